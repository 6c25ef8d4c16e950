"""Hostile bodies against the parsers on a real `sie-server` (issue #30.3): bodies of tiny
containers that an untyped parser turns into one Python object per byte (16 MiB of msgpack
empty maps was +1.1 GB and 3.3 s; 32 MiB of JSON +1.07 GB). Each must answer a 4xx saying
why, raise the server's peak memory (VmHWM, against its own baseline) by far less than the
objects it describes, and leave `/healthz` answering while it is refused."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from reliability_models import tiny_model_set
from server_fixtures import peak_rss, start_server

MiB = 2**20
# What the body may cost the server above its baseline: the body's bytes a few times over
# (read, joined, handed to the decoder), not one object per byte of it.
PEAK_BUDGET = 200 * MiB
HEALTHZ_BUDGET_S = 1.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    roots = tiny_model_set(tmp_path_factory.mktemp("parser-models"))
    process = start_server("--model", f"enc={roots['enc']}", "--no-builtin", "--device", "cpu",
                           "--max-body-bytes", "64MiB", "--preload", "enc",
                           log_dir=tmp_path_factory.mktemp("parser-server"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=120) as client:
        assert client.post("/v1/encode/enc", json={"items": ["warm up"]}).status_code == 200
        yield client


def msgpack_array(marker: bytes, count: int) -> bytes:
    """A msgpack array32 of `count` one-byte values (`\\x80`: an empty map)."""
    return b"\xdd" + count.to_bytes(4, "big") + marker * count


def json_array(element: bytes, count: int) -> bytes:
    return b"[" + b",".join([element] * count) + b"]"


def attack(server, http, path: str, body: bytes, content_type: str) -> tuple[httpx.Response, float, int]:
    """POST `body` while a thread polls /healthz; (answer, slowest /healthz in s, peak RSS growth)."""
    baseline = peak_rss(server.pid)
    slowest = 0.0
    done = threading.Event()

    def poll() -> None:
        nonlocal slowest
        with httpx.Client(base_url=server.url, timeout=30) as probe:
            while not done.is_set():
                started = time.monotonic()
                assert probe.get("/healthz").status_code == 200
                slowest = max(slowest, time.monotonic() - started)
                time.sleep(0.02)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        answer = http.post(path, content=body, headers={"Content-Type": content_type, "Accept": "application/json"})
        time.sleep(0.3)  # the freeing of whatever the body made happens after the answer
    finally:
        done.set()
        poller.join()
    return answer, slowest, peak_rss(server.pid) - baseline


def check(answer: httpx.Response, slowest: float, growth: int, status: int, hint: str) -> None:
    measured = f"{answer.status_code}, peak RSS +{growth / MiB:.0f} MiB, /healthz up to {slowest:.2f}s: {answer.text}"
    assert answer.status_code == status and hint in answer.json()["error"]["message"], measured
    assert growth < PEAK_BUDGET, measured
    assert slowest < HEALTHZ_BUDGET_S, measured


MSGPACK = "application/msgpack"
JSON = "application/json"


def test_task_route_msgpack_empty_maps(server, http):
    # {"items": [{}, {}, ...]}: the typed decoder refuses items[0]; nothing may parse the rest into dicts
    body = b"\x81\xa5items" + msgpack_array(b"\x80", 16 * MiB)
    check(*attack(server, http, "/v1/encode/enc", body, MSGPACK), 413, "items is longer than 65536")


def test_task_route_msgpack_refused_at_items0_without_parsing_the_rest(server, http):
    # the typed decoder refuses items[0]; nothing may parse the rest into dicts to word the error
    body = (b"\x82\xa5items" + msgpack_array(b"\x80", 60_000) + b"\xa4rest" + msgpack_array(b"\x80", 16 * MiB))
    check(*attack(server, http, "/v1/encode/enc", body, MSGPACK), 400, "items[0]")


def test_large_malformed_body_says_why_without_parsing_it(server, http):
    body = b"\x81\xa5items" + msgpack_array(b"\x80", 16 * MiB)[:-1]  # truncated by its last byte
    check(*attack(server, http, "/v1/encode/enc", body, MSGPACK), 400, "not valid msgpack")


def test_task_route_top_level_array_of_maps(server, http):
    body = msgpack_array(b"\x80", 32 * MiB)
    check(*attack(server, http, "/v1/encode/enc", body, MSGPACK), 400, "must be an object")


def test_task_route_json_empty_objects(server, http):
    # msgspec bounds a JSON list only once it is built: the values are counted before parsing
    body = b'{"items": ' + json_array(b"{}", 10 * MiB) + b"}"  # 30 MiB of JSON
    check(*attack(server, http, "/v1/encode/enc", body, JSON), 413, "JSON values")


def test_task_route_json_short_strings(server, http):
    body = b'{"items": ' + json_array(b'"ab"', 6 * MiB) + b"}"
    check(*attack(server, http, "/v1/encode/enc", body, JSON), 413, "JSON values")


def test_task_route_msgpack_short_strings(server, http):
    # a list states its length first in msgpack: past the wire's ceiling nothing of it is built
    body = b"\x81\xa5items" + msgpack_array(b"\xa2ab", 8 * MiB)[:5] + b"\xa2ab" * 8 * MiB
    check(*attack(server, http, "/v1/encode/enc", body, MSGPACK), 413, "items is longer than")


def test_compat_route_msgpack_empty_maps(server, http):
    body = b"\x82\xa5model\xa3enc\xa5input" + msgpack_array(b"\x80", 16 * MiB)
    check(*attack(server, http, "/v1/embeddings", body, MSGPACK), 413, "more than")


def test_compat_route_json_empty_objects(server, http):
    body = b'{"model": "enc", "input": ' + json_array(b"{}", 10 * MiB) + b"}"
    check(*attack(server, http, "/v1/embeddings", body, JSON), 413, "JSON values")


def test_compat_route_json_top_level_array(server, http):
    body = json_array(b"[]", 10 * MiB)
    check(*attack(server, http, "/v1/embeddings", body, JSON), 413, "JSON values")


def test_compat_route_many_small_lists_within_the_value_count(server, http):
    # 20,000 lists of a number: within the value count, refused by the list bound (16,384)
    body = b'{"model": "enc", "input": ' + json_array(b"[1]", 20_000) + b"}"
    answer = http.post("/v1/embeddings", content=body, headers={"Content-Type": JSON})
    assert answer.status_code == 413 and "more than 16384" in answer.json()["error"]["message"], answer.text


def test_compat_route_many_small_lists(server, http):
    body = b'{"model": "enc", "input": ' + json_array(b"[12345678901234567890]", 1 << 20) + b"}"
    check(*attack(server, http, "/v1/embeddings", body, JSON), 413, "JSON values")


def test_compat_route_top_level_array(server, http):
    body = b"\x91\x80"
    answer = http.post("/v1/embeddings", content=body, headers={"Content-Type": MSGPACK})
    assert answer.status_code == 400 and "must be an object" in answer.json()["error"]["message"], answer.text


def test_compat_route_deep_nesting_is_refused_by_depth(server, http):
    body = b'{"model": "enc", "input": [[[[[[["x"]]]]]]]}'
    answer = http.post("/v1/embeddings", content=body, headers={"Content-Type": JSON})
    assert answer.status_code == 400 and "nested too deeply" in answer.json()["error"]["message"], answer.text


def test_an_image_member_is_not_decoded_as_anything(server, http):
    # `image` took any value (msgspec's Any) and built it before the item's own check refused it
    body = b"\x81\xa5items\x91\x81\xa5image" + msgpack_array(b"\x80", 16 * MiB)
    check(*attack(server, http, "/v1/encode/enc", body, MSGPACK), 400, "items[0].image must be bytes")
