"""Weaviate's inference-container protocols, one model per base URL: `/weaviate/{model}/...`.

Weaviate's text2vec-transformers and reranker-transformers modules call a container that
serves one model; give a module `http://host:8080/weaviate/<model id>` as its inference URL
(`inferenceUrl`, or `passageInferenceUrl` / `queryInferenceUrl`) and Weaviate vectorises and
reranks through SIE with no client code. Checked against Weaviate's module clients
(usecases/modulecomponents/clients/transformers/transformers.go, modules/text2vec-transformers/
clients, modules/reranker-transformers/clients/ranker.go; weaviate commit adcffc5, v1.38 line)
and the containers they call (weaviate/t2v-transformers-models app.py and meta.py,
weaviate/reranker-transformers app.py and crossencoder.py):

- `POST /vectors` (and `/vectors/`): `{text, dims, vector, error, config: {pooling_strategy,
  task_type: query | passage, dimensions}}` -> `{text, vector, dim, dims}`. `task_type` is
  SIE's query mode; `pooling_strategy` is accepted and the card's pooling applies;
  `dimensions` follows the Matryoshka rule of the other APIs.
- `POST /rerank`: `{query, documents, property}` -> `{query, scores: [{document, score}] in
  the documents' order, property, score}`; without documents, `{query, property}` scores the
  one pair into `score` (the container's older form).
- `GET /meta` -> `{"model": {...}}` (the containers send their model's config.json; SIE sends
  what its card knows), `GET /.well-known/ready` and `/.well-known/live` -> 204.

- `POST /vectorize` (multi2vec-clip; modules/multi2vec-clip/clients/vectorizer.go and the
  weaviate/multi2vec-clip-inference container's app.py and clip.py): `{texts: [...], images:
  [base64, ...]}` (Go's omitempty leaves an empty list out) -> `{textVectors, imageVectors}`, one
  vector per text (text tower) and per image (vision tower) in the order sent; neither sent ->
  two empty lists, as the container answers. One `encode` call with text and image items, so
  the image limits (413, 400) apply. Vectors are L2-normalised for CLIP (the container's
  ClipInferenceOpenAI and OpenCLIP normalise) and raw features for SigLIP (its
  ClipInferenceSigCLIP answers get_text_features / get_image_features as they are). Weaviate's
  client sends no config (no dimensions, no task type); the module's `/meta` and readiness are
  the routes below.

Errors are the containers' `{"error": "..."}` (what the module prints) with SIE's statuses.
Weaviate's module clients send no Authorization header: serve these to Weaviate from an SIE
without API keys (on a private network).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from aiohttp import web

from sie_engine import validation
from sie_engine.errors import InvalidRequest, SIEError

from . import codec, compat
from .handlers import body_of
from .redact import public_text
from .state import ENGINE, LIFECYCLE

TASK_TYPES = {"query": True, "passage": False}
VECTOR_FIELDS = ("text", "dims", "vector", "error", "config")  # Weaviate's vecRequest, sent whole
CONFIG_FIELDS = ("pooling_strategy", "task_type", "dimensions")
RERANK_FIELDS = ("query", "documents", "property")  # Weaviate's RankInput
CLIP_FIELDS = ("texts", "images")  # multi2vec-clip's vecRequest
RAW_FEATURE_FAMILIES = {"siglip"}  # the container answers SigLIP's features unnormalised, CLIP's normalised
ITEM = re.compile(r"items\[(\d+)\](\.text|\.image)?")


def weaviate_error(error: SIEError, status: int) -> tuple[int, dict]:
    return status, {"error": error.message}


weaviate = compat.foreign_errors(weaviate_error)


@weaviate
async def vectors(request: web.Request) -> web.Response:
    model, alias = compat.split_mode(request.match_info["model"])
    body = await body_of(request)
    codec.check_fields(body, VECTOR_FIELDS, required=("text",))
    config = body.get("config") or {}
    if not isinstance(config, dict):
        raise InvalidRequest("config must be an object", field="config")
    codec.check_fields(config, CONFIG_FIELDS)
    task_type = config.get("task_type")
    if task_type is not None and (not isinstance(task_type, str) or task_type not in TASK_TYPES):
        raise InvalidRequest("config.task_type must be query or passage", field="config.task_type")
    if config.get("pooling_strategy") is not None and not isinstance(config["pooling_strategy"], str):
        raise InvalidRequest("config.pooling_strategy must be a string", field="config.pooling_strategy")
    is_query = compat.choose_mode(alias, TASK_TYPES.get(task_type) if task_type else None, "config.task_type")
    text = validation.check_text(body["text"], request.app[ENGINE].limits, "text")
    dims = await compat.check_dimensions(request, model, config.get("dimensions"), "config.dimensions")
    result = await compat.encode(request, model, [text], names={"items[0].text": "text", "dims": "config.dimensions"},
                                 output_types=["dense"], is_query=is_query, dims=dims,
                                 normalize=True if dims is not None else None)
    vector = result.items[0].dense
    # `dim` is what the t2v container answers, `dims` what Weaviate's vecRequest struct reads
    return await compat.answer(request, {"text": text, "vector": vector, "dim": len(vector), "dims": len(vector)},
                               vector.nbytes)


@weaviate
async def rerank(request: web.Request) -> web.Response:
    model, _ = compat.split_mode(request.match_info["model"])
    body = await body_of(request)
    codec.check_fields(body, RERANK_FIELDS, required=("query",))
    limits = request.app[ENGINE].limits
    query = validation.check_text(body["query"], limits, "query")
    documents = body.get("documents")
    single = documents is None
    if single:  # the container's one-pair form: score (query, property)
        documents = [body.get("property")]
    if not isinstance(documents, list):
        raise InvalidRequest("documents must be a list of strings", field="documents")
    if not documents:  # Weaviate sends none; the container answers an empty list
        return await compat.answer(request, {"query": query, "scores": [], "property": None, "score": None})
    texts = [validation.check_text(d, limits, "property" if single else f"documents[{i}]")
             for i, d in enumerate(documents)]
    result = await compat.score(request, model, query, texts, names={"items": "documents", "query.text": "query"})
    by_index: dict[int, float] = {s.index: float(s.score) for s in result.scores}
    if single:
        return await compat.answer(request, {"query": query, "scores": None, "property": texts[0],
                                             "score": by_index[0]})
    scores: list[dict[str, Any]] = [{"document": t, "score": by_index[i]} for i, t in enumerate(texts)]
    return await compat.answer(request, {"query": query, "scores": scores, "property": None, "score": None})


def _strings(body: dict, name: str, kind: str) -> list[str]:
    value = body.get(name)
    if value is None:  # Go's omitempty leaves an empty list out
        return []
    if not isinstance(value, list):
        raise InvalidRequest(f"{name} must be a list of {kind}", field=name)
    for i, entry in enumerate(value):
        if not isinstance(entry, str):
            raise InvalidRequest(f"{name}[{i}] must be a {kind[:-1]}, got {type(entry).__name__}",
                                 field=f"{name}[{i}]")
    return value


def _clip_names(exc: InvalidRequest, texts: int) -> InvalidRequest:
    """encode's `items[k].text` / `items[k].image` -> `texts[k]` / `images[k - texts]` (texts come first)."""
    field = exc.field or ""
    match = ITEM.match(field)
    if match:
        index = int(match.group(1))
        theirs = f"texts[{index}]" if index < texts else f"images[{index - texts}]"
        message = re.sub(rf"items\[{index}\](\.text|\.image)?", theirs, exc.message)
        return type(exc)(message, field=theirs + field[match.end():])
    if field == "items":  # the item count
        return type(exc)(exc.message.replace("items", "texts and images", 1), field="texts")
    return exc


