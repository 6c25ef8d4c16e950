"""Splitting large requests into chunks and putting the answers back together.

Chunks go out concurrently, so each item gets an explicit id first (its index in
the whole request, as the server would give it); the merged result reads as if
the request had been sent in one piece.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sie_contract.tasks import Task

from .types import EncodeResult, ExtractResult, ScoredItem, ScoreResult


def with_ids(items: list[dict]) -> list[dict]:
    """Give every item without an id its index in the whole request (docs/api.md default)."""
    for index, item in enumerate(items):
        if item.get("id") is None:
            item["id"] = str(index)
    return items


def split(items: Sequence[dict], size: int) -> list[tuple[int, list[dict]]]:
    """`[(offset, chunk)]` of at most `size` items each, in order."""
    if size <= 0:
        raise ValueError("batch_size must be a positive integer")
    return [(start, list(items[start:start + size])) for start in range(0, len(items), size)]


def merge_encode(model: str, parts: Sequence[EncodeResult], offsets: Sequence[int] = ()) -> EncodeResult:
    """The chunks' items end to end; a document page's `item` (its document's index in the chunk)
    becomes the index in the whole request."""
    for offset, part in zip(offsets, parts):
        for item in part.items:
            if item.page is not None:
                item.page.item += offset
    items = [item for part in parts for item in part.items]
    return EncodeResult(parts[0].model if parts else model, items, sum(p.tokens for p in parts))


def merge_extract(model: str, parts: Sequence[ExtractResult], offsets: Sequence[int] = ()) -> ExtractResult:
    """The chunks' items end to end (a document page's `item` made the index in the whole request)."""
    for offset, part in zip(offsets, parts):
        for item in part.items:
            if item.page is not None:
                item.page.item += offset
    items = [item for part in parts for item in part.items]
    return ExtractResult(parts[0].model if parts else model, items, sum(p.tokens for p in parts))


def merge_score(model: str, parts: Sequence[tuple[int, ScoreResult]], top_k: int | None) -> ScoreResult:
    """Chunk-local indices -> request indices, one ranking over all chunks, then top_k."""
    scored = [
        ScoredItem(id=s.id, index=s.index + offset, score=s.score, rank=0)
        for offset, part in parts for s in part.scores
    ]
    # Stable on ties: the earlier item wins, as within one chunk.
    scored.sort(key=lambda s: (-s.score, s.index))
    if top_k is not None:
        scored = scored[:top_k]
    for rank, s in enumerate(scored):
        s.rank = rank
    return ScoreResult(parts[0][1].model if parts else model, scored, sum(p.tokens for _, p in parts))


def merge(task: Task, model: str, offsets: Sequence[int], parts: Sequence[Any], request: Mapping[str, Any]) -> Any:
    """The answers of a call's chunks as one result (a single chunk's answer as it is)."""
    if len(parts) == 1 and task.name != "score":
        return parts[0]
    if task.name == "encode":
        return merge_encode(model, parts, offsets)
    if task.name == "extract":
        return merge_extract(model, parts, offsets)
    if task.name == "score":
        return merge_score(model, list(zip(offsets, parts)), request.get("top_k"))
    # a plug-in task's decoded answers: their payload lists end to end, their tokens summed
    merged = {"model": parts[0].get("model", model), "usage": {"tokens": 0}}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, list):
                merged.setdefault(key, []).extend(value)
        merged["usage"]["tokens"] += int((part.get("usage") or {}).get("tokens", 0))
    return merged
