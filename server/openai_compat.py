"""`POST /v1/embeddings`: OpenAI's embeddings API over SIE's encode.

Request: `model`, `input` (a string or a list of strings), `encoding_format`
(`float` | `base64`: little-endian float32 bytes, what the official client
asks for by default), `dimensions` (Matryoshka truncation, then
renormalisation; refused on models trained without Matryoshka sizes), `user`
(ignored), and SIE's `input_type` (`query` | `document`) for query mode. A
client that can send no extra field selects query mode with the model alias
`<model>#query`. Jina's embeddings API's fields (`task`, `embedding_type`, `normalized`,
`late_chunking`: jina_fields.py) are taken too.

Token-id input is refused with 400: the ids such clients send come from
OpenAI's tokenizer (tiktoken), which SIE's models do not share, so decoding
them would embed the wrong text. LangChain's `OpenAIEmbeddings` sends them
unless given `check_embedding_ctx_length=False`; the message says so. Errors
use OpenAI's shape (the middleware picks it for this route).
"""

from __future__ import annotations

import base64

import numpy as np
from aiohttp import web

from sie_engine import validation
from sie_engine.errors import InvalidRequest, PayloadTooLarge

from . import codec, compat
from .fields import EMBEDDINGS_FIELDS
from .handlers import body_of
from .jina_fields import FIELDS as JINA_FIELDS
from .jina_fields import jina_options
from .state import ENGINE, SETTINGS

ENCODING_FORMATS = ("float", "base64")
# SIE's query-mode extension: `query` / `document`, and the names other providers give them
# (NVIDIA NIM's `passage`, Cohere's and Nomic's `search_query` / `search_document`).
INPUT_TYPES = {"query": True, "search_query": True, "document": False, "passage": False, "search_document": False}
FIELDS = EMBEDDINGS_FIELDS + ("input_type",) + JINA_FIELDS
TOKEN_IDS = ("token-id input is not supported: the ids come from another tokenizer than the model's own, so SIE "
             "cannot read them; send the text (LangChain's OpenAIEmbeddings: check_embedding_ctx_length=False)")


# OpenAI refuses an empty string in `input` with 400 and this message (its API answers `input: ""` and
# `input: ["a", ""]` so; a blank "   " it embeds, as SIE does)
EMPTY_INPUT = "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference."


def input_texts(value, limits: validation.Limits, refuse_empty: bool = True) -> list[str]:
    """`input` -> list of texts, with OpenAI-style messages naming `input`; `refuse_empty`: an empty
    string is OpenAI's 400 (Infinity, which reuses this, embeds it)."""
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list):
        raise InvalidRequest("input must be a string or a list of strings", field="input")
    if not texts:
        raise InvalidRequest("input must not be empty", field="input")
    if all(isinstance(t, int) and not isinstance(t, bool) for t in texts) or any(isinstance(t, list) for t in texts):
        raise InvalidRequest(TOKEN_IDS, field="input")
    if len(texts) > limits.max_items:
        raise PayloadTooLarge(f"input holds {len(texts)} strings; at most {limits.max_items} per request",
                              field="input")
    for i, text in enumerate(texts):
        where = f"input[{i}]" if not isinstance(value, str) else "input"
        validation.check_text(text, limits, where)
        if refuse_empty and text == "":
            raise InvalidRequest(EMPTY_INPUT, field=where)
    return texts


def input_type(value) -> bool | None:
    """`input_type` -> is_query (None when absent)."""
    if value is None:
        return None
    if not isinstance(value, str) or value not in INPUT_TYPES:
        raise InvalidRequest(f"input_type must be one of {', '.join(INPUT_TYPES)}", field="input_type")
    return INPUT_TYPES[value]


def embedding_value(vector: np.ndarray, encoding_format: str):
    if encoding_format == "base64":
        return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return np.ascontiguousarray(vector, dtype=np.float32)


def check_user(body: dict) -> None:
    if body.get("user") is not None and not isinstance(body["user"], str):  # OpenAI's end-user id: text
        raise InvalidRequest("user must be a string (an id of your end user; SIE ignores it)", field="user")


def check_encoding_format(value) -> str | None:
    if value is not None and value not in ENCODING_FORMATS:
        raise InvalidRequest(f"encoding_format must be one of {', '.join(ENCODING_FORMATS)}", field="encoding_format")
    return value


def embeddings_payload(result, model: str, encoding_format: str) -> dict:
    """OpenAI's embeddings answer of an encode result's dense vectors."""
    data = [{"object": "embedding", "index": i, "embedding": embedding_value(item.dense, encoding_format)}
            for i, item in enumerate(result.items)]
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": int(result.tokens), "total_tokens": int(result.tokens)}}


async def embeddings(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    body = await body_of(request)
    codec.check_fields(body, FIELDS, required=("model", "input"))
    model, alias = compat.split_mode(body["model"])
    is_query = compat.choose_mode(alias, input_type(body.get("input_type")), "input_type")
    check_user(body)
    encoding_format = check_encoding_format(body.get("encoding_format") or None)
    jina = jina_options(body, encoding_format)
    encoding_format = jina.encoding_format or "float"
    dims = await compat.check_dimensions(request, model, body.get("dimensions"), "dimensions")
    texts = input_texts(body["input"], engine.limits)
    # a cut vector is renormalised unless Jina's `normalized: false` asks for it as pooled
    normalize = jina.normalize if jina.normalize is not None else (True if dims is not None else None)
    names = {"dims": "dimensions", "items": "input", "profile": "task"}
    result = await compat.encode(request, model, texts, names=names, output_types=["dense"], is_query=is_query,
                                 dims=dims, profile=jina.task, normalize=normalize,
                                 late_chunking=jina.late_chunking or None)
    payload = embeddings_payload(result, result.model, encoding_format)
    # OpenAI answers JSON; clients of this route expect nothing else.
    body_bytes = await codec.serialise(payload, codec.JSON, sum(item.dense.nbytes for item in result.items),
                                       request.app[SETTINGS].offload_bytes)
    return codec.response(body_bytes, codec.JSON)
