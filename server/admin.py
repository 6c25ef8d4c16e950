"""The admin API: model cards as runtime config (issue #32.3).

    GET    /v1/configs/models          the runtime cards
    POST   /v1/configs/models          add or replace cards (one card, or a list)
    DELETE /v1/configs/models/{model}  stop serving a runtime card's model

Its own key (`--admin-key-file`, re-read when it changes, as `--api-key-file` is): the API key
never grants it, and without an admin key file the routes answer 403 saying how to turn them on.
A POST is checked whole before anything changes (400 naming the first bad card, as a bad
`--models` file is named), persisted to `--config-dir` (when set), then applied. A DELETE of a
runtime card that replaced a card the server started with (the catalog's, `--models`') brings
that card back; of any other card, the model stops being served: 404 for new requests, queued
work still answered, weights unloaded once nothing uses them.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from aiohttp import web

from sie_engine.errors import ModelNotFound

from . import codec
from .auth import ApiKeys
from .errors import HTTPProblem
from .runtime_cards import MAX_ADMIN_BODY, PREFIX, RuntimeCards, card_list, cards_of_body, refusal
from .state import ADMIN, ENGINE, SETTINGS, AdminState

log = logging.getLogger(__name__)

ADMIN_ROUTES = frozenset({"configs_list", "configs_add", "configs_remove"})


def setup(app: web.Application, config_dir: Path | None, admin_key_file: Path | None) -> None:
    """Mount the admin routes and read the persisted cards into the (not yet serving) engine's
    catalog; raises ValueError for a config dir that cannot be used."""
    engine = app[ENGINE]
    store = RuntimeCards(config_dir)
    started_with = {card.id: card for card in engine.catalog}
    for card in store.load():
        engine.catalog.add(card)  # not serving yet: nothing is loaded, no reader is running
    app[ADMIN] = AdminState(store=store, keys=ApiKeys((), admin_key_file), started_with=started_with)
    app.router.add_get(PREFIX, list_cards, name="configs_list")
    app.router.add_post(PREFIX, add_cards, name="configs_add")
    app.router.add_delete(PREFIX + "/{model:.+}", remove_card, name="configs_remove")


def admit(request: web.Request) -> None:
    """The admin key check (the middleware calls it for ADMIN_ROUTES instead of the API key's)."""
    problem = refusal(request.app[ADMIN].keys, request.headers.get("Authorization"))
    if problem is not None:
        raise problem


async def list_cards(request: web.Request) -> web.Response:
    return await codec.answer(request, card_list(request.app[ADMIN].store.cards()))


async def add_cards(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    body = await codec.read_object_or_list(request, min(settings.max_body_bytes, MAX_ADMIN_BODY),
                                           idle_timeout_s=settings.body_idle_timeout_s,
                                           total_timeout_s=settings.body_timeout_s)
    cards = cards_of_body(body)  # every card checked before any is kept or served
    changed = await apply_cards(request.app, cards)
    return await codec.answer(request, {"models": [c.id for c in cards], "changed": changed})


async def apply_cards(app: web.Application, cards: list) -> list[str]:
    """Persist and serve checked cards (the POST's work; queue mode's config watcher calls it too)."""
    admin = app[ADMIN]
    async with admin.lock:  # one change at a time: the file and the catalog stay in step
        await _persist(admin.store.put, cards)
        changed = await app[ENGINE].set_cards(cards)
    log.info("admin: cards %s added or replaced (%s changed)", [c.id for c in cards], changed or "none")
    return changed


async def remove_card(request: web.Request) -> web.Response:
    model = request.match_info["model"]
    restored = await apply_removal(request.app, model)
    return await codec.answer(request, {"removed": model, "restored": restored})


async def apply_removal(app: web.Application, model: str) -> bool:
    """Stop serving a runtime card (ModelNotFound when it is none); True when the card it replaced
    is served again. The DELETE's work; queue mode's config watcher calls it too."""
    admin = app[ADMIN]
    engine = app[ENGINE]
    async with admin.lock:
        if admin.store.get(model) is None:
            served = model in engine.catalog
            raise ModelNotFound(f"model {model!r} is not a runtime card (GET {PREFIX} lists them)"
                                + ("; a card the server started with changes with its --models files and a "
                                   "restart" if served else ""))
        await _persist(admin.store.remove, model)
        original = admin.started_with.get(model)
        if original is not None:  # the runtime card replaced one the server started with: that one again
            await engine.set_cards([original])
        else:
            await engine.remove_card(model)
    log.info("admin: card %s removed%s", model, " (the card it replaced is served again)" if original else "")
    return original is not None


async def _persist(write, *args) -> None:
    try:
        await asyncio.to_thread(write, *args)
    except OSError as exc:
        raise HTTPProblem("not_ready", f"cannot write the config dir ({exc.strerror or exc}); nothing was changed",
                          retry_after=5.0) from None
