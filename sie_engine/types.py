"""Result types of the Python API."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sie_contract.values import Classification, Entity, Page, Region, Relation, SparseVector


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
    muvera: Any = None  # np.ndarray [r_reps * 2**k_sim * dim_proj]: the multivector's MUVERA encoding
    page: Page | None = None  # a document item's page (the item's id is the document's)


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
class ExtractedItem:
    id: str
    entities: list[Entity]
    # zero-shot classification models: the labels with their scores, best first (None: an entity model)
    classifications: list[Classification] | None = None
    # relation models: triples between the item's entities (None: not a relation model)
    relations: list[Relation] | None = None
    # detectors (OWLv2): the boxes found in the item's image for the labels (None: not a detector)
    regions: list[Region] | None = None


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
    # where the weights are: local (package, directory or hub cache), download (fetched on first
    # load) or unavailable (not installed, missing, or uncached while offline); see weights.locate_weights
    weights: str = "local"
    weights_source: str = ""
    weights_detail: str = ""
    # what encode items may carry (text; image too for CLIP and SigLIP) and the image side in pixels
    modalities: tuple[str, ...] = ("text",)
    image_size: int | None = None
    # never evicted (its card's `pinned`, or --pin); unloaded after this many idle seconds (None: never)
    pinned: bool = False
    idle_evict_s: float | None = None


@dataclass
class ModelStatus:
    state: str  # available, loading, loaded, failed
    queued_items: int
    queued_tokens: int


@dataclass
class EngineStatus:
    """A consistent snapshot of the engine's models and queues."""

    models: dict[str, ModelStatus]

    @property
    def queued_items(self) -> int:
        return sum(m.queued_items for m in self.models.values())

    @property
    def queued_tokens(self) -> int:
        return sum(m.queued_tokens for m in self.models.values())
