"""JSON Schema pieces the tasks' fields and answers share (OpenAPI components)."""

from __future__ import annotations


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(properties: dict, required=(), **extra) -> dict:
    schema = {"type": "object", "properties": properties, "additionalProperties": False, **extra}
    if required:
        schema["required"] = list(required)
    return schema


NUMBERS = {"type": "array", "items": {"type": "number"}}
TENSOR = {
    "description": "JSON: a list of numbers (nested for multivector); int8: {data, scale}. "
                   "msgpack: a tensor object {dtype, shape, data (bytes, little-endian, C order)} (+ scale for int8).",
    "oneOf": [NUMBERS, {"type": "array", "items": NUMBERS},
              obj({"data": {"type": "array"}, "scale": {"type": "number"}}),
              obj({"dtype": {"type": "string"}, "shape": {"type": "array", "items": {"type": "integer"}},
                   "data": {"type": "string", "format": "binary"}, "scale": {"type": "number"}})],
}

# A text to run a model on: the server refuses empty and blank ones (400), so the schema does.
TEXT = {"type": "string", "minLength": 1, "pattern": "\\S"}

COMPONENTS = {
    "Item": {"oneOf": [TEXT, obj({"id": {"type": "string"}, "text": TEXT}, ["text"])]},
    "Items": {"type": "array", "items": ref("Item"), "minItems": 1},
    # encode's items may be images (two-tower image-text models: CLIP, SigLIP)
    "EncodeItem": {"oneOf": [
        TEXT, obj({"id": {"type": "string"}, "text": TEXT}, ["text"]),
        obj({"id": {"type": "string"}, "image": {
            "type": "string", "format": "byte",
            "description": "the image file's bytes (PNG, JPEG, WebP, GIF, BMP): base64 or a data: URI in JSON, "
                           "raw bytes in msgpack; URLs are not fetched"}}, ["image"]),
    ]},
    "EncodeItems": {"type": "array", "items": ref("EncodeItem"), "minItems": 1},
    "Usage": obj({"tokens": {"type": "integer"}}, ["tokens"]),
    "Tensor": TENSOR,
}


def answer(payload_name: str, payload: dict) -> dict:
    """The answer shape every task shares: the model, its payload list, usage."""
    return obj({"model": {"type": "string"}, payload_name: {"type": "array", "items": payload}, "usage": ref("Usage")},
               ["model", payload_name, "usage"])
