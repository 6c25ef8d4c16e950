"""The colqwen2 family: the backbone (model.py), its input preparation (inputs.py), its own
multivector builder (head.py) and the card of a card-less directory (card.py)."""

from __future__ import annotations

from ..base import Family
from .card import colqwen2_card
from .inputs import ColQwen2Inputs
from .model import ColQwen2Config, ColQwen2Model

FAMILY = Family("colqwen2", ColQwen2Config.from_hf, ColQwen2Model, "none", tokenizer=ColQwen2Inputs,
                local_card=colqwen2_card,
                heads=(("multivector", "sie_engine.models.colqwen2.head:build_colqwen2_multivector"),))
