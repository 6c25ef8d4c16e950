"""Scoring many (query, text) pairs with distinct queries as one request (TEI's `/predict`).

`score` takes one query and many items; a batch of pairs with 4,096 distinct queries made
4,096 score calls, each admitted, tokenised and queued on its own: 10.7 s, and `/healthz`
stalled up to 1.8 s, against 0.2 s for the same pairs through one rerank (issue #30). A
cross-encoder scores every pair as one packed sentence pair whatever its query, so all the
pairs are tokenised in one call and queued as one scheduler request here.
Only plain cross-encoders (card output `score`, no prompt): a prompted LLM reranker or a
late-interaction model runs through `score`, query by query.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import validation as v
from ..card import ModelCard
from ..types import ScoreResult
from ..work import WorkItem
from .common import check_truncation, longest_first
from .context import Call, TaskContext
from .score import SCORE, rank


def scores_pairs(card: ModelCard) -> bool:
    """Whether `card`'s model scores any pairs in one request (a plain cross-encoder)."""
    kind = ((card.options or {}).get("score") or {}).get("kind")
    return "score" in card.outputs and kind != "yes-no"


async def run_pairs(engine: TaskContext, call: Call, queries: Sequence[str], texts: Sequence[str]) -> ScoreResult:
    """Score `queries[i]` against `texts[i]` for every i; the answer's scores are best first,
    each with its pair's index (as `score` ranks items). `call.fields` holds `truncate`."""
    limits = engine.limits
    for i, (query, text) in enumerate(zip(queries, texts, strict=True)):
        v.check_text(query, limits, f"items[{i}].query")
        v.check_text(text, limits, f"items[{i}].text")
    card = call.card
    tokenized, tokenize_s = await engine.tokenize(card, "encode_pairs", list(queries), list(texts))
    check_truncation(tokenized, call.fields.get("truncate"))
    request = engine.new_request(call, "score", len(texts))
    types = tokenized.type_ids
    work: list[WorkItem[None]] = [
        WorkItem(request, i, tokenized.ids[i], type_ids=types[i] if types else None, outputs=SCORE)
        for i in longest_first(tokenized.ids)]
    scores = await engine.run_items(card, "score", work, request)
    ranked = rank([str(i) for i in range(len(texts))], [r["score"] for r in scores], None)
    return ScoreResult(card.id, ranked, tokenized.num_tokens, engine.timings(request, call.started, tokenize_s))
