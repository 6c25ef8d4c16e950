"""What the compatibility APIs share (OpenAI, TEI, Cohere/Jina, Weaviate's modules, Infinity).

Each of those APIs is a thin handler over `engine.run` (docs/extending.md, "A route that is
not a task"): parse the foreign request, call `encode` or `score`, write the foreign answer.
Here are the steps they have in common:

- the model alias `<model>#query` / `<model>#document`, which selects query mode for clients
  that can send no field of their own (Chroma's and LlamaIndex's TEI clients, Infinity's);
  in a URL path the `#` is written `%23`, since a bare `#` starts the URL's fragment;
- texts checked with the foreign API's field names, so its clients read errors they know;
- `dimensions` refused on models trained without Matryoshka sizes (a shortened vector of such
  a model loses quality silently), and allowed at the model's full width;
- `foreign_errors(shape)`, which answers an `SIEError` in the foreign API's error shape with
  SIE's status and retry headers; it leaves the shape on the handler, so the middleware's
  admission errors (401, draining) come in the same shape.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

from sie_engine import validation
from sie_engine.errors import InvalidRequest, PayloadTooLarge, SIEError
from sie_engine.types import ModelInfo

from . import codec
from .compat_routes import CompatApi
from .errors import public, retry_headers, status_for
from .handlers import timeout_of
from .state import ENGINE, ERROR_CODE, MODEL_LABEL, PRE_ADMITTED, SETTINGS, TIMINGS

MODES = {"query": True, "document": False}


class EmptyInput(InvalidRequest):
    """A request with no texts at all (TEI answers these with its own error type, `Empty`)."""


# ---- model and mode -------------------------------------------------------------
def split_mode(model: Any, field: str = "model") -> tuple[str, bool | None]:
    """`<model>#query` -> (model, True), `<model>#document` -> (model, False), a plain id -> (id, None)."""
    if not isinstance(model, str) or not model or len(model) > 256:
        raise InvalidRequest(f"{field} must be a non-empty string of at most 256 characters", field=field)
    base, sep, mode = model.rpartition("#")
    if not sep:
        return model, None
    if mode not in MODES or not base:
        raise InvalidRequest(f"{field} {model!r}: after '#' comes query or document (the mode alias), "
                             f"e.g. {base or 'org/model'}#query", field=field)
    return base, MODES[mode]


def label(request: web.Request, model: str) -> None:
    """Label the request's metrics with the model when it is served here (junk ids never become series)."""
    if model in request.app[ENGINE].catalog:
        request[MODEL_LABEL] = model


def choose_mode(alias: bool | None, explicit: bool | None, field: str) -> bool | None:
    """The mode from an explicit field or the model alias; None without either (the engine's
    default: document mode, or the card's default profile for documents, which a profile the
    request names may override); the two disagreeing is a mistake worth a 400, not a silent pick."""
    if explicit is not None and alias is not None and explicit != alias:
        raise InvalidRequest(f"{field} asks for {'query' if explicit else 'document'} mode but the model alias "
                             f"asks for {'query' if alias else 'document'} mode", field=field)
    return explicit if explicit is not None else alias


# ---- request values ---------------------------------------------------------------
def texts_of(value: Any, limits: validation.Limits, field: str, *, single: bool = True,
             empty: str | None = None) -> list[str]:
    """A string (when `single`) or a list of strings -> the texts, checked with `field`'s name.
    A blank text is a text (SIE embeds it as sentence-transformers does); `empty`: the foreign
    API's message for an empty string where that API refuses one (EmptyInput), None to take it."""
    texts = [value] if single and isinstance(value, str) else value
    if not isinstance(texts, list):
        raise InvalidRequest(f"{field} must be {'a string or ' if single else ''}a list of strings", field=field)
    if not texts:
        raise EmptyInput(f"{field} must not be empty", field=field)
    if len(texts) > limits.max_items:
        raise PayloadTooLarge(f"{field} holds {len(texts)} texts; at most {limits.max_items} per request",
                              field=field)
    for i, text in enumerate(texts):
        if isinstance(text, list) or (isinstance(text, int) and not isinstance(text, bool)):
            raise InvalidRequest(f"{field}[{i}]: token ids are not accepted; send the text (SIE tokenises with "
                                 "each model's own tokenizer)", field=field)
        validation.check_text(text, limits, field if texts is not value else f"{field}[{i}]")
        if empty is not None and text == "":
            raise EmptyInput(empty, field=field if texts is not value else f"{field}[{i}]")
    return texts


def require(body: dict, required: tuple[str, ...]) -> None:
    """400 for a required field missing; other fields are not checked here: for an API whose server
    ignores fields it does not know (TEI's serde structs, Infinity's pydantic models), so do we."""
    for name in required:
        if body.get(name) is None:
            raise InvalidRequest(f"{name} is required", field=name)


