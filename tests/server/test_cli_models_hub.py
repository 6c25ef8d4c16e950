"""`sie-server models` tells a Hub model that is not cached by whether the Hub answers: "download"
only when the first load could fetch it, "not cached (Hub unreachable)" when the Hub does not answer,
asked once per listing with a short timeout (offline, the list comes at once, not after a wait per
card). The Hub is stood in for by local endpoints (`HF_ENDPOINT`): one that answers, one that refuses
connections, one that accepts and never answers; the Hub cache is an empty folder."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sie_server.hub_reach import NOT_CACHED_UNREACHABLE, PROBE_TIMEOUT_S
from sie_server.launch import server_command

HUB_MODEL = "BAAI/bge-small-en-v1.5"  # a built-in card whose weights only the Hub has
PACKAGED = "sentence-transformers/all-MiniLM-L6-v2"  # weights from an installed package
# the listing's start-up (imports, 156 cards) on a loaded 2-core box, plus the one probe; a probe
# per card would take 156 times PROBE_TIMEOUT_S
LISTING_S = 30 + PROBE_TIMEOUT_S


def models(tmp_path, endpoint: str, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0", "HF_HOME": str(tmp_path / "hf-home")}
    started = time.monotonic()
    done = subprocess.run([*server_command(), "models", *args], capture_output=True, text=True, timeout=300,
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done, time.monotonic() - started


def table_rows(done: subprocess.CompletedProcess) -> dict[str, str]:
    """The table's AVAILABLE column by model id (the column starts where its header does)."""
    header, *lines = done.stdout.splitlines()
    start, end = header.index("AVAILABLE"), header.index("WEIGHTS")
    return {line.split()[0]: line[start:end].strip() for line in lines}


class _Hub(BaseHTTPRequestHandler):
    def do_HEAD(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def answering_hub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def refusing_hub() -> str:
    """A loopback port nothing listens on: connections are refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def silent_hub() -> Iterator[str]:
    """A socket that listens and never accepts: connecting works (the kernel's backlog), no answer comes."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_a_reachable_hub_lists_uncached_models_as_download(tmp_path, answering_hub):
    done, _ = models(tmp_path, answering_hub)
    rows = table_rows(done)
    assert rows[HUB_MODEL] == "download" and rows[PACKAGED] == "local"


def test_an_unreachable_hub_lists_them_as_not_cached(tmp_path, refusing_hub):
    done, elapsed = models(tmp_path, refusing_hub)
    rows = table_rows(done)
    assert rows[HUB_MODEL] == NOT_CACHED_UNREACHABLE and rows[PACKAGED] == "local"
    assert "download" not in rows.values()
    assert elapsed < LISTING_S, f"{elapsed:.0f} s"
    listing, _ = models(tmp_path, refusing_hub, "--json")
    entry = {row["id"]: row for row in json.loads(listing.stdout)}[HUB_MODEL]
    assert entry["available"] == "unavailable"
    assert f"the Hub ({refusing_hub}) did not answer" in entry["detail"] and "ConnectError" in entry["detail"]


def test_a_hub_that_never_answers_costs_one_short_timeout(tmp_path, silent_hub):
    done, elapsed = models(tmp_path, silent_hub)
    rows = table_rows(done)
    assert rows[HUB_MODEL] == NOT_CACHED_UNREACHABLE and "download" not in rows.values()
    assert elapsed < LISTING_S, f"{elapsed:.0f} s: the Hub is asked once, for {PROBE_TIMEOUT_S} s at most"
