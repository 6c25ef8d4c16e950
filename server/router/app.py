"""The router's aiohttp application: `create_router_app(config) -> web.Application`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Protocol

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sie_contract import all_tasks
from sie_engine.errors import SIEError

from .. import compat_routes, slow_clients
from ..auth import ApiKeys
from ..body_budget import BODY_BUDGET, BodyBudget
from ..errors import retry_headers, status_for
from ..redact import public_text
from . import admin
from .bodies import model_in_body, read_forwarded, routing_model
from .config import RouterConfig
from .errors import error_response
from .metrics import RouterMetrics
from .proxy import Forwarder
from .registry import WorkerRegistry

log = logging.getLogger("sie_server.router")

CONFIG = web.AppKey("config", RouterConfig)
METRICS = web.AppKey("metrics", RouterMetrics)
REGISTRY = web.AppKey("registry", WorkerRegistry)


class Handles(Protocol):
    """What answers a routed request: the direct Forwarder (proxy.py) or queue mode's (queue/dispatch.py)."""

    async def handle(self, request: web.Request, pool: str | None, model: str | None,
                     body: bytes) -> web.StreamResponse: ...


FORWARDER = web.AppKey("forwarder", Handles)
STATE = web.AppKey("state", dict)
API_KEYS = web.AppKey("api_keys", ApiKeys)

# The Server header: the software, never its version or the runtime's (issue #30.8).
SERVER_NAME = "sie-router"
# The same open routes as an engine server (health, readiness, metrics, OpenAPI).
_OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/openapi.json"})
# The admin API checks its own key (admin.py), never the API key.
_ADMIN_PATH = admin.PREFIX


@web.middleware
async def _contract_errors(request: web.Request, handler) -> web.StreamResponse:
    """aiohttp's own 404/405/413 answers and the body bounds' errors (bodies.py), in the
    contract's error shape; the head timer stopped and the body budget released as the
    engine server's middleware does."""
    slow_clients.request_started(request)
    try:
        response = await handler(request)
    except SIEError as exc:  # body bounds (408, 413, 415, 429) and bad headers (400)
        response = error_response(status_for(exc), exc.code, public_text(exc.message), headers=retry_headers(exc))
        if response.status == 408:  # the body stopped arriving: this connection is of no more use
            response.force_close()
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[CONFIG].max_body_bytes
        response = error_response(413, "payload_too_large", f"request body over {limit} bytes")
    except web.HTTPNotFound:
        response = error_response(404, "not_found", f"no route {request.method} {request.path}")
    except web.HTTPMethodNotAllowed:
        response = error_response(405, "invalid_request",
                                  f"{request.method} is not allowed on {request.path}")
    finally:
        slow_clients.request_finished(request)
        request.app[BODY_BUDGET].release(request)
    response.headers["Server"] = SERVER_NAME  # no versions (issue #30.8)
    return response


@web.middleware
async def _api_key(request: web.Request, handler) -> web.StreamResponse:
    keys = request.app[API_KEYS]
    on_admin = request.path == _ADMIN_PATH or request.path.startswith(_ADMIN_PATH + "/")
    if keys.enabled and request.path not in _OPEN_PATHS and not on_admin:
        if not keys.check(request.headers.get("Authorization")):
            return error_response(401, "unauthorized",
                                  "missing or wrong API key: send 'Authorization: Bearer <key>'")
    return await handler(request)


def _pool_for(request: web.Request) -> tuple[str | None, web.Response | None]:
    config = request.app[CONFIG]
    pool = request.headers.get("X-SIE-Pool") or config.default_pool
    if pool is None:
        return None, None
    registry = request.app[REGISTRY]
    if not registry.pool_known(pool):
        known = ", ".join(sorted(registry.seen_pools)) or "(none)"
        return None, error_response(400, "invalid_request",
                                    f"X-SIE-Pool: unknown pool '{pool}'; known pools: {known}")
    return pool, None


async def _forward(request: web.Request, model: str | None, body: bytes) -> web.StreamResponse:
    pool, refusal = _pool_for(request)
    if refusal is not None:
        return refusal
    return await request.app[FORWARDER].handle(request, pool, model, body)


async def task_handler(request: web.Request) -> web.StreamResponse:
    """POST /v1/{task}/{model} for every registered task: the model is in the path."""
    body = await read_forwarded(request, request.app[CONFIG])
    return await _forward(request, request.match_info["model"], body)


async def body_model_handler(request: web.Request) -> web.StreamResponse:
    """A compat route whose model is in the JSON body (OpenAI's /v1/embeddings, Cohere's rerank,
    Infinity's, compat_routes.py); the body is sent unchanged. A GET (Infinity's /models) has none:
    any worker of the pool answers it."""
    body = await read_forwarded(request, request.app[CONFIG])
    model = await model_in_body(request, body, request.app[CONFIG])
    return await _forward(request, model, body)


async def path_model_handler(request: web.Request) -> web.StreamResponse:
    """A compat route whose model is in its path (`/tei/{model}/embed`, compat_routes.py)."""
    body = await read_forwarded(request, request.app[CONFIG])
    return await _forward(request, routing_model(request.match_info["model"]), body)


