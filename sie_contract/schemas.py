"""JSON Schema (OpenAPI 3.1 components) derived from the declared types.

`task_schemas(task)` gives a task's `{Name}Request` and `{Name}Response` with every
component they refer to, from `msgspec.json.schema_components` over the request struct
and the answer type, so the document describes exactly what the decoder takes. Two
adjustments make it read as the API is used: a null field is a field not sent (so the
`null` branches of optional fields are left out and the required fields are the task's),
and the unions of the wire are disjoint (a string or an object), written `oneOf`.

`ref`, `obj`, `answer` and `NUMBERS` remain for hand-written schemas (a plug-in that
declares its fields by schema, the compatibility APIs' foreign shapes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from . import shapes

if TYPE_CHECKING:
    from .tasks import Task

REF = "#/components/schemas/{name}"
Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": REF.format(name=name)}


def obj(properties: Mapping[str, Any], required: Sequence[str] = (), **extra: Any) -> Schema:
    schema: Schema = {"type": "object", "properties": dict(properties), "additionalProperties": False, **extra}
    if required:
        schema["required"] = list(required)
    return schema


NUMBERS: Schema = {"type": "array", "items": {"type": "number"}}
TENSOR: Schema = {
    "description": "JSON: a list of numbers (nested for multivector); int8: {data, scale}. "
                   "msgpack: a tensor object {dtype, shape, data (bytes, little-endian, C order)} (+ scale for int8).",
    "oneOf": [NUMBERS, {"type": "array", "items": NUMBERS},
              obj({"data": {"type": "array"}, "scale": {"type": "number"}}),
              obj({"dtype": {"type": "string"}, "shape": {"type": "array", "items": {"type": "integer"}},
                   "data": {"type": "string", "format": "binary"}, "scale": {"type": "number"}})],
}


def _tidy(node: Any) -> Any:
    """msgspec's schema as the API reads: no null branches or null defaults (null is "not sent"),
    disjoint unions as oneOf, no titles (the component's name says it)."""
    if isinstance(node, list):
        return [_tidy(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: Schema = {}
    for key, value in node.items():
        if key == "title" or (key == "default" and value is None) or (key == "required" and not value):
            continue
        out[key] = _tidy(value)
    if "anyOf" in out:
        options = [o for o in out.pop("anyOf") if o != {"type": "null"}]
        if len(options) == 1:
            out = {**options[0], **out}
        else:
            out["oneOf"] = options
    return out


def derive(types: Sequence[Any]) -> tuple[list[Schema], dict[str, Schema]]:
    """Schemas of `types` (refs into the components) and the components they need."""
    found, components = msgspec.json.schema_components(types, ref_template=REF)
    return [_tidy(s) for s in found], {name: _tidy(s) for name, s in components.items()}


def _shared() -> dict[str, Schema]:
    (item, items, encode_item, encode_items, _), components = derive(
        [shapes.Text | shapes.TextItem, shapes.Items,
         shapes.Text | shapes.EncodeItem, shapes.EncodeItems, shapes.Usage])
    return {**components, "Item": item, "Items": {**items, "items": ref("Item")}, "EncodeItemOrText": encode_item,
            "EncodeItems": {**encode_items, "items": ref("EncodeItemOrText")}, "Tensor": TENSOR}


# Components every document carries (plug-ins refer to Items, EncodeItems, Usage, Tensor).
COMPONENTS: dict[str, Schema] = _shared()
TEXT: Schema = derive([shapes.Text])[0][0]


def task_schemas(task: Task) -> dict[str, Schema]:
    """`{Name}Request`, `{Name}Response` and the components they refer to."""
    name = task.name.capitalize()
    request_type = task.request_type
    types: list[Any] = [request_type] + ([task.answer_type] if task.answer_type is not None else [])
    found, components = derive(types)
    request = components.pop(request_type.__name__)
    for f in task.fields:
        prop = dict(f.schema) if f.schema is not None else request["properties"][f.name]
        if f.description:
            prop = {**prop, "description": f.description}
        request["properties"][f.name] = prop
    request.pop("required", None)
    if task.required:
        request["required"] = list(task.required)
    if task.answer_type is not None:
        response = components.pop(task.answer_type.__name__)
    else:
        response = dict(task.answer_schema)
    return {**components, f"{name}Request": request, f"{name}Response": response}


def answer(payload_name: str, payload: Mapping[str, Any]) -> Schema:
    """The answer shape every task shares (for a hand-written answer schema): the model,
    its payload list, usage."""
    return obj({"model": {"type": "string"}, payload_name: {"type": "array", "items": payload}, "usage": ref("Usage")},
               ["model", payload_name, "usage"])
