"""The OpenAPI 3.1 document of every route, served at `GET /openapi.json`.

Built here from the same field lists the handlers enforce, so the document and
the server cannot drift apart on which fields exist. docs/api.md is the prose
version of the same contract.
"""

from __future__ import annotations

import functools

from sie_engine.postprocess import OUTPUT_DTYPES

from .fields import EXTRACT_FIELDS, SCORE_FIELDS

ERROR_CODES = ["invalid_request", "unsupported_task", "unsupported_output", "unauthorized", "model_not_found",
               "not_found", "method_not_allowed", "payload_too_large", "overloaded", "inference_failed",
               "internal_error", "not_ready", "draining", "model_load_failed", "no_worker", "too_many_connections",
               "deadline_exceeded"]


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(properties: dict, required=(), **extra) -> dict:
    schema = {"type": "object", "properties": properties, "additionalProperties": False, **extra}
    if required:
        schema["required"] = list(required)
    return schema


NUMBERS = {"type": "array", "items": {"type": "number"}}
TENSOR_JSON = {
    "description": "JSON: a list of numbers (nested for multivector); int8: {data, scale}. "
                   "msgpack: a tensor object {dtype, shape, data (bytes, little-endian, C order)} (+ scale for int8).",
    "oneOf": [NUMBERS, {"type": "array", "items": NUMBERS}, _obj({"data": {"type": "array"}, "scale": {"type": "number"}}),
              _obj({"dtype": {"type": "string"}, "shape": {"type": "array", "items": {"type": "integer"}},
                    "data": {"type": "string", "format": "binary"}, "scale": {"type": "number"}})],
}

SCHEMAS = {
    "Item": {"oneOf": [{"type": "string"}, _obj({"id": {"type": "string"}, "text": {"type": "string"}}, ["text"])]},
    "Items": {"type": "array", "items": _ref("Item"), "minItems": 1},
    "Usage": _obj({"tokens": {"type": "integer"}}, ["tokens"]),
    "Error": _obj({"error": _obj({"code": {"type": "string", "enum": ERROR_CODES}, "message": {"type": "string"},
                                  "field": {"type": "string", "description": "the offending request field"}},
                                 ["code", "message"])}, ["error"]),
    "OpenAIError": _obj({"error": _obj({"message": {"type": "string"}, "type": {"type": "string"},
                                        "param": {"type": ["string", "null"]}, "code": {"type": "string"}})}),
    "EncodeRequest": _obj({
        "items": _ref("Items"),
        "output_types": {"type": "array", "items": {"enum": ["dense", "sparse", "multivector"]}},
        "is_query": {"type": "boolean", "default": False},
        "instruction": {"type": "string"},
        "dims": {"type": "integer", "minimum": 1, "description": "Matryoshka truncation of dense vectors"},
        "normalize": {"type": "boolean"},
        "output_dtype": {"enum": list(OUTPUT_DTYPES), "default": "float32"},
        "truncate": {"type": "boolean", "default": True},
        "precision": {"enum": ["float32", "float16", "bfloat16", "int8"],
                      "description": "compute precision (default: the card's dtype); bfloat16 is the fast CPU mode"},
    }, ["items"]),
    "EncodeResponse": _obj({
        "model": {"type": "string"},
        "items": {"type": "array", "items": _obj({
            "id": {"type": "string"}, "dense": TENSOR_JSON, "multivector": TENSOR_JSON,
            "sparse": _obj({"indices": TENSOR_JSON, "values": TENSOR_JSON}),
        }, ["id"])},
        "usage": _ref("Usage"),
    }, ["model", "items", "usage"]),
    "ScoreRequest": _obj({
        "query": {"oneOf": [{"type": "string"}, _obj({"text": {"type": "string"}}, ["text"])]},
        "items": _ref("Items"), "top_k": {"type": "integer", "minimum": 1},
        **{name: {"description": "option of the score task"} for name in SCORE_FIELDS[3:]},
    }, ["query", "items"]),
    "ScoreResponse": _obj({
        "model": {"type": "string"},
        "scores": {"type": "array", "items": _obj({"id": {"type": "string"}, "index": {"type": "integer"},
                                                   "score": {"type": "number"}, "rank": {"type": "integer"}})},
        "usage": _ref("Usage"),
    }),
    "ExtractRequest": _obj({
        "items": _ref("Items"), "labels": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "threshold": {"type": "number", "default": 0.5}, "flat": {"type": "boolean", "default": True},
        **{name: {"description": "option of the extract task"} for name in EXTRACT_FIELDS[4:]},
    }, ["items", "labels"]),
    "ExtractResponse": _obj({
        "model": {"type": "string"},
        "items": {"type": "array", "items": _obj({"id": {"type": "string"}, "entities": {"type": "array", "items": _obj({
            "text": {"type": "string"}, "label": {"type": "string"}, "score": {"type": "number"},
            "start": {"type": "integer"}, "end": {"type": "integer"}})}})},
        "usage": _ref("Usage"),
    }),
    "EmbeddingsRequest": _obj({
        "model": {"type": "string"},
        "input": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        "encoding_format": {"enum": ["float", "base64"], "default": "float"},
        "dimensions": {"type": "integer", "minimum": 1}, "user": {"type": "string"},
    }, ["model", "input"]),
    "EmbeddingsResponse": _obj({
        "object": {"const": "list"},
        "data": {"type": "array", "items": _obj({"object": {"const": "embedding"}, "index": {"type": "integer"},
                                                 "embedding": {"oneOf": [NUMBERS, {"type": "string"}]}})},
        "model": {"type": "string"},
        "usage": _obj({"prompt_tokens": {"type": "integer"}, "total_tokens": {"type": "integer"}}),
    }),
    "Model": {"type": "object", "properties": {
        "id": {"type": "string"}, "object": {"const": "model"}, "created": {"type": "integer"},
        "owned_by": {"type": "string"}, "family": {"type": ["string", "null"]},
        "tasks": {"type": "array", "items": {"enum": ["encode", "score", "extract"]}},
        "outputs": {"type": "array", "items": {"type": "string"}},
        "dims": {"type": "object", "additionalProperties": {"type": "integer"}},
        "matryoshka_dims": {"type": "array", "items": {"type": "integer"}}, "max_seq_len": {"type": "integer"},
        "state": {"enum": ["available", "loading", "loaded", "failed"]}, "memory_bytes": {"type": "integer"},
        "error": {"type": "string"}, "description": {"type": "string"}}},
    "ModelList": _obj({"object": {"const": "list"}, "data": {"type": "array", "items": _ref("Model")}}),
    "Status": {"type": "object", "properties": {
        "ready": {"type": "boolean"}, "draining": {"type": "boolean"}, "pool": {"type": "string"},
        "inflight": {"type": "integer"}, "queued_tokens": {"type": "integer"}, "queued_items": {"type": "integer"},
        "models": {"type": "object", "additionalProperties": {"type": "object", "properties": {
            "state": {"type": "string"}, "queued_tokens": {"type": "integer"}, "queued_items": {"type": "integer"}}}}}},
}

