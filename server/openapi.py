"""The OpenAPI 3.1 document of every route, served at `GET /openapi.json`.

Task routes come from `sie_contract`'s registry: each task's request and answer
schemas are derived from the same typed structures the handlers decode into
(`sie_contract.schemas.task_schemas`), so the document and the server cannot drift
apart on which fields exist, their types or their bounds. docs/api.md is the prose version of the
same contract.
"""

from __future__ import annotations

from collections.abc import Sequence

from sie_contract import Task
from sie_contract.errors import ERROR_CODES
from sie_contract.schemas import COMPONENTS, NUMBERS, task_schemas
from sie_contract.schemas import obj as _obj
from sie_contract.schemas import ref as _ref

from . import compat_openapi

SCHEMAS = {
    **COMPONENTS,
    "Error": _obj({"error": _obj({"code": {"type": "string", "enum": list(ERROR_CODES)}, "message": {"type": "string"},
                                  "field": {"type": "string", "description": "the offending request field"},
                                  "reason": {"type": "string", "description": "why a model failed to load"},
                                  "retryable": {"type": "boolean",
                                                "description": "on 429 / 503: whether a later retry can succeed"}},
                                 ["code", "message"])}, ["error"]),
    "OpenAIError": _obj({"error": _obj({"message": {"type": "string"}, "type": {"type": "string"},
                                        "param": {"type": ["string", "null"]}, "code": {"type": "string"}})}),
    "EmbeddingsRequest": _obj({
        "model": {"type": "string"},
        "input": {"oneOf": [{"type": "string", "minLength": 1},
                            {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}]},
        "encoding_format": {"enum": ["float", "base64"], "default": "float"},
        "dimensions": {"type": "integer", "minimum": 1}, "user": {"type": "string"},
        "input_type": {"enum": ["query", "document", "passage", "search_query", "search_document"],
                       "description": "SIE's query mode (or name the model `<model>#query`)"},
        "task": {"type": "string", "description": "one of the model's profiles, as Jina's embeddings API names its "
                                                  "tasks (jina-embeddings-v3: retrieval.query, text-matching, ...)"},
        "embedding_type": {"enum": ["float", "base64"], "description": "Jina's name for encoding_format"},
        "encoding_type": {"enum": ["float", "base64"], "description": "Jina's older name for encoding_format"},
        "normalized": {"type": "boolean", "description": "Jina's: false answers the vectors as pooled"},
        "late_chunking": {"type": "boolean", "description": "Jina's: true reads the inputs as one sequence and "
                                                            "pools each input's own tokens there (encode's "
                                                            "late_chunking)"},
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
        "tasks": {"type": "array", "items": {"type": "string"}},
        "outputs": {"type": "array", "items": {"type": "string"}},
        "dims": {"type": "object", "additionalProperties": {"type": "integer"}},
        "matryoshka_dims": {"type": "array", "items": {"type": "integer"}}, "max_seq_len": {"type": "integer"},
        "state": {"enum": ["available", "loading", "loaded", "failed"]}, "memory_bytes": {"type": "integer"},
        "error": {"type": "string"}, "description": {"type": "string"},
        "weights": _obj({"status": {"enum": ["local", "download", "unavailable"]}, "source": {"type": "string"},
                         "detail": {"type": "string"}}),
        "pinned": {"type": "boolean", "description": "never evicted (its card's pinned, or --pin)"},
        "idle_evict_s": {"type": ["number", "null"],
                         "description": "unloaded after this many idle seconds; null: never"},
        "adapters": {"type": "array", "items": {"type": "string"},
                     "description": "the LoRA adapters encode's lora_id names (absent: none)"},
        "profiles": {"type": "array", "items": {"type": "string"},
                     "description": "the profiles encode's profile names (absent: none)"},
    }},
    # the card schema of --models files (sie_engine/card.py; unknown fields are refused there)
    "Card": {"type": "object", "required": ["id"], "properties": {
        "id": {"type": "string"}, "weights": {"oneOf": [{"type": "string"}, {"type": "object"}]},
        "family": {"type": ["string", "null"]}, "outputs": {"type": "array", "items": {"type": "string"}},
        "pooling": {"type": "string"}, "normalize": {"type": "boolean"}, "max_seq_len": {"type": "integer"},
        "dims": {"type": ["integer", "null"]}, "matryoshka_dims": {"type": "array", "items": {"type": "integer"}},
        "query_template": {"type": "string"}, "document_template": {"type": "string"},
        "query_instruction": {"type": ["string", "null"]}, "dtype": {"type": "string"},
        "max_batch_tokens": {"type": "integer"}, "trust_remote_code": {"type": "boolean"},
        "modalities": {"type": "array", "items": {"type": "string"}}, "image_size": {"type": ["integer", "null"]},
        "query_tower": {"type": "string"}, "options": {"type": "object"}, "description": {"type": "string"},
        "pinned": {"type": "boolean", "description": "never evicted once loaded"},
        "idle_evict_s": {"type": ["number", "null"], "minimum": 0,
                         "description": "unloaded after this many idle seconds (null: the server's --idle-evict-s; "
                                        "0: never)"},
        "adapters": {"type": "object", "additionalProperties": {"oneOf": [{"type": "string"}, {"type": "object"}]},
                     "description": "PEFT LoRA adapters by the name encode's lora_id takes: a directory, or a "
                                    "source like weights (hub, package, path) holding adapter_config.json and "
                                    "adapter_model.safetensors"},
        "profiles": {"type": "object", "additionalProperties": {"type": "object"},
                     "description": "named presets of encode fields (lora_id among them) that encode's profile "
                                    "selects; the request's own fields win"}}},
    "CardList": _obj({"object": {"const": "list"}, "models": {"type": "array", "items": _ref("Card")}},
                     ["models"]),
    "CardsApplied": _obj({"models": {"type": "array", "items": {"type": "string"}},
                          "changed": {"type": "array", "items": {"type": "string"},
                                      "description": "the ids whose card differs from the one served before"}},
                         ["models", "changed"]),
    "CardRemoved": _obj({"removed": {"type": "string"},
                         "restored": {"type": "boolean",
                                      "description": "the card it replaced (one the server started with) is "
                                                     "served again"}}, ["removed", "restored"]),
    "ModelList": _obj({"object": {"const": "list"}, "data": {"type": "array", "items": _ref("Model")}}),
    "Status": {"type": "object", "properties": {
        "ready": {"type": "boolean"}, "draining": {"type": "boolean"}, "pool": {"type": "string"},
        "inflight": {"type": "integer"}, "queued_tokens": {"type": "integer"}, "queued_items": {"type": "integer"},
        "models": {"type": "object", "additionalProperties": {"type": "object", "properties": {
            "state": {"type": "string"}, "queued_tokens": {"type": "integer"}, "queued_items": {"type": "integer"}}}},
        "configs": {"type": "object", "additionalProperties": {"type": "string"},
                    "description": "runtime card id -> digest (the router replays its cards where they differ)"}}},
}

