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

import logging
from pathlib import Path
from typing import Any

from aiohttp import web

from . import codec
from .auth import ApiKeys
from .card_admin import CardAdmin
from .runtime_cards import MAX_ADMIN_BODY, PREFIX, card_list, cards_of_body, refusal
from .state import ADMIN, ENGINE, SETTINGS, AdminState

log = logging.getLogger(__name__)

ADMIN_ROUTES = frozenset({"configs_list", "configs_add", "configs_remove"})


def setup(app: web.Application, config_dir: Path | None, admin_key_file: Path | None,
          cards: Any = None) -> None:
    """Mount the admin routes over `cards` (a split server's frontend passes the engine core's);
    by default a CardAdmin over this app's engine, which reads the persisted cards into its (not
    yet serving) catalog and raises ValueError for a config dir that cannot be used."""
    if cards is None:
        cards = CardAdmin(app[ENGINE], config_dir)
    app[ADMIN] = AdminState(cards=cards, keys=ApiKeys((), admin_key_file))
    app.router.add_get(PREFIX, list_cards, name="configs_list")
    app.router.add_post(PREFIX, add_cards, name="configs_add")
    app.router.add_delete(PREFIX + "/{model:.+}", remove_card, name="configs_remove")


def admit(request: web.Request) -> None:
    """The admin key check (the middleware calls it for ADMIN_ROUTES instead of the API key's)."""
    problem = refusal(request.app[ADMIN].keys, request.headers.get("Authorization"))
    if problem is not None:
        raise problem


async def list_cards(request: web.Request) -> web.Response:
    return await codec.answer(request, card_list(request.app[ADMIN].cards.cards()))


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
    changed = await app[ADMIN].cards.apply(cards)
    log.info("admin: cards %s added or replaced (%s changed)", [c.id for c in cards], changed or "none")
    return changed


async def remove_card(request: web.Request) -> web.Response:
    model = request.match_info["model"]
    restored = await apply_removal(request.app, model)
    return await codec.answer(request, {"removed": model, "restored": restored})


async def apply_removal(app: web.Application, model: str) -> bool:
    """Stop serving a runtime card (ModelNotFound when it is none); True when the card it replaced
    is served again. The DELETE's work; queue mode's config watcher calls it too."""
    restored = await app[ADMIN].cards.remove(model)
    log.info("admin: card %s removed%s", model, " (the card it replaced is served again)" if restored else "")
    return restored
