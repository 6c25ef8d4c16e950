"""`AsyncSIEQdrant`: SIEQdrant's calls for `AsyncQdrantClient`, awaited, with SIE's
`AsyncSIEClient` encoding (the collection layout and requests are the same:
plan.py builds them for both)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import numpy as np
from qdrant_client import AsyncQdrantClient, models
from tqdm.auto import tqdm

from sie_client import DEFAULT_MODEL, AsyncSIEClient, RetryPolicy, connect_async

from .plan import QdrantPlan, part
from .points import NamedVector


def _async_only(qdrant: Any) -> None:
    if not isinstance(qdrant, AsyncQdrantClient):
        raise TypeError(f"AsyncSIEQdrant awaits an AsyncQdrantClient, not {type(qdrant).__name__}; "
                        f"for QdrantClient use sie_qdrant.SIEQdrant")


class AsyncSIEQdrant(QdrantPlan):
    """SIEQdrant for asyncio programs.

    Example:
        sie = AsyncSIEQdrant(dense_model="sentence-transformers/all-MiniLM-L6-v2", url="http://127.0.0.1:8080")
        qdrant = AsyncQdrantClient(":memory:")
        await sie.create_collection(qdrant, "docs")
        await sie.upsert(qdrant, "docs", texts, ids=ids)
        hits = await sie.search(qdrant, "docs", "how do I mount a disk?", limit=10)
    """

    def __init__(self, *, dense_model: str | None = DEFAULT_MODEL, sparse_model: str | None = None,
                 multivector_model: str | None = None, rerank_model: str | None = None,
                 dense_name: str = "dense", sparse_name: str = "sparse", multivector_name: str = "multivector",
                 sparse_idf: bool = False, instruction: str | None = None, client: AsyncSIEClient | None = None,
                 url: str | None = None, api_key: str | None = None, timeout: float | None = None,
                 batch_size: int | None = None, progress: bool | None = None, image_model: str | None = None,
                 image_name: str = "image", retry: RetryPolicy | None = None, muvera_model: str | None = None,
                 muvera_name: str = "muvera", muvera: Mapping[str, int] | None = None):
        super().__init__(dense_model=dense_model, sparse_model=sparse_model, multivector_model=multivector_model,
                         rerank_model=rerank_model, dense_name=dense_name, sparse_name=sparse_name,
                         multivector_name=multivector_name, sparse_idf=sparse_idf, instruction=instruction,
                         batch_size=batch_size, progress=progress, image_model=image_model, image_name=image_name,
                         muvera_model=muvera_model, muvera_name=muvera_name, muvera=muvera)
        self.client = connect_async(client, url=url, api_key=api_key, timeout=timeout, retry=retry)
        self._dims: dict[tuple[str, str], int] = {}

    async def dims(self, vector: NamedVector) -> int:
        key = (vector.model, vector.kind)
        if key not in self._dims:
            size = (await self.client.model(vector.model)).dims.get(vector.kind)
            if not size:
                probe = (await self.client.encode(vector.model, ["dimension probe"],
                                                  output_types=[vector.kind])).items[0]
                size = int(np.shape(getattr(probe, vector.kind))[-1])
            self._dims[key] = int(size)
        return self._dims[key]

    def vectors_config(self, sizes: Mapping[str, int],
                       distance: models.Distance = models.Distance.COSINE) -> dict[str, models.VectorParams]:
        """Dense and multivector params for vector sizes already awaited (`await self.dims(v)`)."""
        return self.sized_vectors_config(sizes, distance)

    async def create_collection(self, qdrant: AsyncQdrantClient, collection: str,
                                distance: models.Distance = models.Distance.COSINE, **kwargs) -> None:
        _async_only(qdrant)
        sizes = {v.name: await self.dims(v) for v in self.vectors if v.kind in ("dense", "multivector")}
        await qdrant.create_collection(collection, vectors_config=self.vectors_config(sizes, distance),
                                       sparse_vectors_config=self.sparse_vectors_config() or None, **kwargs)

    async def _encode(self, texts: Sequence[str | None] | None, is_query: bool,
                      images: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        count, calls = self.encode_calls(texts, images, is_query)
        rows: list[dict[str, Any]] = [{} for _ in range(count)]
        for model, items, where, wanted, options in calls:
            self.fill_rows(rows, wanted, await self.client.encode(model, items, **options), where)
        return rows

    async def embed_documents(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        return await self._encode(texts, is_query=False)

    async def embed_queries(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        return await self._encode(texts, is_query=True)

    async def embed_images(self, images: Sequence[Any], *, is_query: bool = False) -> list[dict[str, Any]]:
        return await self._encode(None, is_query=is_query, images=images)

    async def points(self, texts: Sequence[str | None] | None = None, ids: Sequence[Any] | None = None,
                     payloads: Sequence[Mapping[str, Any]] | None = None, text_field: str = "text", *,
                     images: Sequence[Any] | None = None) -> list[models.PointStruct]:
        ids = self.check_lengths(texts, ids, payloads, images)
        return self.build_points(texts, ids, payloads, text_field, await self._encode(texts, False, images))

    async def upsert(self, qdrant: AsyncQdrantClient, collection: str, texts: Sequence[str | None] | None = None,
                     ids: Sequence[Any] | None = None, payloads: Sequence[Mapping[str, Any]] | None = None,
                     text_field: str = "text", chunk: int = 512, *, images: Sequence[Any] | None = None) -> int:
        """Encode and upsert in chunks of `chunk` points (AsyncQdrantClient's upload_points takes
        a plain iterable, which cannot await SIE: chunks are upserted instead)."""
        _async_only(qdrant)
        ids = self.check_lengths(texts, ids, payloads, images)
        for start in range(0, len(ids), chunk):
            end = start + chunk
            points = await self.points(part(texts, start, end), ids[start:end], part(payloads, start, end),
                                       text_field, images=part(images, start, end))
            await qdrant.upsert(collection, points=points)
        return len(ids)

    async def iter_points(self, texts: Sequence[str | None] | None = None, ids: Sequence[Any] | None = None,
                          payloads: Sequence[Mapping[str, Any]] | None = None, text_field: str = "text",
                          chunk: int = 512, *, images: Sequence[Any] | None = None
                          ) -> AsyncIterator[models.PointStruct]:
        """Points encoded `chunk` at a time, as an async stream (`async for`; one progress bar over
        all points when `progress` is on): memory stays bounded by a chunk."""
        ids = self.check_lengths(texts, ids, payloads, images)
        with tqdm(total=len(ids), desc="encode", unit="item", disable=not self.progress, leave=False) as bar:
            for start in range(0, len(ids), chunk):
                end = start + chunk
                for point in await self.points(part(texts, start, end), ids[start:end], part(payloads, start, end),
                                               text_field, images=part(images, start, end)):
                    yield point
                bar.update(len(ids[start:end]))

    async def upload(self, qdrant: AsyncQdrantClient, collection: str, texts: Sequence[str | None] | None = None,
                     ids: Sequence[Any] | None = None, payloads: Sequence[Mapping[str, Any]] | None = None,
                     text_field: str = "text", *, chunk: int = 512, batch_size: int = 64, parallel: int = 1,
                     max_retries: int = 3, wait: bool = True, images: Sequence[Any] | None = None) -> int:
        """Bulk load through qdrant-client's `upload_points` (its batching, parallel upload and
        retries), one SIE-encoded chunk at a time; returns the count. AsyncQdrantClient's
        upload_points is a plain (blocking) method over a plain iterable, which cannot await SIE:
        each chunk is encoded, awaited, then handed over whole."""
        _async_only(qdrant)
        ids = self.check_lengths(texts, ids, payloads, images)
        for start in range(0, len(ids), chunk):
            end = start + chunk
            points = await self.points(part(texts, start, end), ids[start:end], part(payloads, start, end),
                                       text_field, images=part(images, start, end))
            qdrant.upload_points(collection, points=points, batch_size=batch_size, parallel=parallel,
                                 max_retries=max_retries, wait=wait)
        return len(ids)

    async def search(self, qdrant: AsyncQdrantClient, collection: str, query: str, *, using: str | None = None,
                     limit: int = 10, query_filter: models.Filter | None = None,
                     with_payload: bool | Sequence[str] = True, **kwargs) -> list[models.ScoredPoint]:
        return (await self.search_batch(qdrant, collection, [query], using=using, limit=limit,
                                        query_filter=query_filter, with_payload=with_payload, **kwargs))[0]

    async def search_batch(self, qdrant: AsyncQdrantClient, collection: str, queries: Sequence[str], *,
                           using: str | None = None, limit: int = 10, query_filter: models.Filter | None = None,
                           with_payload: bool | Sequence[str] = True, **kwargs) -> list[list[models.ScoredPoint]]:
        _async_only(qdrant)
        requests = self.search_requests(await self.embed_queries(queries), using, limit, query_filter, with_payload,
                                        **kwargs)
        return [answer.points for answer in await qdrant.query_batch_points(collection, requests=requests)]

    async def search_image(self, qdrant: AsyncQdrantClient, collection: str, image: Any, *,
                           using: str | None = None, limit: int = 10, query_filter: models.Filter | None = None,
                           with_payload: bool | Sequence[str] = True, **kwargs) -> list[models.ScoredPoint]:
        return (await self.search_image_batch(qdrant, collection, [image], using=using, limit=limit,
                                              query_filter=query_filter, with_payload=with_payload, **kwargs))[0]

    async def search_image_batch(self, qdrant: AsyncQdrantClient, collection: str, images: Sequence[Any], *,
                                 using: str | None = None, limit: int = 10, query_filter: models.Filter | None = None,
                                 with_payload: bool | Sequence[str] = True,
                                 **kwargs) -> list[list[models.ScoredPoint]]:
        _async_only(qdrant)
        requests = self.search_requests(await self.embed_images(images, is_query=True), self.image_using(using),
                                        limit, query_filter, with_payload, **kwargs)
        return [answer.points for answer in await qdrant.query_batch_points(collection, requests=requests)]

    async def hybrid_search(self, qdrant: AsyncQdrantClient, collection: str, query: str, *, limit: int = 10,
                            prefetch_limit: int | None = None, fusion: models.Fusion = models.Fusion.RRF,
                            weights: Mapping[str, float] | None = None, rrf_k: int | None = None,
                            query_filter: models.Filter | None = None, rerank: bool | None = None,
                            text_field: str = "text") -> list[models.ScoredPoint]:
        return (await self.hybrid_search_batch(qdrant, collection, [query], limit=limit, prefetch_limit=prefetch_limit,
                                               fusion=fusion, weights=weights, rrf_k=rrf_k, query_filter=query_filter,
                                               rerank=rerank, text_field=text_field))[0]

    async def hybrid_search_batch(self, qdrant: AsyncQdrantClient, collection: str, queries: Sequence[str], *,
                                  limit: int = 10, prefetch_limit: int | None = None,
                                  fusion: models.Fusion = models.Fusion.RRF, weights: Mapping[str, float] | None = None,
                                  rrf_k: int | None = None, query_filter: models.Filter | None = None,
                                  rerank: bool | None = None,
                                  text_field: str = "text") -> list[list[models.ScoredPoint]]:
        _async_only(qdrant)
        rerank = self.wants_rerank(rerank)
        prefetch_limit = prefetch_limit or 4 * limit
        requests = self.hybrid_requests(await self.embed_queries(queries), limit=prefetch_limit if rerank else limit,
                                        prefetch_limit=prefetch_limit, fusion=fusion, weights=weights, rrf_k=rrf_k,
                                        query_filter=query_filter)
        answers = [answer.points for answer in await qdrant.query_batch_points(collection, requests=requests)]
        if not rerank:
            return answers
        return [await self.rerank(query, points, limit=limit, text_field=text_field)
                for query, points in zip(queries, answers)]

    async def multistage_search(self, qdrant: AsyncQdrantClient, collection: str, query: str, *, limit: int = 10,
                                prefetch_limit: int = 100, query_filter: models.Filter | None = None
                                ) -> list[models.ScoredPoint]:
        return (await self.multistage_search_batch(qdrant, collection, [query], limit=limit,
                                                   prefetch_limit=prefetch_limit, query_filter=query_filter))[0]

    async def multistage_search_batch(self, qdrant: AsyncQdrantClient, collection: str, queries: Sequence[str], *,
                                      limit: int = 10, prefetch_limit: int = 100,
                                      query_filter: models.Filter | None = None) -> list[list[models.ScoredPoint]]:
        """`multistage_search` for many queries: one SIE call and one Qdrant batch request."""
        _async_only(qdrant)
        requests = self.multistage_requests(await self.embed_queries(queries), limit=limit,
                                            prefetch_limit=prefetch_limit, query_filter=query_filter)
        return [answer.points for answer in await qdrant.query_batch_points(collection, requests=requests)]

    async def rerank(self, query: str, points: Sequence[models.ScoredPoint], *, limit: int | None = None,
                     text_field: str = "text") -> list[models.ScoredPoint]:
        points = list(points)
        texts = self.rerank_texts(points, text_field)
        if not points:
            return []
        return self.reorder(points, await self.client.score(self.required_rerank_model(), query, texts, top_k=limit))
