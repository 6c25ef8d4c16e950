"""The PaddleOCR-VL family's registry entry: the model (model.py), its input preparation and `generate`
head (serving.py: extract on page images and PDFs, prompted by task: tasks.py) and the card of a
card-less PaddleOCR-VL directory."""

from __future__ import annotations

from ..base import Family
from .model import PaddleOcrVlConfig, PaddleOcrVlModel
from .serving import PaddleOcrInputs, local_card

FAMILY = Family("paddleocr_vl", PaddleOcrVlConfig.from_hf, PaddleOcrVlModel, "none", tokenizer=PaddleOcrInputs,
                local_card=local_card,
                heads=(("generate", "sie_engine.models.paddleocr_vl.serving:build_generation_head"),))
