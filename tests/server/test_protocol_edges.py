"""The smaller protocol points of issue #30.8 against a real `sie-server`: `Expect:
100-continue` checks the key and the declared length first; query values never reach the
access log; the Server header names no versions; aiohttp's parse errors are the contract's
JSON (414 for a long request line, 431 for long headers); a model id with a newline gets
its route's own 404 shape; a short model name gets a "did you mean".
"""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from server_fixtures import start_server
from tiny_models import make_tiny_bert

KEY = "edges-key"
MODEL = "tiny-org/edges-enc"
MAX_BODY = 1 * 2**20
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    enc = make_tiny_bert(tmp_path_factory.mktemp("edges-models") / "enc", seed=4)
    process = start_server("--model", f"{MODEL}={enc}", "--no-builtin", "--device", "cpu", "--api-key", KEY,
                           "--preload", MODEL, "--max-body-bytes", str(MAX_BODY),
                           log_dir=tmp_path_factory.mktemp("edges-server"))
    try:
        yield process
    finally:
        process.stop()


def address(server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def exchange(server, data: bytes, timeout: float = 5.0) -> bytes:
    """What the server answers to `data` (read until it closes or goes quiet)."""
    with socket.create_connection(address(server)) as sock:
        sock.sendall(data)
        sock.settimeout(timeout)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
                if b"\r\n\r\n" in answer and answer.startswith(b"HTTP/1.1 100"):
                    break
        except (TimeoutError, ConnectionResetError):
            pass
    return answer


def split(answer: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split(" ")[1]), {k.lower(): v for k, v in headers.items()}, body


def expect_head(length: int, key: str | None = KEY) -> bytes:
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (f"POST /v1/encode/{MODEL} HTTP/1.1\r\nHost: sie\r\n{auth}Content-Type: application/json\r\n"
            f"Content-Length: {length}\r\nExpect: 100-continue\r\n\r\n").encode()


def test_expect_continue_with_a_declared_body_over_the_limit_is_413_without_100(server):
    answer = exchange(server, expect_head(100 * 2**20))
    assert not answer.startswith(b"HTTP/1.1 100")
    status, headers, body = split(answer)
    assert status == 413 and json.loads(body)["error"]["code"] == "payload_too_large"


def test_expect_continue_without_the_key_is_401_without_100(server):
    answer = exchange(server, expect_head(100, key=None))
    assert not answer.startswith(b"HTTP/1.1 100")
    status, _, body = split(answer)
    assert status == 401 and json.loads(body)["error"]["code"] == "unauthorized"


def test_expect_continue_that_passes_gets_100_then_its_answer(server):
    body = json.dumps({"items": ["hello"]}).encode()
    with socket.create_connection(address(server)) as sock:
        sock.settimeout(10)
        sock.sendall(expect_head(len(body)))
        assert sock.recv(65536).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200")


def test_query_values_never_reach_the_access_log(server):
    httpx.get(server.url + "/healthz?api_key=s3cr3t-value&x=1", timeout=5)
    log = server.log_containing("/healthz?api_key=", timeout=10)
    assert "s3cr3t-value" not in log
    assert "/healthz?api_key=REDACTED&x=REDACTED" in log


def test_the_server_header_names_no_versions(server):
    for answer in (httpx.get(server.url + "/healthz", timeout=5),
                   httpx.get(server.url + "/v1/models", timeout=5)):  # 200 and a 401
        assert answer.headers["Server"] == "sie"
    _, headers, _ = split(exchange(server, b"BLAH / HTTP/1.1\r\nHost: sie\r\n\r\n"))
    assert headers["server"] == "sie"


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: sie\r\n\r\n", 414),
    (b"GET /healthz HTTP/1.1\r\nHost: sie\r\nX-Big: " + b"a" * 10_000 + b"\r\n\r\n", 431),
    (b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-%d: a\r\n" % i for i in range(200)) + b"\r\n", 431),
    (b"BLAH / HTTP/1.1\r\nHost: sie\r\n\r\n", 400),
    (b"POST /healthz HTTP/1.1\r\nHost: sie\r\nContent-Length: abc\r\n\r\n", 400),
])
def test_parse_errors_are_the_contracts_json(server, request_bytes, status):
    answered, headers, body = split(exchange(server, request_bytes))
    assert answered == status
    assert headers["content-type"].startswith("application/json")
    error = json.loads(body)["error"]
    assert error["code"] == "invalid_request" and "aaaa" not in error["message"]


@pytest.mark.parametrize(("path", "body"), [("/tei/no%0Asuch/embed", {"inputs": "x"}),
                                            ("/weaviate/no%0Asuch/vectors", {"text": "x"})])
def test_a_model_id_with_a_newline_gets_the_routes_own_404(server, path, body):
    answer = httpx.post(server.url + path, json=body, headers=AUTH, timeout=10)
    assert answer.status_code == 404
    assert isinstance(answer.json()["error"], str)  # TEI's and Weaviate's shape, not SIE's {"code", ...}


def test_a_model_id_with_a_newline_on_sies_route_is_model_not_found(server):
    answer = httpx.post(server.url + "/v1/encode/no%0Asuch", json={"items": ["x"]}, headers=AUTH, timeout=10)
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "model_not_found"


def test_a_short_model_name_gets_a_did_you_mean(server):
    answer = httpx.post(server.url + "/v1/encode/edges-enc", json={"items": ["x"]}, headers=AUTH, timeout=10)
    assert answer.status_code == 404
    assert f"did you mean '{MODEL}'" in answer.json()["error"]["message"]
