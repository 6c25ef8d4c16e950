"""Qdrant helpers backed by SIE: collection configs sized from `/v1/models`, points
with named dense / sparse / multivector vectors from one SIE call per model,
single-vector, hybrid (prefetch + fusion) and multi-stage (prefetch + multivector
rescoring) queries, bulk upload, and an optional SIE rerank; `SIEQdrant` for
QdrantClient, `AsyncSIEQdrant` for AsyncQdrantClient; `use_sie(qdrant, url)`: qdrant-client's own
inference objects (`models.Document` / `models.Image` with `model="sie/<id>"`) embedded by SIE."""

from .async_vectors import AsyncSIEQdrant
from .inference import use_sie
from .points import point_id
from .vectors import SIEQdrant

__all__ = ["AsyncSIEQdrant", "SIEQdrant", "point_id", "use_sie"]
