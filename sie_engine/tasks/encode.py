"""The `encode` task: texts -> dense, sparse and multi-vector outputs.

Texts get the card's template (query or document, with its instruction), are
tokenised (ColBERT models: with their markers and query expansion) and queued
as `encode` work whose items name the outputs wanted; the per-request options
(Matryoshka `dims`, normalisation, output dtype) are applied to the results.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Sequence

import numpy as np

from .. import validation as v
from ..errors import InvalidRequest
from ..heads.colbert import marked_encode_args, uses_markers
from ..postprocess import convert_dtype, truncate_and_normalize
from ..types import EncodedItem, EncodeResult
from ..work import WorkItem
from .common import check_truncation, longest_first
from .context import TaskContext

# Texts tokenised per step of a large request: each chunk is queued as soon as it is
# tokenised, so inference starts while the rest is still being tokenised.
TOKENIZE_CHUNK = 2048


async def run(engine: TaskContext, model: str, request: dict[str, Any], timeout: float | None) -> EncodeResult:
    started = time.monotonic()
    card = engine.card(model, request.get("precision"))
    ids, texts = v.parse_items(request["items"], engine.limits)
    outputs = v.check_output_types(request.get("output_types"), card)
    is_query = bool(v.check_optional_bool(request.get("is_query"), "is_query"))
    normalize = v.check_optional_bool(request.get("normalize"), "normalize")
    truncate = v.check_optional_bool(request.get("truncate"), "truncate")
    instruction = v.check_instruction(request.get("instruction"), engine.limits)
    output_dtype = v.check_output_dtype(request["output_dtype"] if request.get("output_dtype") is not None
                                        else "float32")
    dims = v.check_dims(request.get("dims"), card.dims, card)
    texts = apply_template(texts, *card.template_for(is_query, instruction))
    if "multivector" in card.outputs and uses_markers(card):  # ColBERT: markers, query expansion
        method, kwargs = "encode_marked", marked_encode_args(card, is_query)
    else:
        method, kwargs = "encode", {}

    work_request = engine.new_request(card, "encode", len(texts), timeout)
    wanted = frozenset(outputs)
    tokens = 0
    tokenize_s = 0.0
    pending = asyncio.ensure_future(engine.tokenize(card, method, texts[:TOKENIZE_CHUNK], **kwargs))
    try:
        for start in range(0, len(texts), TOKENIZE_CHUNK):
            tokenized, seconds = await pending
            if start + TOKENIZE_CHUNK < len(texts):
                following = texts[start + TOKENIZE_CHUNK:start + 2 * TOKENIZE_CHUNK]
                pending = asyncio.ensure_future(engine.tokenize(card, method, following, **kwargs))
            tokenize_s += seconds
            tokens += tokenized.num_tokens
            check_truncation(tokenized, truncate, offset=start)
            key_lens = tokenized.key_lens or [None] * len(tokenized.ids)
            engine.submit(card, "encode", [
                WorkItem(work_request, start + i, tokenized.ids[i], outputs=wanted, key_len=key_lens[i])
                for i in longest_first(tokenized.ids)
            ], work_request)
    except BaseException as exc:
        work_request.fail(exc if isinstance(exc, Exception) else asyncio.CancelledError())
        work_request.future.exception()  # raised below, not awaited: marked read so asyncio logs no traceback
        if not pending.done():
            pending.cancel()
        raise
    raw = await work_request.future
    items = assemble(ids, raw, outputs, dims, card.normalize if normalize is None else normalize, output_dtype)
    return EncodeResult(card.id, items, tokens, engine.timings(work_request, started, tokenize_s))


def apply_template(texts: list[str], template: str, instruction: str | None) -> list[str]:
    """`{text}` replaced by each text and `{instruction}` by the instruction (or nothing)."""
    prefix, _, suffix = template.partition("{text}")
    prefix = prefix.replace("{instruction}", instruction or "")
    suffix = suffix.replace("{instruction}", instruction or "")
    if prefix or suffix:
        return [prefix + t + suffix for t in texts]
    return texts


def assemble(ids: list[str], raw: list[dict], outputs: Sequence[str], dims: int | None,
             normalize: bool, output_dtype: str) -> list[EncodedItem]:
    """Per-item head outputs -> EncodedItems with the request's output options."""
    items = [EncodedItem(id=item_id) for item_id in ids]
    if "dense" in outputs:
        dense = np.stack([r["dense"] for r in raw])
        if dims is not None and dims > dense.shape[1]:  # a card without `dims` is checked here, on the real width
            raise InvalidRequest(f"dims must be between 1 and {dense.shape[1]} for this model", field="dims")
        dense = truncate_and_normalize(dense, dims, normalize)
        for item, vector in zip(items, dense):
            item.dense = convert_dtype(vector, output_dtype)
    if "sparse" in outputs:
        for item, r in zip(items, raw):
            item.sparse = r["sparse"]
    if "multivector" in outputs:
        for item, r in zip(items, raw):
            item.multivector = convert_dtype(r["multivector"], output_dtype)
    return items
