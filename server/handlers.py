"""Route handlers: parse, validate, submit to the engine, await, serialise.

Field-level validation of items, outputs and options is the engine's (one
place for the Python API and HTTP); here only the body's shape, the route's
allowed fields and HTTP-only inputs (headers) are checked.
"""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from sie_engine.errors import InvalidRequest
from sie_engine.types import ModelInfo

from . import codec
from .errors import HTTPProblem
from .fields import ENCODE_FIELDS, EXTRACT_FIELDS, SCORE_FIELDS
from .openapi import openapi_document
from .state import ENGINE, LIFECYCLE, METRICS, MODEL_LABEL, SETTINGS, TIMINGS


TIMEOUT_HEADER = "X-SIE-Timeout-Ms"


# ---- shared steps ----------------------------------------------------------
def model_of(request: web.Request) -> str:
    """The model id from the path; labels the request's metrics when it is served here."""
    model = request.match_info["model"]
    if model in request.app[ENGINE].catalog:
        request[MODEL_LABEL] = model
    return model


def timeout_of(request: web.Request) -> float | None:
    """`X-SIE-Timeout-Ms` as seconds for the engine's `timeout=`."""
    raw = request.headers.get(TIMEOUT_HEADER)
    if raw is None:
        return None
    try:
        ms = float(raw)
    except ValueError:
        ms = math.nan
    if not math.isfinite(ms) or ms <= 0:
        raise InvalidRequest(f"{TIMEOUT_HEADER} must be a positive number of milliseconds, got {raw!r}",
                             field=TIMEOUT_HEADER)
    return ms / 1000.0


async def body_of(request: web.Request) -> dict:
    settings = request.app[SETTINGS]
    return await codec.read_object(request, settings.max_body_bytes, settings.offload_bytes)


def given(body: dict, names: tuple[str, ...]) -> dict[str, Any]:
    """The optional fields the client actually sent (so engine defaults apply to the rest)."""
    return {name: body[name] for name in names if body.get(name) is not None}


# ---- work routes -----------------------------------------------------------
async def encode(request: web.Request) -> web.Response:
    model = model_of(request)
    body = await body_of(request)
    codec.check_fields(body, ENCODE_FIELDS, required=("items",))
    result = await request.app[ENGINE].encode(
        model, body["items"], **given(body, ENCODE_FIELDS[1:]), timeout=timeout_of(request))
    request[TIMINGS] = result.timings
    payload, size = codec.encode_answer(result, codec.answer_format(request))
    return await codec.answer(request, payload, approx_bytes=size, offload_bytes=request.app[SETTINGS].offload_bytes)


async def score(request: web.Request) -> web.Response:
    model = model_of(request)
    body = await body_of(request)
    codec.check_fields(body, SCORE_FIELDS, required=("query", "items"))
    result = await request.app[ENGINE].score(
        model, body["query"], body["items"], **given(body, SCORE_FIELDS[2:]), timeout=timeout_of(request))
    request[TIMINGS] = result.timings
    return await codec.answer(request, codec.score_answer(result))


async def extract(request: web.Request) -> web.Response:
    model = model_of(request)
    body = await body_of(request)
    codec.check_fields(body, EXTRACT_FIELDS, required=("items", "labels"))
    result = await request.app[ENGINE].extract(
        model, body["items"], body["labels"], **given(body, EXTRACT_FIELDS[2:]), timeout=timeout_of(request))
    request[TIMINGS] = result.timings
    return await codec.answer(request, codec.extract_answer(result))


# ---- models and state ------------------------------------------------------
def model_entry(info: ModelInfo, created: int) -> dict:
    entry = {
        "id": info.id, "object": "model", "created": created, "owned_by": "sie", "family": info.family,
        "tasks": list(info.tasks), "outputs": list(info.outputs), "dims": dict(info.dims),
        "matryoshka_dims": list(info.matryoshka_dims), "max_seq_len": info.max_seq_len, "state": info.state,
        "memory_bytes": info.memory_bytes, "description": info.description,
    }
    if info.error:
        entry["error"] = info.error
    return entry


async def list_models(request: web.Request) -> web.Response:
    created = int(request.app[LIFECYCLE].started_at)
    data = [model_entry(info, created) for info in request.app[ENGINE].models()]
    return await codec.answer(request, {"object": "list", "data": data})


async def get_model(request: web.Request) -> web.Response:
    info = request.app[ENGINE].model_info(model_of(request))
    return await codec.answer(request, model_entry(info, int(request.app[LIFECYCLE].started_at)))


async def status(request: web.Request) -> web.Response:
    engine, lifecycle = request.app[ENGINE], request.app[LIFECYCLE]
    queues = request.app[METRICS].queues()
    models = {}
    for card in engine.catalog:
        items, tokens = queues.get(card.id, (0, 0))
        models[card.id] = {"state": engine.pool.state(card.id), "queued_tokens": tokens, "queued_items": items}
    return await codec.answer(request, {
        "ready": lifecycle.ready and not lifecycle.draining, "draining": lifecycle.draining,
        "pool": request.app[SETTINGS].pool, "inflight": lifecycle.inflight,
        "queued_tokens": sum(t for _, t in queues.values()), "queued_items": sum(i for i, _ in queues.values()),
        "models": models,
    })


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    lifecycle = request.app[LIFECYCLE]
    if lifecycle.draining:
        raise HTTPProblem("draining", "the server is draining before shutdown", retry_after=5.0)
    if not lifecycle.ready:
        detail = f": {lifecycle.preload_error}" if lifecycle.preload_error else ""
        raise HTTPProblem("not_ready", f"preloading models{detail}", retry_after=1.0)
    return web.json_response({"status": "ready"})


async def metrics(request: web.Request) -> web.Response:
    body, content_type = request.app[METRICS].exposition()
    return web.Response(body=body, headers={"Content-Type": content_type})


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document())
