"""Result types of the Python API."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class SparseVector:
    indices: np.ndarray  # int32 token ids
    values: np.ndarray  # float32 weights


@dataclass
class Timings:
    """Seconds spent per phase of one request."""

    queue: float = 0.0
    tokenize: float = 0.0
    inference: float = 0.0
    total: float = 0.0


@dataclass
class EncodedItem:
    id: str
    dense: Any = None  # np.ndarray [dims] (or Quantized / packed bits per output_dtype)
    sparse: SparseVector | None = None
    multivector: Any = None  # np.ndarray [tokens, dims]


@dataclass
class EncodeResult:
    model: str
    items: list[EncodedItem]
    tokens: int
    timings: Timings = field(default_factory=Timings)


@dataclass
class ScoredItem:
    id: str
    index: int
    score: float
    rank: int


@dataclass
class ScoreResult:
    model: str
    scores: list[ScoredItem]  # best first
    tokens: int
    timings: Timings = field(default_factory=Timings)


@dataclass
class Entity:
    text: str
    label: str
    score: float
    start: int
    end: int


@dataclass
class ExtractedItem:
    id: str
    entities: list[Entity]


@dataclass
class ExtractResult:
    model: str
    items: list[ExtractedItem]
    tokens: int
    timings: Timings = field(default_factory=Timings)


@dataclass
class ModelInfo:
    id: str
    family: str | None
    tasks: tuple[str, ...]
    outputs: tuple[str, ...]
    dims: dict[str, int]
    matryoshka_dims: tuple[int, ...]
    max_seq_len: int
    state: str
    memory_bytes: int
    error: str | None = None
    description: str = ""
