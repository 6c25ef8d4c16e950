"""SIGTERM under load on a real `sie-server serve` subprocess: readiness turns
503, new work is refused with 503 `draining`, every request accepted before the
signal is answered in full, and the process exits 0 as soon as they are, even with
a client that sent part of a request body and stopped (it asked for nothing yet;
before issue #19 it was counted in flight and held the shutdown for the whole drain
timeout). A drain that runs out of time: tests/server/test_overload.py."""

from __future__ import annotations

import asyncio
import signal
import time

import aiohttp
import numpy as np

from dev_corpus import load_docs
from server_fixtures import DEFAULT_MODEL, start_server

ENCODE = f"/v1/encode/{DEFAULT_MODEL}"
REQUESTS = 16
PER_REQUEST = 6


async def test_sigterm_under_load_loses_no_accepted_request(tmp_path):
    docs = [d["text"][:400] for d in load_docs(REQUESTS * PER_REQUEST)]  # ~90 tokens each: a few seconds of work
    batches = [docs[i * PER_REQUEST:(i + 1) * PER_REQUEST] for i in range(REQUESTS)]
    server = start_server("--preload", DEFAULT_MODEL, log_dir=tmp_path)
    try:
        async with aiohttp.ClientSession(server.url) as session:
            async def encode(texts):
                async with session.post(ENCODE, json={"items": texts}) as r:
                    return r.status, await r.json()

            # reference vectors, one request at a time before the load
            reference = [np.array([i["dense"] for i in (await encode(b))[1]["items"]]) for b in batches[:3]]

            async def inflight():
                async with session.get("/v1/status") as r:
                    return (await r.json())["inflight"]

            # 10 of its 100 body bytes, then silence
            host, port = server.url.removeprefix("http://").split(":")
            _, stalled = await asyncio.open_connection(host, int(port))
            stalled.write(f"POST {ENCODE} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                          f"Content-Length: 100\r\n\r\n{{\"items\": [".encode())
            await stalled.drain()

            load = [asyncio.create_task(encode(b)) for b in batches]
            while await inflight() < REQUESTS + 1:  # every request (and the stalled one) entered before the signal
                await asyncio.sleep(0.01)
            server.signal(signal.SIGTERM)

            # while draining: not ready, new work refused with Retry-After
            await asyncio.sleep(0.05)
            async with session.get("/readyz") as r:
                assert r.status == 503 and (await r.json())["error"]["code"] == "draining"
            async with session.post(ENCODE, json={"items": ["late"]}) as r:
                assert r.status == 503 and (await r.json())["error"]["code"] == "draining"
                assert int(r.headers["Retry-After"]) >= 1
            assert await inflight() > 0, "the load finished before the drain could be observed"

            answers = await asyncio.gather(*load)
            answered = time.monotonic()
        assert [status for status, _ in answers] == [200] * REQUESTS
        for (_, body), texts in zip(answers, batches):
            assert [item["id"] for item in body["items"]] == [str(i) for i in range(len(texts))]
        for (_, body), want in zip(answers, reference):
            np.testing.assert_allclose(np.array([i["dense"] for i in body["items"]]), want, atol=1e-5)
        assert server.wait(timeout=60) == 0, server.log_text()
        assert time.monotonic() - answered < 10, "the stalled body held the shutdown"
        stalled.close()
        assert "drained (all answered)" in server.log_text()
    finally:
        server.stop()
