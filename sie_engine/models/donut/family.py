"""The Donut family's registry entry: the model (model.py), its input preparation and `generate` head
(serving.py: extract on page images and PDFs) and the card of a card-less Donut directory."""

from __future__ import annotations

from ..base import Family
from .model import DonutConfig, DonutModel
from .serving import DonutInputs, local_card

FAMILY = Family("donut", DonutConfig.from_hf, DonutModel, "mean", tokenizer=DonutInputs, local_card=local_card,
                heads=(("generate", "sie_engine.models.donut.serving:build_generation_head"),))
