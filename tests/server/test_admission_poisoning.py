"""Admission cannot be poisoned (issue #30.1) on a real `sie-server serve`.

The attack the adversarial trial found: three invalid requests of ~53 KB (4,096 non-text
items each, answered 400) and one body left half-sent. Before the fix each non-text item
counted a whole window (4,096 x 256 tokens: ~87 s of MiniLM), the average request the
pre-body check charges was updated before the items were validated, and the half-sent call
was charged that average: an idle server refused every small request with 429 and a
Retry-After of up to 89 s. Now only validated, admitted work feeds the estimates, an invalid
item costs nothing, and a call is charged at most its declared body."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from engine_fixtures import Recorder, make_engine, tiny_cards
from server_fixtures import DEFAULT_MODEL, server_fixture

ENCODE = f"/v1/encode/{DEFAULT_MODEL}"
# 4,096 items that are not text: images, which the contract lets through and a text-only model
# refuses once validated, after admission: ~57 KB of JSON
INVALID = json.dumps({"items": [{"image": "a"}] * 4096}, separators=(",", ":")).encode()

server = server_fixture("--preload", DEFAULT_MODEL, "--max-queue-wait", "30")


def half_sent(url: str, body: bytes) -> socket.socket:
    """A connection that sends the head and half of `body`, then nothing more (left open)."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port))
    head = (f"POST {ENCODE} HTTP/1.1\r\nHost: {parts.hostname}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    sock.sendall(head + body[: len(body) // 2])
    return sock


def test_invalid_requests_and_a_half_sent_body_leave_admission_open(server):
    with httpx.Client(base_url=server.url, timeout=60) as http:
        assert http.post(ENCODE, json={"items": ["warm"]}).status_code == 200
        for _ in range(3):
            answer = http.post(ENCODE, content=INVALID, headers={"Content-Type": "application/json"})
            assert answer.status_code == 400, answer.text
        sock = half_sent(server.url, INVALID)
        try:
            time.sleep(0.3)  # the half-sent call is let in and waits for the rest of its body
            for i in range(10):
                sent = time.monotonic()
                answer = http.post(ENCODE, json={"items": [f"a small request {i}"]})
                assert answer.status_code == 200, (answer.status_code, answer.headers.get("Retry-After"), answer.text)
                assert time.monotonic() - sent < 10.0  # at once, not after a Retry-After
            status = http.get("/v1/status").json()
            assert status["queued_tokens"] == 0
        finally:
            sock.close()


def test_only_validated_admitted_work_feeds_the_average_request(tmp_path):
    """The average request (what a call not read yet is charged) moves only on real tokens
    of requests that were validated and queued; a half-sent body is charged at most its
    declared length at its model's rate."""
    from sie_engine.errors import InvalidRequest

    with make_engine(tiny_cards(tmp_path, names=("a",)), Recorder(), max_queue_wait_s=30.0) as engine:
        admission = engine.scheduler.admission
        with pytest.raises(InvalidRequest):
            engine.run_sync("encode", "tiny/a", [{"image": "a"}] * 4096)
        assert admission.request_s == 0.0 and admission.reserved("tiny/a") == 0.0
        engine.run_sync("encode", "tiny/a", ["some text", "more text"])
        assert 0.0 < admission.request_s < 1.0
        average = admission.request_s
        with pytest.raises(InvalidRequest):
            engine.run_sync("encode", "tiny/a", ["fine"] * 100 + [{"image": "a"}])
        assert admission.request_s == average  # refused: its bound never counted
        handle = engine.refuse_if_overloaded("tiny/a", body_bytes=10)
        assert handle.seconds == pytest.approx(min(average, 10 / admission.throughput.rate("tiny/a")))
        engine.pre_admission_done(handle)
        assert admission.pending.seconds == 0.0 and admission.pending.count == 0
