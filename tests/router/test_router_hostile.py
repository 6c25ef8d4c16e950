"""The router under the attacks the engine server withstands (issue #30, point 6), with a real
worker and a real router on loopback and short timeouts.

Deeply nested JSON and bodies that are not what their Content-Encoding says are 400s (the
worker's or the router's), never 500s; `br` is the contract's 415; gzip bombs are stopped at
the body limit off the event loop while /healthz answers; slow request heads are closed after
the head timeout; junk model ids do not grow the metrics' label set; bad `X-SIE-Timeout-Ms`
values are 400 as on the engine; the Server header names no versions.
"""

from __future__ import annotations

import gzip
import socket
import struct
import threading
import time
import zlib

import httpx
import pytest

from router_fixtures import start_router
from server_fixtures import metric_samples, slowest_healthz_while, start_server
from tiny_models import make_tiny_bert

HEAD_S = 1.0
MAX_BODY = 2 * 2**20
SLACK = 1.5


@pytest.fixture(scope="module")
def router(tmp_path_factory):
    enc = make_tiny_bert(tmp_path_factory.mktemp("router-hostile-models") / "enc", seed=3)
    worker = start_server("--model", f"enc={enc}", "--no-builtin", "--device", "cpu", "--preload", "enc",
                          log_dir=tmp_path_factory.mktemp("router-hostile-worker"))
    router = None
    try:
        router = start_router([f"--worker={worker.url}", "--poll-interval=0.2", "--head-timeout", str(HEAD_S),
                               "--max-body-bytes", str(MAX_BODY), "--max-connections", "64"],
                              tmp_path_factory.mktemp("router-hostile"))
        deadline = time.monotonic() + 30
        while not any(w["ready"] for w in router.workers().values()):
            assert time.monotonic() < deadline, "the worker never turned ready at the router"
            time.sleep(0.2)
        yield router
    finally:
        if router is not None:
            router.stop()
        worker.stop()


def address(router) -> tuple[str, int]:
    host, port = router.url.removeprefix("http://").split(":")
    return host, int(port)


def post(router, path: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(router.url + path, content=body, timeout=30,
                      headers={"Content-Type": "application/json", **headers})


def gzip_bomb(mib: int) -> bytes:
    """`mib` MiB of zeros as one gzip member of about 1 KiB per MiB (after a full flush every
    1 MiB block compresses to the same bytes; only the CRC needs the whole input)."""
    zeros = bytes(2**20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    first = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    end = compressor.flush()[:-8]
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(zeros, crc)
    return first + block * (mib - 1) + end + struct.pack("<II", crc, (mib * 2**20) & 0xFFFFFFFF)


def test_encode_works_through_the_router(router):
    answer = post(router, "/v1/encode/enc", b'{"items": ["hello"]}')
    assert answer.status_code == 200 and len(answer.json()["items"]) == 1


def test_a_compressed_body_is_forwarded_and_read(router):
    body = b'{"model": "enc", "input": ["hello", "world"]}'
    answer = post(router, "/v1/embeddings", gzip.compress(body), **{"Content-Encoding": "gzip"})
    assert answer.status_code == 200 and len(answer.json()["data"]) == 2
    answer = post(router, "/v1/encode/enc", gzip.compress(b'{"items": ["hello"]}'), **{"Content-Encoding": "gzip"})
    assert answer.status_code == 200


def test_deeply_nested_json_on_a_body_routed_path_is_400_not_500(router):
    body = b'{"model": "enc", "input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    answer = post(router, "/v1/embeddings", body)
    assert answer.status_code == 400
    assert "Traceback" not in router.log.read_text()


@pytest.mark.parametrize("path", ["/v1/embeddings", "/v1/encode/enc"])
def test_a_body_that_is_not_gzip_is_400(router, path):
    answer = post(router, path, b'{"model": "enc", "input": ["x"]}', **{"Content-Encoding": "gzip"})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_request"


@pytest.mark.parametrize("path", ["/v1/embeddings", "/v1/encode/enc"])
def test_brotli_is_the_contracts_415(router, path):
    answer = post(router, path, b"\x0b\x02\x80hello\x03", **{"Content-Encoding": "br"})
    assert answer.status_code == 415 and answer.json()["error"]["code"] == "unsupported_media_type"
    assert answer.headers["Content-Type"].startswith("application/json")


def test_gzip_bombs_are_413_without_stalling_the_router(router):
    bomb = gzip_bomb(1024)  # 1 GiB of zeros in about 1 MB
    assert len(bomb) < MAX_BODY
    answers: list[int] = []

    def send():
        answers.append(post(router, "/v1/embeddings", bomb, **{"Content-Encoding": "gzip"}).status_code)

    worst = slowest_healthz_while(router.url, [threading.Thread(target=send) for _ in range(8)])
    assert answers == [413] * 8
    assert worst < 1.0, f"/healthz took {worst:.2f}s while bombs were in flight"


def test_slow_request_heads_are_closed_after_the_head_timeout(router):
    slow = [socket.create_connection(address(router)) for _ in range(40)]
    try:
        for sock in slow:
            sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: r\r\nX-Slow: ")
        time.sleep(HEAD_S + SLACK)
        closed = 0
        for sock in slow:
            sock.settimeout(2)
            try:
                closed += sock.recv(1024) == b""
            except ConnectionResetError:
                closed += 1
            except TimeoutError:  # still open
                pass
        assert closed == len(slow)
    finally:
        for sock in slow:
            sock.close()


def test_junk_model_ids_do_not_grow_the_metrics(router):
    for i in range(200):
        assert post(router, f"/v1/encode/junk-{i}", b'{"items": ["x"]}').status_code == 404
    models = {s.labels.get("model") for s in metric_samples(router.metrics()) if "model" in s.labels}
    assert not any(m.startswith("junk-") for m in models), sorted(models)[:10]
    assert "other" in models and "enc" in models


@pytest.mark.parametrize("value", ["NaN", "0", "-5", "inf", "soon"])
def test_a_bad_timeout_header_is_400_as_on_the_engine(router, value):
    answer = post(router, "/v1/encode/enc", b'{"items": ["x"]}', **{"X-SIE-Timeout-Ms": value})
    assert answer.status_code == 400
    assert "X-SIE-Timeout-Ms must be a positive number" in answer.json()["error"]["message"]


def test_the_server_header_names_no_versions(router):
    server = httpx.get(router.url + "/healthz", timeout=5).headers["Server"]
    assert "aiohttp" not in server and "Python" not in server
