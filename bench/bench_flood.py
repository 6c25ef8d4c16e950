"""Overload and shutdown under a flood (issue #19): N requests of 64 long texts sent at
once to a real `sie-server serve` with the default model, then the same flood again with
SIGTERM in the middle of it.

    python bench/bench_flood.py                        # 400 x 64, default settings (--max-queue-wait 30)
    python bench/bench_flood.py --requests 100 --max-queue-wait 10 --drain-timeout 20

Prints for the flood: how many were admitted and refused, the refusals' latency (p50,
p99, max: sent to answered; the target is under 1 s), the Retry-After values, and the
admitted requests' queue wait (the server's X-SIE-Queue-Ms: the target is at most the
bound plus one batch) and total latency. For the SIGTERM run: the answers by status, any
request left without an answer (a dropped connection: the target is none), the last
answer and the process's exit after the signal (the target: within the drain timeout,
plus at most the server's documented 15 s).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).parent))
from common import MINILM_ID, load_texts  # noqa: E402

ENCODE = f"/v1/encode/{MINILM_ID}"


def long_texts(count: int) -> list[str]:
    """Dev-corpus documents longer than MiniLM's 256-token window, cycled to `count`."""
    texts = [t for t in load_texts() if len(t) > 1000]
    return [texts[i % len(texts)] for i in range(count)]


async def post(session: aiohttp.ClientSession, body: bytes) -> dict:
    """One request of a body encoded beforehand (so the client's own JSON encoding of hundreds of
    requests is not counted in the server's latency)."""
    sent = time.monotonic()
    try:
        async with session.post(ENCODE, data=body, headers={"Content-Type": "application/json"}) as r:
            await r.read()
            return {"status": r.status, "sent": sent, "answered": time.monotonic(),
                    "retry_after": r.headers.get("Retry-After"),
                    "queue_s": float(r.headers.get("X-SIE-Queue-Ms", "0")) / 1000}
    except aiohttp.ClientError as exc:
        return {"status": None, "sent": sent, "answered": time.monotonic(), "error": repr(exc)}


def quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def describe(name: str, values: list[float]) -> str:
    if not values:
        return f"{name}: none"
    return (f"{name}: p50 {statistics.median(values):.3f}s  p99 {quantile(values, 0.99):.3f}s  "
            f"max {max(values):.3f}s  (n={len(values)})")


def body_of(texts: list[str]) -> bytes:
    return orjson.dumps({"items": texts})


async def flood(url: str, requests: int, body: bytes) -> list[asyncio.Task]:
    connector = aiohttp.TCPConnector(limit=requests + 8)
    session = aiohttp.ClientSession(url, connector=connector, timeout=aiohttp.ClientTimeout(total=1800))
    tasks = [asyncio.create_task(post(session, body)) for _ in range(requests)]
    asyncio.get_running_loop().create_task(_close_after(session, tasks))
    return tasks


async def _close_after(session: aiohttp.ClientSession, tasks: list[asyncio.Task]) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)
    await session.close()


async def run_flood(url: str, args) -> None:
    body = body_of(long_texts(args.texts))
    started = time.monotonic()
    answers = await asyncio.gather(*await flood(url, args.requests, body))
    took = time.monotonic() - started
    statuses = Counter(a["status"] for a in answers)
    refused = [a for a in answers if a["status"] == 429]
    admitted = [a for a in answers if a["status"] == 200]
    print(f"\nflood: {args.requests} x {args.texts} texts, --max-queue-wait {args.max_queue_wait:g}s; "
          f"all answered in {took:.1f}s; statuses {dict(statuses)}")
    print(describe("refusal latency", [a["answered"] - a["sent"] for a in refused]))
    if refused:
        retry = sorted(int(a["retry_after"]) for a in refused)
        print(f"Retry-After: min {retry[0]}s  median {statistics.median(retry):g}s  max {retry[-1]}s")
    print(describe("admitted queue wait (X-SIE-Queue-Ms)", [a["queue_s"] for a in admitted]))
    print(describe("admitted latency", [a["answered"] - a["sent"] for a in admitted]))


async def run_sigterm(server, url: str, args) -> None:
    tasks = await flood(url, args.requests, body_of(long_texts(args.texts)))
    await asyncio.sleep(args.sigterm_after)
    signalled = time.monotonic()
    server.signal()
    answers = await asyncio.gather(*tasks)
    exit_code = await asyncio.to_thread(server.wait, args.drain_timeout + 120)
    exited = time.monotonic() - signalled
    statuses = Counter(a["status"] for a in answers)
    dropped = [a for a in answers if a["status"] is None]
    last = max(a["answered"] for a in answers) - signalled
    print(f"\nSIGTERM {args.sigterm_after:g}s into a second flood, --drain-timeout {args.drain_timeout:g}s: "
          f"statuses {dict(statuses)}; unanswered (dropped connections): {len(dropped)}")
    print(f"last answer {last:.1f}s after the signal; process exited (code {exit_code}) {exited:.1f}s after it")
    if dropped:
        print("first dropped:", dropped[0]["error"])


async def main_async(args) -> None:
    from sie_server.launch import start_server

    server = start_server("--preload", MINILM_ID, "--max-queue-wait", str(args.max_queue_wait),
                          "--drain-timeout", str(args.drain_timeout), "--no-access-log",
                          log_dir=tempfile.mkdtemp(prefix="sie-flood-"))
    try:
        async with aiohttp.ClientSession(server.url) as session:  # measure throughput first, as a warm server has
            await post(session, body_of(long_texts(args.texts)))
        await run_flood(server.url, args)
        await run_sigterm(server, server.url, args)
    finally:
        server.stop()
        print(f"\nserver log: {server.log_path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--texts", type=int, default=64, help="texts per request")
    parser.add_argument("--max-queue-wait", type=float, default=30.0)
    parser.add_argument("--drain-timeout", type=float, default=120.0)
    parser.add_argument("--sigterm-after", type=float, default=10.0, help="seconds into the second flood")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
