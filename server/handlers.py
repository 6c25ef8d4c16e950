"""Route handlers: parse, validate, submit to the engine, await, serialise.

A task's body is decoded into its request struct (sie_contract: types, unknown fields
and fixed bounds refused with the field's path) and handed to the engine as it is;
the deployment's limits on counts are checked right after decoding, the model's own
(its width, its window, its outputs) by the engine, one place for the Python API and
HTTP. HTTP-only inputs (headers) are checked here.
"""

from __future__ import annotations

import asyncio

import msgspec
from aiohttp import web

from sie_contract import Task
from sie_engine.errors import PayloadTooLarge
from sie_engine.types import ModelInfo

from . import codec
from .deadline_header import deadline_ms
from .errors import HTTPProblem
from .openapi import openapi_document
from .redact import public_text
from .state import ADMIN, ENGINE, LIFECYCLE, METRICS, MODEL_LABEL, PRE_ADMITTED, SETTINGS, TASKS, TIMINGS


# ---- shared steps ----------------------------------------------------------
def model_of(request: web.Request) -> str:
    """The model id from the path; labels the request's metrics when it is served here."""
    model = request.match_info["model"]
    if model in request.app[ENGINE].catalog:
        request[MODEL_LABEL] = model
    return model


def timeout_of(request: web.Request) -> float | None:
    """`X-SIE-Timeout-Ms` as seconds for the engine's `timeout=`."""
    ms = deadline_ms(request)
    return None if ms is None else ms / 1000.0


async def body_of(request: web.Request) -> dict:
    settings = request.app[SETTINGS]
    # lists up to the deployment's items bound (a longer one gets the route's own 413 up to MAX_LIST)
    max_list = max(request.app[ENGINE].limits.max_items, codec.MAX_LIST)
    return await codec.read_object(request, settings.max_body_bytes, settings.offload_bytes,
                                   idle_timeout_s=settings.body_idle_timeout_s,
                                   total_timeout_s=settings.body_timeout_s, max_list=max_list)


async def task_request_of(request: web.Request, task: Task) -> msgspec.Struct:
    """The body as `task`'s request struct, its chunk field (items) within the deployment's
    `max_items` (413, as the engine would answer, before any work)."""
    settings = request.app[SETTINGS]
    struct = await codec.read_request(request, task, settings.max_body_bytes, settings.offload_bytes,
                                      idle_timeout_s=settings.body_idle_timeout_s,
                                      total_timeout_s=settings.body_timeout_s)
    items = getattr(struct, task.chunk_field, None) if task.chunk_field else None
    limit = request.app[ENGINE].limits.max_items
    if isinstance(items, list) and len(items) > limit:
        raise PayloadTooLarge(f"{task.chunk_field} holds {len(items)} items; at most {limit} per request",
                              field=task.chunk_field)
    return struct


# ---- work routes -----------------------------------------------------------
def task_handler(task: Task):
    """`POST /v1/{task}/{model}` for a registered task: its fields checked, the engine's call
    awaited, the result written as the task's answer (JSON, or msgpack with binary tensors)."""

    async def handle(request: web.Request) -> web.Response:
        model = model_of(request)
        body = await task_request_of(request, task)
        # the decoded struct is the call's one argument: Task.request takes it as validated
        result = await request.app[ENGINE].run(task.name, model, body, timeout=timeout_of(request),
                                               pre_admitted=request.get(PRE_ADMITTED))
        request[TIMINGS] = result.timings
        fmt = codec.answer_format(request)
        payload, size = codec.task_answer(result, fmt)
        return await codec.answer(request, payload, approx_bytes=size,
                                  offload_bytes=request.app[SETTINGS].offload_bytes)

    handle.__name__ = f"{task.name}_handler"
    return handle


# ---- models and state ------------------------------------------------------
def model_entry(info: ModelInfo, created: int) -> dict:
    entry = {
        "id": info.id, "object": "model", "created": created, "owned_by": "sie", "family": info.family,
        "tasks": list(info.tasks), "outputs": list(info.outputs), "dims": dict(info.dims),
        "matryoshka_dims": list(info.matryoshka_dims), "max_seq_len": info.max_seq_len, "state": info.state,
        "memory_bytes": info.memory_bytes, "description": public_text(info.description),
        # where the weights are (local / download / unavailable), but no path of this machine
        "weights": {"status": info.weights, "source": public_text(info.weights_source),
                    "detail": public_text(info.weights_detail)},
        "modalities": list(info.modalities),
        "pinned": info.pinned, "idle_evict_s": info.idle_evict_s,
    }
    if info.adapters or info.profiles:  # the names lora_id and profile take
        entry["adapters"], entry["profiles"] = list(info.adapters), list(info.profiles)
    if info.image_size:
        entry["image_size"] = info.image_size
    if info.error:
        entry["error"] = public_text(info.error)
    return entry


async def list_models(request: web.Request) -> web.Response:
    created = int(request.app[LIFECYCLE].started_at)
    # looking up where each model's weights are reads the file system: off the event loop
    infos = await asyncio.to_thread(request.app[ENGINE].models)
    data = [model_entry(info, created) for info in infos]
    return await codec.answer(request, {"object": "list", "data": data})


async def get_model(request: web.Request) -> web.Response:
    info = await asyncio.to_thread(request.app[ENGINE].model_info, model_of(request))
    return await codec.answer(request, model_entry(info, int(request.app[LIFECYCLE].started_at)))


async def status(request: web.Request) -> web.Response:
    lifecycle = request.app[LIFECYCLE]
    snapshot = await request.app[ENGINE].status()
    models = {model_id: {"state": m.state, "queued_tokens": m.queued_tokens, "queued_items": m.queued_items}
              for model_id, m in snapshot.models.items()}
    return await codec.answer(request, {
        "ready": lifecycle.ready and not lifecycle.draining, "draining": lifecycle.draining,
        "pool": request.app[SETTINGS].pool, "inflight": lifecycle.inflight,
        "queued_tokens": snapshot.queued_tokens, "queued_items": snapshot.queued_items, "models": models,
        # the runtime cards' digests: the router replays its cards to a worker whose differ
        "configs": request.app[ADMIN].cards.digests(),
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
    return web.json_response(openapi_document(request.app[TASKS]))
