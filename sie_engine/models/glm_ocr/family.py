"""The GLM-OCR family's registry entry: the model (model.py), its input preparation and `generate`
head (serving.py: extract on page images and PDFs, prompted by task: tasks.py) and the card of a
card-less GLM-OCR directory."""

from __future__ import annotations

from ..base import Family
from .model import GlmOcrConfig, GlmOcrModel
from .serving import GlmOcrInputs, local_card

FAMILY = Family("glm_ocr", GlmOcrConfig.from_hf, GlmOcrModel, "none", tokenizer=GlmOcrInputs, local_card=local_card,
                heads=(("generate", "sie_engine.models.glm_ocr.serving:build_generation_head"),))
