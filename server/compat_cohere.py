"""Cohere's embed API v2, over SIE's encode: `POST /v2/embed`.

Checked field by field against cohere-python 7.3.1 (src/cohere/v2/raw_client.py `embed`, the
EmbedInput / EmbedContent / EmbedByTypeResponse types):

- `model`, `input_type` (required by Cohere's client): `search_query` runs the card's query
  prompt; `search_document`, `classification` and `clustering` the card's document prompt, except
  that `classification` and `clustering` select the card's profile of that name where it has one
  (jina-embeddings-v3's task adapters); `image` is for image inputs, which take no prompt;
- what to embed, exactly one of: `texts` (strings), `images` (data URIs:
  `data:image/png;base64,...`), `inputs` (`[{content: [{type: text, text} | {type: image_url,
  image_url: {url}}]}]`, one part per input: SIE's image models embed a text or an image, they
  do not fuse the two into one vector as Cohere's embed-v4 does, so a mixed input is a 400);
- `embedding_types` (default `["float"]`): float, int8, uint8, binary, ubinary, base64;
- `output_dimension`: Matryoshka truncation, then renormalisation (refused on models trained
  without Matryoshka sizes, as `dimensions` on the OpenAI route);
- `truncate`: `END` (the default) cuts the end of a text longer than the model's window, `NONE`
  answers 400 for it; `START` is refused (SIE cuts on the right);
- `max_tokens`: accepted at or above the model's window (where it cuts nothing), refused below;
- `priority`: accepted and ignored (SIE batches in arrival order).

The answer is `{id, response_type: "embeddings_by_type", embeddings: {<type>: [...]}, texts?,
meta}`. Errors are Cohere's `{"message"}` with SIE's statuses.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
from aiohttp import web

from sie_engine import validation
from sie_engine.errors import InvalidRequest, PayloadTooLarge

from . import codec, compat
from .compat_rerank import cohere_error
from .handlers import body_of
from .request_ids import fresh_uuid
from .state import ENGINE

FIELDS = ("model", "input_type", "texts", "images", "inputs", "max_tokens", "output_dimension", "embedding_types",
          "truncate", "priority")
INPUT_TYPES = {"search_query": True, "search_document": False, "classification": False, "clustering": False,
               "image": False}
# input types a card's profile of the same name serves where it has one (jina-embeddings-v3's tasks)
PROFILE_TYPES = ("classification", "clustering")
TRUNCATE = {"END": True, "NONE": False}


# ---- quantised embeddings ------------------------------------------------------------------
# Cohere documents the ranges and packing (docs.cohere.com "Embeddings types"; the binary ones as
# sentence-transformers' quantize_embeddings writes them): int8 in [-128, 127], uint8 in [0, 255],
# binary / ubinary one bit per dimension (> 0 is 1), packed 8 to a byte, big-endian within the
# byte, ubinary as 0..255 and binary as that minus 128. Cohere does not publish its int8
# calibration; SIE scales each vector by its own largest magnitude (its `output_dtype: int8`),
# which keeps a vector's value independent of the batch it came in and cosine order intact.
def _int8(matrix: np.ndarray) -> np.ndarray:
    peak = np.abs(matrix).max(axis=1, keepdims=True)
    scale = np.where(peak > 0, peak, 1.0) / 127.0
    return np.clip(np.rint(matrix / scale), -127, 127).astype(np.int16)


def _ubinary(matrix: np.ndarray) -> np.ndarray:
    return np.packbits(matrix > 0, axis=1).astype(np.int16)


QUANTISE = {
    "float": lambda m: m,
    "int8": _int8,
    "uint8": lambda m: _int8(m) + 128,
    "binary": lambda m: _ubinary(m) - 128,
    "ubinary": _ubinary,
    "base64": lambda m: [base64.b64encode(np.ascontiguousarray(row, dtype="<f4").tobytes()).decode("ascii")
                         for row in m],
}


def embeddings_by_type(matrix: np.ndarray, types: list[str]) -> dict[str, Any]:
    """[n, dims] float32 -> `{type: n embeddings}` for each requested type."""
    return {name: QUANTISE[name](matrix) for name in types}


# ---- request fields ------------------------------------------------------------------------
def embedding_types(value: Any) -> list[str]:
    if value is None:
        return ["float"]
    if not isinstance(value, list) or not value or not all(isinstance(t, str) and t in QUANTISE for t in value):
        raise InvalidRequest(f"embedding_types must be a non-empty list of {', '.join(QUANTISE)}",
                             field="embedding_types")
    return list(dict.fromkeys(value))


def truncate(value: Any) -> bool:
    if value is None:
        return True
    if not isinstance(value, str):
        raise InvalidRequest("truncate must be one of NONE, START, END", field="truncate")
    if value == "START":
        raise InvalidRequest("truncate START is not supported: SIE cuts the end of a text longer than the model's "
                             "window (END); send END or NONE", field="truncate")
    if value not in TRUNCATE:
        raise InvalidRequest("truncate must be one of NONE, START, END", field="truncate")
    return TRUNCATE[value]


def _content_item(content: Any, where: str, limits: validation.Limits) -> dict[str, str]:
    """One `inputs[i]` -> an encode item: `{"text": ...}` or `{"image": data URI}`."""
    parts = content.get("content") if isinstance(content, dict) else None
    if not isinstance(parts, list) or not parts:
        raise InvalidRequest(f"{where} must be an object with a non-empty content list", field=where)
    if len(parts) > 1:
        raise InvalidRequest(f"{where} holds {len(parts)} content parts: SIE's models embed one text or one image "
                             "per input (they do not fuse text and image into one vector); send them as "
                             "separate inputs", field=f"{where}.content")
    part, at = parts[0], f"{where}.content[0]"
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text":
        return {"text": validation.check_text(part.get("text"), limits, f"{at}.text")}
    if kind == "image_url":
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else None
        if not isinstance(url, str):
            raise InvalidRequest(f"{at}.image_url must be an object with a url (a data URI)", field=f"{at}.image_url")
        return {"image": url}
    raise InvalidRequest(f"{at}.type must be text or image_url", field=f"{at}.type")


def items_of(body: dict, limits: validation.Limits) -> tuple[list[dict[str, str]], str]:
    """The request's texts, images or inputs -> (encode items, the field they came from)."""
    given = [name for name in ("texts", "images", "inputs") if body.get(name) is not None]
    if len(given) != 1:
        raise InvalidRequest("send exactly one of texts, images or inputs", field=given[1] if given else "texts")
    field, values = given[0], body[given[0]]
    if not isinstance(values, list) or not values:
        raise InvalidRequest(f"{field} must be a non-empty list", field=field)
    if len(values) > limits.max_items:
        raise PayloadTooLarge(f"{field} holds {len(values)} entries; at most {limits.max_items} per request",
                              field=field)
    if field == "texts":
        return [{"text": validation.check_text(t, limits, f"texts[{i}]")} for i, t in enumerate(values)], field
    if field == "images":
        for i, image in enumerate(values):
            if not isinstance(image, str) or not image.startswith("data:"):
                raise InvalidRequest(f"images[{i}] must be a data URI (data:image/png;base64,...)",
                                     field=f"images[{i}]")
        return [{"image": image} for image in values], field
    return [_content_item(content, f"inputs[{i}]", limits) for i, content in enumerate(values)], field