MODEL_PARAM = {"name": "model", "in": "path", "required": True, "schema": {"type": "string"},
               "description": "model id; may contain slashes (the rest of the path)"}
TIMEOUT_PARAM = {"name": "X-SIE-Timeout-Ms", "in": "header", "required": False, "schema": {"type": "number"},
                 "description": "deadline in ms; work not started by then is dropped with 504"}
BODY_TYPES = ("application/json", "application/msgpack")


ERROR_TEXT = {"400": "bad request", "401": "missing or wrong API key (on the admin API: admin key)",
              "403": "the admin API is off (no --admin-key-file)", "404": "unknown model",
              "408": "the body stopped arriving or took too long (the connection is closed)",
              "413": "too large (a compressed body: once decompressed)",
              "415": "Content-Encoding other than gzip, deflate or identity", "429": "overloaded (Retry-After)",
              "503": "draining or model failed to load (Retry-After)", "504": "deadline passed"}
# What a work route can answer besides 200 (every status occurs: tests/server/test_openapi_replay.py).
WORK_ERRORS = ("400", "401", "404", "408", "413", "415", "429", "503", "504")


def _errors(schema: str = "Error", codes: Sequence[str] = WORK_ERRORS) -> dict:
    return {code: {"description": ERROR_TEXT[code], "content": {"application/json": {"schema": _ref(schema)}}}
            for code in codes}


def _work(summary: str, request: str, response: str, with_model: bool = True, error_schema: str = "Error",
          types=BODY_TYPES) -> dict:
    return {"post": {
        "summary": summary,
        "parameters": ([MODEL_PARAM] if with_model else []) + [TIMEOUT_PARAM],
        "requestBody": {"required": True, "content": {t: {"schema": _ref(request)} for t in types}},
        "responses": {"200": {"description": "OK", "content": {t: {"schema": _ref(response)} for t in types}},
                      **_errors(error_schema)},
    }}