MODEL_PARAM = {"name": "model", "in": "path", "required": True, "schema": {"type": "string"},
               "description": "model id; may contain slashes (the rest of the path)"}
TIMEOUT_PARAM = {"name": "X-SIE-Timeout-Ms", "in": "header", "required": False, "schema": {"type": "number"},
                 "description": "deadline in ms; work not started by then is dropped with 504"}
BODY_TYPES = ("application/json", "application/msgpack")


def _errors(schema: str = "Error") -> dict:
    described = {"400": "bad request", "401": "missing or wrong API key", "404": "unknown model",
                 "413": "too large", "429": "overloaded (Retry-After)", "503": "draining or model failed to load (Retry-After)",
                 "504": "deadline passed"}
    return {code: {"description": text, "content": {"application/json": {"schema": _ref(schema)}}}
            for code, text in described.items()}


def _work(summary: str, request: str, response: str, with_model: bool = True, error_schema: str = "Error",
          types=BODY_TYPES) -> dict:
    return {"post": {
        "summary": summary,
        "parameters": ([MODEL_PARAM] if with_model else []) + [TIMEOUT_PARAM],
        "requestBody": {"required": True, "content": {t: {"schema": _ref(request)} for t in types}},
        "responses": {"200": {"description": "OK", "content": {t: {"schema": _ref(response)} for t in types}},
                      **_errors(error_schema)},
    }}


def _get(summary: str, schema: dict | None, content_type: str = "application/json", **extra) -> dict:
    content = {content_type: {"schema": schema}} if schema else {content_type: {"schema": {"type": "string"}}}
    return {"get": {"summary": summary, "responses": {"200": {"description": "OK", "content": content}}, **extra}}


@functools.lru_cache(maxsize=1)
def openapi_document() -> dict:
    return {
        "openapi": "3.1.0",
        "info": {"title": "SIE inference server", "version": "0.1.0",
                 "description": "encode / score / extract for small search models; see docs/api.md"},
        "components": {"schemas": SCHEMAS,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": {
            "/v1/encode/{model}": _work("Dense, sparse and multi-vector embeddings", "EncodeRequest", "EncodeResponse"),
            "/v1/score/{model}": _work("Rerank items against a query, best first", "ScoreRequest", "ScoreResponse"),
            "/v1/extract/{model}": _work("Zero-shot entity extraction", "ExtractRequest", "ExtractResponse"),
            "/v1/embeddings": _work("OpenAI-compatible embeddings", "EmbeddingsRequest", "EmbeddingsResponse",
                                    with_model=False, error_schema="OpenAIError", types=("application/json",)),
            "/v1/models": _get("Served models", _ref("ModelList")),
            "/v1/models/{model}": {"get": {**_get("One model", _ref("Model"))["get"], "parameters": [MODEL_PARAM],
                                           "responses": {"200": {"description": "OK", "content": {
                                               "application/json": {"schema": _ref("Model")}}}, **_errors()}}},
            "/v1/status": _get("Lightweight state for the router", _ref("Status")),
            "/healthz": _get("Liveness", {"type": "object"}, security=[]),
            "/readyz": _get("Readiness: 200 once preloads are done, 503 while starting or draining",
                            {"type": "object"}, security=[]),
            "/metrics": _get("Prometheus metrics", None, "text/plain", security=[]),
            "/openapi.json": _get("This document", {"type": "object"}, security=[]),
        },
    }
