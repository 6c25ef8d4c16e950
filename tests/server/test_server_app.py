"""`create_app` in-process on a loopback port (aiohttp's TestServer): a preload
that fails keeps /readyz at 503 with the reason while the server stays live,
and requests for the broken model get 503 `model_load_failed`: missing weights are not
worth a retry, so no Retry-After (test_load_failures has the rest).
Cheap: the broken model never loads, so no weights are read."""

from __future__ import annotations

import asyncio
import threading
import time

from aiohttp.test_utils import TestClient, TestServer

from engine_fixtures import Recorder, make_engine, patch_run, tiny_cards
from server_fixtures import metric_value
from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_server import ServerSettings, create_app
from sie_server.metrics import ServerMetrics


async def test_failed_preload_keeps_readiness_down_and_says_why(tmp_path):
    broken = ModelCard(id="broken/model", weights=WeightsSource(path=str(tmp_path / "missing")), dims=8)
    metrics = ServerMetrics()  # the engine reports its loads to it; the app serves them
    with Engine(Catalog([broken]), device="cpu", load_retry_cooldown_s=60, pool_events=metrics.pool_events,
                scheduler_events=metrics.scheduler_events) as engine:
        app = create_app(engine, ServerSettings(preload=("broken/model",)), metrics)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            deadline = time.monotonic() + 60  # the failed load is recorded off the loop: on a busy box, later
            while True:
                ready = await client.get("/readyz")
                body = await ready.json()
                if "failed" in body["error"]["message"] or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.01)
            assert ready.status == 503 and body["error"]["code"] == "not_ready"
            assert "broken/model" in body["error"]["message"] and ready.headers["Retry-After"]
            assert (await client.get("/healthz")).status == 200

            status = await (await client.get("/v1/status")).json()
            assert status["ready"] is False and status["models"]["broken/model"]["state"] == "failed"
            info = await (await client.get("/v1/models/broken/model")).json()
            assert info["state"] == "failed" and "not_found" in info["error"]

            answer = await client.post("/v1/encode/broken/model", json={"items": ["a"]})
            assert answer.status == 503 and (await answer.json())["error"]["code"] == "model_load_failed"
            assert "Retry-After" not in answer.headers
            metrics = await (await client.get("/metrics")).text()
            assert metric_value(metrics, "sie_model_load_failures_total", model="broken/model") >= 1
            assert metric_value(metrics, "sie_rejected_total", model="broken/model", reason="model_load_failed") == 1


async def test_status_reports_the_engines_own_queues(tmp_path):
    """/v1/status reads the engine (the router routes on it), not the server's metrics mirror:
    an engine built with event hooks of its own still shows its queue there."""
    recorder = Recorder()
    engine = make_engine(tiny_cards(tmp_path, names=("a",)), recorder)
    running, release = threading.Event(), threading.Event()

    def held(run, items):
        running.set()
        release.wait(10)
        return run(items)

    try:
        patch_run(engine, "tiny/a", held)
        app = create_app(engine, ServerSettings())
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            first = asyncio.ensure_future(client.post("/v1/encode/tiny/a", json={"items": ["one"]}))
            assert await asyncio.to_thread(running.wait, 10)
            second = asyncio.ensure_future(client.post("/v1/encode/tiny/a", json={"items": ["two", "three"]}))
            for _ in range(200):  # the first batch runs (held); the second request waits behind it
                status = await (await client.get("/v1/status")).json()
                if status["queued_items"]:
                    break
                await asyncio.sleep(0.02)
            assert status["queued_items"] == 2 and status["models"]["tiny/a"]["queued_items"] == 2
            assert status["models"]["tiny/a"]["state"] == "loaded" and status["queued_tokens"] > 0
            release.set()
            assert [(await r).status for r in (first, second)] == [200, 200]
    finally:
        release.set()
        engine.close()
