"""The Grounding DINO family's registry entry: the model (model.py), its input preparation
(inputs.py), its own `detect` heads (head.py) and the card of a card-less directory (card.py)."""

from __future__ import annotations

from ..base import Family
from .card import detector_card
from .config import grounding_dino_config
from .inputs import GroundingDinoInputs
from .model import GroundingDinoDetector

FAMILY = Family("grounding-dino", grounding_dino_config, GroundingDinoDetector, "none", tokenizer=GroundingDinoInputs,
                local_card=detector_card,
                heads=(("detect", "sie_engine.models.grounding_dino.head:build_detect_heads"),))
