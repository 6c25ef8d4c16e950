"""A request's `profile` and `lora_id`, resolved against its model's card at the engine's boundary.

A profile (the card's `profiles`) is a named set of encode fields, an adapter (`lora_id`)
among them: the request's own fields win, the profile fills in the rest. A request that names
neither a profile nor an adapter gets the card's `query_profile` or `document_profile` (by its
`is_query`), where the card has one. A `lora_id` must be one of the card's `adapters`. Both
refusals are 400s that list what the card has and suggest the closest names, so a typo is
fixed from the message alone.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from .card import ModelCard
from .errors import InvalidRequest

# longest name a refusal echoes (and compares): card names are short, a hostile one need not be
MAX_SHOWN = 120


def _shown(name: str) -> str:
    return repr(name if len(name) <= MAX_SHOWN else name[:MAX_SHOWN] + "...")


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`; did you mean 'a' or 'b'?`, or nothing when no known name is close."""
    # 0.5: short names (adapter ids of two letters) are one typo from half their characters
    close = difflib.get_close_matches(name[:MAX_SHOWN], list(known), n=3, cutoff=0.5)
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?" if close else ""


def with_profile(card: ModelCard, fields: Mapping[str, Any], task: str = "encode") -> dict[str, Any]:
    """The request's fields with its profile's defaults under them (the request's own win), its
    adapter checked. InvalidRequest for an unknown profile or adapter. The card's default
    profiles are encode's (`task`): its fields are what a profile presets."""
    merged = dict(fields)
    name = fields.get("profile")
    if name is None and task == "encode" and fields.get("lora_id") is None:
        name = card.query_profile if fields.get("is_query") else card.document_profile
    if name is not None:
        profile = card.profiles.get(name)
        if profile is None:
            known = ", ".join(card.profiles) or "none"
            raise InvalidRequest(f"model {card.id!r} has no profile {_shown(name)}{did_you_mean(name, card.profiles)} "
                                 f"(its card's profiles: {known})", field="profile")
        merged = {**profile, **merged}
    lora_id = merged.get("lora_id")
    if lora_id is not None and lora_id not in card.adapters:
        known = ", ".join(card.adapters) or "none: its card declares no adapters"
        raise InvalidRequest(f"model {card.id!r} has no LoRA adapter {_shown(lora_id)}"
                             f"{did_you_mean(lora_id, card.adapters)}"
                             f" (its card's adapters: {known})", field="lora_id")
    return merged
