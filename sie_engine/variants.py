"""Precision variants: a model computed in another dtype than its card's, for the calls that ask
(`precision`). A variant is keyed by (model id, precision), made once per pair and remade when the
model's card is replaced. It is not a catalog entry (a request cannot name it as a model, and
`GET /v1/models` never lists it) and loads no tokenizer of its own (it shares its base model's).

The pool and the scheduler know a variant by its name `<id>@<precision>`: its own resident weights
and its own queue, so a batch never mixes precisions."""

from __future__ import annotations

import dataclasses

from .card import ModelCard


def variant_name(model_id: str, precision: str) -> str:
    """The pool's and the scheduler's key of `model_id` computed in `precision`."""
    return f"{model_id}@{precision}"


class PrecisionVariants:
    """The variants the engine's calls have asked for, by (model id, precision)."""

    def __init__(self) -> None:
        # (model id, precision) -> (the variant's card, the card it was made from)
        self._made: dict[tuple[str, str], tuple[ModelCard, ModelCard]] = {}
        self._by_name: dict[str, tuple[str, str]] = {}  # variant name -> (model id, precision)

    def of(self, card: ModelCard, precision: str) -> ModelCard:
        """`card` computed in `precision` (the same card object for the same pair, while `card` is the
        catalog's); `card` itself when that is its dtype."""
        if precision == card.dtype:
            return card
        key = (card.id, precision)
        known = self._made.get(key)
        if known is None or known[1] is not card:  # new, or its card was replaced since
            name = variant_name(card.id, precision)
            variant = dataclasses.replace(card, id=name, dtype=precision,
                                          description=f"{card.id} computed in {precision}")
            known = self._made[key] = (variant, card)
            self._by_name[name] = key
        return known[0]

    def get(self, name: str) -> ModelCard | None:
        """The variant a pool or scheduler key names, if one was made (None for a model's own id)."""
        key = self._by_name.get(name)
        return self._made[key][0] if key is not None else None

    def base_of(self, model_id: str) -> str:
        """The model id a variant computes (a model's own id for a model): whose tokenizer it uses."""
        key = self._by_name.get(model_id)
        return key[0] if key is not None else model_id
