"""Static embedders in model2vec's format (potion-base-8M and the other model2vec models).

No transformer: a text's vector is the mean of its tokens' rows in one table. Read in
the order a text travels: the checkpoint layout, the typed config, the input preparation
(model2vec's own tokenisation rules), the batch plan (no attention), the model.

A model2vec directory holds `model.safetensors` with the table `embeddings` `[rows, dim]`
(and, in some models, `weights` `[vocab]`, one scale per token, and `mapping` `[vocab]`,
token id -> table row, for vocabulary-quantised models), model2vec's `config.json`
(`normalize`, `max_length`, ...) and `tokenizer.json`. What `StaticModel.encode`
(model2vec 0.10.0) does, and SIE does the same:

- each text is cut to `max_length * median_token_length` characters, the median taken over
  the vocabulary's token strings, before tokenising;
- tokenised without special tokens, truncated to `max_length` tokens (default 512), then the
  unknown token dropped wherever it occurs (so a text may end with fewer tokens);
- row `mapping[id]` (or `id`) of the table, times `weights[id]` where the model has them,
  averaged over the text's tokens; a text left with no token gets the zero vector;
- normalised when the config says `normalize` (SIE's card and per-request option).

`forward` gives each token's row, for the shared mean-pooling head like any backbone's
hidden states; the dense head of a float32 model calls `mean_of_rows` instead, which gathers,
scales and sums the rows in one pass (`embedding_bag`) without holding them: a batch is then
memory-light, so the CPU batch cap for transformers' activations does not apply
(`cpu_float32_batch_tokens`). A batch carries only its sequence boundaries (`cu_seqlens`),
no attention plan.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...attention import AttentionBackend, AttentionMetadata
from ...checkpoints.layout import CheckpointLayout
from ...layers.weights import WeightSpec
from ...tokenizer import Tokenized, VocabularyLookup
from ..base import Backbone, Family
from .layout import DEFAULT_MAX_LENGTH, TOKENIZER_FILE, describe_layout

# ---- typed config -----------------------------------------------------------------

@dataclass(frozen=True)
class StaticConfig:
    vocab_size: int  # token ids the tokenizer gives (rows of `weights` / `mapping`)
    hidden_size: int  # the table's width, the vector's
    embedding_rows: int  # rows of `embeddings` (fewer than vocab_size when vocabulary-quantised)
    token_weights: bool = False  # a `weights` tensor scales each token's row
    token_mapping: bool = False  # a `mapping` tensor: token id -> table row
    normalize: bool = False  # model2vec's default when the config says nothing
    max_length: int | None = DEFAULT_MAX_LENGTH  # None: model2vec does not truncate

    @staticmethod
    def from_hf(config: Mapping[str, Any]) -> StaticConfig:
        """From the layout's config (model2vec's config.json plus the table's facts)."""
        missing = [k for k in ("vocab_size", "hidden_size") if k not in config]
        if missing:
            raise KeyError(f"a model2vec config needs {missing}: describe the directory with checkpoints.describe")
        max_length = config.get("max_length", DEFAULT_MAX_LENGTH)
        if max_length is not None and int(max_length) <= 0:
            raise ValueError(f"max_length={max_length} must be positive")
        mapped = bool(config.get("token_mapping", False))
        rows = int(config.get("embedding_rows", config["vocab_size"]))
        if not mapped and rows != int(config["vocab_size"]):
            raise ValueError(f"the table has {rows} rows for {config['vocab_size']} tokens and no mapping")
        return StaticConfig(
            vocab_size=int(config["vocab_size"]),
            hidden_size=int(config["hidden_size"]),
            embedding_rows=rows,
            token_weights=bool(config.get("token_weights", False)),
            token_mapping=mapped,
            normalize=bool(config.get("normalize", False)),
            max_length=int(max_length) if max_length is not None else None,
        )

    @property
    def max_seq_len(self) -> int | None:
        """model2vec's truncation: the window SIE tokenises to (None: the card's)."""
        return self.max_length

    @property
    def empty_id(self) -> int:
        """The id a text left with no token is given: one past the vocabulary, a zero row."""
        return self.vocab_size


# ---- input preparation ------------------------------------------------------------

def unknown_token_id(tokenizer) -> int | None:
    """model2vec's `_get_unk_token_id`: the model's unknown token (WordPiece, BPE, word
    level), or a Unigram model's `unk_id`; None when the tokenizer has none."""
    from tokenizers.models import BPE, WordLevel, WordPiece

    model = tokenizer.model
    if isinstance(model, (WordPiece, BPE, WordLevel)):  # the models that name their unknown token
        token = model.unk_token
        return None if token is None else tokenizer.token_to_id(token)
    return json.loads(tokenizer.to_str())["model"].get("unk_id")


