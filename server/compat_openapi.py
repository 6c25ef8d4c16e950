"""OpenAPI paths and schemas of the compatibility APIs (TEI, Cohere/Jina, Weaviate's modules,
Infinity): the same fields their handlers accept (server/compat_*.py), their answers and
their own error shapes. Each operation is tagged `compat:<api>`, so tools that exercise SIE's
own contract (its error shape) can tell these apart."""

from __future__ import annotations

from sie_contract.schemas import NUMBERS, obj, ref

STRINGS = {"type": "array", "items": {"type": "string"}}
TEXTS = {"oneOf": [{"type": "string"}, STRINGS]}
PAIR = {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2}
BOOL = {"type": "boolean"}
IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}  # token ids
POSITIVE = {"type": "integer", "minimum": 1}
TRUNCATION = {"truncate": BOOL, "truncation_direction": {"enum": ["right", "Right"]}}
PROMPT = {"prompt_name": {"enum": ["query", "document", "passage", "corpus"]}}
RANK_DOCUMENTS = {"type": "array", "items": {"oneOf": [{"type": "string"},
                                                       {"type": "object", "properties": {"text": {"type": "string"}}}]}}
TEI_ERROR_TYPES = {"enum": ["Unhealthy", "Backend", "Overloaded", "Validation", "Tokenizer", "Empty"]}
OPTIONAL_STRING = {"type": ["string", "null"]}
USAGE = obj({"prompt_tokens": {"type": "integer"}, "total_tokens": {"type": "integer"}})

