"""`create_app(engine, settings)`: the aiohttp application around an `Engine`.

State lives in typed `web.AppKey`s (state.py); background work (preloading,
watching the API key file) runs in `cleanup_ctx`, so it starts and stops with
the app. `drain(app)` is the SIGTERM path: readiness turns 503, new work is
refused with 503 `draining`, and it returns once every accepted request has
been answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from sie_contract import all_tasks
from sie_engine.errors import SIEError

from . import admin, compat, compat_routes, cors, expect, handlers
from .auth import ApiKeys
from .body_budget import BODY_BUDGET, BodyBudget
from .metrics import ServerMetrics
from .middleware import PUBLIC_ROUTES, frame
from .settings import ServerSettings
from .state import ADMIN, API_KEYS, ENGINE, LIFECYCLE, METRICS, QUEUE_TOKEN, SETTINGS, TASKS, WORK_ROUTES, Lifecycle

if TYPE_CHECKING:  # torch: a split server's frontends never load the engine
    from sie_engine import Engine

log = logging.getLogger(__name__)


def create_app(engine: Engine, settings: ServerSettings | None = None,
               metrics: ServerMetrics | None = None, card_admin: Any = None) -> web.Application:
    """The server app. Pass the `ServerMetrics` whose `pool_events` / `scheduler_events` the
    engine was built with (`serve.build_engine` does both); without one, the app counts
    requests but not the engine's loads, batches and queues. Every task registered in
    `sie_contract` now gets its route. `card_admin`: who changes the runtime cards (admin.setup;
    a split server's frontend passes its engine core's)."""
    settings = settings or ServerSettings()
    metrics = metrics or ServerMetrics()
    metrics.memory_budget.set(engine.budget_bytes)

    app = web.Application(middlewares=[frame], client_max_size=settings.max_body_bytes)
    app[ENGINE] = engine
    app[SETTINGS] = settings
    app[BODY_BUDGET] = BodyBudget(settings.max_buffered_body_bytes)
    app[METRICS] = metrics
    app[LIFECYCLE] = Lifecycle(ready=not settings.preload)
    app[API_KEYS] = ApiKeys(tuple(settings.api_keys), settings.api_key_file)
    if settings.queue_url is not None:  # what its queue consumer will send (queue/consumer.py)
        app[QUEUE_TOKEN] = secrets.token_urlsafe(24)
    tasks = tuple(all_tasks())
    app[TASKS] = tasks
    # the ecosystem's APIs (OpenAI, TEI, Cohere/Jina, Weaviate's modules, Infinity) over the same
    # engine calls, as compat_routes.py declares them
    app[WORK_ROUTES] = frozenset(task.name for task in tasks).union(*(api.work for api in compat_routes.APIS))

    for task in tasks:
        app.router.add_post(task.route(compat_routes.MODEL_MATCH), handlers.task_handler(task), name=task.name)
    app.router.add_get("/v1/models", handlers.list_models, name="models")
    app.router.add_get("/v1/models/" + compat_routes.MODEL_MATCH, handlers.get_model, name="model")
    app.router.add_get("/v1/status", handlers.status, name="status")
    app.router.add_get("/healthz", handlers.healthz, name="healthz")
    app.router.add_get("/readyz", handlers.readyz, name="readyz")
    app.router.add_get("/metrics", handlers.metrics, name="metrics")
    app.router.add_get("/openapi.json", handlers.openapi, name="openapi")
    admin.setup(app, settings.config_dir, settings.admin_key_file, card_admin)  # /v1/configs/models
    for api in compat_routes.APIS:
        compat.mount_api(app, api)
    cors.setup(app, settings.cors_origins)  # aiohttp-cors, on every route above (off without origins)
    expect.install(app, PUBLIC_ROUTES)  # key and length checked before "100 Continue"

    app.cleanup_ctx.append(_preload)
    app.cleanup_ctx.append(_watch_key_file)
    return app


async def _preload(app: web.Application):
    """Load `settings.preload` in the background; /readyz turns 200 when all are in.
    A failed load is retried after the pool's cool-down (readyz says why meanwhile)."""
    engine, lifecycle = app[ENGINE], app[LIFECYCLE]

    async def run():
        for model in app[SETTINGS].preload:
            started = time.monotonic()  # the whole wait as a user sees it: files, tokenizer, weights, retries
            while True:
                try:
                    await engine.load(model)
                    lifecycle.preload_error = None
                    break
                except SIEError as exc:
                    lifecycle.preload_error = exc.message
                    log.error("preload of %s failed: %s", model, exc.message)
                    await asyncio.sleep(max(1.0, getattr(exc, "retry_after", 0) or 5.0))
            log.info("preloaded %s in %.1fs", model, time.monotonic() - started)
            await _warm_up(engine, model)
        lifecycle.ready = True

    task = asyncio.create_task(run()) if app[SETTINGS].preload else None
    yield
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _warm_up(engine: Engine, model: str) -> None:
    """One batch through a preloaded model before readiness, so admission starts from its
    measured throughput (issue #30); a model it cannot warm stays cold (admitted about one
    batch at a time until measured), which is no reason to stay unready."""
    try:
        seconds = await engine.warm_up(model)
    except SIEError as exc:
        log.warning("warm-up of %s skipped: %s (admitted about one batch at a time until measured)",
                    model, exc.message)
        return
    except Exception:  # a fault in a task's warm-up must not keep the server unready
        log.exception("warm-up of %s failed (admitted about one batch at a time until measured)", model)
        return
    log.info("warmed up %s in %.1fs", model, seconds)


