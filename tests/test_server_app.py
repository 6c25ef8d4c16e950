"""`create_app` in-process on a loopback port (aiohttp's TestServer): a preload
that fails keeps /readyz at 503 with the reason while the server stays live,
and requests for the broken model get 503 `model_load_failed` with Retry-After.
Cheap: the broken model never loads, so no weights are read."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer

from server_fixtures import metric_value
from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_server import ServerSettings, create_app


async def test_failed_preload_keeps_readiness_down_and_says_why(tmp_path):
    broken = ModelCard(id="broken/model", weights=WeightsSource(path=str(tmp_path / "missing")), dims=8)
    with Engine(Catalog([broken]), device="cpu", load_retry_cooldown_s=60) as engine:
        app = create_app(engine, ServerSettings(preload=("broken/model",)))
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            for _ in range(100):
                ready = await client.get("/readyz")
                body = await ready.json()
                if "failed" in body["error"]["message"]:
                    break
            assert ready.status == 503 and body["error"]["code"] == "not_ready"
            assert "broken/model" in body["error"]["message"] and ready.headers["Retry-After"]
            assert (await client.get("/healthz")).status == 200

            status = await (await client.get("/v1/status")).json()
            assert status["ready"] is False and status["models"]["broken/model"]["state"] == "failed"
            info = await (await client.get("/v1/models/broken/model")).json()
            assert info["state"] == "failed" and "not_found" in info["error"]

            answer = await client.post("/v1/encode/broken/model", json={"items": ["a"]})
            assert answer.status == 503 and (await answer.json())["error"]["code"] == "model_load_failed"
            assert int(answer.headers["Retry-After"]) >= 1
            metrics = await (await client.get("/metrics")).text()
            assert metric_value(metrics, "sie_model_load_failures_total", model="broken/model") >= 1
            assert metric_value(metrics, "sie_rejected_total", model="broken/model", reason="model_load_failed") == 1