SCHEMAS = {
    "TEIError": obj({"error": {"type": "string"}, "error_type": TEI_ERROR_TYPES}, ["error", "error_type"]),
    "CohereError": obj({"message": {"type": "string"}}, ["message"]),
    "WeaviateError": obj({"error": {"type": "string"}}, ["error"]),
    "InfinityError": obj({"error": obj({"message": {"type": "string"}, "type": {"type": ["string", "null"]},
                                        "param": {"type": ["string", "null"]}, "code": {"type": "integer"}})}),
    # FastAPI's HTTPValidationError: what Infinity answers (422) for a field its pydantic models refuse
    "InfinityValidationError": obj({"detail": {"type": "array", "items": obj({
        "loc": {"type": "array", "items": {"type": ["string", "integer"]}}, "msg": {"type": "string"},
        "type": {"type": "string"}}, ["loc", "msg", "type"])}}, ["detail"]),
    "TEIEmbedRequest": obj({"inputs": TEXTS, "normalize": BOOL, "dimensions": {"type": "integer", "minimum": 1},
                            "encoding_format": {"enum": ["float"]}, **PROMPT, **TRUNCATION}, ["inputs"]),
    "TEIInputsRequest": obj({"inputs": TEXTS, **PROMPT, **TRUNCATION}, ["inputs"]),
    "TEIRerankRequest": obj({"query": {"type": "string"}, "texts": STRINGS, "raw_scores": {"const": False},
                             "return_text": BOOL, **TRUNCATION}, ["query", "texts"]),
    # pairs for a reranker; a text or a batch of [text] for a fixed-label classifier (raw_scores: its logits)
    "TEIPredictRequest": obj({"inputs": {"oneOf": [{"type": "string"}, PAIR, {"type": "array", "items": {
        "oneOf": [{"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 1}, PAIR]}}]},
                              "raw_scores": BOOL, "parameters": {"type": "object"}, **TRUNCATION}, ["inputs"]),
    "TEISimilarityRequest": obj({"inputs": obj({"source_sentence": {"type": "string"}, "sentences": STRINGS},
                                               ["source_sentence", "sentences"]),
                                 "parameters": obj({**PROMPT, **TRUNCATION})}, ["inputs"]),
    "TEITokenizeRequest": obj({"inputs": TEXTS, "add_special_tokens": BOOL, **PROMPT}, ["inputs"]),
    "TEIOpenAIError": obj({"message": {"type": "string"}, "code": {"type": "integer"}, "type": TEI_ERROR_TYPES},
                          ["message", "code", "type"]),
    # TEI's OpenAICompatRequest: `model` and `user` are taken and ignored
    "TEIOpenAIRequest": obj({"input": TEXTS, "model": OPTIONAL_STRING, "user": OPTIONAL_STRING,
                             "encoding_format": {"enum": ["float", "base64"]}, "dimensions": POSITIVE}, ["input"]),
    "TEIDecodeRequest": obj({"ids": {"oneOf": [IDS, {"type": "array", "items": IDS}]}, "skip_special_tokens": BOOL},
                            ["ids"]),
    "TEIRootRequest": {"oneOf": [ref("TEIEmbedRequest"), ref("TEIRerankRequest"), ref("TEIPredictRequest"),
                                 ref("TEISimilarityRequest")]},
    "TEIInfo": {"type": "object", "required": ["model_id", "model_type", "max_input_length", "version"]},
    "CohereRerankRequest": obj({
        "model": {"type": "string"}, "query": {"type": "string"}, "documents": RANK_DOCUMENTS,
        "top_n": POSITIVE, "rank_fields": STRINGS, "return_documents": BOOL,
        "max_chunks_per_doc": POSITIVE, "max_tokens_per_doc": POSITIVE,
        "priority": {"type": "integer", "minimum": 0}}, ["model", "query", "documents"]),
    "CohereRerankResponse": {"type": "object", "required": ["id", "results", "meta"], "properties": {
        "id": {"type": "string"}, "model": {"type": "string"}, "meta": {"type": "object"},
        "usage": obj({"total_tokens": {"type": "integer"}}),
        "results": {"type": "array", "items": {
            "type": "object", "required": ["index", "relevance_score"], "properties": {
                "index": {"type": "integer"}, "relevance_score": {"type": "number"},
                "document": {"type": "object"}}}}}},
    "WeaviateVectorsRequest": obj({
        "text": {"type": "string"}, "dims": {"type": "integer"}, "vector": {"type": ["array", "null"]},
        "error": {"type": "string"}, "config": obj({"pooling_strategy": {"type": "string"},
                                                    "task_type": {"enum": ["query", "passage"]},
                                                    "dimensions": {"type": "integer", "minimum": 1}})}, ["text"]),
    "WeaviateVectorsResponse": obj({"text": {"type": "string"}, "vector": NUMBERS, "dim": {"type": "integer"},
                                    "dims": {"type": "integer"}}, ["text", "vector", "dims"]),
    "WeaviateRerankRequest": obj({"query": {"type": "string"}, "documents": STRINGS, "property": {"type": "string"}},
                                 ["query"]),
    "WeaviateRerankResponse": obj({
        "query": {"type": "string"}, "property": {"type": ["string", "null"]}, "score": {"type": ["number", "null"]},
        "scores": {"type": ["array", "null"],
                   "items": obj({"document": {"type": "string"}, "score": {"type": "number"}})}}, ["query"]),
    # multi2vec-clip: Weaviate's client leaves an empty list out of the JSON
    "WeaviateVectorizeRequest": obj({"texts": STRINGS, "images": {"type": "array", "items": {
        "type": "string", "description": "base64 image bytes"}}}),
    "WeaviateVectorizeResponse": obj({"textVectors": {"type": "array", "items": NUMBERS},
                                      "imageVectors": {"type": "array", "items": NUMBERS}},
                                     ["textVectors", "imageVectors"]),
    "InfinityEmbeddingsRequest": obj({
        "model": {"type": "string"}, "input": TEXTS, "encoding_format": {"enum": ["float", "base64"]},
        "dimensions": {"type": "integer", "minimum": 0}, "user": {"type": "string"}, "modality": {"const": "text"}},
        ["model", "input"]),
    "InfinityEmbeddingsResponse": {"type": "object", "required": ["object", "data", "model", "usage"], "properties": {
        "object": {"const": "list"}, "model": {"type": "string"}, "usage": USAGE, "id": {"type": "string"},
        "created": {"type": "integer"},
        "data": {"type": "array", "items": obj({"object": {"const": "embedding"}, "index": {"type": "integer"},
                                                "embedding": {"oneOf": [NUMBERS, {"type": "string"}]}})}}},
    "InfinityRerankRequest": obj({
        "model": {"type": "string"}, "query": {"type": "string"}, "documents": STRINGS,
        "top_n": POSITIVE, "return_documents": BOOL, "raw_scores": {"const": False}},
        ["model", "query", "documents"]),
    "InfinityClassifyRequest": obj({"model": {"type": "string"}, "input": STRINGS, "raw_scores": BOOL},
                                   ["model", "input"]),
    "InfinityClassifyResponse": {"type": "object", "required": ["object", "data", "model", "usage"], "properties": {
        "object": {"const": "classify"}, "model": {"type": "string"}, "usage": USAGE, "id": {"type": "string"},
        "created": {"type": "integer"},
        "data": {"type": "array", "items": {"type": "array", "items": obj(
            {"score": {"type": "number"}, "label": {"type": "string"}}, ["score", "label"])}}}},
    "InfinityRerankResponse": {"type": "object", "required": ["object", "results", "model", "usage"], "properties": {
        "object": {"const": "rerank"}, "model": {"type": "string"}, "usage": USAGE, "id": {"type": "string"},
        "created": {"type": "integer"},
        "results": {"type": "array", "items": obj({"relevance_score": {"type": "number"}, "index": {"type": "integer"},
                                                   "document": {"type": "string"}})}}},
}

MODEL = {"name": "model", "in": "path", "required": True, "schema": {"type": "string"},
         "description": "model id, slashes included; `%23query` appended selects query mode"}
_ERRORS = {"400": "bad request", "401": "missing or wrong API key", "404": "unknown model",
           "408": "the body stopped arriving or took too long", "413": "too large",
           "415": "Content-Encoding other than gzip, deflate or identity",
           "422": "invalid field (TEI, Infinity)", "429": "overloaded (Retry-After)",
           "503": "not ready, draining, or the model failed to load (Retry-After)", "504": "deadline passed"}
# What each kind of operation answers besides its success (each occurs: tests/server/test_openapi_replay.py).
WORK = ("400", "401", "404", "408", "413", "415", "429", "503", "504")
TEI_WORK = ("401", "404", "408", "413", "415", "422", "429", "503", "504")  # TEI says 422 where others say 400
BODY_ONLY = ("401", "404", "408", "413", "415", "422")  # tokenize: no model runs
LOOKUP = ("401", "404")  # GETs about a model
HEALTH = ("401", "404", "503")
# Infinity: 422 for a field its request models refuse (FastAPI's shape), 400 for a model named wrong
INFINITY_WORK: dict = {"errors": (*WORK, "422"), "shapes": {"422": "InfinityValidationError"}}


def _op(api: str, summary: str, answer: dict | None, error: str, request: str | None = None, model: bool = False,
        content_type: str = "application/json", errors: tuple[str, ...] = WORK, success: str = "200",
        shapes: dict[str, str] | None = None) -> dict:
    """`shapes`: the error schema of a status whose body differs from `error`'s (Infinity's 422)."""
    operation: dict = {"tags": [f"compat:{api}"], "summary": summary}
    if model:
        operation["parameters"] = [MODEL]
    if request:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": ref(request)}}}
    ok: dict = {"description": "OK"}
    if answer is not None:
        ok["content"] = {content_type: {"schema": answer}}
    described = {code: {"description": _ERRORS[code], "content": {"application/json": {
        "schema": ref((shapes or {}).get(code, error))}}} for code in errors}
    return {**operation, "responses": {success: ok if success == "200" else {"description": "no content"},
                                       **described}}


def _tei(summary: str, request: str | None, answer: dict | None, errors: tuple[str, ...] = TEI_WORK) -> dict:
    return _op("tei", summary, answer, "TEIError", request, model=True, errors=errors)


MATRIX = {"type": "array", "items": NUMBERS}
PREDICTIONS = {"type": "array", "items": obj({"label": {"type": "string"}, "score": {"type": "number"}},
                                             ["label", "score"])}  # TEI's Prediction, best first
TEI_TOKENS = {"type": "array", "items": {"type": "array", "items": {"type": "object", "required": ["id", "text"]}}}
# TEI's OpenAI route at the model's base URL, answering errors as TEI's OpenAICompatErrorResponse
TEI_OPENAI = _op("tei", "TEI's OpenAI-shaped embeddings (the model from the URL)", ref("EmbeddingsResponse"),
                 "TEIOpenAIError", "TEIOpenAIRequest", model=True, errors=TEI_WORK)

PATHS = {
    "/tei/{model}/embed": {"post": _tei("TEI: dense embeddings", "TEIEmbedRequest", MATRIX)},
    "/tei/{model}/embed_sparse": {"post": _tei("TEI: sparse embeddings", "TEIInputsRequest", {
        "type": "array", "items": {"type": "array", "items": obj({"index": {"type": "integer"},
                                                                  "value": {"type": "number"}})}})},
    "/tei/{model}/embed_all": {"post": _tei("TEI: per-token vectors (multi-vector models)", "TEIInputsRequest",
                                            {"type": "array", "items": MATRIX})},
    "/tei/{model}/rerank": {"post": _tei("TEI: rerank, best first", "TEIRerankRequest", {
        "type": "array", "items": obj({"index": {"type": "integer"}, "score": {"type": "number"},
                                       "text": {"type": "string"}})})},
    "/tei/{model}/predict": {"post": _tei("TEI: score (query, text) pairs, or a classifier's labels of each text",
                                          "TEIPredictRequest", {"oneOf": [PREDICTIONS, {"type": "array",
                                                                                        "items": PREDICTIONS}]})},
    "/tei/{model}/similarity": {"post": _tei("TEI: cosine similarity to a source sentence", "TEISimilarityRequest",
                                             NUMBERS)},
    "/tei/{model}/tokenize": {"post": _tei("TEI: the model's tokens", "TEITokenizeRequest", TEI_TOKENS, BODY_ONLY)},
    "/tei/{model}/decode": {"post": _tei("TEI: the text of token ids", "TEIDecodeRequest", STRINGS, BODY_ONLY)},
    "/tei/{model}/v1/embeddings": {"post": TEI_OPENAI},
    "/tei/{model}/embeddings": {"post": TEI_OPENAI},
    "/tei/{model}/info": {"get": _tei("TEI: model info", None, ref("TEIInfo"), LOOKUP)},
    "/tei/{model}/health": {"get": _tei("TEI: 200 while the model can serve", None, None, HEALTH)},
    "/tei/{model}": {"post": _tei("TEI's root route: the model's own call (embed, embed_sparse, rerank, predict)",
                                  "TEIRootRequest", {}),
                     "get": _tei("TEI's root health", None, None, HEALTH)},
    "/v1/rerank": {"post": _op("cohere", "Cohere v1 / Jina rerank", ref("CohereRerankResponse"), "CohereError",
                               "CohereRerankRequest")},
    "/v2/rerank": {"post": _op("cohere", "Cohere v2 rerank", ref("CohereRerankResponse"), "CohereError",
                               "CohereRerankRequest")},
    "/weaviate/{model}/vectors": {"post": _op("weaviate", "Weaviate text2vec-transformers: one vector",
                                              ref("WeaviateVectorsResponse"), "WeaviateError",
                                              "WeaviateVectorsRequest", model=True)},
    "/weaviate/{model}/rerank": {"post": _op("weaviate", "Weaviate reranker-transformers: scores in document order",
                                             ref("WeaviateRerankResponse"), "WeaviateError", "WeaviateRerankRequest",
                                             model=True)},
    "/weaviate/{model}/vectorize": {"post": _op("weaviate", "Weaviate multi2vec-clip: text and image vectors",
                                                ref("WeaviateVectorizeResponse"), "WeaviateError",
                                                "WeaviateVectorizeRequest", model=True)},
    "/weaviate/{model}/meta": {"get": _op("weaviate", "Weaviate module meta", {"type": "object"}, "WeaviateError",
                                          model=True, errors=LOOKUP)},
    "/weaviate/{model}/.well-known/ready": {"get": _op("weaviate", "204 when ready", None, "WeaviateError",
                                                       model=True, errors=HEALTH, success="204")},
    "/weaviate/{model}/.well-known/live": {"get": _op("weaviate", "204 while alive (any model name)", None,
                                                      "WeaviateError", model=True, errors=("401",), success="204")},
    "/embeddings": {"post": _op("infinity", "Infinity embeddings", ref("InfinityEmbeddingsResponse"), "InfinityError",
                                "InfinityEmbeddingsRequest", **INFINITY_WORK)},
    "/rerank": {"post": _op("infinity", "Infinity rerank", ref("InfinityRerankResponse"), "InfinityError",
                            "InfinityRerankRequest", **INFINITY_WORK)},
    "/classify": {"post": _op("infinity", "Infinity classify: every label of a fixed-label classifier, best first",
                              ref("InfinityClassifyResponse"), "InfinityError", "InfinityClassifyRequest",
                              **INFINITY_WORK)},
    "/models": {"get": _op("infinity", "Infinity's model list", {"type": "object"}, "InfinityError", errors=("401",))},
    # open without a key, as Infinity leaves it (server/middleware.py's PUBLIC_ROUTES)
    "/health": {"get": {**_op("infinity", "Infinity's health: the server's clock", {
        "type": "object", "required": ["unix"], "properties": {"unix": {"type": "number"}}}, "InfinityError",
        errors=()), "security": []}},
}

# the routes added later (Cohere's embed v2), kept in their own file
from . import compat_openapi_extra  # noqa: E402

SCHEMAS.update(compat_openapi_extra.SCHEMAS)
PATHS.update(compat_openapi_extra.paths(_op))
