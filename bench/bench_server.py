"""Throughput of the HTTP server next to the in-process engine, in one run.

Many concurrent clients send encode requests (B documents each) from the dev
corpus; the same requests, equally concurrent, go to an in-process `Engine`
first. Prints tokens/s and latency percentiles for both, so the table shows
what HTTP, (de)serialisation and the server's event loop cost.

    python bench/bench_server.py [--docs 2000] [--concurrency 32] [--batch 8] [--format json|msgpack]

Needs the dev corpus (../shared/data or $SIE_DATA_DIR) and the default model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

DATA_DIR = Path(os.environ.get("SIE_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def load_texts(limit: int) -> list[str]:
    with open(DATA_DIR / "debian-dev-docs.jsonl") as f:
        return [json.loads(line)["text"] for _, line in zip(range(limit), f)]


async def drive(send, batches: list[list[str]], concurrency: int) -> tuple[float, int, list[float], list]:
    """Send every batch with `concurrency` workers; returns (seconds, tokens, latencies, first answer)."""
    queue: asyncio.Queue = asyncio.Queue()
    for i, batch in enumerate(batches):
        queue.put_nowait((i, batch))
    latencies: list[float] = []
    tokens = 0
    first = None

    async def worker():
        nonlocal tokens, first
        while not queue.empty():
            i, batch = queue.get_nowait()
            started = time.perf_counter()
            used, vectors = await send(batch)
            latencies.append(time.perf_counter() - started)
            tokens += used
            if i == 0:
                first = vectors

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started, tokens, latencies, first


async def bench_engine(args, batches):
    from sie_engine import Engine

    engine = Engine(device=args.device)
    try:
        await engine.load(args.model)
        await engine.encode(args.model, batches[0])  # warm-up

        async def send(batch):
            result = await engine.encode(args.model, batch)
            return result.tokens, np.stack([item.dense for item in result.items])

        return await drive(send, batches, args.concurrency)
    finally:
        engine.close()


async def bench_http(args, batches):
    import aiohttp
    import msgpack

    from sie_server.codec import decode_tensor
    from sie_server.launch import start_server

    server = start_server("--preload", args.model, "--device", args.device)
    try:
        url = f"/v1/encode/{args.model}"
        connector = aiohttp.TCPConnector(limit=args.concurrency)
        async with aiohttp.ClientSession(server.url, connector=connector) as session:
            async def send(batch):
                if args.format == "msgpack":
                    body = msgpack.packb({"items": batch})
                    headers = {"Content-Type": "application/msgpack"}
                    async with session.post(url, data=body, headers=headers) as r:
                        answer = msgpack.unpackb(await r.read())
                    vectors = np.stack([decode_tensor(item["dense"]) for item in answer["items"]])
                else:
                    async with session.post(url, json={"items": batch}) as r:
                        answer = await r.json()
                    vectors = np.array([item["dense"] for item in answer["items"]], dtype=np.float32)
                if r.status != 200:
                    raise RuntimeError(f"HTTP {r.status}: {answer}")
                return answer["usage"]["tokens"], vectors

            await send(batches[0])  # warm-up
            return await drive(send, batches, args.concurrency)
    finally:
        server.stop()


def row(name: str, seconds: float, tokens: int, latencies: list[float], requests: int) -> str:
    q = statistics.quantiles(latencies, n=100)
    return (f"{name:<14} {requests:>8} {tokens:>9} {seconds:>8.2f} {tokens / seconds:>10.0f} "
            f"{q[49] * 1000:>8.1f} {q[94] * 1000:>8.1f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=8, help="documents per request")
    parser.add_argument("--concurrency", type=int, default=32, help="concurrent clients")
    parser.add_argument("--format", choices=["json", "msgpack"], default="json")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    texts = load_texts(args.docs)
    batches = [texts[i:i + args.batch] for i in range(0, len(texts), args.batch)]
    print(f"{len(texts)} documents in {len(batches)} requests of {args.batch}, {args.concurrency} concurrent clients, "
          f"model {args.model}, {args.format} over HTTP", flush=True)
    engine_s, engine_tokens, engine_lat, engine_first = asyncio.run(bench_engine(args, batches))
    http_s, http_tokens, http_lat, http_first = asyncio.run(bench_http(args, batches))
    if engine_tokens != http_tokens:
        print(f"token counts differ: engine {engine_tokens}, http {http_tokens}", file=sys.stderr)
        return 1
    worst = float(np.abs(engine_first - http_first).max())
    print(f"\n{'':<14} {'requests':>8} {'tokens':>9} {'seconds':>8} {'tokens/s':>10} {'p50 ms':>8} {'p95 ms':>8}")
    print(row("in-process", engine_s, engine_tokens, engine_lat, len(batches)))
    print(row(f"http ({args.format})", http_s, http_tokens, http_lat, len(batches)))
    print(f"\nHTTP / in-process throughput: {engine_s / http_s:.2f}; first answer max |diff| {worst:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
