"""Point ids and SIE outputs as qdrant-client values."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
from qdrant_client import models

# Qdrant point ids are unsigned ints or UUIDs; other ids map to a stable UUID.
_ID_NAMESPACE = uuid.UUID("6f1b8a52-3c0e-4f7e-9b51-5e2d7a0c9a11")


def point_id(value: Any) -> int | str:
    """A Qdrant point id for `value`: ints and UUID strings as they are, other strings as uuid5."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    text = str(value)
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return str(uuid.uuid5(_ID_NAMESPACE, text))


@dataclass(frozen=True)
class NamedVector:
    """One named vector of the collection: its name, SIE output kind and model, and what a
    point's vector is computed from (its text, or its image through an image-text model)."""

    name: str
    kind: str  # dense | sparse | multivector | muvera (a dense vector: the multivector's MUVERA encoding)
    model: str
    source: str = "text"  # text | image


def qdrant_vector(kind: str, item: Any) -> Any:
    """One SIE output of an encoded item as the value qdrant-client takes for that kind."""
    if kind == "sparse":
        return models.SparseVector(indices=item.sparse.indices.astype(int).tolist(),
                                   values=item.sparse.values.astype(float).tolist())
    return np.asarray(getattr(item, kind), dtype=np.float32).tolist()  # [dims] or [tokens, dims]
