"""`SIEWeaviate`: SIE as the vectoriser of a Weaviate collection whose named vectors
are self-provided ("bring your own vectors"): Weaviate stores and searches them,
SIE computes them, at import (document mode) and at query time (query mode).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from weaviate.classes.config import Configure, DataType, Property
from weaviate.classes.query import MetadataQuery
from weaviate.collections import Collection

from sie_client import DEFAULT_MODEL, SIEClient, connect


def entity_property(label: str, prefix: str = "entities_") -> str:
    """The property name holding the entities of one label: "person" -> "entities_person"."""
    name = re.sub(r"[^0-9A-Za-z_]+", "_", label.strip()).strip("_").lower()
    if not name:
        raise ValueError(f"label {label!r} gives no usable property name")
    return prefix + name


@dataclass(frozen=True)
class NamedVector:
    name: str
    kind: str  # dense | multivector
    model: str


class SIEWeaviate:
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
                 timeout: float | None = None, batch_size: int | None = None, progress: bool | None = None):
        """
        dense_model / multivector_model: SIE models of the named vectors (None leaves one out).
        rerank_model: SIE score model for `rerank=True`. extract_model: SIE extraction model for `enrich`.
        text_property: the property SIE reads the text from (and reranks on).
        client / url / api_key / timeout: an SIEClient or the options to make one
        (SIE_URL / SIE_API_KEY by default; no URL means embedded mode).
        """
        self.vectors = [
            NamedVector(name, kind, model)
            for name, kind, model in ((dense_name, "dense", dense_model), (multivector_name, "multivector", multivector_model))
            if model is not None
        ]
        if not self.vectors:
            raise ValueError("give dense_model, multivector_model or both")
        self.rerank_model = rerank_model
        self.extract_model = extract_model
        self.text_property = text_property
        self.instruction = instruction
        self.batch_size = batch_size
        self.progress = progress
        self.client = connect(client, url=url, api_key=api_key, timeout=timeout)

    # ---- collection --------------------------------------------------------
    def vector_config(self) -> list:
        """Weaviate named-vector configs: self-provided dense and multi-vector (cosine)."""
        configs = []
        for v in self.vectors:
            if v.kind == "dense":
                configs.append(Configure.Vectors.self_provided(name=v.name))
            else:
                configs.append(Configure.MultiVectors.self_provided(name=v.name))
        return configs

    def properties(self, entity_labels: Sequence[str] = ()) -> list[Property]:
        """The text property, plus one filterable text-array property per entity label."""
        props = [Property(name=self.text_property, data_type=DataType.TEXT)]
        props += [Property(name=entity_property(label), data_type=DataType.TEXT_ARRAY) for label in entity_labels]
        return props

    def create_collection(self, weaviate_client: Any, name: str, *, properties: Sequence[Property] | None = None,
                          entity_labels: Sequence[str] = (), **kwargs) -> Collection:
        """Create collection `name` with SIE's named vectors; kwargs go to `collections.create`."""
        props = list(properties) if properties is not None else self.properties(entity_labels)
        return weaviate_client.collections.create(name, properties=props, vector_config=self.vector_config(), **kwargs)

    # ---- vectors -----------------------------------------------------------
    def _encode(self, texts: Sequence[str], is_query: bool) -> list[dict[str, list]]:
        """Per text, `{vector name: list (dense) or list of lists (multi-vector)}`; one SIE call per model."""
        texts = list(texts)
        out: list[dict[str, list]] = [{} for _ in texts]
        by_model: dict[str, list[NamedVector]] = {}
        for v in self.vectors:
            by_model.setdefault(v.model, []).append(v)
        for model, wanted in by_model.items():
            result = self.client.encode(
                model, texts, output_types=[v.kind for v in wanted], is_query=is_query,
                instruction=self.instruction if is_query else None, batch_size=self.batch_size, progress=self.progress,
            )
            for row, item in zip(out, result.items):
                for v in wanted:
                    row[v.name] = np.asarray(getattr(item, v.kind), dtype=np.float32).tolist()
        return out

    def document_vectors(self, texts: Sequence[str]) -> list[dict[str, list]]:
        return self._encode(texts, is_query=False)

    def query_vectors(self, texts: Sequence[str]) -> list[dict[str, list]]:
        return self._encode(texts, is_query=True)

    # ---- enrichment --------------------------------------------------------
    def enrich(self, texts: Sequence[str], labels: Sequence[str], *, threshold: float | None = None) -> list[dict[str, list[str]]]:
        """Per text, `{entities_<label>: [entity texts]}` from the SIE extraction model (every label
        present, empty when nothing was found, so the property is filterable on every object)."""
        if self.extract_model is None:
            raise ValueError("enrichment needs SIEWeaviate(extract_model=...)")
        result = self.client.extract(self.extract_model, list(texts), list(labels), threshold=threshold,
                                     batch_size=self.batch_size, progress=self.progress)
        enriched = []
        for item in result.items:
            props: dict[str, list[str]] = {entity_property(label): [] for label in labels}
            for entity in item.entities:
                values = props.setdefault(entity_property(entity.label), [])
                if entity.text not in values:
                    values.append(entity.text)
            enriched.append(props)
        return enriched

    # ---- import ------------------------------------------------------------
    def import_objects(self, collection: Collection, objects: Sequence[Mapping[str, Any]], *,
                       uuids: Sequence[Any] | None = None, entity_labels: Sequence[str] = (),
                       batch_size: int = 200, chunk: int = 512) -> int:
        """Encode each object's `text_property` with SIE and batch-import it with its vectors
        (and, with entity_labels, its extracted entities). Raises on any failed object."""
        objects = [dict(o) for o in objects]
        if uuids is not None and len(uuids) != len(objects):
            raise ValueError("objects and uuids must have the same length")
        for i, obj in enumerate(objects):
            if not isinstance(obj.get(self.text_property), str):
                raise ValueError(f"objects[{i}] has no {self.text_property!r} text to vectorise")
        written = 0
        with collection.batch.fixed_size(batch_size=batch_size) as batch:
            for start in range(0, len(objects), chunk):
                part = objects[start:start + chunk]
                texts = [o[self.text_property] for o in part]
                vectors = self.document_vectors(texts)
                entities = self.enrich(texts, entity_labels) if entity_labels else [{} for _ in part]
                for offset, (obj, vector, extra) in enumerate(zip(part, vectors, entities)):
                    uuid = uuids[start + offset] if uuids is not None else None
                    batch.add_object(properties={**obj, **extra}, vector=vector, uuid=uuid)
                    written += 1
        failed = collection.batch.failed_objects
        if failed:
            raise RuntimeError(f"{len(failed)} objects failed to import; first: {failed[0].message}")
        return written

    # ---- queries -----------------------------------------------------------
    def _target(self, target_vector: str | None) -> NamedVector:
        if target_vector is None:
            return self.vectors[0]
        for v in self.vectors:
            if v.name == target_vector:
                return v
        raise ValueError(f"unknown target vector {target_vector!r}; this helper has {[v.name for v in self.vectors]}")

    def near_text(self, collection: Collection, query: str, *, target_vector: str | None = None, limit: int = 10,
                  filters: Any = None, rerank: bool | None = None, candidates: int | None = None, **kwargs) -> list:
        """Objects nearest to the SIE query vector of `query` (Weaviate near-vector search).

        rerank: rescore with `rerank_model` (default: when one is configured) over `candidates`
        (default 4 * limit) and keep `limit`. kwargs go to `query.near_vector`."""
        target = self._target(target_vector)
        rerank = self._rerank_wanted(rerank)
        vector = self.query_vectors([query])[0][target.name]
        answer = collection.query.near_vector(
            near_vector=vector, target_vector=target.name, limit=(candidates or 4 * limit) if rerank else limit,
            filters=filters, return_metadata=MetadataQuery(distance=True), **kwargs,
        )
        return self.rerank(query, answer.objects, limit=limit) if rerank else list(answer.objects)

    def hybrid(self, collection: Collection, query: str, *, alpha: float = 0.5, target_vector: str | None = None,
               limit: int = 10, filters: Any = None, rerank: bool | None = None, candidates: int | None = None,
               **kwargs) -> list:
        """Weaviate hybrid search (BM25 on the text + the SIE query vector, fused by Weaviate),
        optionally reranked by SIE. kwargs go to `query.hybrid`."""
        target = self._target(target_vector)
        rerank = self._rerank_wanted(rerank)
        vector = self.query_vectors([query])[0][target.name]
        answer = collection.query.hybrid(
            query=query, vector=vector, target_vector=target.name, alpha=alpha,
            limit=(candidates or 4 * limit) if rerank else limit, filters=filters,
            return_metadata=MetadataQuery(score=True), **kwargs,
        )
        return self.rerank(query, answer.objects, limit=limit) if rerank else list(answer.objects)

    def _rerank_wanted(self, rerank: bool | None) -> bool:
        if rerank and self.rerank_model is None:
            raise ValueError("rerank=True needs SIEWeaviate(rerank_model=...)")
        return self.rerank_model is not None if rerank is None else rerank

    def rerank(self, query: str, objects: Sequence[Any], *, limit: int | None = None) -> list:
        """Objects reordered by the SIE score model (best first); each object's
        `metadata.rerank_score` is set to the model's score."""
        if self.rerank_model is None:
            raise ValueError("rerank needs SIEWeaviate(rerank_model=...)")
        objects = list(objects)
        if not objects:
            return []
        texts = []
        for obj in objects:
            text = (obj.properties or {}).get(self.text_property)
            if not isinstance(text, str):
                raise ValueError(f"object {obj.uuid} has no {self.text_property!r} property to rerank on; return it in the query")
            texts.append(text)
        scored = self.client.score(self.rerank_model, query, texts, top_k=limit)
        reranked = []
        for s in scored.scores:
            obj = objects[s.index]
            obj.metadata.rerank_score = s.score
            reranked.append(obj)
        return reranked
