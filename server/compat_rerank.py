"""Cohere's and Jina's rerank APIs, over SIE's score: `POST /v1/rerank` and `POST /v2/rerank`.

Both name the model in the body, so they are served at their own paths. Checked field by field
against cohere-python 7.0.9 (src/cohere/raw_base_client.py `rerank`, v2/raw_client.py, the
RerankResponse and V2RerankResponse types; commit bc495da) and Jina's rerank API
(`{model, query, documents, top_n, return_documents}` -> `{model, usage, results}`):

- `/v1/rerank` (Cohere v1, and Jina's path): `model`, `query`, `documents` (strings, or objects
  with `text`, or with the fields named by `rank_fields`), `top_n`, `rank_fields`,
  `return_documents` (default true, as Jina's; Cohere's v1 clients read `document` as optional),
  `max_chunks_per_doc`.
- `/v2/rerank` (Cohere v2): `model`, `query`, `documents` (strings), `top_n`,
  `max_tokens_per_doc`, `priority`, and what cohere 5.x's v2 client also sent
  (`return_documents`, default false, `rank_fields`, `max_chunks_per_doc`); `relevant_spans`
  is refused (SIE's rerankers score whole texts).

The answer is Cohere's `{id, results: [{index, relevance_score, document?}], meta}` best first,
with Jina's `model` and `usage: {total_tokens}` beside it. Documents are cut to the model's
window (so `max_tokens_per_doc` and `max_chunks_per_doc` change nothing; `priority` neither:
SIE batches in arrival order). Errors are Cohere's `{"message"}` with SIE's statuses.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from sie_engine import validation
from sie_engine.errors import InvalidRequest, PayloadTooLarge, SIEError

from . import codec, compat
from .handlers import body_of
from .request_ids import fresh_uuid
from .state import ENGINE

V1_FIELDS = ("model", "query", "documents", "top_n", "rank_fields", "return_documents", "max_chunks_per_doc")
V2_FIELDS = ("model", "query", "documents", "top_n", "max_tokens_per_doc", "relevant_spans", "priority",
             "return_documents", "rank_fields", "max_chunks_per_doc")


def cohere_error(error: SIEError, status: int) -> tuple[int, dict]:
    return status, {"message": error.message}


def document_texts(documents: Any, rank_fields: Any, limits: validation.Limits) -> list[str]:
    """Cohere's and Jina's documents -> the texts to score. An object is its `text`, or with
    `rank_fields` its named fields as `name: value` lines in that order (as Cohere ranks them)."""
    if not isinstance(documents, list):
        raise InvalidRequest("documents must be a list of strings or of objects with a text field", field="documents")
    if not documents:
        raise InvalidRequest("documents must not be empty", field="documents")
    if len(documents) > limits.max_items:
        raise PayloadTooLarge(f"documents holds {len(documents)} documents; at most {limits.max_items} per request",
                              field="documents")
    if rank_fields is not None and (not isinstance(rank_fields, list) or not rank_fields
                                    or not all(isinstance(f, str) for f in rank_fields)):
        raise InvalidRequest("rank_fields must be a non-empty list of field names", field="rank_fields")
    texts = []
    for i, document in enumerate(documents):
        where = f"documents[{i}]"
        if isinstance(document, dict) and rank_fields:
            text = "\n".join(f"{name}: {document[name]}" for name in rank_fields if document.get(name) is not None)
            if not text:
                raise InvalidRequest(f"{where} has none of the rank_fields {rank_fields}", field=where)
        elif isinstance(document, dict):
            value = document.get("text")
            if not isinstance(value, str):
                raise InvalidRequest(f"{where} needs a text field (SIE's rerankers score text), or name the fields "
                                     "to rank with rank_fields", field=where)
            text = value
        else:
            text = document
        texts.append(validation.check_text(text, limits, where))
    return texts


async def _rerank(request: web.Request, fields: tuple[str, ...], version: str, return_default: bool) -> web.Response:
    body = await body_of(request)
    codec.check_fields(body, fields)
    if body.get("model") is None:
        raise InvalidRequest("model is required: name one of the server's rerankers (GET /v1/models)", field="model")
    for name in ("query", "documents"):
        if body.get(name) is None:
            raise InvalidRequest(f"{name} is required", field=name)
    if body.get("relevant_spans") not in (None, False, {}):
        raise InvalidRequest("relevant_spans is not supported: SIE's rerankers score whole documents",
                             field="relevant_spans")
    for name in ("max_tokens_per_doc", "max_chunks_per_doc"):
        validation.check_positive_int(body.get(name), name)
    priority = body.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int) or priority < 0):
        raise InvalidRequest("priority must be an integer of at least 0", field="priority")
    model, _ = compat.split_mode(body["model"])  # a mode alias means nothing to a reranker
    limits = request.app[ENGINE].limits
    query = validation.check_text(body["query"], limits, "query")
    texts = document_texts(body["documents"], body.get("rank_fields"), limits)
    top_n = validation.check_positive_int(body.get("top_n"), "top_n")
    return_documents = compat.check_bool(body, "return_documents", return_default)
    result = await compat.score(request, model, query, texts, top_k=top_n,
                                names={"items": "documents", "query.text": "query", "top_k": "top_n"})
    results = []
    for scored in result.scores:  # best first
        entry: dict[str, Any] = {"index": scored.index, "relevance_score": float(scored.score)}
        if return_documents:
            document = body["documents"][scored.index]
            entry["document"] = document if isinstance(document, dict) else {"text": document}
        results.append(entry)
    return await compat.answer(request, {
        "id": fresh_uuid(), "results": results,
        "meta": {"api_version": {"version": version}, "billed_units": {"search_units": 1}},
        "model": result.model, "usage": {"total_tokens": int(result.tokens)},
    })


@compat.foreign_errors(cohere_error)
async def rerank_v1(request: web.Request) -> web.Response:
    return await _rerank(request, V1_FIELDS, "1", return_default=True)


@compat.foreign_errors(cohere_error)
async def rerank_v2(request: web.Request) -> web.Response:
    return await _rerank(request, V2_FIELDS, "2", return_default=False)
