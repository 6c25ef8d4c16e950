"""The admin API on the router: the engine server's `/v1/configs/models` (server/admin.py),
checked here, kept here, and propagated to every worker in the router's worker list.

Why the router replays its cards rather than workers sharing one config dir: a shared dir needs
a volume every pod of every pool can write (ReadWriteMany), which most clusters do not have, and
a file watcher in every engine; the router already polls every worker each `--poll-interval`.
Each worker's `GET /v1/status` lists the digests of its runtime cards (`configs`), so a worker
that is new, came back, or restarted without its `--config-dir` shows digests that differ from
the router's, and the router sends it its cards (and the DELETEs of cards removed since, which
it remembers while it runs). The same admin key file on the router and the engines: the router
calls the workers with its first key.

Answers say which workers applied a change (`applied`), which refused it (`failed`, with their
status and message) and which were down (`pending`: they get it when their poll succeeds).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp
from aiohttp import web

from sie_engine.card import ModelCard
from sie_engine.errors import SIEError

from ..auth import ApiKeys
from ..errors import status_for
from ..runtime_cards import MAX_ADMIN_BODY, PREFIX, RuntimeCards, card_list, cards_of_body, refusal
from .errors import error_response
from .registry import WorkerRegistry
from .worker import Worker

log = logging.getLogger("sie_server.router")

# seconds one worker may take to apply a change (it persists a file and swaps cards: no load)
APPLY_TIMEOUT_S = 10.0
# a worker that refused a replay (another admin key, a card it cannot take) is asked again after this
REPLAY_BACKOFF_S = 30.0


@dataclass
class RouterAdmin:
    store: RuntimeCards
    keys: ApiKeys
    removed: set[str] = field(default_factory=set)  # ids deleted while this router runs (replayed too)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    replaying: set[str] = field(default_factory=set)  # worker urls a replay is under way for
    not_before: dict[str, float] = field(default_factory=dict)  # worker url -> when to replay again
    registry: WorkerRegistry | None = None  # the router's worker list, once it is made
    queue: Any = None  # queue mode's QueueForwarder: cards go to its KV bucket as well (queue/configs.py)

    def worker_key(self) -> str | None:
        return self.keys.first_key()


ROUTER_ADMIN = web.AppKey("router_admin", RouterAdmin)


def _registry(request: web.Request) -> WorkerRegistry:
    registry = request.app[ROUTER_ADMIN].registry
    assert registry is not None, "the worker registry is made before the router serves"
    return registry


def _refused(request: web.Request) -> web.Response | None:
    problem = refusal(request.app[ROUTER_ADMIN].keys, request.headers.get("Authorization"))
    if problem is None:
        return None
    return error_response(status_for(problem), problem.code, problem.message)


async def _call(session: aiohttp.ClientSession, admin: RouterAdmin, worker: Worker, method: str, path: str,
                body: object = None) -> tuple[int, str]:
    """(status, message) of one admin call to a worker; status 0 when it could not be reached."""
    key = admin.worker_key()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        async with session.request(method, worker.url + path, json=body, headers=headers,
                                   timeout=aiohttp.ClientTimeout(total=APPLY_TIMEOUT_S)) as answer:
            text = await answer.text()
            if answer.status < 400:
                return answer.status, ""
            try:
                message = json.loads(text)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = text[:300]
            return answer.status, message
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        return 0, f"{type(exc).__name__}: {exc}"


async def _propagate(request: web.Request, method: str, path: str, body: object = None,
                     gone_is_done: bool = False) -> dict:
    """Send one admin call to every worker; which applied it, refused it, or were down."""
    admin = request.app[ROUTER_ADMIN]
    registry = _registry(request)
    workers = list(registry.workers.values())
    answers = await asyncio.gather(*(_call(registry.session, admin, w, method, path, body) for w in workers))
    applied, failed, pending = [], [], []
    for worker, (status, message) in zip(workers, answers):
        if status and (status < 400 or (gone_is_done and status == 404)):
            applied.append(worker.url)
        elif status:
            failed.append({"worker": worker.url, "pool": worker.pool, "status": status, "message": message})
        else:
            pending.append(worker.url)
    return {"applied": applied, "failed": failed, "pending": pending}


async def list_cards(request: web.Request) -> web.Response:
    refused = _refused(request)
    if refused is not None:
        return refused
    return web.json_response(card_list(request.app[ROUTER_ADMIN].store.cards()))


async def add_cards(request: web.Request) -> web.Response:
    refused = _refused(request)
    if refused is not None:
        return refused
    if (request.content_length or 0) > MAX_ADMIN_BODY:
        return error_response(413, "payload_too_large", f"admin bodies are at most {MAX_ADMIN_BODY} bytes")
    raw = await request.content.read(MAX_ADMIN_BODY + 1)
    if len(raw) > MAX_ADMIN_BODY:
        return error_response(413, "payload_too_large", f"admin bodies are at most {MAX_ADMIN_BODY} bytes")
    try:
        cards = cards_of_body(await asyncio.to_thread(json.loads, raw))  # checked here, before any worker sees it
    except ValueError as exc:
        return error_response(400, "invalid_request", f"the body is not valid JSON: {exc}")
    except SIEError as exc:
        return error_response(status_for(exc), exc.code, exc.message)
    admin = request.app[ROUTER_ADMIN]
    if admin.queue is not None and admin.queue.js is None:
        return _queue_down()
    async with admin.lock:
        await asyncio.to_thread(admin.store.put, cards)
        admin.removed.difference_update(c.id for c in cards)
        result = await _propagate(request, "POST", PREFIX, [c.to_dict() for c in cards])
        if admin.queue is not None:
            from ..queue.configs import publish_cards

            result["bucket"], result["bucket_revision"] = "sie_configs", await publish_cards(admin.queue.js, cards)
    log.info("admin: cards %s propagated: %s", [c.id for c in cards], result)
    return web.json_response({"models": [c.id for c in cards], **result})


async def remove_card(request: web.Request) -> web.Response:
    refused = _refused(request)
    if refused is not None:
        return refused
    model = request.match_info["model"]
    admin = request.app[ROUTER_ADMIN]
    if admin.queue is not None and admin.queue.js is None:
        return _queue_down()
    async with admin.lock:
        if admin.store.get(model) is None:
            return error_response(404, "model_not_found",
                                  f"model {model!r} is not a runtime card of this router (GET {PREFIX} lists them)")
        await asyncio.to_thread(admin.store.remove, model)
        admin.removed.add(model)
        result = await _propagate(request, "DELETE", _card_path(model), gone_is_done=True)
        if admin.queue is not None:
            from ..queue.configs import publish_removal

            await publish_removal(admin.queue.js, model)
            result["bucket"] = "sie_configs"
    log.info("admin: card %s removed: %s", model, result)
    return web.json_response({"removed": model, **result})


def _queue_down() -> web.Response:
    return error_response(503, "not_ready", "queue mode: no connection to the NATS server yet, so the change could "
                                            "not reach the engines; nothing was changed", retry_after_s=2)


def _card_path(model: str) -> str:
    """The worker's DELETE path of a card: the id quoted (its slashes kept, as the route takes them)."""
    return f"{PREFIX}/{quote(model, safe='/')}"


