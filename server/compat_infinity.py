"""Infinity's API (michaelfeil/infinity): `POST /embeddings`, `POST /rerank`, `GET /models`.

Infinity names the model in the body, so these are served at Infinity's own paths (its
default, empty `--url-prefix`). Checked against infinity_emb 0.0.77 (infinity_server.py and
fastapi_schemas/pymodels.py, commit fcb951c):

- `/embeddings`: `{model, input, encoding_format, dimensions (0: full), user, modality}` ->
  `{object: list, data: [{object, embedding, index}], model, usage, id, created}`. Only the
  text modality is served (SIE has no image or audio models yet). Infinity has no query mode:
  name the model `<model>#query` for queries. `dimensions` follows the Matryoshka rule.
- `/rerank`: `{model, query, documents, top_n, return_documents (false), raw_scores}` ->
  `{object: rerank, results: [{relevance_score, index, document?: text}], model, usage, id,
  created}`, best first. `raw_scores` (logits) is refused: SIE answers activated scores.
- `/classify`: `{model, input: [text, ...], raw_scores (false)}` -> `{object: classify, data: [[{score,
  label}, ...] per text], model, usage, id, created}`: every label of a fixed-label classifier, best first
  (Infinity runs transformers' text-classification pipeline with `top_k=None`); `raw_scores` the logits.
- `/models`: `{object: list, data: [{id, object, owned_by, created, backend, capabilities, stats}]}`.
- `/health`: `{unix: <time>}`, as Infinity answers it (its client's `health` call).

Errors are Infinity's: a request field that fails its checks gets FastAPI's 422 `{"detail": [{loc,
msg, type}]}` (pydantic's request validation), the rest its `{"error": {message, type, param, code:
<status>}}` with SIE's statuses (400 for no model named or one lacking the task, 404 an unknown one).

As lenient as Infinity: its request models are pydantic `BaseModel`s with the default
`extra="ignore"`, so fields it does not know (an OpenAI client's `input_type`) are ignored here too;
its strings are `StringConstraints(strip_whitespace=True)` with no minimum length, so `""` and
`"   "` are embedded (as the empty text; SIE strips them as Infinity does). `/models` answers
`owned_by: "infinity"`, the only value of `ModelInfo.owned_by` (`Literal["infinity"]`) that
Infinity's own client (infinity_client) accepts.
"""

from __future__ import annotations

import asyncio
import re
import time

from aiohttp import web

from sie_engine import validation
from sie_engine.errors import InvalidRequest, SIEError, UnsupportedOutput, UnsupportedTask

from . import compat, compat_classify
from .handlers import body_of
from .openai_compat import ENCODING_FORMATS, embedding_value, input_texts
from .request_ids import fresh_uuid
from .state import ENGINE, LIFECYCLE

EMBEDDINGS_FIELDS = ("model", "input", "encoding_format", "dimensions", "user", "modality")
RERANK_FIELDS = ("model", "query", "documents", "top_n", "return_documents", "raw_scores")
CLASSIFY_FIELDS = ("model", "input", "raw_scores")
CAPABILITIES = {"encode": "embed", "score": "rerank"}  # SIE's tasks -> Infinity's capabilities


def infinity_error(error: SIEError, status: int) -> tuple[int, dict]:
    """A request field that fails Infinity's pydantic request models is FastAPI's 422 with its
    HTTPValidationError body (`{"detail": [{loc, msg, type}]}`, the model infinity_client parses a
    422 into); Infinity's own errors (a model it does not serve, a task the model lacks, overload)
    are its OpenAIException's `{"error": {message, type, param, code}}`."""
    field = getattr(error, "field", None)
    if status == 400 and not isinstance(error, UnsupportedTask | UnsupportedOutput) and field != "model":
        return 422, {"detail": [{"loc": ["body", *_location(field)], "msg": error.message, "type": "value_error"}]}
    return status, {"error": {"message": error.message, "type": error.code, "param": field, "code": status}}


def _location(field: str | None) -> list[str | int]:
    """`documents[2]` -> ["documents", 2], pydantic's `loc` below the body."""
    return [int(part[1:-1]) if part.startswith("[") else part for part in re.findall(r"\[\d+\]|[^.\[\]]+", field or "")]


infinity = compat.foreign_errors(infinity_error)


# What Infinity's request models (and so infinity_client) put in `model` when none is given
UNNAMED = "default/not-specified"


def _model(body: dict) -> tuple[str, bool | None]:
    # Infinity serving one model takes any name for it; serving several it answers 400 (`Invalid model`,
    # with the names). SIE serves many, so it answers as that, also for its client's default name.
    if body.get("model") is None or body["model"] == UNNAMED:
        raise InvalidRequest(f"model is required (infinity_client sends {UNNAMED!r} when none is given): name one "
                             "of the served models (GET /models)", field="model")
    return compat.split_mode(body["model"])


