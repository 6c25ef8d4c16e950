"""Values that cross the wire besides plain numbers and arrays: int8 vectors with
their scale, sparse vectors, and what extraction finds (entities, classes, relations, regions).
The engine produces them, the server writes them (vectors as tensor objects in msgpack),
the client reads them back into the same types."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Quantized:
    """An int8 vector or matrix and the scale that turns it back into floats
    (value = data * scale). One scale per output (a multivector matrix shares one)."""

    data: np.ndarray
    scale: float

    def dequantize(self) -> np.ndarray:
        """float32 values back (each within `scale / 2` of the original)."""
        values: np.ndarray = self.data.astype(np.float32) * np.float32(self.scale)
        return values


@dataclass
class SparseVector:
    indices: np.ndarray  # [nnz] int32 vocabulary ids, ascending
    values: np.ndarray  # [nnz] float32 weights
    # [nnz] the vocabulary tokens of `indices` (encode's `sparse_labels`; Chroma's SparseVector.labels)
    labels: list[str] | None = None

    def __post_init__(self) -> None:  # the wire's dtypes, whatever the producer used
        self.indices = np.asarray(self.indices, dtype=np.int32)
        self.values = np.asarray(self.values, dtype=np.float32)

    def to_dict(self) -> dict[int, float]:
        return {int(i): float(v) for i, v in zip(self.indices, self.values)}


@dataclass
class Entity:
    text: str
    label: str
    score: float | None  # None: an entity the request gave a relation model, not one found
    start: int  # character offsets into the item's text, end exclusive
    end: int


@dataclass
class Classification:
    label: str
    score: float


@dataclass
class Relation:
    """A relation model's triple: `head` stands in `relation` to `tail` (entities of the same item)."""

    head: Entity
    relation: str
    tail: Entity
    score: float


@dataclass
class Region:
    """A region of an image item (the wire's `RegionOut`): a label, a box `[x0, y0, x1, y1]` in the
    image's pixels, a score where the model gives one and a text where it reads one; a quad box
    (OCR) or polygons (segmentation) where the model gives them, `box` then being their extent."""

    label: str
    box: list[float]
    score: float | None = None
    text: str | None = None
    quad_box: list[float] | None = None
    polygons: list[list[float]] | None = None


@dataclass
class Page:
    """The page of a document item an encoded item is (the wire's `PageOut`): `item` is the
    document's index in the request's items, `number` the page's (1-based); its size in points
    (1/72 inch) and in the pixels it was rendered to."""

    item: int
    number: int
    width: float
    height: float
    width_px: int
    height_px: int