def mount(app: web.Application, admin: RouterAdmin) -> None:
    app[ROUTER_ADMIN] = admin
    app.router.add_get(PREFIX, list_cards)
    app.router.add_post(PREFIX, add_cards)
    app.router.add_delete(PREFIX + "/{model:.+}", remove_card)


# ---- replay -----------------------------------------------------------------------------

def behind(admin: RouterAdmin, worker: Worker) -> tuple[list[ModelCard], list[str]]:
    """The router's cards a worker does not serve as the router has them, and the removed ones
    it still serves."""
    digests = admin.store.digests()  # computed once per change, not per poll
    stale = [card for card in admin.store.cards() if worker.configs.get(card.id) != digests[card.id]]
    removed = sorted(admin.removed & set(worker.configs))
    return stale, removed


def replay_if_behind(app: web.Application, session: aiohttp.ClientSession, worker: Worker) -> None:
    """Called after each successful status poll: start one replay for a worker that is behind."""
    admin = app[ROUTER_ADMIN]
    if worker.url in admin.replaying or admin.lock.locked():  # a change in flight reaches it itself
        return
    if time.monotonic() < admin.not_before.get(worker.url, 0.0):
        return
    stale, removed = behind(admin, worker)
    if not stale and not removed:
        return
    admin.replaying.add(worker.url)

    async def replay() -> None:
        ok = True
        try:
            if stale:
                status, message = await _call(session, admin, worker, "POST", PREFIX, [c.to_dict() for c in stale])
                ok = 0 < status < 400
                log.log(logging.INFO if ok else logging.WARNING, "admin: replayed cards %s to %s: %s",
                        [c.id for c in stale], worker.url, "applied" if ok else f"{status} {message}")
            for model in removed:
                status, message = await _call(session, admin, worker, "DELETE", _card_path(model))
                ok = ok and (0 < status < 400 or status == 404)
        finally:
            admin.replaying.discard(worker.url)
            if not ok:  # not every poll: a worker that refuses will refuse again
                admin.not_before[worker.url] = time.monotonic() + REPLAY_BACKOFF_S

    asyncio.get_running_loop().create_task(replay(), name=f"sie-router-replay-{worker.url}")