@infinity
async def embeddings(request: web.Request) -> web.Response:
    body = await body_of(request)
    compat.require(body, ("input",))
    model, alias = _model(body)
    if body.get("modality", "text") != "text":
        raise InvalidRequest("modality: only text is served (SIE has no image or audio models yet)", field="modality")
    encoding_format = body.get("encoding_format") or "float"
    if encoding_format not in ENCODING_FORMATS:
        raise InvalidRequest(f"encoding_format must be one of {', '.join(ENCODING_FORMATS)}", field="encoding_format")
    dimensions = body.get("dimensions")
    dims = await compat.check_dimensions(request, model, None if dimensions == 0 else dimensions, "dimensions")
    texts = [text.strip() for text in input_texts(body["input"], request.app[ENGINE].limits, refuse_empty=False)]
    result = await compat.encode(request, model, texts, names={"dims": "dimensions", "items": "input"},
                                 output_types=["dense"], is_query=bool(alias), dims=dims,
                                 normalize=True if dims is not None else None)
    data = [{"object": "embedding", "embedding": embedding_value(item.dense, encoding_format), "index": i}
            for i, item in enumerate(result.items)]
    return await compat.answer(request, {
        "object": "list", "data": data, "model": result.model,
        "usage": {"prompt_tokens": int(result.tokens), "total_tokens": int(result.tokens)},
        "id": f"infinity-{fresh_uuid()}", "created": int(time.time()),
    }, sum(item.dense.nbytes for item in result.items))


@infinity
async def rerank(request: web.Request) -> web.Response:
    body = await body_of(request)
    compat.require(body, ("query", "documents"))
    model, _ = _model(body)
    if compat.check_bool(body, "raw_scores", False):
        raise InvalidRequest("raw_scores is not supported: SIE's rerankers answer activated scores", field="raw_scores")
    limits = request.app[ENGINE].limits
    query = validation.check_text(body["query"], limits, "query").strip()
    documents = [d.strip() for d in compat.texts_of(body["documents"], limits, "documents", single=False)]
    top_n = validation.check_positive_int(body.get("top_n"), "top_n")
    return_documents = compat.check_bool(body, "return_documents", False)
    result = await compat.score(request, model, query, documents, top_k=top_n,
                                names={"items": "documents", "query.text": "query", "top_k": "top_n"})
    results = []
    for scored in result.scores:  # best first
        entry = {"relevance_score": float(scored.score), "index": scored.index}
        if return_documents:
            entry["document"] = documents[scored.index]
        results.append(entry)
    return await compat.answer(request, {
        "object": "rerank", "results": results, "model": result.model,
        "usage": {"prompt_tokens": int(result.tokens), "total_tokens": int(result.tokens)},
        "id": f"infinity-{fresh_uuid()}", "created": int(time.time()),
    })


@infinity
async def classify(request: web.Request) -> web.Response:
    body = await body_of(request)
    compat.require(body, ("input",))
    model, _ = _model(body)
    if not compat_classify.is_classifier(request, model):
        raise InvalidRequest(f"model {model!r} is not a fixed-label classifier (a text-classification model with its "
                             "own labels); classify serves those", field="model")
    texts = [t.strip() for t in compat.texts_of(body["input"], request.app[ENGINE].limits, "input", single=False)]
    raw_scores = compat.check_bool(body, "raw_scores", False)
    result = await compat_classify.classify(request, model, texts, names={"items": "input"},
                                            raw_scores=raw_scores or None)
    return await compat.answer(request, {
        "object": "classify", "data": result.labels, "model": result.model,
        "usage": {"prompt_tokens": result.tokens, "total_tokens": result.tokens},
        "id": f"infinity-{fresh_uuid()}", "created": int(time.time()),
    })


@infinity
async def health(request: web.Request) -> web.Response:
    """Infinity's `GET /health`: the server's clock (`{"unix": float}`), whatever the models' states."""
    return await compat.answer(request, {"unix": time.time()})


@infinity
async def models(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    created = int(request.app[LIFECYCLE].started_at)
    snapshot = await engine.status()
    data = []
    for info in await asyncio.to_thread(engine.models):  # off the loop, as /v1/models lists them
        queued = snapshot.models.get(info.id)
        data.append({
            "id": info.id, "object": "model", "owned_by": "infinity", "created": created, "backend": "sie",
            "capabilities": sorted({CAPABILITIES[t] for t in info.tasks if t in CAPABILITIES}
                                   | ({"classify"} if compat_classify.CLASSIFIER in info.outputs else set())),
            "stats": {"queued_items": queued.queued_items if queued else 0,
                      "queued_tokens": queued.queued_tokens if queued else 0, "state": info.state},
        })
    return await compat.answer(request, {"object": "list", "data": data})
