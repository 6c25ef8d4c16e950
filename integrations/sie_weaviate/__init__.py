"""Weaviate (weaviate-client v4) helpers backed by SIE: collections with
self-provided named vectors (dense and multi-vector), import with SIE vectors,
near-vector and hybrid queries with an optional SIE rerank, and extraction-based
enrichment (entities stored as filterable text-array properties); `SIEWeaviate`
for WeaviateClient, `AsyncSIEWeaviate` for WeaviateAsyncClient."""

from .async_collection import AsyncSIEWeaviate
from .collection import SIEWeaviate
from .plan import entity_property

__all__ = ["AsyncSIEWeaviate", "SIEWeaviate", "entity_property"]
