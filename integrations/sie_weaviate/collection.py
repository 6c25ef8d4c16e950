"""`SIEWeaviate`: SIE as the vectoriser of a Weaviate collection whose named vectors
are self-provided ("bring your own vectors"): Weaviate stores and searches them,
SIE computes them, at import (document mode) and at query time (query mode).
With an image-text model (CLIP, SigLIP) an image vector sits beside the text
vectors, computed from each object's image blob property: `near_text` finds
images by a text, `near_image` by an image. For Weaviate's async client use
`AsyncSIEWeaviate` (async_collection.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from weaviate.classes.query import MetadataQuery
from weaviate.client import WeaviateAsyncClient
from weaviate.collections import Collection

from sie_client import DEFAULT_MODEL, RetryPolicy, SIEClient, connect
from sie_client.image_inputs import present

from .plan import WeaviatePlan, as_texts


def _sync_only(weaviate_client: Any) -> None:
    # The async client's calls return coroutines: made here they would never run.
    if isinstance(weaviate_client, WeaviateAsyncClient):
        raise TypeError("SIEWeaviate drives a WeaviateClient; "
                        "for WeaviateAsyncClient use sie_weaviate.AsyncSIEWeaviate")


class SIEWeaviate(WeaviatePlan):
    """Vectorise a Weaviate collection's named vectors with SIE.

    Example:
        sie = SIEWeaviate(dense_model="sentence-transformers/all-MiniLM-L6-v2", url="http://127.0.0.1:8080")
        docs = sie.create_collection(weaviate_client, "Docs")
        sie.import_objects(docs, [{"text": t} for t in texts])
        hits = sie.near_text(docs, "how do I mount a disk?", limit=10)
    """

    def __init__(self, *, dense_model: str | None = DEFAULT_MODEL, multivector_model: str | None = None,
                 rerank_model: str | None = None, extract_model: str | None = None, dense_name: str = "dense",
                 multivector_name: str = "multivector", text_property: str = "text", instruction: str | None = None,
                 client: SIEClient | None = None, url: str | None = None, api_key: str | None = None,
                 timeout: float | None = None, batch_size: int | None = None, progress: bool | None = None,
                 image_model: str | None = None, image_name: str = "image", image_property: str = "image",
                 retry: RetryPolicy | None = None):
        """
        See WeaviatePlan for the vectors and options. client / url / api_key / timeout / retry (the
        client's RetryPolicy): an SIEClient or the options to make one (SIE_URL / SIE_API_KEY by
        default; no URL means embedded mode).
        """
        super().__init__(dense_model=dense_model, multivector_model=multivector_model, rerank_model=rerank_model,
                         extract_model=extract_model, dense_name=dense_name, multivector_name=multivector_name,
                         text_property=text_property, instruction=instruction, batch_size=batch_size,
                         progress=progress, image_model=image_model, image_name=image_name,
                         image_property=image_property)
        self.client = connect(client, url=url, api_key=api_key, timeout=timeout, retry=retry)

    # ---- collection --------------------------------------------------------
    def create_collection(self, weaviate_client: Any, name: str, *, properties: Sequence[Any] | None = None,
                          entity_labels: Sequence[str] = (), **kwargs) -> Collection:
        """Create collection `name` with SIE's named vectors; kwargs go to `collections.create`."""
        _sync_only(weaviate_client)
        props = list(properties) if properties is not None else self.properties(entity_labels)
        return weaviate_client.collections.create(name, properties=props, vector_config=self.vector_config(), **kwargs)

    # ---- vectors -----------------------------------------------------------
    def _encode(self, texts: str | Sequence[str | None] | None, is_query: bool,
                images: Sequence[Any] | None = None) -> list[dict[str, list]]:
        """Per text or image, `{vector name: list (dense) or list of lists (multi-vector)}`;
        one SIE call per model and input kind."""
        count, calls = self.encode_calls(texts, images, is_query)
        rows: list[dict[str, list]] = [{} for _ in range(count)]
        for model, items, where, wanted, options in calls:
            self.fill_rows(rows, wanted, self.client.encode(model, items, **options), where)
        return rows

    def document_vectors(self, texts: str | Sequence[str]) -> list[dict[str, list]]:
        return self._encode(texts, is_query=False)

    def query_vectors(self, texts: str | Sequence[str]) -> list[dict[str, list]]:
        """Query-mode vectors, one row per text (a single string is one text)."""
        return self._encode(texts, is_query=True)

    def image_vectors(self, images: Sequence[Any], *, is_query: bool = False) -> list[dict[str, list]]:
        """Per image (bytes, a Path, a PIL image, a pixel array or base64 text), its image vector,
        or as a query every dense vector of the image model."""
        return self._encode(None, is_query, images)

    # ---- enrichment --------------------------------------------------------
    def enrich(self, texts: str | Sequence[str], labels: Sequence[str], *,
               threshold: float | None = None) -> list[dict[str, list[str]]]:
        """Per text, `{entities_<label>: [entity texts]}` from the SIE extraction model."""
        options = self.enrich_options(threshold)
        result = self.client.extract(self.required_extract_model(), as_texts(texts), list(labels), **options)
        return self.entity_properties(result, labels)

    # ---- import ------------------------------------------------------------
    def import_objects(self, collection: Collection, objects: Sequence[Mapping[str, Any]], *,
                       uuids: Sequence[Any] | None = None, entity_labels: Sequence[str] = (),
                       batch_size: int = 200, chunk: int = 512) -> int:
        """Encode each object's `text_property` with SIE and batch-import it with its vectors
        (and, with entity_labels, its extracted entities). Raises on any failed object."""
        parts = self.import_parts(objects, uuids, chunk)
        written = 0
        with collection.batch.fixed_size(batch_size=batch_size) as batch:
            for start, part in parts:
                texts = self.texts_of(part)
                vectors = self._encode(texts, False, self.images_of(part))
                where = present(texts) if entity_labels else []
                # the texts at `where`, in order: present() keeps the rows whose text is not None
                found = [t for t in texts if t is not None]
                entities = self.place(len(part), where, self.enrich(found, entity_labels) if where else [])
                for offset, (obj, vector, extra) in enumerate(zip(part, vectors, entities)):
                    uuid = uuids[start + offset] if uuids is not None else None
                    batch.add_object(properties={**obj, **extra}, vector=vector, uuid=uuid)
                    written += 1
        failed = collection.batch.failed_objects
        if failed:
            raise RuntimeError(f"{len(failed)} objects failed to import; first: {failed[0].message}")
        return written

    # ---- queries -----------------------------------------------------------
    def near_text(self, collection: Collection, query: str, *, target_vector: str | None = None, limit: int = 10,
                  filters: Any = None, rerank: bool | None = None, candidates: int | None = None, **kwargs) -> list:
        """Objects nearest to the SIE query vector of `query` (Weaviate near-vector search).

        rerank: rescore with `rerank_model` (default: when one is configured) over `candidates`
        (default 4 * limit) and keep `limit`. kwargs go to `query.near_vector`."""
        target = self.target(target_vector)
        rerank = self.wants_rerank(rerank)
        vector = self.query_vectors(query)[0][target.name]
        answer = collection.query.near_vector(
            near_vector=vector, target_vector=target.name, limit=(candidates or 4 * limit) if rerank else limit,
            filters=filters, return_metadata=MetadataQuery(distance=True), **kwargs,
        )
        return self.rerank(query, answer.objects, limit=limit) if rerank else list(answer.objects)

    def near_image(self, collection: Collection, image: Any, *, target_vector: str | None = None, limit: int = 10,
                   filters: Any = None, **kwargs) -> list:
        """Objects nearest to an image (bytes, a Path, a PIL image, a pixel array or base64 text) on
        the image vector, or on another dense vector of the image model. kwargs go to `query.near_vector`."""
        target = self.image_target(target_vector)
        vector = self.image_vectors([image], is_query=True)[0][target.name]
        answer = collection.query.near_vector(near_vector=vector, target_vector=target.name, limit=limit,
                                              filters=filters, return_metadata=MetadataQuery(distance=True), **kwargs)
        return list(answer.objects)

    def hybrid(self, collection: Collection, query: str, *, alpha: float = 0.5, target_vector: str | None = None,
               limit: int = 10, filters: Any = None, rerank: bool | None = None, candidates: int | None = None,
               **kwargs) -> list:
        """Weaviate hybrid search (BM25 on the text + the SIE query vector, fused by Weaviate),
        optionally reranked by SIE. kwargs go to `query.hybrid`."""
        target = self.target(target_vector)
        rerank = self.wants_rerank(rerank)
        vector = self.query_vectors(query)[0][target.name]
        answer = collection.query.hybrid(
            query=query, vector=vector, target_vector=target.name, alpha=alpha,
            limit=(candidates or 4 * limit) if rerank else limit, filters=filters,
            return_metadata=MetadataQuery(score=True), **kwargs,
        )
        return self.rerank(query, answer.objects, limit=limit) if rerank else list(answer.objects)

    def rerank(self, query: str, objects: Sequence[Any], *, limit: int | None = None) -> list:
        """Objects reordered by the SIE score model (best first); each object's
        `metadata.rerank_score` is set to the model's score."""
        objects = list(objects)
        texts = self.rerank_texts(objects)
        if not objects:
            return []
        return self.reorder(objects, self.client.score(self.required_rerank_model(), query, texts, top_k=limit))
