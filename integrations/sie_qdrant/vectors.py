"""`SIEQdrant`: SIE encodings shaped for qdrant-client collections with named vectors.

One collection can hold these named vectors per point:

- dense (cosine), from a dense model;
- sparse, from a SPLADE-style model (Qdrant's IDF modifier only on request);
- multivector with the MAX_SIM comparator (late interaction, ColBERT-style);
- muvera (dot product): a multivector model's MUVERA encoding, one vector HNSW indexes, to
  find candidates that the multivector rescores with MaxSim (`multistage_search`);
- image (cosine), from the point's image through an image-text model (CLIP, SigLIP),
  beside the text vectors: a query text finds images through the model's text tower,
  a query image (`search_image`) finds images and same-model text vectors.

When one model offers several of these outputs they come from one SIE call
(one forward pass). Queries use SIE's query mode (`is_query=True`). For
`AsyncQdrantClient` use `AsyncSIEQdrant` (async_vectors.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from qdrant_client import AsyncQdrantClient, QdrantClient, models
from tqdm.auto import tqdm

from sie_client import DEFAULT_MODEL, RetryPolicy, SIEClient, connect

from .plan import QdrantPlan, part
from .points import NamedVector


def _sync_only(qdrant: Any) -> None:
    # An AsyncQdrantClient's methods return coroutines: called here they would be
    # dropped unawaited, so create_collection would silently do nothing.
    if isinstance(qdrant, AsyncQdrantClient):
        raise TypeError("SIEQdrant drives a QdrantClient; for AsyncQdrantClient use sie_qdrant.AsyncSIEQdrant")


class SIEQdrant(QdrantPlan):
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
                 sparse_idf: bool = False, instruction: str | None = None, client: SIEClient | None = None,
                 url: str | None = None, api_key: str | None = None, timeout: float | None = None,
                 batch_size: int | None = None, progress: bool | None = None, image_model: str | None = None,
                 image_name: str = "image", retry: RetryPolicy | None = None, muvera_model: str | None = None,
                 muvera_name: str = "muvera", muvera: Mapping[str, int] | None = None):
        """
        See QdrantPlan for the vectors and options. client / url / api_key / timeout / retry (the
        client's RetryPolicy): an SIEClient or the options to make one (SIE_URL / SIE_API_KEY by
        default; no URL means embedded mode).
        """
        super().__init__(dense_model=dense_model, sparse_model=sparse_model, multivector_model=multivector_model,
                         rerank_model=rerank_model, dense_name=dense_name, sparse_name=sparse_name,
                         multivector_name=multivector_name, sparse_idf=sparse_idf, instruction=instruction,
                         batch_size=batch_size, progress=progress, image_model=image_model, image_name=image_name,
                         muvera_model=muvera_model, muvera_name=muvera_name, muvera=muvera)
        self.client = connect(client, url=url, api_key=api_key, timeout=timeout, retry=retry)
        self._dims: dict[tuple[str, str], int] = {}

    # ---- collection configuration -----------------------------------------
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
        sizes = {v.name: self.dims(v) for v in self.vectors if v.kind in ("dense", "multivector")}
        return self.sized_vectors_config(sizes, distance)

    def create_collection(self, qdrant: QdrantClient, collection: str, **kwargs) -> None:
        """Create `collection` with this helper's named vectors (kwargs go to qdrant's create_collection)."""
        _sync_only(qdrant)
        qdrant.create_collection(collection, vectors_config=self.vectors_config(),
                                 sparse_vectors_config=self.sparse_vectors_config() or None, **kwargs)

    # ---- encoding ----------------------------------------------------------
    def _encode(self, texts: Sequence[str | None] | None, is_query: bool, progress: bool | None = None,
                images: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        """Per point or query, `{vector name: qdrant vector}`; one SIE call per distinct model and input kind."""
        count, calls = self.encode_calls(texts, images, is_query, progress)
        rows: list[dict[str, Any]] = [{} for _ in range(count)]
        for model, items, where, wanted, options in calls:
            self.fill_rows(rows, wanted, self.client.encode(model, items, **options), where)
        return rows

    def embed_documents(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        return self._encode(texts, is_query=False)

    def embed_queries(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        return self._encode(texts, is_query=True)

    def embed_images(self, images: Sequence[Any], *, is_query: bool = False) -> list[dict[str, Any]]:
        """Per image (bytes, a path, a PIL image or a pixel array), its vectors: the image vector
        (documents), or every vector of the image space (queries)."""
        return self._encode(None, is_query=is_query, images=images)

    def points(self, texts: Sequence[str | None] | None = None, ids: Sequence[Any] | None = None,
               payloads: Sequence[Mapping[str, Any]] | None = None, text_field: str = "text",
               progress: bool | None = None, *, images: Sequence[Any] | None = None) -> list[models.PointStruct]:
        """PointStructs with the named vectors of each point's text and image (see QdrantPlan)."""
        ids = self.check_lengths(texts, ids, payloads, images)
        return self.build_points(texts, ids, payloads, text_field, self._encode(texts, False, progress, images))

    def upsert(self, qdrant: QdrantClient, collection: str, texts: Sequence[str | None] | None = None,
               ids: Sequence[Any] | None = None, payloads: Sequence[Mapping[str, Any]] | None = None,
               text_field: str = "text", chunk: int = 512, *, images: Sequence[Any] | None = None) -> int:
        """Encode and upsert in chunks of `chunk` points; returns the number of points written.
        images: one per point (bytes, a path, a PIL image or a pixel array; None for none), for
        the image vector."""
        _sync_only(qdrant)
        ids = self.check_lengths(texts, ids, payloads, images)
        for start in range(0, len(ids), chunk):
            end = start + chunk
            qdrant.upsert(collection, points=self.points(part(texts, start, end), ids[start:end],
                                                         part(payloads, start, end), text_field,
                                                         images=part(images, start, end)))
        return len(ids)

    def iter_points(self, texts: Sequence[str | None] | None = None, ids: Sequence[Any] | None = None,
                    payloads: Sequence[Mapping[str, Any]] | None = None, text_field: str = "text",
                    chunk: int = 512, *, images: Sequence[Any] | None = None) -> Iterator[models.PointStruct]:
        """Points encoded `chunk` at a time, as a stream (one progress bar over all points
        when `progress` is on): memory stays bounded by a chunk however many points there are."""
        ids = self.check_lengths(texts, ids, payloads, images)
        with tqdm(total=len(ids), desc="encode", unit="item", disable=not self.progress, leave=False) as bar:
            for start in range(0, len(ids), chunk):
                end = start + chunk
                yield from self.points(part(texts, start, end), ids[start:end], part(payloads, start, end),
                                       text_field, progress=False, images=part(images, start, end))
                bar.update(len(ids[start:end]))

    def upload(self, qdrant: QdrantClient, collection: str, texts: Sequence[str | None] | None = None,
               ids: Sequence[Any] | None = None, payloads: Sequence[Mapping[str, Any]] | None = None,
               text_field: str = "text", *, chunk: int = 512, batch_size: int = 64, parallel: int = 1,
               max_retries: int = 3, wait: bool = True, images: Sequence[Any] | None = None) -> int:
        """Bulk load through qdrant-client's `upload_points` (its batching, parallel upload
        processes and retries) from a stream of SIE-encoded points; returns the count."""
        _sync_only(qdrant)
        count = len(self.check_lengths(texts, ids, payloads, images))
        qdrant.upload_points(collection, points=self.iter_points(texts, ids, payloads, text_field, chunk,
                                                                 images=images),
                             batch_size=batch_size, parallel=parallel, max_retries=max_retries, wait=wait)
        return count

    # ---- queries -----------------------------------------------------------
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
        _sync_only(qdrant)
        requests = self.search_requests(self.embed_queries(queries), using, limit, query_filter, with_payload,
                                        **kwargs)
        return [answer.points for answer in qdrant.query_batch_points(collection, requests=requests)]

    def search_image(self, qdrant: QdrantClient, collection: str, image: Any, *, using: str | None = None,
                     limit: int = 10, query_filter: models.Filter | None = None,
                     with_payload: bool | Sequence[str] = True, **kwargs) -> list[models.ScoredPoint]:
        """Nearest points to an image (bytes, a path, a PIL image or a pixel array) on a vector of
        the image space (the image vector by default)."""
        return self.search_image_batch(qdrant, collection, [image], using=using, limit=limit,
                                       query_filter=query_filter, with_payload=with_payload, **kwargs)[0]

    def search_image_batch(self, qdrant: QdrantClient, collection: str, images: Sequence[Any], *,
                           using: str | None = None, limit: int = 10, query_filter: models.Filter | None = None,
                           with_payload: bool | Sequence[str] = True, **kwargs) -> list[list[models.ScoredPoint]]:
        _sync_only(qdrant)
        requests = self.search_requests(self.embed_images(images, is_query=True), self.image_using(using), limit,
                                        query_filter, with_payload, **kwargs)
        return [answer.points for answer in qdrant.query_batch_points(collection, requests=requests)]

    def hybrid_search(self, qdrant: QdrantClient, collection: str, query: str, *, limit: int = 10,
                      prefetch_limit: int | None = None, fusion: models.Fusion = models.Fusion.RRF,
                      weights: Mapping[str, float] | None = None, rrf_k: int | None = None,
                      query_filter: models.Filter | None = None, rerank: bool | None = None,
                      text_field: str = "text") -> list[models.ScoredPoint]:
        """Prefetch from every named vector, fuse (RRF by default), then optionally rerank with SIE.

        prefetch_limit: candidates per vector (default 4 * limit). weights: RRF weight per vector
        name (others 1.0); rrf_k: RRF's rank constant (Qdrant's default when None). rerank: use
        `rerank_model` (default: when one is configured) on the fused candidates' `text_field`.
        """
        return self.hybrid_search_batch(qdrant, collection, [query], limit=limit, prefetch_limit=prefetch_limit,
                                        fusion=fusion, weights=weights, rrf_k=rrf_k, query_filter=query_filter,
                                        rerank=rerank, text_field=text_field)[0]

    def hybrid_search_batch(self, qdrant: QdrantClient, collection: str, queries: Sequence[str], *, limit: int = 10,
                            prefetch_limit: int | None = None, fusion: models.Fusion = models.Fusion.RRF,
                            weights: Mapping[str, float] | None = None, rrf_k: int | None = None,
                            query_filter: models.Filter | None = None, rerank: bool | None = None,
                            text_field: str = "text") -> list[list[models.ScoredPoint]]:
        _sync_only(qdrant)
        rerank = self.wants_rerank(rerank)
        prefetch_limit = prefetch_limit or 4 * limit
        requests = self.hybrid_requests(self.embed_queries(queries), limit=prefetch_limit if rerank else limit,
                                        prefetch_limit=prefetch_limit, fusion=fusion, weights=weights, rrf_k=rrf_k,
                                        query_filter=query_filter)
        answers = [answer.points for answer in qdrant.query_batch_points(collection, requests=requests)]
        if not rerank:
            return answers
        return [self.rerank(query, points, limit=limit, text_field=text_field)
                for query, points in zip(queries, answers)]

    def multistage_search(self, qdrant: QdrantClient, collection: str, query: str, *, limit: int = 10,
                          prefetch_limit: int = 100, query_filter: models.Filter | None = None
                          ) -> list[models.ScoredPoint]:
        """Dense / sparse / MUVERA candidates rescored by the multivector (MaxSim) in one Qdrant query."""
        return self.multistage_search_batch(qdrant, collection, [query], limit=limit, prefetch_limit=prefetch_limit,
                                            query_filter=query_filter)[0]

    def multistage_search_batch(self, qdrant: QdrantClient, collection: str, queries: Sequence[str], *,
                                limit: int = 10, prefetch_limit: int = 100,
                                query_filter: models.Filter | None = None) -> list[list[models.ScoredPoint]]:
        _sync_only(qdrant)
        requests = self.multistage_requests(self.embed_queries(queries), limit=limit, prefetch_limit=prefetch_limit,
                                            query_filter=query_filter)
        return [answer.points for answer in qdrant.query_batch_points(collection, requests=requests)]

    def rerank(self, query: str, points: Sequence[models.ScoredPoint], *, limit: int | None = None,
               text_field: str = "text") -> list[models.ScoredPoint]:
        """Reorder points by the SIE score model; each point's score becomes the model's score."""
        points = list(points)
        texts = self.rerank_texts(points, text_field)
        if not points:
            return []
        return self.reorder(points, self.client.score(self.required_rerank_model(), query, texts, top_k=limit))
