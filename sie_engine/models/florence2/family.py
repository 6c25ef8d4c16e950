"""The Florence-2 family's registry entry: the model (model.py), its input preparation and `generate`
head (serving.py: extract on images and PDF pages, by task token) and the card of a card-less
Florence-2 directory."""

from __future__ import annotations

from ..base import Family
from .model import Florence2Config, Florence2Model
from .serving import Florence2Inputs, local_card

FAMILY = Family("florence2", Florence2Config.from_hf, Florence2Model, "mean", tokenizer=Florence2Inputs,
                local_card=local_card,
                heads=(("generate", "sie_engine.models.florence2.serving:build_generation_head"),))
