"""Result types of the client. HTTP answers (JSON or msgpack) and embedded-mode
results are all turned into these, so code never needs to know which it got."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sie_contract.values import Classification, Entity, Page, Quantized, Region, Relation, SparseVector


@dataclass
class EncodedItem:
    id: str
    dense: Any = None  # np.ndarray [dims] (float32/float16/uint8; uint8 packed bits for binary; Quantized for int8)
    sparse: SparseVector | None = None
    multivector: Any = None  # np.ndarray [tokens, dims]
    muvera: Any = None  # np.ndarray [r_reps * 2**k_sim * dim_proj]: the multivector's MUVERA encoding
    page: Page | None = None  # a document item's page (the item's id is the document's)


@dataclass
class EncodeResult:
    model: str
    items: list[EncodedItem]
    tokens: int = 0

    def dense_matrix(self) -> np.ndarray:
        """`[N, dims]` dense vectors stacked in item order."""
        vectors = [item.dense.dequantize() if isinstance(item.dense, Quantized) else item.dense for item in self.items]
        if any(v is None for v in vectors):
            raise ValueError("some items carry no dense vector: ask for output_types=['dense']")
        return np.stack(vectors) if vectors else np.zeros((0, 0), dtype=np.float32)


@dataclass
class ScoredItem:
    id: str
    index: int  # position of the item in the request
    score: float
    rank: int  # 0 is best


@dataclass
class ScoreResult:
    model: str
    scores: list[ScoredItem]  # best first
    tokens: int = 0


@dataclass
class ExtractedItem:
    id: str
    entities: list[Entity]
    # classification models (NLI, GLiClass): labels with scores, best first; None for entity models
    classifications: list[Classification] | None = None
    # relation models (GLiREL): triples between the item's entities; None for other models
    relations: list[Relation] | None = None
    # detectors (OWLv2): boxes `[x0, y0, x1, y1]` in the image's pixels for the labels; None for other models
    regions: list[Region] | None = None


@dataclass
class ExtractResult:
    model: str
    items: list[ExtractedItem]
    tokens: int = 0


@dataclass
class ModelInfo:
    id: str
    family: str | None = None
    tasks: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    dims: dict[str, int] = field(default_factory=dict)
    matryoshka_dims: tuple[int, ...] = ()
    max_seq_len: int | None = None
    state: str = "available"
    memory_bytes: int = 0
    error: str | None = None
    weights: str = "local"  # local, download (fetched on first load) or unavailable
    modalities: tuple[str, ...] = ("text",)  # what encode items may carry: text, and image for CLIP / SigLIP
    image_size: int | None = None
    pinned: bool = False  # never evicted (its card's pinned, or the server's --pin)
    idle_evict_s: float | None = None  # unloaded after this many idle seconds; None: never