@weaviate
async def vectorize(request: web.Request) -> web.Response:
    model, alias = compat.split_mode(request.match_info["model"])
    body = await body_of(request)
    codec.check_fields(body, CLIP_FIELDS)
    texts = _strings(body, "texts", "strings")
    images = _strings(body, "images", "base64 strings")
    request.app[ENGINE].model_info(model)  # 404 for a model not served here, even with nothing to vectorise
    compat.label(request, model)
    if not texts and not images:  # the container answers two empty lists
        return await compat.answer(request, {"textVectors": [], "imageVectors": []})
    items = [{"text": t} for t in texts] + [{"image": i} for i in images]  # base64 decoded off the loop
    try:
        result = await compat.encode(request, model, items, output_types=["dense"], is_query=alias, normalize=False)
    except InvalidRequest as exc:
        raise _clip_names(exc, len(texts)) from None
    vectors = np.stack([item.dense for item in result.items]).astype(np.float32, copy=False)
    if (await compat.served_model(request, model)).family not in RAW_FEATURE_FAMILIES:  # resident: its family is known
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return await compat.answer(request, {"textVectors": vectors[:len(texts)], "imageVectors": vectors[len(texts):]},
                               vectors.nbytes)


@weaviate
async def meta(request: web.Request) -> web.Response:
    model, _ = compat.split_mode(request.match_info["model"])
    engine = request.app[ENGINE]
    info, card = await compat.served_model(request, model), engine.card(model)
    compat.label(request, model)
    return await compat.answer(request, {"model": {
        "_name_or_path": model, "model_type": info.family, "outputs": list(info.outputs), "tasks": list(info.tasks),
        "dims": dict(info.dims), "matryoshka_dims": list(info.matryoshka_dims),
        "max_position_embeddings": info.max_seq_len, "pooling": card.pooling, "state": info.state,
        "modalities": list(info.modalities), "image_size": info.image_size,
        "description": public_text(info.description), "server": "sie",  # no path of this machine
    }})


@weaviate
async def ready(request: web.Request) -> web.Response:
    """204 once the server is ready and the model is served (and has not failed to load)."""
    model, _ = compat.split_mode(request.match_info["model"])
    lifecycle = request.app[LIFECYCLE]
    state = (await compat.served_model(request, model)).state  # 404 for a model not served here
    if lifecycle.draining or not lifecycle.ready or state == "failed":
        return await compat.answer(request, {"error": "not ready"}, status=503)
    return web.Response(status=204)


@weaviate
async def live(request: web.Request) -> web.Response:
    compat.split_mode(request.match_info["model"])
    return web.Response(status=204)
