"""Tokenisation with the model's fast tokenizer.

Runs on a thread pool, never on an event loop (the Rust tokenizer releases the
GIL in `encode_batch`). Truncation follows the card's max length; no padding,
since batches are packed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np


@dataclass
class Tokenized:
    ids: list[np.ndarray]  # int32 token ids per text
    type_ids: list[np.ndarray] | None  # segment ids (pairs only)
    truncated: list[bool]  # True where the text was longer than the window
    offsets: list[list[tuple[int, int]]] | None = None  # character offsets, when asked for

    @property
    def num_tokens(self) -> int:
        return sum(len(x) for x in self.ids)


class TextTokenizer:
    def __init__(self, root: Path, max_length: int):
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(str(root), use_fast=True)
        if not hf.is_fast:
            raise ValueError(f"{root}: SIE needs a fast (Rust) tokenizer")
        self.hf = hf
        self.max_length = max_length
        self._tok = hf.backend_tokenizer
        self._tok.no_padding()
        self._tok.enable_truncation(max_length)
        self.pad_token_id = hf.pad_token_id
        self.cls_token_id = hf.cls_token_id
        self.sep_token_id = hf.sep_token_id
        self.special_ids = frozenset(hf.all_special_ids)

    def encode(self, texts: Sequence[str], *, add_special_tokens: bool = True,
               with_offsets: bool = False) -> Tokenized:
        encodings = self._tok.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return Tokenized(
            ids=[np.asarray(e.ids, dtype=np.int32) for e in encodings],
            type_ids=None,
            truncated=[bool(e.overflowing) for e in encodings],
            offsets=[e.offsets for e in encodings] if with_offsets else None,
        )

    def encode_pairs(self, firsts: Sequence[str], seconds: Sequence[str]) -> Tokenized:
        """Sentence pairs (query, document); truncation takes from the longer side first."""
        encodings = self._tok.encode_batch(list(zip(firsts, seconds)))
        return Tokenized(
            ids=[np.asarray(e.ids, dtype=np.int32) for e in encodings],
            type_ids=[np.asarray(e.type_ids, dtype=np.int32) for e in encodings],
            truncated=[bool(e.overflowing) for e in encodings],
        )