async def passthrough_handler(request: web.Request) -> web.StreamResponse:
    """GET /v1/models, /v1/models/{model}, /openapi.json: any ready worker of the pool answers."""
    return await _forward(request, None, b"")


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.get("draining"):
        return error_response(503, "draining", "the router is shutting down", retry_after_s=1)
    if request.app[CONFIG].queue_url is not None and not state.get("queue_ready"):
        return error_response(503, "not_ready", "no connection to the NATS server (--queue) yet", retry_after_s=1)
    if not state.get("discovered"):
        return error_response(503, "not_ready", "first worker discovery not done", retry_after_s=1)
    return web.json_response({"status": "ready"})


async def metrics_handler(request: web.Request) -> web.Response:
    payload = generate_latest(request.app[METRICS].registry)
    return web.Response(body=payload, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def workers_handler(request: web.Request) -> web.Response:
    """GET /v1/router/workers: the router's view of its workers (for operators and tests)."""
    registry = request.app[REGISTRY]
    return web.json_response({
        "pools": sorted(registry.seen_pools),
        "workers": [w.snapshot() for w in registry.workers.values()],
    })


async def _worker_context(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG]
    # auto_decompress=False: an encoded answer goes back byte for byte with its header.
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=1024), auto_decompress=False)
    registry = WorkerRegistry(config, app[METRICS], session)
    app[REGISTRY] = registry
    app[admin.ROUTER_ADMIN].registry = registry
    registry.after_poll = lambda worker: admin.replay_if_behind(app, session, worker)
    app[FORWARDER] = Forwarder(config, registry, app[METRICS], session)
    # One round before serving, so the first requests see the workers that are up.
    try:
        await asyncio.wait_for(registry.refresh(force_discovery=True),
                               config.status_timeout_s + 1.0)
    except asyncio.TimeoutError:
        log.warning("first worker discovery timed out; continuing in the background")
    app[STATE]["discovered"] = True
    loop_task = asyncio.create_task(registry.run(), name="sie-router-refresh")
    tasks = [loop_task]
    if config.api_key_file is not None:
        tasks.append(asyncio.create_task(app[API_KEYS].watch(1.0), name="sie-router-key-file"))
    if config.admin_key_file is not None:
        tasks.append(asyncio.create_task(app[admin.ROUTER_ADMIN].keys.watch(1.0), name="sie-router-admin-keys"))
    queue = _queue_forwarder(app) if config.queue_url is not None else None
    if queue is not None:
        tasks.append(asyncio.create_task(_connect_queue(app, queue), name="sie-router-queue"))
    yield
    if queue is not None:
        await queue.close()
    for task in tasks:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
    await session.close()


def _queue_forwarder(app: web.Application):
    """Queue mode's forwarder in place of the direct one (the worker list stays, for the admin API)."""
    from ..queue.dispatch import QueueForwarder
    from ..queue.layout import QueueLayout

    config = app[CONFIG]
    assert config.queue_url is not None
    queue_layout = QueueLayout(ack_wait_s=config.queue_ack_wait_s, max_deliver=config.queue_max_deliver,
                               dead_letter_max_msgs=config.queue_dead_letter_max)
    queue = QueueForwarder(config, app[METRICS], config.queue_url, config.queue_pools(), queue_layout)
    app[FORWARDER] = queue
    app[admin.ROUTER_ADMIN].queue = queue
    return queue


async def _connect_queue(app: web.Application, queue) -> None:
    """Connect, make the streams, read the runtime cards the bucket holds; retried until it works
    (/readyz answers 503 meanwhile)."""
    from ..queue.configs import read_cards

    while True:
        try:
            await queue.start()
            cards = await read_cards(queue.js)
            if cards:
                await asyncio.to_thread(app[admin.ROUTER_ADMIN].store.put, cards)
            app[STATE]["queue_ready"] = True
            return
        except Exception as exc:  # the NATS server not up yet, or a stream it refuses
            log.warning("queue mode: cannot set up %s yet (%s: %s); retrying", app[CONFIG].queue_url,
                        type(exc).__name__, exc)
            if queue.nc is not None:
                await queue.nc.close()
                queue.nc = None
            await asyncio.sleep(1.0)


async def _on_shutdown(app: web.Application) -> None:
    app[STATE]["draining"] = True


def create_router_app(config: RouterConfig) -> web.Application:
    app = web.Application(
        client_max_size=config.max_body_bytes, middlewares=[_contract_errors, _api_key])
    app[CONFIG] = config
    app[BODY_BUDGET] = BodyBudget(config.max_buffered_body_bytes)
    app[API_KEYS] = ApiKeys(tuple(config.api_keys), config.api_key_file)
    app[METRICS] = RouterMetrics()
    app[STATE] = {}
    store = admin.RuntimeCards(config.config_dir)
    store.load()  # ValueError for a bad dir or file (the CLI reports it)
    admin.mount(app, admin.RouterAdmin(store=store, keys=ApiKeys((), config.admin_key_file)))
    app.cleanup_ctx.append(_worker_context)
    app.on_shutdown.append(_on_shutdown)
    for task in all_tasks():  # the registry's tasks when the app is made, as the workers serve them
        app.router.add_post(task.route(compat_routes.MODEL_MATCH), task_handler)
    app.router.add_get("/v1/models", passthrough_handler)
    app.router.add_get("/v1/models/" + compat_routes.MODEL_MATCH, passthrough_handler)
    app.router.add_get("/openapi.json", passthrough_handler)
    for api in compat_routes.APIS:  # the rows the workers mount, in the same order (the same matches)
        handler = path_model_handler if api.model == "path" else body_model_handler
        for method, path, _, _ in api.paths():
            app.router.add_route(method, path, handler)
    app.router.add_get("/v1/router/workers", workers_handler)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_handler)
    return app
