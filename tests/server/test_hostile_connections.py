"""Slow, idle, hostile and compressed connections against a real `sie-server` (issue #19,
points 4 and 5), with short timeouts so each case takes about a second.

Raw sockets send exactly the bytes of each attack: no bytes, a partial head, one header
byte at a time, a body never finished or trickled past its total time, an idle keep-alive
connection; each must be closed after its timeout. At the connection cap with idle
sockets, probes are still answered. Compressed bodies: a body that is not what its
Content-Encoding says is 400, an unknown encoding 415, and gzip bombs are stopped at the
body limit (413) off the event loop while /healthz keeps answering. Accept errors at the
open-file limit are logged once per interval, client-caused errors without tracebacks.
"""

from __future__ import annotations

import gzip
import json
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import time
import zlib

import httpx
import pytest

from server_fixtures import slowest_healthz_while, start_server
from tiny_models import make_tiny_bert

KEY = "hostile-key"
HEAD_S, KEEPALIVE_S, BODY_IDLE_S, BODY_TOTAL_S = 1.0, 1.5, 1.0, 2.0
MAX_CONNECTIONS, PROBE_CONNECTIONS = 32, 4
MAX_BODY = 4 * 2**20
SLACK = 1.0  # scheduling on a busy 2-core machine
ENC = "/v1/encode/enc"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    enc = make_tiny_bert(tmp_path_factory.mktemp("hostile-models") / "enc", seed=1)
    process = start_server("--model", f"enc={enc}", "--no-builtin", "--device", "cpu", "--api-key", KEY,
                           "--preload", "enc", "--max-connections", str(MAX_CONNECTIONS),
                           "--probe-connections", str(PROBE_CONNECTIONS), "--head-timeout", str(HEAD_S),
                           "--keepalive-timeout", str(KEEPALIVE_S), "--body-idle-timeout", str(BODY_IDLE_S),
                           "--body-timeout", str(BODY_TOTAL_S), "--max-body-bytes", str(MAX_BODY),
                           log_dir=tmp_path_factory.mktemp("hostile-server"))
    try:
        yield process
    finally:
        process.stop()


