"""`POST /v1/embeddings`: OpenAI's embeddings API over SIE's encode.

Request: `model`, `input` (a string or a list of strings), `encoding_format`
(`float` | `base64`: little-endian float32 bytes, what the official client
asks for by default), `dimensions` (Matryoshka truncation, then
renormalisation), `user` (ignored). Token-id input is refused with 400: SIE
tokenises with each model's own tokenizer. Errors use OpenAI's shape (the
middleware picks it for this route).
"""

from __future__ import annotations

import base64

import numpy as np
from aiohttp import web

from sie_engine.card import validate_model_id
from sie_engine.errors import InvalidRequest, PayloadTooLarge
from sie_engine import validation

from . import codec
from .fields import EMBEDDINGS_FIELDS as FIELDS
from .handlers import body_of, timeout_of
from .state import ENGINE, MODEL_LABEL, SETTINGS, TIMINGS

ENCODING_FORMATS = ("float", "base64")


def input_texts(value, limits: validation.Limits) -> list[str]:
    """`input` -> list of texts, with OpenAI-style messages naming `input`."""
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list):
        raise InvalidRequest("input must be a string or a list of strings", field="input")
    if not texts:
        raise InvalidRequest("input must not be empty", field="input")
    if all(isinstance(t, int) and not isinstance(t, bool) for t in texts) or any(isinstance(t, list) for t in texts):
        raise InvalidRequest("token-id input is not supported: send the text (SIE tokenises with the model's own "
                             "tokenizer)", field="input")
    if len(texts) > limits.max_items:
        raise PayloadTooLarge(f"input holds {len(texts)} strings; at most {limits.max_items} per request",
                              field="input")
    for i, text in enumerate(texts):
        validation.check_text(text, limits, f"input[{i}]" if not isinstance(value, str) else "input")
    return texts


def embedding_value(vector: np.ndarray, encoding_format: str):
    if encoding_format == "base64":
        return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return np.ascontiguousarray(vector, dtype=np.float32)


async def embeddings(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    body = await body_of(request)
    codec.check_fields(body, FIELDS, required=("model", "input"))
    model = validate_model_id(body["model"])
    if model in engine.catalog:
        request[MODEL_LABEL] = model
    encoding_format = body.get("encoding_format") or "float"
    if encoding_format not in ENCODING_FORMATS:
        raise InvalidRequest(f"encoding_format must be one of {', '.join(ENCODING_FORMATS)}", field="encoding_format")
    dims = validation.check_positive_int(body.get("dimensions"), "dimensions")
    texts = input_texts(body["input"], engine.limits)
    try:
        result = await engine.encode(model, texts, output_types=["dense"], dims=dims,
                                     normalize=True if dims is not None else None, timeout=timeout_of(request))
    except InvalidRequest as exc:
        if exc.field == "dims":  # the engine's name for OpenAI's `dimensions`
            raise InvalidRequest(exc.message.replace("dims", "dimensions", 1), field="dimensions") from None
        raise
    request[TIMINGS] = result.timings
    data = [{"object": "embedding", "index": i, "embedding": embedding_value(item.dense, encoding_format)}
            for i, item in enumerate(result.items)]
    payload = {"object": "list", "data": data, "model": result.model,
               "usage": {"prompt_tokens": int(result.tokens), "total_tokens": int(result.tokens)}}
    size = sum(item.dense.nbytes for item in result.items)
    # OpenAI answers JSON; clients of this route expect nothing else.
    body_bytes = await codec.serialise(payload, codec.JSON, size, request.app[SETTINGS].offload_bytes)
    return codec.response(body_bytes, codec.JSON)
