"""The GLM-OCR family's registry entry: the model (model.py)."""

from __future__ import annotations

from ..base import Family
from .model import GlmOcrConfig, GlmOcrModel

FAMILY = Family("glm_ocr", GlmOcrConfig.from_hf, GlmOcrModel, "none")
