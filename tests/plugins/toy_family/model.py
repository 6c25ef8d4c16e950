"""The toy backbone, read leaf to root: token and position rows, one mixing layer.

`forward(input_ids [T], positions [T], attn, token_type_ids [T]?) -> hidden [T, H]` is
`tanh(mix(tokens[ids] + positions[pos]))`; no attention, so it brings its own batch plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from sie_engine.attention import AttentionBackend, AttentionMetadata
from sie_engine.checkpoints.layout import CheckpointLayout
from sie_engine.layers.weights import WeightSpec
from sie_engine.models.base import Backbone, Family
from sie_engine.models.static.model import NoAttention
from sie_engine.tokenizer import Tokenized, VocabularyLookup

from . import PACKAGE


@dataclass(frozen=True)
class ToyConfig:
    vocab_size: int
    hidden_size: int
    max_positions: int  # rows of the position table: the window
    out_dim: int  # width of the dense head's projection

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> ToyConfig:
        return ToyConfig(int(config["vocab_size"]), int(config["hidden_size"]), int(config["max_positions"]),
                         int(config["out_dim"]))

    @property
    def max_seq_len(self) -> int:
        return self.max_positions


class ToyInputs(VocabularyLookup):
    """Whitespace words -> ids by the directory's tokenizer.json; no special tokens, no pairs."""

    uses_type_ids = False
    special_ids: frozenset = frozenset()

    def __init__(self, layout: CheckpointLayout | Path, max_length: int, trust_remote_code: bool = False):
        from tokenizers import Tokenizer

        root = layout.tokenizer_source if isinstance(layout, CheckpointLayout) else Path(layout)
        self._tok = Tokenizer.from_file(str(Path(root) / "tokenizer.json"))
        self._tok.no_padding()
        self._tok.enable_truncation(max_length)
        self.max_length = max_length
        self.pad_token_id = self.cls_token_id = self.sep_token_id = None

    def encode(self, texts: Sequence[str], *, add_special_tokens: bool = True, with_offsets: bool = False) -> Tokenized:
        encodings = self._tok.encode_batch(list(texts), add_special_tokens=False)
        return Tokenized(ids=[np.asarray(e.ids, dtype=np.int32) for e in encodings], type_ids=None,
                         truncated=[bool(e.overflowing) for e in encodings])

    def encode_pairs(self, firsts: Sequence[str], seconds: Sequence[str]) -> Tokenized:
        raise ValueError("the toy family encodes single texts")


class ToyModel(Backbone):
    weight_spec = WeightSpec(anchor="tokens.weight")
    cpu_float32_batch_tokens = None  # a declared capability: no activations worth capping batches for

    @classmethod
    def attention_backend(cls, device: torch.device, dtype: torch.dtype) -> AttentionBackend:
        return NoAttention()

    def __init__(self, config: ToyConfig, backend: AttentionBackend | None = None):
        super().__init__()
        self.config = config
        self.tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.positions = nn.Embedding(config.max_positions, config.hidden_size)
        self.mix = nn.Linear(config.hidden_size, config.hidden_size)

    def input_embeddings(self) -> nn.Embedding:
        return self.tokens

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        return torch.tanh(self.mix(self.tokens(input_ids.long()) + self.positions(positions.long())))  # [T, H]


FAMILY = Family("toy", ToyConfig.from_hf, ToyModel, "mean", tokenizer=ToyInputs,
                heads=(("dense", f"{PACKAGE}.head:build_toy_dense"),))
