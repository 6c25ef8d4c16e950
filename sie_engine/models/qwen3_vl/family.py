"""The qwen3_vl family: the backbone (model.py), its input preparation (inputs.py) and its dense
head (head.py); the reranker's score is the shared yes/no head (heads/classifier.py)."""

from __future__ import annotations

from ..base import Family
from .inputs import Qwen3VLInputs
from .model import Qwen3VLConfig, Qwen3VLModel

FAMILY = Family("qwen3_vl", Qwen3VLConfig.from_hf, Qwen3VLModel, "last", tokenizer=Qwen3VLInputs,
                heads=(("dense", "sie_engine.models.qwen3_vl.head:build_qwen3_vl_dense"),))
