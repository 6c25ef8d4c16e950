"""`WeaviatePlan`: what SIEWeaviate and AsyncSIEWeaviate share, everything but the
I/O: the named vectors and their configs, the properties, and turning SIE's
encodings, extractions and scores into vectors, properties and orderings."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from weaviate.classes.config import Configure, DataType, Property

from sie_client import DEFAULT_MODEL, EncodeResult, ExtractResult


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


def as_texts(texts: str | Sequence[str]) -> list[str]:
    """A single string is one text (a str is a Sequence too: never split it into characters)."""
    return [texts] if isinstance(texts, str) else list(texts)


class WeaviatePlan:
    def __init__(self, *, dense_model: str | None = DEFAULT_MODEL, multivector_model: str | None = None,
                 rerank_model: str | None = None, extract_model: str | None = None, dense_name: str = "dense",
                 multivector_name: str = "multivector", text_property: str = "text", instruction: str | None = None,
                 batch_size: int | None = None, progress: bool | None = None):
        """
        dense_model / multivector_model: SIE models of the named vectors (None leaves one out).
        rerank_model: SIE score model for `rerank=True`. extract_model: SIE extraction model for `enrich`.
        text_property: the property SIE reads the text from (and reranks on).
        """
        self.vectors = [
            NamedVector(name, kind, model)
            for name, kind, model in ((dense_name, "dense", dense_model),
                                      (multivector_name, "multivector", multivector_model))
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

    # ---- vectors -----------------------------------------------------------
    def by_model(self) -> dict[str, list[NamedVector]]:
        """Vectors grouped by model: a model's outputs come from one SIE call."""
        groups: dict[str, list[NamedVector]] = {}
        for v in self.vectors:
            groups.setdefault(v.model, []).append(v)
        return groups

    def encode_options(self, wanted: Sequence[NamedVector], is_query: bool) -> dict[str, Any]:
        return dict(output_types=[v.kind for v in wanted], is_query=is_query,
                    instruction=self.instruction if is_query else None, batch_size=self.batch_size,
                    progress=self.progress)

    @staticmethod
    def fill_rows(rows: list[dict[str, list]], wanted: Sequence[NamedVector], result: EncodeResult) -> None:
        """`{vector name: list (dense) or list of lists (multi-vector)}` per text."""
        for row, item in zip(rows, result.items):
            for v in wanted:
                row[v.name] = np.asarray(getattr(item, v.kind), dtype=np.float32).tolist()

    # ---- enrichment --------------------------------------------------------
    def enrich_options(self, threshold: float | None) -> dict[str, Any]:
        if self.extract_model is None:
            raise ValueError("enrichment needs extract_model=...")
        return dict(threshold=threshold, batch_size=self.batch_size, progress=self.progress)

    @staticmethod
    def entity_properties(result: ExtractResult, labels: Sequence[str]) -> list[dict[str, list[str]]]:
        """Per text, `{entities_<label>: [entity texts]}` (every label present, empty when nothing
        was found, so the property is filterable on every object)."""
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
    def import_parts(self, objects: Sequence[Mapping[str, Any]], uuids: Sequence[Any] | None,
                     chunk: int) -> list[tuple[int, list[dict[str, Any]]]]:
        """(offset, objects) chunks to encode, after checking every object has its text."""
        objects = [dict(o) for o in objects]
        if uuids is not None and len(uuids) != len(objects):
            raise ValueError("objects and uuids must have the same length")
        for i, obj in enumerate(objects):
            if not isinstance(obj.get(self.text_property), str):
                raise ValueError(f"objects[{i}] has no {self.text_property!r} text to vectorise")
        return [(start, objects[start:start + chunk]) for start in range(0, len(objects), chunk)]

    def texts_of(self, objects: Sequence[Mapping[str, Any]]) -> list[str]:
        return [o[self.text_property] for o in objects]

    # ---- queries -----------------------------------------------------------
    def target(self, target_vector: str | None) -> NamedVector:
        if target_vector is None:
            return self.vectors[0]
        for v in self.vectors:
            if v.name == target_vector:
                return v
        raise ValueError(f"unknown target vector {target_vector!r}; this helper has {[v.name for v in self.vectors]}")

    def wants_rerank(self, rerank: bool | None) -> bool:
        if rerank and self.rerank_model is None:
            raise ValueError("rerank=True needs rerank_model=...")
        return self.rerank_model is not None if rerank is None else rerank

    def rerank_texts(self, objects: Sequence[Any]) -> list[str]:
        if self.rerank_model is None:
            raise ValueError("rerank needs rerank_model=...")
        texts = []
        for obj in objects:
            text = (obj.properties or {}).get(self.text_property)
            if not isinstance(text, str):
                raise ValueError(f"object {obj.uuid} has no {self.text_property!r} property to rerank on; "
                                 f"return it in the query")
            texts.append(text)
        return texts

    @staticmethod
    def reorder(objects: Sequence[Any], scored) -> list:
        """Objects in the SIE score model's order; `metadata.rerank_score` set to its score."""
        reranked = []
        for s in scored.scores:
            obj = objects[s.index]
            obj.metadata.rerank_score = s.score
            reranked.append(obj)
        return reranked