def _get(summary: str, schema: dict | None, content_type: str = "application/json", errors: Sequence[str] = (),
         **extra) -> dict:
    content = {content_type: {"schema": schema}} if schema else {content_type: {"schema": {"type": "string"}}}
    return {"get": {"summary": summary, "responses": {"200": {"description": "OK", "content": content},
                                                      **_errors(codes=errors)}, **extra}}


def _admin(summary: str, method: str, schema: str, errors: Sequence[str], **extra) -> dict:
    """An admin API operation: its own key (`admin` scheme), tagged so the work replay leaves it to
    tests/server/test_runtime_config.py."""
    return {method: {"summary": summary, "tags": ["admin"], "security": [{"admin": []}],
                     "responses": {"200": {"description": "OK", "content": {"application/json": {
                         "schema": _ref(schema)}}}, **_errors(codes=errors)}, **extra}}


ADMIN_PATHS = {
    "/v1/configs/models": {
        **_admin("The runtime cards (added with POST)", "get", "CardList", ("401", "403")),
        **_admin("Add or replace cards: one card, or a list; all checked before any is applied", "post",
                 "CardsApplied", ("400", "401", "403"), requestBody={"required": True, "content": {
                     "application/json": {"schema": {"oneOf": [_ref("Card"), {"type": "array", "items": _ref("Card"),
                                                                              "minItems": 1}]}}}}),
    },
    "/v1/configs/models/{model}": _admin("Stop serving a runtime card's model (queued work is still answered)",
                                         "delete", "CardRemoved", ("401", "403", "404"), parameters=[MODEL_PARAM]),
}


def openapi_document(tasks: Sequence[Task]) -> dict:
    """The document for a server serving these tasks (the registry's, when the app was made)."""
    schemas = {**SCHEMAS, **compat_openapi.SCHEMAS}
    paths = {}
    for task in tasks:
        schemas.update(task_schemas(task))
        name = task.name.capitalize()
        paths[task.route()] = _work(task.summary, f"{name}Request", f"{name}Response")
    return {
        "openapi": "3.1.0",
        "info": {"title": "SIE inference server", "version": "0.1.0",
                 "description": "encode / score / extract for small search models; see docs/api.md. A path called "
                                "with a method it does not list answers 405 with an `Allow` header "
                                "(components.responses.MethodNotAllowed)."},
        "components": {"schemas": schemas, "responses": {"MethodNotAllowed": {
                           "description": "the path exists but not with this method; `Allow` lists its methods",
                           "headers": {"Allow": {"schema": {"type": "string"}}},
                           "content": {"application/json": {"schema": _ref("Error")}}}},
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                                           "admin": {"type": "http", "scheme": "bearer",
                                                     "description": "a key of --admin-key-file"}}},
        "security": [{"bearer": []}],
        "paths": {
            **paths,
            "/v1/embeddings": _work("OpenAI-compatible embeddings", "EmbeddingsRequest", "EmbeddingsResponse",
                                    with_model=False, error_schema="OpenAIError", types=("application/json",)),
            "/v1/models": _get("Served models", _ref("ModelList"), errors=("401",)),
            "/v1/models/{model}": _get("One model", _ref("Model"), errors=("401", "404"), parameters=[MODEL_PARAM]),
            # the router polls it; it shows no more than /metrics does, so it needs no key
            "/v1/status": _get("Lightweight state for the router", _ref("Status"), security=[]),
            "/healthz": _get("Liveness (answered even when the server's connections are all taken)",
                             _obj({"status": {"const": "ok"}}, ["status"]), security=[]),
            "/readyz": _get("Readiness: 200 once preloads are done, 503 while starting or draining (answered even "
                            "when the server's connections are all taken)", _obj({"status": {"const": "ready"}},
                                                                                 ["status"]),
                            errors=("503",), security=[]),
            "/metrics": _get("Prometheus metrics", None, "text/plain", security=[]),
            "/openapi.json": _get("This document", {"type": "object"}, security=[]),
            **ADMIN_PATHS,
            **compat_openapi.PATHS,  # TEI, Cohere/Jina, Weaviate's modules, Infinity (their own shapes)
        },
    }
