"""`SIEQdrant`: SIE encodings shaped for qdrant-client collections with named vectors.

One collection can hold up to three named vectors per point:

- dense (cosine), from a dense model;
- sparse, with Qdrant's IDF modifier by default (Qdrant weighs each term by its
  inverse document frequency at query time);
- multivector with the MAX_SIM comparator (late interaction, ColBERT-style).

When one model offers several of these outputs they come from one SIE call
(one forward pass). Queries use SIE's query mode (`is_query=True`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from qdrant_client import QdrantClient, models

from sie_client import DEFAULT_MODEL, EncodeResult, SIEClient, connect

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
    """One named vector of the collection: its name, SIE output kind and model."""

    name: str
    kind: str  # dense | sparse | multivector
    model: str


def _sparse(sparse) -> models.SparseVector:
    return models.SparseVector(indices=sparse.indices.astype(int).tolist(), values=sparse.values.astype(float).tolist())


class SIEQdrant:
    """Encode with SIE for a Qdrant collection of named vectors.

    Example:
        sie = SIEQdrant(dense_model="sentence-transformers/all-MiniLM-L6-v2", url="http://127.0.0.1:8080")
        sie.create_collection(qdrant, "docs")
        sie.upsert(qdrant, "docs", texts, ids=ids)
        hits = sie.search(qdrant, "docs", "how do I mount a disk?", limit=10)
    """

    def __init__(self, *, dense_model: str | None = DEFAULT_MODEL, sparse_model: str | None = None,
                 multivector_model: str | None = None, rerank_model: str | None = None,
                 dense_name: str = "dense", sparse_name: str = "sparse", multivector_name: str = "multivector",
                 sparse_idf: bool = True, instruction: str | None = None, client: SIEClient | None = None,
                 url: str | None = None, api_key: str | None = None, timeout: float | None = None,
                 batch_size: int | None = None, progress: bool | None = None):
        """
        *_model: the SIE model for each named vector (None leaves that vector out).
        rerank_model: an SIE score model used by `hybrid_search(rerank=True)` / `rerank`.
        sparse_idf: configure the sparse vector with Qdrant's IDF modifier.
        client / url / api_key / timeout: an SIEClient or the options to make one
        (SIE_URL / SIE_API_KEY by default; no URL means embedded mode).
        """
        self.vectors = [
            NamedVector(name, kind, model)
            for name, kind, model in ((dense_name, "dense", dense_model), (sparse_name, "sparse", sparse_model),
                                      (multivector_name, "multivector", multivector_model))
            if model is not None
        ]
        if not self.vectors:
            raise ValueError("give at least one of dense_model, sparse_model, multivector_model")
        self.rerank_model = rerank_model
        self.sparse_idf = sparse_idf
        self.instruction = instruction
        self.batch_size = batch_size
        self.progress = progress
        self.client = connect(client, url=url, api_key=api_key, timeout=timeout)
        self._dims: dict[tuple[str, str], int] = {}

    # ---- collection configuration -----------------------------------------
    def vector(self, kind: str) -> NamedVector | None:
        return next((v for v in self.vectors if v.kind == kind), None)

    def dims(self, vector: NamedVector) -> int:
        """The vector size: from `/v1/models`, else (model not loaded yet) from one probe encoding."""
        key = (vector.model, vector.kind)
        if key not in self._dims:
            size = self.client.model(vector.model).dims.get(vector.kind)
            if not size:
                probe = self.client.encode(vector.model, ["dimension probe"], output_types=[vector.kind]).items[0]
                size = int(np.shape(getattr(probe, vector.kind))[-1])
            self._dims[key] = int(size)
        return self._dims[key]

    def vectors_config(self, distance: models.Distance = models.Distance.COSINE) -> dict[str, models.VectorParams]:
        config = {}
        for v in self.vectors:
            if v.kind == "dense":
                config[v.name] = models.VectorParams(size=self.dims(v), distance=distance)
            elif v.kind == "multivector":
                config[v.name] = models.VectorParams(
                    size=self.dims(v), distance=distance,
                    multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM),
                )
        return config

    def sparse_vectors_config(self) -> dict[str, models.SparseVectorParams]:
        modifier = models.Modifier.IDF if self.sparse_idf else None
        return {v.name: models.SparseVectorParams(modifier=modifier) for v in self.vectors if v.kind == "sparse"}

    def create_collection(self, qdrant: QdrantClient, collection: str, **kwargs) -> None:
        """Create `collection` with this helper's named vectors (kwargs go to qdrant's create_collection)."""
        qdrant.create_collection(collection, vectors_config=self.vectors_config(),
                                 sparse_vectors_config=self.sparse_vectors_config() or None, **kwargs)

    # ---- encoding ----------------------------------------------------------
    def _encode(self, texts: Sequence[str], is_query: bool) -> list[dict[str, Any]]:
        """Per text, `{vector name: qdrant vector}`; one SIE call per distinct model."""
        texts = list(texts)
        out: list[dict[str, Any]] = [{} for _ in texts]
        by_model: dict[str, list[NamedVector]] = {}
        for v in self.vectors:
            by_model.setdefault(v.model, []).append(v)
        for model, wanted in by_model.items():
            result: EncodeResult = self.client.encode(
                model, texts, output_types=[v.kind for v in wanted], is_query=is_query,
                instruction=self.instruction if is_query else None, batch_size=self.batch_size, progress=self.progress,
            )
            for row, item in zip(out, result.items):
                for v in wanted:
                    if v.kind == "dense":
                        row[v.name] = np.asarray(item.dense, dtype=np.float32).tolist()
                    elif v.kind == "sparse":
                        row[v.name] = _sparse(item.sparse)
                    else:
                        row[v.name] = np.asarray(item.multivector, dtype=np.float32).tolist()
        return out

    def embed_documents(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        return self._encode(texts, is_query=False)

    def embed_queries(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        return self._encode(texts, is_query=True)

    def points(self, texts: Sequence[str], ids: Sequence[Any] | None = None,
               payloads: Sequence[Mapping[str, Any]] | None = None, text_field: str = "text") -> list[models.PointStruct]:
        """PointStructs with every named vector; the text is kept in the payload under `text_field`
        (for reranking), and an id that is not an int or UUID under `id`."""
        ids = list(ids) if ids is not None else list(range(len(texts)))
        if len(ids) != len(texts) or (payloads is not None and len(payloads) != len(texts)):
            raise ValueError("texts, ids and payloads must have the same length")
        points = []
        for i, (text, vectors) in enumerate(zip(texts, self.embed_documents(texts))):
            payload = dict(payloads[i]) if payloads is not None else {}
            payload.setdefault(text_field, text)
            pid = point_id(ids[i])
            if pid != ids[i]:
                payload.setdefault("id", ids[i])
            points.append(models.PointStruct(id=pid, vector=vectors, payload=payload))
        return points

    def upsert(self, qdrant: QdrantClient, collection: str, texts: Sequence[str], ids: Sequence[Any] | None = None,
               payloads: Sequence[Mapping[str, Any]] | None = None, text_field: str = "text",
               chunk: int = 512) -> int:
        """Encode and upsert in chunks of `chunk` texts; returns the number of points written."""
        ids = list(ids) if ids is not None else list(range(len(texts)))
        for start in range(0, len(texts), chunk):
            end = start + chunk
            qdrant.upsert(collection, points=self.points(texts[start:end], ids[start:end],
                                                         payloads[start:end] if payloads is not None else None,
                                                         text_field))
        return len(texts)

    # ---- queries -----------------------------------------------------------
    def _using(self, using: str | None) -> str:
        if using is None:
            return self.vectors[0].name
        if using not in {v.name for v in self.vectors}:
            raise ValueError(f"unknown vector {using!r}; this helper has {[v.name for v in self.vectors]}")
        return using

    def search(self, qdrant: QdrantClient, collection: str, query: str, *, using: str | None = None, limit: int = 10,
               query_filter: models.Filter | None = None, with_payload: bool | Sequence[str] = True,
               **kwargs) -> list[models.ScoredPoint]:
        """Nearest points to `query` on one named vector (the first configured by default)."""
        return self.search_batch(qdrant, collection, [query], using=using, limit=limit, query_filter=query_filter,
                                 with_payload=with_payload, **kwargs)[0]

    def search_batch(self, qdrant: QdrantClient, collection: str, queries: Sequence[str], *, using: str | None = None,
                     limit: int = 10, query_filter: models.Filter | None = None,
                     with_payload: bool | Sequence[str] = True, **kwargs) -> list[list[models.ScoredPoint]]:
        """`search` for many queries: one SIE call and one Qdrant batch request."""
        name = self._using(using)
        requests = [
            models.QueryRequest(query=vectors[name], using=name, limit=limit, filter=query_filter,
                                with_payload=with_payload, **kwargs)
            for vectors in self.embed_queries(queries)
        ]
        return [answer.points for answer in qdrant.query_batch_points(collection, requests=requests)]

    def hybrid_search(self, qdrant: QdrantClient, collection: str, query: str, *, limit: int = 10,
                      prefetch_limit: int | None = None, fusion: models.Fusion = models.Fusion.RRF,
                      query_filter: models.Filter | None = None, rerank: bool | None = None,
                      text_field: str = "text") -> list[models.ScoredPoint]:
        """Prefetch from every named vector, fuse (RRF by default), then optionally rerank with SIE.

        prefetch_limit: candidates per vector (default 4 * limit). rerank: use `rerank_model`
        (default: when one is configured) on the fused candidates' `text_field` payload.
        """
        return self.hybrid_search_batch(qdrant, collection, [query], limit=limit, prefetch_limit=prefetch_limit,
                                        fusion=fusion, query_filter=query_filter, rerank=rerank,
                                        text_field=text_field)[0]

    def hybrid_search_batch(self, qdrant: QdrantClient, collection: str, queries: Sequence[str], *, limit: int = 10,
                            prefetch_limit: int | None = None, fusion: models.Fusion = models.Fusion.RRF,
                            query_filter: models.Filter | None = None, rerank: bool | None = None,
                            text_field: str = "text") -> list[list[models.ScoredPoint]]:
        rerank = self.rerank_model is not None if rerank is None else rerank
        if rerank and self.rerank_model is None:
            raise ValueError("rerank=True needs SIEQdrant(rerank_model=...)")
        prefetch_limit = prefetch_limit or 4 * limit
        fused_limit = prefetch_limit if rerank else limit
        requests = [
            models.QueryRequest(
                prefetch=[models.Prefetch(query=vectors[v.name], using=v.name, limit=prefetch_limit, filter=query_filter)
                          for v in self.vectors],
                query=models.FusionQuery(fusion=fusion), limit=fused_limit, with_payload=True,
            )
            for vectors in self.embed_queries(queries)
        ]
        answers = [answer.points for answer in qdrant.query_batch_points(collection, requests=requests)]
        if not rerank:
            return answers
        return [self.rerank(query, points, limit=limit, text_field=text_field) for query, points in zip(queries, answers)]

    def rerank(self, query: str, points: Sequence[models.ScoredPoint], *, limit: int | None = None,
               text_field: str = "text") -> list[models.ScoredPoint]:
        """Reorder points by the SIE score model; each point's score becomes the model's score."""
        if self.rerank_model is None:
            raise ValueError("rerank needs SIEQdrant(rerank_model=...)")
        points = list(points)
        if not points:
            return []
        texts = []
        for p in points:
            if not p.payload or text_field not in p.payload:
                raise ValueError(f"point {p.id} has no {text_field!r} payload to rerank on; store texts with upsert()")
            texts.append(p.payload[text_field])
        scored = self.client.score(self.rerank_model, query, texts, top_k=limit)
        return [points[s.index].model_copy(update={"score": s.score}) for s in scored.scores]
