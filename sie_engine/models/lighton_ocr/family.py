"""The LightOnOCR family's registry entry: the model (model.py over pixtral.py and models/qwen), its
input preparation and `generate` head (serving.py: extract on page images and PDFs) and the card of
a card-less LightOnOCR directory."""

from __future__ import annotations

from ..base import Family
from .model import LightOnOcrConfig, LightOnOcrModel
from .serving import LightOnOcrInputs, local_card

FAMILY = Family("lighton_ocr", LightOnOcrConfig.from_hf, LightOnOcrModel, "mean", tokenizer=LightOnOcrInputs,
                local_card=local_card,
                heads=(("generate", "sie_engine.models.lighton_ocr.serving:build_generation_head"),))
