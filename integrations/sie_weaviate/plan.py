"""`WeaviatePlan`: what SIEWeaviate and AsyncSIEWeaviate share, everything but the
I/O: the named vectors and their configs, the properties, the SIE calls that
vectorise texts and images, and turning SIE's encodings, extractions and scores
into vectors, properties and orderings."""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
from weaviate.classes.config import Configure, DataType, Property

from sie_client import DEFAULT_MODEL, EncodeResult, ExtractResult
from sie_client.image_inputs import check_names, encode_groups, image_bytes


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
    source: str = "text"  # what an object's vector is computed from: its text, or its image


@overload
def as_texts(texts: str | Sequence[str]) -> list[str]: ...
@overload
def as_texts(texts: Sequence[str | None]) -> list[str | None]: ...
def as_texts(texts: str | Sequence[str | None]) -> list[str] | list[str | None]:
    """A single string is one text (a str is a Sequence too: never split it into characters);
    objects' texts keep their None where an object has no text."""
    return [texts] if isinstance(texts, str) else list(texts)


class WeaviatePlan:
    def __init__(self, *, dense_model: str | None = DEFAULT_MODEL, multivector_model: str | None = None,
                 rerank_model: str | None = None, extract_model: str | None = None, dense_name: str = "dense",
                 multivector_name: str = "multivector", text_property: str = "text", instruction: str | None = None,
                 batch_size: int | None = None, progress: bool | None = None, image_model: str | None = None,
                 image_name: str = "image", image_property: str = "image"):
        """
        dense_model / multivector_model: SIE models of the named vectors (None leaves one out).
        rerank_model: SIE score model for `rerank=True`. extract_model: SIE extraction model for `enrich`.
        text_property: the property SIE reads the text from (and reranks on).
        image_model: an image-text model (CLIP, SigLIP) for a named vector `image_name` computed from
            each object's `image_property`, a blob property (base64, as Weaviate's multi2vec modules
            store images); query texts reach it through the model's text tower.
        """
        self.vectors = [
            NamedVector(name, kind, model)
            for name, kind, model in ((dense_name, "dense", dense_model),
                                      (multivector_name, "multivector", multivector_model))
            if model is not None
        ]
        if image_model is not None:
            self.vectors.append(NamedVector(image_name, "dense", image_model, source="image"))
        if not self.vectors:
            raise ValueError("give dense_model, multivector_model, image_model or several")
        check_names(self.vectors)
        self.image_model = image_model
        self.image_property = image_property
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
        """The text property, the image blob property (with image_model), plus one filterable
        text-array property per entity label."""
        props = [Property(name=self.text_property, data_type=DataType.TEXT)]
        if self.image_model is not None:
            props.append(Property(name=self.image_property, data_type=DataType.BLOB))
        props += [Property(name=entity_property(label), data_type=DataType.TEXT_ARRAY) for label in entity_labels]
        return props

    # ---- vectors -----------------------------------------------------------
    def encode_options(self, wanted: Sequence[NamedVector], is_query: bool) -> dict[str, Any]:
        return dict(output_types=list(dict.fromkeys(v.kind for v in wanted)), is_query=is_query,
                    instruction=self.instruction if is_query else None, batch_size=self.batch_size,
                    progress=self.progress)

    def encode_calls(self, texts: str | Sequence[str | None] | None, images: Sequence[Any] | None,
                     is_query: bool) -> tuple[int, list[tuple[str, list, list[int], list, dict]]]:
        """(rows, [(model, items, row positions, vectors, options)]): the SIE calls that vectorise
        objects or queries (see sie_client.image_inputs.encode_groups). A str image is base64,
        Weaviate's blob form; an object without a text or an image lacks the vectors it would feed."""
        texts = as_texts(texts) if texts is not None else None
        rows, groups = encode_groups(self.vectors, texts, images, is_query=is_query, image_model=self.image_model,
                                     str_is="base64")
        return rows, [(model, items, where, wanted, self.encode_options(wanted, is_query))
                      for model, items, where, wanted in groups]

    @staticmethod
    def fill_rows(rows: list[dict[str, list]], wanted: Sequence[NamedVector], result: EncodeResult,
                  where: Sequence[int]) -> None:
        """`{vector name: list (dense) or list of lists (multi-vector)}` per row (`where`: the rows
        the encoded items belong to)."""
        for i, item in zip(where, result.items):
            for v in wanted:
                rows[i][v.name] = np.asarray(getattr(item, v.kind), dtype=np.float32).tolist()

    # ---- enrichment --------------------------------------------------------
    def required_extract_model(self) -> str:
        if self.extract_model is None:
            raise ValueError("enrichment needs extract_model=...")
        return self.extract_model

    def enrich_options(self, threshold: float | None) -> dict[str, Any]:
        self.required_extract_model()
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
        copies = [dict(o) for o in objects]
        if uuids is not None and len(uuids) != len(copies):
            raise ValueError("objects and uuids must have the same length")
        for i, obj in enumerate(copies):
            text = obj.get(self.text_property)
            has_image = self.image_model is not None and obj.get(self.image_property) is not None
            if has_image:
                # Stored as Weaviate stores blobs: base64 text (what SIE gets is decoded from it).
                obj[self.image_property] = base64.b64encode(
                    image_bytes(obj[self.image_property], str_is="base64")).decode("ascii")
            if not isinstance(text, str) and (text is not None or not has_image):
                wanted = repr(self.text_property) + (f" text or {self.image_property!r} image"
                                                     if self.image_model is not None else " text")
                raise ValueError(f"objects[{i}] has no {wanted} to vectorise")
        return [(start, copies[start:start + chunk]) for start in range(0, len(copies), chunk)]

    def texts_of(self, objects: Sequence[Mapping[str, Any]]) -> list[str | None]:
        return [o.get(self.text_property) for o in objects]

    @staticmethod
    def place(count: int, where: Sequence[int], values: Sequence[dict]) -> list[dict]:
        """`count` rows: `values` at the positions `where`, empty dicts elsewhere (objects without a text
        get no entities)."""
        rows: list[dict] = [{} for _ in range(count)]
        for i, value in zip(where, values):
            rows[i] = value
        return rows

    def images_of(self, objects: Sequence[Mapping[str, Any]]) -> list[str | None] | None:
        """The objects' images (base64 after import_parts), or None without an image model."""
        return [o.get(self.image_property) for o in objects] if self.image_model is not None else None

    # ---- queries -----------------------------------------------------------
    def image_target(self, target_vector: str | None) -> NamedVector:
        """The vector an image query searches: the image vector, or a dense vector of the same model."""
        if self.image_model is None:
            raise ValueError("image queries need image_model=... (an image-text model such as CLIP)")
        target = self.target(target_vector) if target_vector is not None else next(
            v for v in self.vectors if v.source == "image")
        if target.model != self.image_model or target.kind != "dense":
            raise ValueError(f"an image can query only dense vectors of the image model {self.image_model!r}, "
                             f"not {target.name!r}")
        return target

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

    def required_rerank_model(self) -> str:
        if self.rerank_model is None:
            raise ValueError("rerank needs rerank_model=...")
        return self.rerank_model

    def rerank_texts(self, objects: Sequence[Any]) -> list[str]:
        self.required_rerank_model()
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