def address(server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def read_until_closed(sock: socket.socket, limit_s: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when it closed
    (seconds from now); fails the test if it stays open for `limit_s`."""
    started = time.monotonic()
    sock.settimeout(limit_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        pytest.fail(f"still open after {limit_s}s; got {data[:200]!r}")
    return data, time.monotonic() - started


def head(method: str, path: str, content_length: int | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: sie", f"Authorization: Bearer {KEY}", "Content-Type: application/json"]
    if content_length is not None:
        lines.append(f"Content-Length: {content_length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def json_of(answer: bytes) -> dict:
    return json.loads(answer.split(b"\r\n\r\n", 1)[1])


# ---- point 4: timeouts -------------------------------------------------------
def test_a_connection_that_sends_nothing_is_closed_after_the_keepalive_timeout(server):
    with socket.create_connection(address(server)) as sock:
        data, closed_after = read_until_closed(sock, KEEPALIVE_S + 5)
    assert data == b"" and closed_after == pytest.approx(KEEPALIVE_S, abs=SLACK)


def test_a_partial_head_is_closed_after_the_head_timeout(server):
    with socket.create_connection(address(server)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHo")
        data, closed_after = read_until_closed(sock, HEAD_S + 5)
    assert data == b"" and closed_after == pytest.approx(HEAD_S, abs=SLACK)


def test_a_head_sent_one_byte_at_a_time_is_closed_after_the_head_timeout(server):
    request = b"GET /healthz HTTP/1.1\r\nX-Padding: " + b"a" * 200 + b"\r\n\r\n"
    with socket.create_connection(address(server)) as sock:
        sock.settimeout(0.25)
        started = time.monotonic()
        closed_after = None
        for byte in request:  # one byte every 0.25 s: the whole head would take 60 s
            try:
                sock.sendall(bytes([byte]))
                if sock.recv(1024) == b"":
                    closed_after = time.monotonic() - started
                    break
            except TimeoutError:
                continue
            except OSError:  # reset after the close
                closed_after = time.monotonic() - started
                break
    assert closed_after is not None and closed_after == pytest.approx(HEAD_S, abs=SLACK)


def test_a_body_that_stops_arriving_gets_408_after_the_idle_timeout(server):
    with socket.create_connection(address(server)) as sock:
        started = time.monotonic()
        sock.sendall(head("POST", ENC, 100) + b'{"items": ["x')
        sock.settimeout(BODY_IDLE_S + 5)
        answer = sock.recv(65536)
        answered_after = time.monotonic() - started  # the connection closes after it
    assert status_of(answer) == 408, answer
    assert json_of(answer)["error"]["code"] == "request_timeout"
    assert answered_after == pytest.approx(BODY_IDLE_S, abs=SLACK)


def test_a_body_trickled_past_its_total_time_gets_408(server):
    with socket.create_connection(address(server)) as sock:
        started = time.monotonic()
        sock.sendall(head("POST", ENC, 1000) + b'{"items": [')
        sock.settimeout(BODY_IDLE_S / 2)
        answer = b""
        while not answer and time.monotonic() - started < BODY_TOTAL_S + 5:
            try:
                sock.sendall(b" ")  # within the idle timeout every time
                answer = sock.recv(65536)
            except TimeoutError:
                continue
        answered_after = time.monotonic() - started
    assert status_of(answer) == 408, answer
    assert "longer than" in json_of(answer)["error"]["message"]
    assert answered_after == pytest.approx(BODY_TOTAL_S, abs=SLACK)


def test_an_idle_keepalive_connection_is_closed_after_the_keepalive_timeout(server):
    with socket.create_connection(address(server)) as sock:
        sock.sendall(head("GET", "/healthz"))
        sock.settimeout(5)
        assert status_of(sock.recv(65536)) == 200
        data, closed_after = read_until_closed(sock, KEEPALIVE_S + 5)
    assert data == b"" and closed_after == pytest.approx(KEEPALIVE_S, abs=SLACK)


def test_probes_are_answered_at_the_connection_cap(server):
    # the cap filled with idle sockets, and more idle ones than the probe reserve beyond it
    idle = [socket.create_connection(address(server)) for _ in range(MAX_CONNECTIONS + PROBE_CONNECTIONS + 4)]
    try:
        time.sleep(0.3)
        for path, expected in (("/healthz", {"status": "ok"}), ("/readyz", {"status": "ready"})):
            started = time.monotonic()
            answer = httpx.get(server.url + path, timeout=5)
            assert answer.status_code == 200 and answer.json() == expected
            assert time.monotonic() - started < 1.0
        # idle sockets make room for a request (issue #30.5); test_connection_exhaustion.py has the
        # refusal when every connection is busy
        served = httpx.get(server.url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=5)
        assert served.status_code == 200
    finally:
        for sock in idle:
            sock.close()
    time.sleep(0.3)
    assert httpx.post(server.url + ENC, json={"items": ["x"]}, headers={"Authorization": f"Bearer {KEY}"},
                      timeout=10).status_code == 200


# ---- point 5: content encodings -------------------------------------------------
def post_raw(server, body: bytes, encoding: str) -> httpx.Response:
    return httpx.post(server.url + ENC, content=body, timeout=30,
                      headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json",
                               "Content-Encoding": encoding})


BODY = b'{"items": ["compressed text"]}'


def raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize("encoding, body", [("gzip", gzip.compress(BODY, mtime=0)), ("deflate", zlib.compress(BODY)),
                                            ("deflate", raw_deflate(BODY)), ("identity", BODY)])
def test_compressed_bodies_are_read(server, encoding, body):
    answer = post_raw(server, body, encoding)
    assert answer.status_code == 200, answer.text
    plain = post_raw(server, BODY, "identity").json()
    assert answer.json()["items"] == plain["items"]


@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_an_empty_body_is_400(server, encoding):
    answer = post_raw(server, b"", encoding)
    assert answer.status_code == 400 and "empty" in answer.json()["error"]["message"], answer.text


@pytest.mark.parametrize("encoding, body", [("gzip", BODY), ("deflate", BODY),
                                            ("gzip", gzip.compress(BODY, mtime=0)[:-12])])
def test_a_body_that_is_not_what_its_encoding_says_is_400(server, encoding, body):
    answer = post_raw(server, body, encoding)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "invalid_request" and encoding in answer.json()["error"]["message"]


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress", "gzip, gzip"])
def test_unknown_encodings_are_415(server, encoding):
    answer = post_raw(server, gzip.compress(BODY, mtime=0), encoding)
    assert answer.status_code == 415, answer.text
    assert answer.json()["error"]["code"] == "unsupported_media_type"


def gzip_bomb(mib: int) -> bytes:
    """`mib` MiB of zeros as one gzip member of about 1 KiB per MiB, built in well under a
    second: after a full flush deflate starts afresh, so every 1 MiB block compresses to the
    same bytes, and only the CRC needs the whole input."""
    zeros = bytes(2**20)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    first = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    end = compressor.flush()[:-8]
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(zeros, crc)
    return first + block * (mib - 1) + end + struct.pack("<II", crc, (mib * 2**20) & 0xFFFFFFFF)


def test_gzip_bombs_get_413_without_stalling_the_server(server):
    bomb = gzip_bomb(1024)  # 1 GiB of zeros in about 1 MB
    assert len(bomb) < MAX_BODY
    statuses: list[int] = []

    def send():
        statuses.append(post_raw(server, bomb, "gzip").status_code)

    slowest = slowest_healthz_while(server.url, [threading.Thread(target=send) for _ in range(24)])
    assert statuses == [413] * 24
    assert slowest < 1.0, f"/healthz took {slowest:.2f}s while bombs were in flight"


def test_headers_that_are_not_text_get_401_not_500(server):
    with socket.create_connection(address(server)) as sock:
        sock.sendall(b"POST " + ENC.encode() + b" HTTP/1.1\r\nHost: sie\r\nAuthorization: Bearer \xff\xfe"
                     + KEY.encode() + b"\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     + b"Content-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)
        answer, _ = read_until_closed(sock, 10)
    assert status_of(answer) == 401, answer


# ---- logs --------------------------------------------------------------------
def test_client_caused_errors_are_logged_without_tracebacks(server):
    before = len(server.log_text())
    for garbage in (b"GET / HTTP/1.1\r\nno colon here\r\n\r\n", b"\x16\x03\x01 not http\r\n\r\n",
                    b"POST " + ENC.encode() + b" HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"):
        with socket.create_connection(address(server)) as sock:
            sock.sendall(garbage)
            read_until_closed(sock, 10)
    for reset_after in (b"", head("POST", ENC, 100) + b'{"items": ['):  # a reset before and during a request
        sock = socket.create_connection(address(server))
        sock.sendall(reset_after)
        time.sleep(0.1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with RST
        sock.close()
    time.sleep(0.3)
    added = server.log_text()[before:]
    assert "Traceback" not in added and " ERROR " not in added, added


ACCEPT_FLOOD = textwrap.dedent("""
    import asyncio, os, resource, sys
    from aiohttp import web
    from sie_server.connections import ConnectionLimitedRunner

    async def main():
        app = web.Application()
        runner = ConnectionLimitedRunner(app, max_connections=100)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=128)
        await site.start()
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        held = []
        try:
            while True:
                held.append(os.open("/dev/null", os.O_RDONLY))  # use up every descriptor
        except OSError:
            pass
        print(runner.addresses[0][1], flush=True)
        await asyncio.sleep(2)
    asyncio.run(main())
""")


def test_accept_errors_at_the_open_file_limit_are_logged_once_per_interval(tmp_path):
    process = subprocess.Popen([sys.executable, "-c", ACCEPT_FLOOD], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        port = int(process.stdout.readline())
        clients = []
        for _ in range(50):  # they queue in the backlog: the server cannot accept them
            clients.append(socket.create_connection(("127.0.0.1", port)))
        _, log = process.communicate(timeout=30)
        for client in clients:
            client.close()
    finally:
        process.kill()
    lines = [line for line in log.splitlines() if "accept" in line]
    assert 1 <= len(lines) <= 1, log[-3000:]
    assert "Traceback" not in log
