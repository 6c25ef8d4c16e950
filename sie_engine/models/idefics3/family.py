"""The Idefics3 family's registry entry: the model (model.py), its input preparation and `generate`
head (serving.py: extract on page images and PDFs, DocTags answers) and the card of a card-less
Idefics3 directory."""

from __future__ import annotations

from ..base import Family
from .model import Idefics3Config, Idefics3Model
from .serving import Idefics3Inputs, local_card

FAMILY = Family("idefics3", Idefics3Config.from_hf, Idefics3Model, "none", tokenizer=Idefics3Inputs,
                local_card=local_card,
                heads=(("generate", "sie_engine.models.idefics3.serving:build_generation_head"),))
