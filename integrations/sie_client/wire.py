"""The wire format of docs/api.md: request bodies out, answers in.

Answers arrive as JSON (vectors as nested lists) or msgpack (vectors as tensor
objects `{dtype, shape, data}`); the embedded mode hands numpy arrays over
directly. `parse_*` read all three into the answer types the contract declares
(`sie_contract.shapes`: a malformed answer is refused naming where) and build the
same result types from them.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any

import msgpack
import msgspec
import numpy as np

from sie_contract.shapes import EncodeAnswer, EntityOut, ExtractAnswer, PageOut, ScoreAnswer

from .types import (
    Classification,
    EncodedItem,
    EncodeResult,
    Entity,
    ExtractedItem,
    ExtractResult,
    ModelInfo,
    Page,
    Quantized,
    Region,
    Relation,
    ScoredItem,
    ScoreResult,
    SparseVector,
)

MSGPACK = "application/msgpack"
JSON = "application/json"
TENSOR_DTYPES = {"float32": "<f4", "float16": "<f2", "int8": "i1", "uint8": "u1", "int32": "<i4"}
TENSOR_KEYS = {"dtype", "shape", "data"}


def dumps(body: Any, content_type: str) -> bytes:
    """msgpack carries image bytes as they are; JSON as base64 strings (docs/api.md)."""
    if content_type == MSGPACK:
        return msgpack.packb(body, use_bin_type=True)
    return json.dumps(body, default=_json_bytes).encode()


def _json_bytes(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} cannot be sent as JSON")


def _tensor_hook(obj: dict) -> Any:
    """msgpack object hook: tensor objects -> numpy arrays (Quantized when they carry a scale)."""
    if TENSOR_KEYS <= obj.keys() and isinstance(obj.get("data"), (bytes, bytearray)):
        array = np.frombuffer(obj["data"], dtype=TENSOR_DTYPES[obj["dtype"]]).reshape(obj["shape"])
        # frombuffer views the message's bytes read-only; callers (databases) may write.
        array = array.astype(array.dtype.newbyteorder("="), copy=True)
        if obj.get("scale") is not None:
            return Quantized(array, float(obj["scale"]))
        return array
    return obj


def loads(raw: bytes, content_type: str | None) -> Any:
    if content_type and content_type.split(";")[0].strip() == MSGPACK:
        return msgpack.unpackb(raw, raw=False, object_hook=_tensor_hook, strict_map_key=False)
    return json.loads(raw) if raw else None


def as_array(value: Any, dtype=np.float32) -> Any:
    """A JSON list, a decoded tensor or an engine array -> a numpy array.

    int8 outputs stay `Quantized`: msgpack's tensor with a scale is decoded so by the
    object hook, and JSON writes them as `{"data": [ints], "scale": float}`.
    """
    if value is None or isinstance(value, (Quantized, np.ndarray)):
        return value
    if isinstance(value, Mapping) and "scale" in value:
        return Quantized(np.asarray(as_array(value["data"], np.int8), dtype=np.int8), float(value["scale"]))
    return np.asarray(value, dtype=dtype)


def _vector_dtype(output_dtype: str | None):
    return {"float16": np.float16, "int8": np.int8, "uint8": np.uint8, "binary": np.uint8}.get(
        output_dtype or "float32", np.float32)


def parse_encode(answer: Mapping[str, Any], output_dtype: str | None = None) -> EncodeResult:
    shaped = msgspec.convert(answer, EncodeAnswer)
    dtype = _vector_dtype(output_dtype)
    items = []
    for raw in shaped.items:
        item = EncodedItem(id=raw.id)
        if raw.dense is not None:
            item.dense = as_array(raw.dense, dtype)
        if raw.sparse is not None:
            sparse = raw.sparse
            item.sparse = SparseVector(
                np.asarray(as_array(sparse.indices, np.int32), dtype=np.int32),
                np.asarray(as_array(sparse.values, np.float32), dtype=np.float32),
                sparse.labels,
            )
        if raw.multivector is not None:
            item.multivector = as_array(raw.multivector, dtype)
        if raw.muvera is not None:
            item.muvera = as_array(raw.muvera, dtype)
        if raw.page is not None:
            item.page = _page(raw.page)
        items.append(item)
    return EncodeResult(shaped.model, items, shaped.usage.tokens)


def _page(page: PageOut) -> Page:
    return Page(page.item, page.number, page.width, page.height, page.width_px, page.height_px)


def parse_score(answer: Mapping[str, Any]) -> ScoreResult:
    shaped = msgspec.convert(answer, ScoreAnswer)
    scores = [ScoredItem(id=s.id, index=s.index, score=s.score, rank=s.rank) for s in shaped.scores]
    return ScoreResult(shaped.model, scores, shaped.usage.tokens)


def parse_entity(e: Mapping[str, Any] | EntityOut) -> Entity:
    if not isinstance(e, EntityOut):
        e = msgspec.convert(e, EntityOut)
    return Entity(text=e.text, label=e.label, score=e.score, start=e.start, end=e.end)


def parse_extract(answer: Mapping[str, Any]) -> ExtractResult:
    shaped = msgspec.convert(answer, ExtractAnswer)
    items = [
        ExtractedItem(
            id=item.id,
            entities=[parse_entity(e) for e in item.entities or ()],
            classifications=None if item.classifications is None else [
                Classification(label=c.label, score=c.score) for c in item.classifications
            ],
            relations=None if item.relations is None else [
                Relation(head=parse_entity(r.head), relation=r.relation, tail=parse_entity(r.tail), score=r.score)
                for r in item.relations
            ],
            text=item.text,
            data=item.data,
            regions=None if item.regions is None else [
                Region(label=r.label, box=list(r.box), score=r.score, text=r.text, quad_box=r.quad_box,
                       polygons=r.polygons) for r in item.regions
            ],
            page=None if item.page is None else _page(item.page),
        )
        for item in shaped.items
    ]
    return ExtractResult(shaped.model, items, shaped.usage.tokens)


def parse_model(raw: Mapping[str, Any]) -> ModelInfo:
    return ModelInfo(
        id=raw["id"],
        family=raw.get("family"),
        tasks=tuple(raw.get("tasks") or ()),
        outputs=tuple(raw.get("outputs") or ()),
        dims={k: int(v) for k, v in (raw.get("dims") or {}).items() if v is not None},
        matryoshka_dims=tuple(raw.get("matryoshka_dims") or ()),
        max_seq_len=raw.get("max_seq_len"),
        state=raw.get("state", "available"),
        memory_bytes=int(raw.get("memory_bytes") or 0),
        error=raw.get("error"),
        weights=(raw.get("weights") or {}).get("status", "local"),
        modalities=tuple(raw.get("modalities") or ("text",)),
        image_size=raw.get("image_size"),
        pinned=bool(raw.get("pinned", False)),
        idle_evict_s=raw.get("idle_evict_s"),
    )


def normalize_items(items: Any) -> list[dict]:
    """A string, a list of strings or `{id?, text}` dicts -> `[{id?, text}]` (a fresh list).

    Bad shapes are left for the server to refuse with its 400 message, except the
    plain mistakes a client can name itself.
    """
    if isinstance(items, str):
        items = [items]
    if not isinstance(items, Sequence) and not hasattr(items, "__iter__"):
        raise TypeError(f"items must be a string or a list of strings / {{id, text}} dicts, got {type(items).__name__}")
    result = []
    for item in items:
        if isinstance(item, str):
            result.append({"text": item})
        elif isinstance(item, Mapping):
            item = dict(item)
            if item.get("image") is not None:
                item["image"] = image_value(item["image"])
            for name in ("document", "video"):  # a PDF's or a video file's path or bytes
                if name in item:
                    item[name] = file_value(item[name])
            result.append(item)
        elif is_image(item):
            result.append({"image": image_value(item)})
        else:
            raise TypeError(f"each item must be a string, an {{id?, text}} or {{id?, image}} dict, or an image "
                            f"(bytes, pathlib.Path, PIL.Image), got {type(item).__name__}")
    return result


def is_image(value: Any) -> bool:
    """Bytes, a `pathlib.Path` or a PIL image (a plain string is always a text)."""
    return isinstance(value, (bytes, bytearray, memoryview, PurePath)) or _is_pil(value)


def _is_pil(value: Any) -> bool:
    return any(cls.__module__.startswith("PIL.") and cls.__name__ == "Image" for cls in type(value).__mro__)


def file_value(value: Any) -> Any:
    """A document's or a video's file as the wire carries it: a `Path` read, a buffer's bytes; anything
    else (bytes, a base64 string, None) as it is, for the server to type-check."""
    if isinstance(value, PurePath):
        return Path(value).read_bytes()
    return bytes(value) if isinstance(value, (bytearray, memoryview)) else value


def image_value(value: Any) -> Any:
    """An item's image as the wire carries it: file bytes (a `Path` is read, a PIL image written as
    PNG; Pillow is needed only then); a string is passed on as the base64 or data: URI it must be."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, PurePath):
        return Path(value).read_bytes()
    if _is_pil(value):
        buffer = io.BytesIO()
        value.save(buffer, format="PNG")
        return buffer.getvalue()
    if isinstance(value, str):
        return value
    raise TypeError(f"an image must be bytes, a pathlib.Path, a PIL.Image or a base64 string, got "
                    f"{type(value).__name__}")


