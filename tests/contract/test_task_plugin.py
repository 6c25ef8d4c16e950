"""A new kind of work is one module: a task registered here, in the test only, appears
with no other edit on the Engine (async and sync), the server's routes, field checks,
drain accounting and OpenAPI document, the client (HTTP and embedded) and the router.

The toy task, `norms`, returns each text's pooled vector length before normalisation:
it tokenises on the engine's pool, runs through the scheduler as its own work, and uses
the model's dense head, as a real plug-in would.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

from sie_client import AsyncSIEClient
from sie_contract import Field, Task, register, unregister
from sie_contract.schemas import answer, obj, ref
from sie_engine import Engine
from sie_engine import validation as v
from sie_engine.errors import InvalidRequest
from sie_engine.tasks.common import longest_first
from sie_engine.types import Timings
from sie_engine.work import WorkItem
from sie_server import ServerSettings, create_app
from sie_server.router import RouterConfig, StaticWorker, create_router_app
from sie_server.state import WORK_ROUTES

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
TEXTS = ["apt installs Debian packages", "a second, somewhat longer text about packages", "x"]


@dataclass
class NormItem:
    id: str
    norm: float


@dataclass
class NormsResult:
    model: str
    items: list[NormItem]
    tokens: int
    timings: Timings = field(default_factory=Timings)


async def run_norms(engine, call) -> NormsResult:
    """The engine side of the toy task (the registry imports it by name): `call` is the resolved
    call (its card, fields, deadline and admission)."""
    card, request = call.card, call.fields
    ids, texts = v.parse_items(request["items"], engine.limits)
    scale = v.check_number(request.get("scale"), "scale", 0.0, 1e6, 1.0)
    tokenized, tokenize_s = await engine.tokenize(card, "encode", texts)
    work_request = engine.new_request(call, "norms", len(texts))
    work = [WorkItem(work_request, i, tokenized.ids[i], outputs=frozenset({"dense"}))
            for i in longest_first(tokenized.ids)]
    raw = await engine.run_items(card, "norms", work, work_request)
    items = [NormItem(item_id, scale * float(np.linalg.norm(r["dense"]))) for item_id, r in zip(ids, raw)]
    return NormsResult(card.id, items, tokenized.num_tokens, engine.timings(work_request, call.started, tokenize_s))


NORMS = Task(
    name="norms",
    summary="Length of each text's pooled vector before normalisation",
    fields=(Field("items", ref("Items"), required=True), Field("scale", {"type": "number"})),
    served_by=("dense",),
    implementation=f"{__name__}:run_norms",
    answer_schema=answer("items", obj({"id": {"type": "string"}, "norm": {"type": "number"}})),
)


@pytest.fixture(scope="module")
def engine():
    register(NORMS)
    try:
        with Engine(device="cpu") as engine:
            yield engine
    finally:
        unregister("norms")


@pytest.fixture(scope="module")
def expected(engine):
    vectors = engine.encode_sync(MODEL, TEXTS, normalize=False)
    return [float(np.linalg.norm(item.dense)) for item in vectors.items]


async def test_the_engine_has_the_task(engine, expected):
    assert "norms" in engine.card(MODEL).tasks and "norms" in dir(engine)
    result = await engine.norms(MODEL, TEXTS, scale=2.0)
    np.testing.assert_allclose([i.norm for i in result.items], 2 * np.asarray(expected), rtol=1e-6)
    assert result.tokens > 0 and result.timings.total > 0
    sync = engine.norms_sync(MODEL, [{"id": "a", "text": TEXTS[0]}])
    assert sync.items[0].id == "a" and sync.items[0].norm == pytest.approx(expected[0], rel=1e-6)
    with pytest.raises(InvalidRequest, match="unknown field 'scael'") as error:
        await engine.norms(MODEL, TEXTS, scael=2.0)
    assert error.value.field == "scael"


async def test_server_client_and_router_serve_it(engine, expected):
    app = create_app(engine, ServerSettings())
    assert "norms" in app[WORK_ROUTES]  # counted in flight, refused while draining
    async with TestClient(TestServer(app, host="127.0.0.1")) as server:
        answer = await server.post(f"/v1/norms/{MODEL}", json={"items": TEXTS})
        assert answer.status == 200
        body = await answer.json()
        assert [i["id"] for i in body["items"]] == ["0", "1", "2"] and body["usage"]["tokens"] > 0
        np.testing.assert_allclose([i["norm"] for i in body["items"]], expected, rtol=1e-6)

        refused = await server.post(f"/v1/norms/{MODEL}", json={"items": TEXTS, "scael": 1})
        assert refused.status == 400 and (await refused.json())["error"]["field"] == "scael"

        document = await (await server.get("/openapi.json")).json()
        assert "/v1/norms/{model}" in document["paths"]
        assert set(document["components"]["schemas"]["NormsRequest"]["properties"]) == {"items", "scale"}

        url = str(server.make_url("")).rstrip("/")
        async with AsyncSIEClient(url, encoding="json") as client:
            over_http = await client.norms(MODEL, TEXTS, batch_size=2)  # two chunks, merged in order
        assert [i["norm"] for i in over_http["items"]] == pytest.approx(expected, rel=1e-6)
        async with AsyncSIEClient(engine=engine) as client:
            embedded = await client.norms(MODEL, TEXTS)
        assert [i["norm"] for i in embedded["items"]] == pytest.approx(expected, rel=1e-6)

        router_app = create_router_app(RouterConfig(workers=(StaticWorker(url),), poll_interval_s=0.2))
        async with TestClient(TestServer(router_app, host="127.0.0.1")) as router:
            for _ in range(100):  # the router polls the worker's /v1/status before routing to it
                if (await router.get("/readyz")).status == 200:
                    break
                await asyncio.sleep(0.05)
            routed = await router.post(f"/v1/norms/{MODEL}", json={"items": TEXTS[:1]})
            assert routed.status == 200
            assert (await routed.json())["items"][0]["norm"] == pytest.approx(expected[0], rel=1e-6)


def test_the_registry_refuses_tasks_that_would_clash():
    items = Field("items", ref("Items"), required=True)
    for name in ("run", "models", "norms_sync", "_private", "two words"):
        with pytest.raises(ValueError, match="task name"):
            register(Task(name=name, summary="x", fields=(items,), served_by=("dense",), implementation="m:f"))
    with pytest.raises(ValueError, match="required fields come first"):
        register(Task(name="late", summary="x", fields=(Field("scale", {}), items), served_by=("dense",),
                      implementation="m:f"))
