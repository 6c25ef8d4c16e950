"""`CardAdmin`: the runtime cards (persisted in `--config-dir`) and the engine's catalog kept in
step, one change at a time. The admin API's POST and DELETE (admin.py) and queue mode's config
watcher (queue/configs.py) change cards through it; in a split server the engine core holds the
one CardAdmin and its frontends a `CoreCardAdmin` (split/client.py) that asks the core.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sie_engine.card import ModelCard
from sie_engine.errors import ModelNotFound

from .errors import HTTPProblem
from .runtime_cards import PREFIX, RuntimeCards


class CardAdmin:
    def __init__(self, engine: Any, config_dir: Path | None):
        """Read the persisted cards into the (not yet serving) engine's catalog; ValueError for a
        config dir that cannot be used. The cards the engine started with are kept: a DELETE of a
        runtime card that replaced one brings it back."""
        self.engine = engine
        self.store = RuntimeCards(config_dir)
        self.started_with = {card.id: card for card in engine.catalog}
        for card in self.store.load():
            engine.catalog.add(card)  # not serving yet: nothing is loaded, no reader is running
        self._lock = asyncio.Lock()

    # ---- what the runtime cards are (read on the loop: in memory) ----------
    def cards(self) -> list[ModelCard]:
        return self.store.cards()

    def get(self, model: str) -> ModelCard | None:
        return self.store.get(model)

    def digests(self) -> dict[str, str]:
        return self.store.digests()

    # ---- changes -----------------------------------------------------------
    async def apply(self, cards: list[ModelCard]) -> list[str]:
        """Persist and serve checked cards; the ids whose card changed."""
        async with self._lock:  # one change at a time: the file and the catalog stay in step
            await _persist(self.store.put, cards)
            return await self.engine.set_cards(cards)

    async def remove(self, model: str) -> bool:
        """Stop serving a runtime card (ModelNotFound when it is none); True when the card it
        replaced is served again."""
        async with self._lock:
            if self.store.get(model) is None:
                served = model in self.engine.catalog
                raise ModelNotFound(f"model {model!r} is not a runtime card (GET {PREFIX} lists them)"
                                    + ("; a card the server started with changes with its --models files and a "
                                       "restart" if served else ""))
            await _persist(self.store.remove, model)
            original = self.started_with.get(model)
            if original is not None:  # the runtime card replaced one the server started with: that one again
                await self.engine.set_cards([original])
            else:
                await self.engine.remove_card(model)
            return original is not None


async def _persist(write, *args) -> None:
    try:
        await asyncio.to_thread(write, *args)
    except OSError as exc:
        raise HTTPProblem("not_ready", f"cannot write the config dir ({exc.strerror or exc}); nothing was changed",
                          retry_after=5.0) from None