def drop_none(body: dict) -> dict:
    return {k: v for k, v in body.items() if v is not None}


def normalize_query(query: Any) -> dict:
    """A string, a `{text}` dict or, for a vision-language reranker, an image (bytes, a path, a PIL image)
    or an `{image, text?}` or `{video, text?}` dict (a video's path or bytes) -> the query as the wire
    carries it."""
    if isinstance(query, str):
        return {"text": query}
    if is_image(query):
        return {"image": image_value(query)}
    if isinstance(query, Mapping) and ("text" in query or "image" in query or "video" in query):
        shaped = {"text": query["text"]} if "text" in query else {}
        if query.get("image") is not None:
            shaped["image"] = image_value(query["image"])
        if query.get("video") is not None:
            shaped["video"] = file_value(query["video"])
        return shaped
    raise TypeError("query must be a string, a {text} dict, or an image, {image, text?} or {video, text?} dict "
                    "(vision-language rerankers)")


def normalize_request(task: str, body: dict) -> dict:
    """A task's request body with items as `{id?, text}` objects and a query as `{text}` (or `{image,
    text?}`, `{video, text?}`) (the forms every task's fields take; plain strings are accepted for
    convenience)."""
    if "items" in body:
        body["items"] = normalize_items(body["items"])
    if "query" in body:
        body["query"] = normalize_query(body["query"])
    for name in ("labels", "entity_labels", "relation_labels", "output_types"):
        value = body.get(name)
        if value is not None and not isinstance(value, (str, list)):
            body[name] = list(value)  # a tuple, set or generator of labels / outputs
    if body.get("output_types") == []:
        del body["output_types"]  # no outputs named: the model's default, as None
    if isinstance(body.get("classify"), Mapping):
        body["classify"] = dict(body["classify"])
    return body


# Typed results of the built-in tasks; a plug-in task's answer is returned as the decoded dict.
_PARSERS = {
    "encode": lambda answer, request: parse_encode(answer, request.get("output_dtype")),
    "score": lambda answer, request: parse_score(answer),
    "extract": lambda answer, request: parse_extract(answer),
}
_EMPTY = {"encode": EncodeResult, "score": ScoreResult, "extract": ExtractResult}


def parse_answer(task: str, answer: Mapping[str, Any], request: Mapping[str, Any]) -> Any:
    parser = _PARSERS.get(task)
    return parser(answer, request) if parser is not None else dict(answer)


def empty_result(task: str, model: str) -> Any:
    """The result of a call with no items (nothing is sent)."""
    kind = _EMPTY.get(task)
    return kind(model, [], 0) if kind is not None else {"model": model, "items": [], "usage": {"tokens": 0}}