async def _watch_key_file(app: web.Application):
    settings = app[SETTINGS]
    tasks = []
    if settings.api_key_file is not None:
        tasks.append(asyncio.create_task(app[API_KEYS].watch(settings.api_key_poll_s)))
    if settings.admin_key_file is not None:
        tasks.append(asyncio.create_task(app[ADMIN].keys.watch(settings.api_key_poll_s)))
    yield
    for task in tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# After the drain timeout: how long the handlers of the requests answered 503 `draining`
# get to write those answers, and the Retry-After they carry (another replica is up by then).
ANSWER_GRACE_S = 5.0
DRAINING_RETRY_AFTER_S = 5.0


async def drain(app: web.Application, timeout_s: float | None = None,
                taken: Callable[[float], Awaitable[bool]] | None = None) -> bool:
    """Stop accepting work and wait until every accepted request has its answer. Work
    still queued when `timeout_s` runs out is answered 503 `draining` with Retry-After,
    never dropped. `taken` waits for other accepted work, up to the same timeout (queue
    mode: the messages taken from the stream, `QueueConsumer.settle`). True when everything
    finished within the timeout."""
    lifecycle, engine = app[LIFECYCLE], app[ENGINE]
    timeout_s = app[SETTINGS].drain_timeout_s if timeout_s is None else timeout_s
    lifecycle.draining = True
    log.info("draining: %d request(s) in flight", lifecycle.accepted())
    waits = [lifecycle.wait_idle(timeout_s)] + ([taken(timeout_s)] if taken is not None else [])
    finished = all(await asyncio.gather(*waits))
    if not finished:
        refused = await engine.abort(f"this server was shutting down and its drain time ({timeout_s:g}s) ran out "
                                     "before this request ran; retry on another replica",
                                     retry_after=DRAINING_RETRY_AFTER_S)
        log.warning("drain timed out after %.0fs: %d request(s) still queued answered 503 draining",
                    timeout_s, refused)
        if not await lifecycle.wait_idle(ANSWER_GRACE_S):
            log.warning("%d request(s) still unanswered %.0fs after the drain timed out", lifecycle.accepted(),
                        ANSWER_GRACE_S)
    try:
        await asyncio.wait_for(engine.drain(), timeout=ANSWER_GRACE_S)
    except asyncio.TimeoutError:
        finished = False
    return finished
