"""A bounded soak on loopback: for a fixed time, concurrent clients send a mixed
stream to a real `sie-server` whose memory budget holds only one of its three
tiny models (so models are evicted and reloaded all the time) and whose queue
bound is small (so it overloads):

- valid clients: every answer is the right vectors (the same model and text
  encoded alone in-process) or a 429/503 with `Retry-After`; none is lost;
- a client that retries per `Retry-After` finishes all its work;
- invalid, oversized, slow-reading, slow-sending and disconnecting clients get
  their 4xx or go away without disturbing the others.

Throughout, the server's resident memory (RSS) and the pool's charged bytes stay
bounded; at the end nothing is left in flight or queued.
"""

from __future__ import annotations

import asyncio
import json
import random
import time

import aiohttp
import numpy as np
import pytest

from engine_fixtures import Recorder, make_engine, tiny_cards
from server_fixtures import metric_value, start_server

SOAK_S = 20.0
MODELS = ("tiny/a", "tiny/b", "tiny/c")
TEXTS = [f"soak text {i}: {'debian packaging ' * (i % 9)}and reliability" for i in range(40)]
MAX_QUEUED_TOKENS = 500
MAX_BODY = 256 * 1024


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("soak")
    cards = tiny_cards(tmp, names=("a", "b", "c"), max_batch_tokens=1024)
    engine = make_engine(cards, Recorder())
    try:
        need = engine.pool._plan(cards[0]).need
        expected = {m: {t: engine.encode_sync(m, [t]).items[0].dense for t in TEXTS} for m in MODELS}
    finally:
        engine.close()
    card_dir = tmp / "cards"
    card_dir.mkdir()
    for card in cards:
        (card_dir / f"{card.id.split('/')[1]}.json.yaml").write_text(json.dumps({
            "id": card.id, "weights": {"path": card.weights.path}, "max_seq_len": card.max_seq_len,
            "max_batch_tokens": card.max_batch_tokens}))
    budget = int(need * 1.5)  # one model resident at a time: every switch evicts
    server = start_server("--models", str(card_dir), "--no-builtin", "--device", "cpu",
                          "--memory-budget", str(budget), "--max-queued-tokens", str(MAX_QUEUED_TOKENS),
                          "--max-total-queued-tokens", str(2 * MAX_QUEUED_TOKENS), "--max-items", "64",
                          "--max-body-bytes", str(MAX_BODY), "--max-connections", "64", "--preload", "tiny/a",
                          log_dir=tmp)
    try:
        yield server, expected, budget
    finally:
        server.stop()


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Tally:
    def __init__(self):
        self.sent = self.ok = self.overloaded = self.client_errors = 0
        self.problems: list[str] = []


def check_encoded(payload: dict, model: str, texts: list[str], expected, tally: Tally) -> None:
    for text, item in zip(texts, payload["items"]):
        if not np.allclose(item["dense"], expected[model][text], atol=1e-4):
            tally.problems.append(f"wrong vector for {model} {text!r}")


async def valid_client(session, url, expected, stop_at, tally: Tally, rng: random.Random):
    while time.monotonic() < stop_at:
        model = rng.choice(MODELS)
        texts = rng.sample(TEXTS, rng.randint(1, 12))
        tally.sent += 1
        async with session.post(f"{url}/v1/encode/{model}", json={"items": texts}) as answer:
            body = await answer.read()
            if answer.status == 200:
                tally.ok += 1
                check_encoded(json.loads(body), model, texts, expected, tally)
            elif answer.status in (429, 503) and int(answer.headers.get("Retry-After", "0")) >= 1:
                tally.overloaded += 1
                await asyncio.sleep(0.05)
            else:
                tally.problems.append(f"valid request answered {answer.status}: {body[:200]!r}")


async def retrying_client(session, url, expected, work: list, tally: Tally, give_up_at: float):
    """Finishes every request, sleeping `Retry-After` seconds after each 429/503."""
    for model, texts in work:
        while True:
            tally.sent += 1
            async with session.post(f"{url}/v1/encode/{model}", json={"items": texts}) as answer:
                body = await answer.read()
                if answer.status == 200:
                    tally.ok += 1
                    check_encoded(json.loads(body), model, texts, expected, tally)
                    break
                if answer.status not in (429, 503) or "Retry-After" not in answer.headers:
                    tally.problems.append(f"retrying client got {answer.status}: {body[:200]!r}")
                    break
                tally.overloaded += 1
                await asyncio.sleep(int(answer.headers["Retry-After"]))
            if time.monotonic() > give_up_at:
                tally.problems.append("the retrying client did not finish its work in time")
                return


INVALID = [{"items": []}, {"items": [7]}, {"items": ["x"], "dims": 0}, {"items": [{"text": None}]},
           {"items": ["x"], "colour": 1}, {"items": "x"}]


async def hostile_client(session, url, stop_at, tally: Tally, rng: random.Random):
    """Invalid bodies, oversized bodies and requests over the queue bound: each a 4xx."""
    while time.monotonic() < stop_at:
        kind = rng.choice(["invalid", "body", "items", "tokens"])
        if kind == "invalid":
            body, status = json.dumps(rng.choice(INVALID)).encode(), 400
        elif kind == "body":
            body, status = json.dumps({"items": ["x" * (MAX_BODY + 10)]}).encode(), 413
        elif kind == "items":
            body, status = json.dumps({"items": ["x"] * 65}).encode(), 413
        else:  # more tokens than a model may queue: refused outright, not queued
            body, status = json.dumps({"items": ["word " * 110] * 20}).encode(), 413
        tally.sent += 1
        async with session.post(f"{url}/v1/encode/{rng.choice(MODELS)}", data=body,
                                headers={"Content-Type": "application/json"}) as answer:
            await answer.read()
            if answer.status == status:
                tally.client_errors += 1
            else:
                tally.problems.append(f"{kind} answered {answer.status}, expected {status}")
        await asyncio.sleep(0.02)


