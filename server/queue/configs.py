"""Runtime model cards in queue mode: the KV bucket `sie_configs`, one key per card.

The router's admin API (router/admin.py) puts a card's JSON under its key and deletes the key of a
removed card; every engine watches the bucket and applies each change as its own admin API would
(server/admin.py: checked as a POST is, persisted to its --config-dir, served). A watch starts with
the bucket's current values, so an engine that starts, restarts or reconnects catches up by itself,
and a runtime card it still has but the bucket no longer holds (removed while it was away) goes.
Why a bucket rather than the router's worker list (direct mode): in queue mode the router does not
know its engines, and the bucket is durable, so nothing waits for a poll or a replay.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging

from aiohttp import web

from sie_engine.errors import SIEError

from ..runtime_cards import cards_of_body, digest
from ..state import ADMIN
from . import layout

log = logging.getLogger("sie_server.queue")

# Waiting for the router to create the bucket: look again this often.
BUCKET_RETRY_S = 1.0


def key_of(model_id: str) -> str:
    """A card id as a KV key (ids hold characters keys may not: base64url, which keys allow)."""
    return base64.urlsafe_b64encode(model_id.encode()).decode()


def id_of(key: str) -> str:
    return base64.urlsafe_b64decode(key.encode()).decode()


async def publish_cards(js, cards: list) -> int:
    """Put cards into the bucket (the router's POST); the last revision written."""
    bucket = await js.key_value(layout.CONFIG_BUCKET)
    revision = 0
    for card in cards:
        revision = await bucket.put(key_of(card.id), json.dumps(card.to_dict(), default=str).encode())
    return revision


async def publish_removal(js, model_id: str) -> None:
    """Delete a card's key (the router's DELETE): every engine's watch removes the card."""
    bucket = await js.key_value(layout.CONFIG_BUCKET)
    await bucket.delete(key_of(model_id))


async def read_cards(js) -> list:
    """Every card in the bucket (the router's store at start, so GET lists what engines serve)."""
    from nats.js.errors import NoKeysError, NotFoundError

    try:
        bucket = await js.key_value(layout.CONFIG_BUCKET)
        keys = await bucket.keys()
    except (NotFoundError, NoKeysError):
        return []
    cards = []
    for key in keys:
        entry = await bucket.get(key)
        if entry.value:
            cards.extend(cards_of_body(json.loads(entry.value)))
    return cards


async def _bucket(js, stopping: asyncio.Event):
    from nats.js.errors import NotFoundError

    while not stopping.is_set():
        try:
            return await js.key_value(layout.CONFIG_BUCKET)
        except NotFoundError:
            try:
                await asyncio.wait_for(stopping.wait(), BUCKET_RETRY_S)
            except asyncio.TimeoutError:
                pass
    return None


async def watch_cards(js, app: web.Application, stopping: asyncio.Event) -> None:
    """Apply the bucket's cards to this server until `stopping` (a task of the consumer)."""
    from .. import admin

    bucket = await _bucket(js, stopping)
    if bucket is None:
        return
    watcher = await bucket.watchall()
    seen: set[str] | None = set()  # ids in the bucket's initial values; None once they are all read
    async for entry in watcher:
        if entry is None:  # the initial values are read: drop what the bucket no longer holds
            gone = {card.id for card in app[ADMIN].cards.cards()} - (seen or set())
            for model_id in sorted(gone):
                await _apply(admin.apply_removal(app, model_id), f"removal of {model_id}")
            seen = None
            continue
        model_id = id_of(entry.key)
        if entry.operation in ("DEL", "PURGE"):
            if app[ADMIN].cards.get(model_id) is not None:
                await _apply(admin.apply_removal(app, model_id), f"removal of {model_id}")
            continue
        if seen is not None:
            seen.add(model_id)
        try:
            cards = cards_of_body(json.loads(entry.value))
        except (ValueError, SIEError) as exc:
            log.error("queue mode: the bucket's card %s is not a card (%s); skipped", model_id, exc)
            continue
        current = app[ADMIN].cards.get(model_id)
        if current is None or digest(current) != digest(cards[0]):
            await _apply(admin.apply_cards(app, cards), f"card {model_id}")


async def _apply(change, what: str) -> None:
    try:
        await change
    except SIEError as exc:  # e.g. the config dir cannot be written: the next change or restart retries
        log.error("queue mode: %s not applied: %s", what, exc.message)