async def served_model(request: web.Request, model: str) -> ModelInfo:
    """A served model's state now (ModelNotFound, a 404, for one not served): the engine's answer,
    asked off the loop, as /v1/models asks it. A split server's frontend gets the engine core's;
    its own `model_info` on the loop knows only the card (not whether the model loaded or failed)."""
    return await asyncio.to_thread(request.app[ENGINE].model_info, model)


async def check_dimensions(request: web.Request, model: str, value: Any, field: str) -> int | None:
    """`dimensions` for a model: refused unless the model was trained for shortened vectors
    (Matryoshka sizes on its card) or the value is its full width."""
    dims = validation.check_positive_int(value, field)
    if dims is None:
        return None
    info = await served_model(request, model)  # 404 for an unknown model
    full = info.dims.get("dense")
    if info.matryoshka_dims or dims == full:
        return dims
    raise InvalidRequest(f"{field}: model {model!r} was not trained for shortened (Matryoshka) vectors, so cutting "
                         f"its {full or 'full-size'} dimensions would lose quality silently; leave {field} out",
                         field=field)


def check_bool(body: dict, name: str, default: bool) -> bool:
    value = validation.check_optional_bool(body.get(name), name)
    return default if value is None else value


# ---- engine calls -------------------------------------------------------------------
def renamed(exc: InvalidRequest, names: dict[str, str]) -> InvalidRequest:
    """The engine's field names (dims, items[2].text) -> the foreign API's."""
    field = exc.field or ""
    for ours, theirs in names.items():
        if field == ours or field.startswith(ours + "["):
            return type(exc)(exc.message.replace(ours, theirs, 1), field=theirs + field[len(ours):])
    return exc


async def encode(request: web.Request, model: str, texts: Sequence[str | dict[str, str]], *,
                 names: dict[str, str] | None = None, **fields: Any):
    """`encode` on the engine for this request (its deadline, metrics label and timings); `texts`:
    strings or item objects (`{"text": ...}`, `{"image": ...}`);
    `fields` left None take the engine's defaults."""
    label(request, model)
    given = {name: value for name, value in fields.items() if value is not None}
    try:
        result = await request.app[ENGINE].run("encode", model, texts, timeout=timeout_of(request),
                                               pre_admitted=request.get(PRE_ADMITTED), **given)
    except InvalidRequest as exc:
        raise renamed(exc, names or {}) from None
    request[TIMINGS] = result.timings
    return result


async def score(request: web.Request, model: str, query: str, texts: list[str], *,
                names: dict[str, str] | None = None, **fields: Any):
    """`score` on the engine: the result's scores come best first, each with its request index."""
    label(request, model)
    given = {name: value for name, value in fields.items() if value is not None}
    try:
        result = await request.app[ENGINE].run("score", model, query, texts, timeout=timeout_of(request),
                                               pre_admitted=request.get(PRE_ADMITTED), **given)
    except InvalidRequest as exc:
        raise renamed(exc, names or {}) from None
    request[TIMINGS] = result.timings
    return result


# ---- answers -------------------------------------------------------------------------
async def answer(request: web.Request, payload: Any, approx_bytes: int = 0, status: int = 200) -> web.Response:
    """A JSON answer (these APIs speak JSON only); large ones are serialised off the event loop."""
    body = await codec.serialise(payload, codec.JSON, approx_bytes, request.app[SETTINGS].offload_bytes)
    return codec.response(body, codec.JSON, status)


Shape = Callable[[SIEError, int], "tuple[int, dict]"]


def foreign_errors(shape: Shape):
    """Wrap a handler so an `SIEError` it raises is answered as `shape(error, status)` gives:
    (the status to answer, the body), with SIE's retry headers."""

    def wrap(handler):
        @functools.wraps(handler)
        async def handle(request: web.Request) -> web.StreamResponse:
            try:
                return await handler(request)
            except SIEError as exc:
                request[ERROR_CODE] = exc.code  # the middleware's logs and rejection metrics read it
                status, body = shape(public(exc), status_for(exc))  # no file paths in answers
                response = codec.response(codec.dumps(body, codec.JSON), codec.JSON, status)
                response.headers.update(retry_headers(exc))
                return response

        handle.error_shape = shape  # type: ignore[attr-defined]  # the middleware's admission errors use it too
        return handle

    return wrap


# ---- routes -----------------------------------------------------------------------
# declared in compat_routes.py (the router mounts the same rows)


def mount_api(app: web.Application, api: CompatApi) -> None:
    """Add an API's declared routes, each to the function its row names in the API's module."""
    module = importlib.import_module(f"{__package__}.{api.module}")
    for method, path, handler, name in api.paths():
        app.router.add_route(method, path, getattr(module, handler), name=name)
