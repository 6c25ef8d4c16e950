"""The router reads API keys from a key file (how the chart hands it the Secret) and re-reads it
when it changes, like an engine; a header that is not valid text is a 401, not a 500."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from urllib.parse import urlsplit

import httpx
import pytest

from router_fixtures import free_port, start_router

ROUTE = "/v1/router/workers"  # needs a key, answers without any worker up


@pytest.fixture(scope="module")
def keyed_router(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("router-keys")
    key_file = tmp / "api-keys"
    key_file.write_text("k1, k2  # the Secret's comma-separated value\n")
    router = start_router([f"--worker=http://127.0.0.1:{free_port()}", "--api-key-file", str(key_file)], tmp)
    yield router, key_file
    router.stop()


def _status(url: str, key: str | None) -> int:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.get(url + ROUTE, headers=headers, timeout=5).status_code


def test_keys_from_the_file_are_required(keyed_router):
    router, _ = keyed_router
    assert _status(router.url, None) == 401
    assert _status(router.url, "wrong") == 401
    assert _status(router.url, "k1") == 200
    assert _status(router.url, "k2") == 200
    assert httpx.get(router.url + "/healthz", timeout=5).status_code == 200  # probes stay open


def test_a_rewritten_key_file_rotates_keys_without_a_restart(keyed_router):
    router, key_file = keyed_router
    key_file.write_text("k3\n")
    deadline = time.monotonic() + 10
    while _status(router.url, "k3") != 200:
        assert time.monotonic() < deadline, "the router did not pick up the new key file"
        time.sleep(0.2)
    assert _status(router.url, "k1") == 401


def test_an_undecodable_authorization_header_is_a_401(keyed_router):
    router, _ = keyed_router
    host, port = urlsplit(router.url).hostname, urlsplit(router.url).port
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(f"GET {ROUTE} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\xff\xfe3\r\n"
                     "Connection: close\r\n\r\n".encode("latin-1"))
        answer = sock.recv(4096).decode("latin-1")
    assert answer.startswith("HTTP/1.1 401"), answer


def test_a_missing_key_file_stops_the_router_with_a_message(tmp_path):
    done = subprocess.run([sys.executable, "-m", "sie_server.cli", "router", "--worker", "http://127.0.0.1:1",
                           "--api-key-file", str(tmp_path / "absent")], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--api-key-file" in done.stderr and "does not exist" in done.stderr
