"""What a head builder gets: the model being built, its checkpoint and its settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..card import ModelCard
from ..models.base import Backbone
from ..tokenizer import VocabularyLookup


@dataclass
class HeadContext:
    """card, root: the model's card and files; hf_config: the backbone's config.json;
    config: the family's typed config; checkpoint: the model's tensors by name, read one at
    a time (a `weights.Checkpoint`); prefix: the backbone's prefix in it; backbone: the
    loaded backbone (a head may share its tensors, e.g. tied embeddings, and asks its declared
    capabilities: `masked_lm_layout`, `input_embeddings`, ...)."""

    card: ModelCard
    root: Path
    hf_config: Mapping[str, Any]
    config: Any
    checkpoint: Mapping[str, torch.Tensor]
    prefix: str
    backbone: Backbone
    tokenizer: VocabularyLookup
    device: torch.device
    dtype: torch.dtype

    def options(self, output: str) -> dict:
        """The card's settings for one head (`options: {<output>: {...}}`), as a plain dict."""
        options = (self.card.options or {}).get(output) or {}
        if not isinstance(options, Mapping):
            raise ValueError(f"card {self.card.id}: options.{output} must be a mapping, got {options!r}")
        return dict(options)