def check_max_tokens(request: web.Request, model: str, value: Any) -> None:
    tokens = validation.check_positive_int(value, "max_tokens")
    if tokens is None:
        return
    window = request.app[ENGINE].model_info(model).max_seq_len  # 404 for an unknown model
    if tokens < window:
        raise InvalidRequest(f"max_tokens {tokens} is below the model's window of {window} tokens: SIE cuts texts "
                             "at the model's window only; leave max_tokens out", field="max_tokens")


@compat.foreign_errors(cohere_error)
async def embed(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    body = await body_of(request)
    codec.check_fields(body, FIELDS, required=("model",))
    model, alias = compat.split_mode(body["model"])
    kind = body.get("input_type")
    if kind is not None and (not isinstance(kind, str) or kind not in INPUT_TYPES):
        raise InvalidRequest(f"input_type must be one of {', '.join(INPUT_TYPES)}", field="input_type")
    is_query = compat.choose_mode(alias, INPUT_TYPES[kind] if kind is not None else None, "input_type")
    card = engine.catalog.get(model)
    profile = kind if kind in PROFILE_TYPES and card is not None and kind in card.profiles else None
    priority = body.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int) or priority < 0):
        raise InvalidRequest("priority must be an integer of at least 0", field="priority")
    types = embedding_types(body.get("embedding_types"))
    cut = truncate(body.get("truncate"))
    dims = await compat.check_dimensions(request, model, body.get("output_dimension"), "output_dimension")
    check_max_tokens(request, model, body.get("max_tokens"))
    items, field = items_of(body, engine.limits)
    result = await compat.encode(request, model, items,
                                 names={"dims": "output_dimension", "items": field},
                                 output_types=["dense"], is_query=is_query, dims=dims, truncate=cut,
                                 profile=profile, normalize=True if dims is not None else None)
    matrix = np.stack([item.dense for item in result.items]).astype(np.float32, copy=False)
    payload: dict[str, Any] = {
        "id": fresh_uuid(), "response_type": "embeddings_by_type",
        "embeddings": embeddings_by_type(matrix, types),
        "meta": {"api_version": {"version": "2"},
                 "billed_units": {"input_tokens": int(result.tokens),
                                  "images": sum(1 for item in items if "image" in item)}},
    }
    texts = [item["text"] for item in items if "text" in item]
    if texts:
        payload["texts"] = texts
    return await compat.answer(request, payload, approx_bytes=matrix.nbytes * len(types))