class StaticTokenizer(VocabularyLookup):
    """model2vec's tokenisation (see the module docstring), with TextTokenizer's interface for
    what encode asks: `encode(texts) -> Tokenized`."""

    uses_type_ids = False

    def __init__(self, layout: CheckpointLayout | Path, max_length: int, trust_remote_code: bool = False):
        from tokenizers import Tokenizer

        if not isinstance(layout, CheckpointLayout):
            layout = describe_layout(Path(layout))
        path = Path(layout.tokenizer_source) / TOKENIZER_FILE
        if not path.is_file():
            raise ValueError(f"{path} is missing: a model2vec model tokenises with its tokenizer.json")
        tokenizer = Tokenizer.from_file(str(path))
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length)
        self._tok = tokenizer
        self.max_length = max_length
        self.config = StaticConfig.from_hf(layout.config)
        vocab = tokenizer.get_vocab_size()
        if vocab > self.config.vocab_size:
            raise ValueError(f"{path} has {vocab} tokens but the model's table covers {self.config.vocab_size}")
        self.unk_id = unknown_token_id(tokenizer)
        tokens = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
        # model2vec's character cut: max_length times the median token length (in characters)
        self.median_token_length = int(np.median([len(token) for token, _ in tokens]))
        self.max_chars = max_length * self.median_token_length
        self.pad_token_id = self.cls_token_id = self.sep_token_id = None
        self._empty = np.asarray([self.config.empty_id], dtype=np.int32)

    def encode(self, texts: Sequence[str], *, add_special_tokens: bool = False,
               with_offsets: bool = False) -> Tokenized:
        """`[ids]` per text as `StaticModel.tokenize` gives them after `encode`'s cut. Special
        tokens are never added (model2vec adds none), whatever the caller asks."""
        if with_offsets:
            raise ValueError("a static embedder gives no character offsets")
        cut = [t[:self.max_chars] for t in texts]
        encodings = self._tok.encode_batch_fast(cut, add_special_tokens=False)
        ids, truncated = [], []
        for text, encoding in zip(texts, encodings):
            seq = np.asarray(encoding.ids, dtype=np.int32)
            if self.unk_id is not None:
                seq = seq[seq != self.unk_id]
            ids.append(seq if len(seq) else self._empty)
            truncated.append(len(text) > self.max_chars or bool(encoding.overflowing))
        return Tokenized(ids=ids, type_ids=None, truncated=truncated)

    def encode_pairs(self, firsts: Sequence[str], seconds: Sequence[str]) -> Tokenized:
        raise ValueError("a static embedder encodes single texts, not pairs")



# ---- batch plan: no attention -----------------------------------------------------

class NoAttention(AttentionBackend):
    """A batch plan for a model without attention: the sequence boundaries the pooling head
    reads, and nothing else (no groups, no masks, no padding)."""

    name = "none"

    def prepare(self, seq_lens: Sequence[int], device: torch.device,
                key_lens: Sequence[int] | None = None) -> AttentionMetadata:
        seq_lens = tuple(int(n) for n in seq_lens)
        cu: np.ndarray = np.zeros(len(seq_lens) + 1, dtype=np.int32)
        np.cumsum(seq_lens, out=cu[1:])
        return AttentionMetadata(cu_seqlens=torch.from_numpy(cu).to(device), max_seqlen=max(seq_lens, default=0),
                                 seq_lens=seq_lens)

    def __call__(self, q, k, v, meta, *, scale, causal=False, window=None, bias=None):
        raise TypeError("a static embedder runs no attention")


# ---- model ------------------------------------------------------------------------

class StaticEmbedding(Backbone):
    """Token rows: `forward(input_ids [T], positions [T], attn, token_type_ids [T]?) -> [T, dim]`
    (positions and segments mean nothing here); the dense head's mean pooling averages them."""

    weight_spec = WeightSpec(anchor="embeddings")
    # no transformer activations to keep in cache: a CPU float32 batch takes the card's budget
    # (runner.batch_budget); potion-base-8M on the 2-core box runs 6,000 texts' rows in batches
    # of 16,384 tokens about twice as fast as in batches of 2,048 (2026-11-30)
    cpu_float32_batch_tokens = None
    fuses_mean_pool = True

    @classmethod
    def attention_backend(cls, device: torch.device, dtype: torch.dtype) -> AttentionBackend:
        """The batch plan this family brings instead of an attention backend."""
        return NoAttention()

    def __init__(self, config: StaticConfig, backend: AttentionBackend | None = None):
        super().__init__()
        self.config = config
        self.hidden_size = config.hidden_size
        self.vocab_size = config.vocab_size
        self.embeddings = nn.Parameter(torch.empty(config.embedding_rows, config.hidden_size), requires_grad=False)
        self.weights = (nn.Parameter(torch.empty(config.vocab_size), requires_grad=False)
                        if config.token_weights else None)
        if config.token_mapping:
            self.register_buffer("mapping", torch.empty(config.vocab_size, dtype=torch.long))
        else:
            self.mapping = None

    @classmethod
    def activation_bytes(cls, batch_tokens: int, config: StaticConfig, dtype: torch.dtype) -> int:
        """Bytes a batch needs beyond the weights (the pool's reserve): at most its rows."""
        return batch_tokens * config.hidden_size * torch.empty((), dtype=dtype).element_size()

    def _rows_and_scales(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`[T]` table rows and `[T]` scales: the token weight, 0 for an empty text's placeholder."""
        real = input_ids < self.vocab_size  # [T]: False only for an empty text's placeholder
        ids = input_ids.clamp_max(self.vocab_size - 1)
        rows = self.mapping.index_select(0, ids) if self.mapping is not None else ids
        scale = real.to(self.embeddings.dtype)
        if self.weights is not None:
            scale = scale * self.weights.index_select(0, ids)
        return rows, scale

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionMetadata,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        rows, scale = self._rows_and_scales(input_ids)
        return self.embeddings.index_select(0, rows) * scale[:, None]  # [T, dim]

    def mean_of_rows(self, input_ids: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
        """`[B, dim]` float32: each sequence's mean of `forward`'s rows, in one gather-and-sum pass."""
        rows, scale = self._rows_and_scales(input_ids)
        sums = F.embedding_bag(rows, self.embeddings, cu_seqlens[:-1].long(), mode="sum", per_sample_weights=scale)
        return sums.float() / (cu_seqlens[1:] - cu_seqlens[:-1]).to(torch.float32)[:, None]


# Static embedders (model2vec: potion-*): a token table and mean pooling, no transformer
FAMILY = Family("static", StaticConfig.from_hf, StaticEmbedding, "mean", tokenizer=StaticTokenizer)
