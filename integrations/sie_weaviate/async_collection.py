"""`AsyncSIEWeaviate`: SIEWeaviate's calls for Weaviate's async client
(`WeaviateAsyncClient`, from `weaviate.use_async_with_*`), awaited, with SIE's
`AsyncSIEClient` computing the vectors. Objects go in through
`collection.data.insert_many`, one call per encoded chunk."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from weaviate.classes.data import DataObject
from weaviate.classes.query import MetadataQuery
from weaviate.client import WeaviateAsyncClient

from sie_client import DEFAULT_MODEL, AsyncSIEClient, RetryPolicy, connect_async
from sie_client.image_inputs import present

from .plan import WeaviatePlan, as_texts


def _async_only(weaviate_client: Any) -> None:
    if not isinstance(weaviate_client, WeaviateAsyncClient):
        raise TypeError(f"AsyncSIEWeaviate awaits a WeaviateAsyncClient, not {type(weaviate_client).__name__}; "
                        f"for WeaviateClient use sie_weaviate.SIEWeaviate")


class AsyncSIEWeaviate(WeaviatePlan):
    """SIEWeaviate for asyncio programs.

    Example:
        sie = AsyncSIEWeaviate(dense_model="sentence-transformers/all-MiniLM-L6-v2", url="http://127.0.0.1:8080")
        async with weaviate.use_async_with_local(port=8081) as client:
            docs = await sie.create_collection(client, "Docs")
            await sie.import_objects(docs, [{"text": t} for t in texts])
            hits = await sie.near_text(docs, "how do I mount a disk?", limit=10)
    """

    def __init__(self, *, dense_model: str | None = DEFAULT_MODEL, multivector_model: str | None = None,
                 rerank_model: str | None = None, extract_model: str | None = None, dense_name: str = "dense",
                 multivector_name: str = "multivector", text_property: str = "text", instruction: str | None = None,
                 client: AsyncSIEClient | None = None, url: str | None = None, api_key: str | None = None,
                 timeout: float | None = None, batch_size: int | None = None, progress: bool | None = None,
                 image_model: str | None = None, image_name: str = "image", image_property: str = "image",
                 retry: RetryPolicy | None = None):
        super().__init__(dense_model=dense_model, multivector_model=multivector_model, rerank_model=rerank_model,
                         extract_model=extract_model, dense_name=dense_name, multivector_name=multivector_name,
                         text_property=text_property, instruction=instruction, batch_size=batch_size,
                         progress=progress, image_model=image_model, image_name=image_name,
                         image_property=image_property)
        self.client = connect_async(client, url=url, api_key=api_key, timeout=timeout, retry=retry)

    async def create_collection(self, weaviate_client: WeaviateAsyncClient, name: str, *,
                                properties: Sequence[Any] | None = None, entity_labels: Sequence[str] = (),
                                **kwargs) -> Any:
        _async_only(weaviate_client)
        props = list(properties) if properties is not None else self.properties(entity_labels)
        return await weaviate_client.collections.create(name, properties=props, vector_config=self.vector_config(),
                                                        **kwargs)

    async def _encode(self, texts: str | Sequence[str | None] | None, is_query: bool,
                      images: Sequence[Any] | None = None) -> list[dict[str, list]]:
        count, calls = self.encode_calls(texts, images, is_query)
        rows: list[dict[str, list]] = [{} for _ in range(count)]
        for model, items, where, wanted, options in calls:
            self.fill_rows(rows, wanted, await self.client.encode(model, items, **options), where)
        return rows

    async def document_vectors(self, texts: str | Sequence[str]) -> list[dict[str, list]]:
        return await self._encode(texts, is_query=False)

    async def query_vectors(self, texts: str | Sequence[str]) -> list[dict[str, list]]:
        return await self._encode(texts, is_query=True)

    async def image_vectors(self, images: Sequence[Any], *, is_query: bool = False) -> list[dict[str, list]]:
        return await self._encode(None, is_query, images)

    async def enrich(self, texts: str | Sequence[str], labels: Sequence[str], *,
                     threshold: float | None = None) -> list[dict[str, list[str]]]:
        options = self.enrich_options(threshold)
        result = await self.client.extract(self.required_extract_model(), as_texts(texts), list(labels), **options)
        return self.entity_properties(result, labels)

    async def import_objects(self, collection: Any, objects: Sequence[Mapping[str, Any]], *,
                             uuids: Sequence[Any] | None = None, entity_labels: Sequence[str] = (),
                             chunk: int = 512) -> int:
        """Encode and insert `chunk` objects at a time; raises on any failed object."""
        written = 0
        for start, part in self.import_parts(objects, uuids, chunk):
            texts = self.texts_of(part)
            vectors = await self._encode(texts, False, self.images_of(part))
            where = present(texts) if entity_labels else []
            # the texts at `where`, in order: present() keeps the rows whose text is not None
            found = [t for t in texts if t is not None]
            entities = self.place(len(part), where, await self.enrich(found, entity_labels) if where else [])
            batch = [DataObject(properties={**obj, **extra}, vector=vector,
                                uuid=uuids[start + offset] if uuids is not None else None)
                     for offset, (obj, vector, extra) in enumerate(zip(part, vectors, entities))]
            answer = await collection.data.insert_many(batch)
            if answer.has_errors:
                first = next(iter(answer.errors.values()))
                raise RuntimeError(f"{len(answer.errors)} objects failed to import; first: {first.message}")
            written += len(batch)
        return written

    async def near_text(self, collection: Any, query: str, *, target_vector: str | None = None, limit: int = 10,
                        filters: Any = None, rerank: bool | None = None, candidates: int | None = None,
                        **kwargs) -> list:
        target = self.target(target_vector)
        rerank = self.wants_rerank(rerank)
        vector = (await self.query_vectors(query))[0][target.name]
        answer = await collection.query.near_vector(
            near_vector=vector, target_vector=target.name, limit=(candidates or 4 * limit) if rerank else limit,
            filters=filters, return_metadata=MetadataQuery(distance=True), **kwargs,
        )
        return await self.rerank(query, answer.objects, limit=limit) if rerank else list(answer.objects)

    async def near_image(self, collection: Any, image: Any, *, target_vector: str | None = None, limit: int = 10,
                         filters: Any = None, **kwargs) -> list:
        target = self.image_target(target_vector)
        vector = (await self.image_vectors([image], is_query=True))[0][target.name]
        answer = await collection.query.near_vector(near_vector=vector, target_vector=target.name, limit=limit,
                                                    filters=filters, return_metadata=MetadataQuery(distance=True),
                                                    **kwargs)
        return list(answer.objects)

    async def hybrid(self, collection: Any, query: str, *, alpha: float = 0.5, target_vector: str | None = None,
                     limit: int = 10, filters: Any = None, rerank: bool | None = None, candidates: int | None = None,
                     **kwargs) -> list:
        target = self.target(target_vector)
        rerank = self.wants_rerank(rerank)
        vector = (await self.query_vectors(query))[0][target.name]
        answer = await collection.query.hybrid(
            query=query, vector=vector, target_vector=target.name, alpha=alpha,
            limit=(candidates or 4 * limit) if rerank else limit, filters=filters,
            return_metadata=MetadataQuery(score=True), **kwargs,
        )
        return await self.rerank(query, answer.objects, limit=limit) if rerank else list(answer.objects)

    async def rerank(self, query: str, objects: Sequence[Any], *, limit: int | None = None) -> list:
        objects = list(objects)
        texts = self.rerank_texts(objects)
        if not objects:
            return []
        return self.reorder(objects, await self.client.score(self.required_rerank_model(), query, texts, top_k=limit))