async def raw_request(host: str, port: int, body: bytes, model: str):
    reader, writer = await asyncio.open_connection(host, port)
    head = (f"POST /v1/encode/{model} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    return reader, writer, head


async def misbehaving_client(url, stop_at, tally: Tally, rng: random.Random):
    """Slow readers, slow senders and clients that disconnect mid-request."""
    host, port = url.removeprefix("http://").split(":")
    port = int(port)
    while time.monotonic() < stop_at:
        kind = rng.choice(["slow-reader", "slow-sender", "disconnect"])
        body = json.dumps({"items": rng.sample(TEXTS, 12)}).encode()
        reader, writer, head = await raw_request(host, port, body, rng.choice(MODELS))
        try:
            if kind == "slow-sender":
                writer.write(head)
                for start in range(0, len(body), 256):
                    writer.write(body[start:start + 256])
                    await writer.drain()
                    await asyncio.sleep(0.02)
                status = (await asyncio.wait_for(reader.readline(), 30)).split()[1]
                if status not in (b"200", b"429", b"503"):
                    tally.problems.append(f"slow sender answered {status!r}")
            elif kind == "slow-reader":
                writer.write(head + body)
                await writer.drain()
                first = await asyncio.wait_for(reader.read(512), 30)  # the answer starts (then trickles)
                if not first.startswith(b"HTTP/1.1 "):
                    tally.problems.append(f"slow reader got {first[:100]!r}")
                for _ in range(5):  # read a trickle, then walk away
                    await asyncio.sleep(0.05)
                    if not await asyncio.wait_for(reader.read(512), 30):
                        break
            else:
                writer.write(head + body)
                await writer.drain()
                await asyncio.sleep(rng.uniform(0.0, 0.1))
            tally.sent += 1
        except asyncio.TimeoutError:
            import urllib.request
            state = urllib.request.urlopen(url + "/v1/status", timeout=5).read().decode()
            tally.problems.append(f"{kind}: no answer in 30 s; server status {state}")
            return
        finally:
            writer.close()


async def watch_memory(session, url, pid, budget, stop_at, samples: list, problems: list):
    while time.monotonic() < stop_at:
        async with session.get(f"{url}/metrics") as answer:
            text = await answer.text()
        charged = metric_value(text, "sie_model_memory_bytes")
        if charged > budget:
            problems.append(f"pool charged {charged} bytes over the {budget}-byte budget")
        samples.append(rss_bytes(pid))
        await asyncio.sleep(0.5)


async def test_soak_mixed_traffic_with_evictions_loses_nothing(setup):
    server, expected, budget = setup
    url = server.url
    rng = random.Random(1234)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60),
                                     connector=aiohttp.TCPConnector(limit=32)) as session:
        async with session.get(f"{url}/metrics") as answer:
            before = await answer.text()
        baseline_rss = rss_bytes(server.pid)
        stop_at = time.monotonic() + SOAK_S
        valid = [Tally() for _ in range(6)]
        retrying, hostile, misbehaving = Tally(), Tally(), Tally()
        work = [(MODELS[i % 3], rng.sample(TEXTS, 6)) for i in range(20)]
        samples: list[int] = []
        memory_problems: list[str] = []
        await asyncio.gather(
            *(valid_client(session, url, expected, stop_at, t, random.Random(i)) for i, t in enumerate(valid)),
            retrying_client(session, url, expected, work, retrying, give_up_at=stop_at + 40),
            hostile_client(session, url, stop_at, hostile, random.Random(99)),
            *(misbehaving_client(url, stop_at, misbehaving, random.Random(100 + i)) for i in range(2)),
            watch_memory(session, url, server.pid, budget, stop_at, samples, memory_problems),
        )
        await asyncio.sleep(1.0)  # work of disconnected clients is dropped or finishes
        async with session.get(f"{url}/metrics") as answer:
            after = await answer.text()

    problems = [p for t in (*valid, retrying, hostile, misbehaving) for p in t.problems] + memory_problems
    assert not problems, problems[:10]
    ok = sum(t.ok for t in valid)
    overloaded = sum(t.overloaded for t in valid)
    print(f"valid: {sum(t.sent for t in valid)} sent, {ok} ok, {overloaded} overloaded; retrying: {retrying.ok} ok "
          f"after {retrying.overloaded} 429/503; hostile: {hostile.client_errors}; misbehaving: {misbehaving.sent}; "
          f"RSS {baseline_rss / 2**20:.0f} -> max {max(samples) / 2**20:.0f} MiB")
    # every valid request was answered (a vector or 429/503); the retrying client finished all its work
    assert sum(t.sent for t in valid) == ok + overloaded and ok > 50
    assert retrying.ok == len(work) and retrying.overloaded >= 1  # it was refused, waited, and finished
    assert hostile.client_errors > 10 and misbehaving.sent > 5
    # models really were swapped, and memory stayed bounded
    evictions = metric_value(after, "sie_model_evictions_total") - metric_value(before, "sie_model_evictions_total")
    assert evictions >= 5, evictions
    assert max(samples) < baseline_rss + 400 * 2**20, (baseline_rss, max(samples))
    # nothing in flight or queued once the clients are gone, and no server error at all
    assert metric_value(after, "sie_inflight_requests") == 0
    assert metric_value(after, "sie_queued_tokens") == 0
    assert metric_value(after, "sie_requests_total", status="500") == 0
    assert server.process.poll() is None
    log = server.log_text()
    assert "unhandled error" not in log and "Traceback" not in log, log[-3000:]
