"""Qdrant helpers backed by SIE: collection configs sized from `/v1/models`, points
with named dense / sparse / multivector vectors from one SIE call per model,
single-vector and hybrid (prefetch + fusion) queries, and an optional SIE rerank."""

from .vectors import SIEQdrant, point_id

__all__ = ["SIEQdrant", "point_id"]
