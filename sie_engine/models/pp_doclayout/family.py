"""PP-DocLayout's registry entry: the model (model.py), its input preparation (inputs.py), its
`layout` head (head.py) and the card of a card-less directory (card.py)."""

from __future__ import annotations

from ..base import Family
from .card import layout_card
from .config import pp_doclayout_config
from .inputs import LayoutInputs
from .model import PPDocLayoutDetector

FAMILY = Family("pp-doclayout", pp_doclayout_config, PPDocLayoutDetector, "none", tokenizer=LayoutInputs,
                local_card=layout_card,
                heads=(("layout", "sie_engine.models.pp_doclayout.head:build_layout_heads"),))
