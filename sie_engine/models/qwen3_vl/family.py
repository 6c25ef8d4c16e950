"""The qwen3_vl family: the backbone (model.py) and its input preparation (inputs.py); the
embedder's dense head (last token) and the reranker's yes/no score head are the shared ones."""

from __future__ import annotations

from ..base import Family
from .inputs import Qwen3VLInputs
from .model import Qwen3VLConfig, Qwen3VLModel

FAMILY = Family("qwen3_vl", Qwen3VLConfig.from_hf, Qwen3VLModel, "last", tokenizer=Qwen3VLInputs)
