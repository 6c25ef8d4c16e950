"""Weaviate (weaviate-client v4) helpers backed by SIE: collections with
self-provided named vectors (dense and multi-vector), batch import with SIE
vectors, near-vector and hybrid queries with an optional SIE rerank, and
extraction-based enrichment (entities stored as filterable text-array properties)."""

from .collection import SIEWeaviate, entity_property

__all__ = ["SIEWeaviate", "entity_property"]
