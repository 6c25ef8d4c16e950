"""Pairs with distinct queries scored as one engine request (TEI's `/predict`, issue #30):
one admission, one tokenisation, one scheduler submission for every pair, where a call per
distinct query made 4,096 queries take 10.7 s and stall `/healthz`."""

from __future__ import annotations

import re

from aiohttp import web

from sie_engine.errors import InvalidRequest
from sie_engine.types import ScoreResult

from . import compat
from .handlers import timeout_of
from .state import ENGINE, PRE_ADMITTED, TIMINGS

# the engine names a pair's texts items[i].query / items[i].text; TEI's pairs are inputs[i][0] / [1]
_FIELD = re.compile(r"items\[(\d+)\]\.(query|text)")


def _tei_field(match: re.Match) -> str:
    return f"inputs[{match[1]}][{0 if match[2] == 'query' else 1}]"


async def score_pairs(request: web.Request, model: str, pairs: list[tuple[str, str]],
                      truncate: bool | None) -> ScoreResult:
    """`Engine.score_pairs` for this request (its deadline, metrics label and timings); an
    invalid text is a 400 naming its pair as TEI's request does."""
    compat.label(request, model)
    try:
        result = await request.app[ENGINE].score_pairs(
            model, [q for q, _ in pairs], [t for _, t in pairs], truncate=truncate, timeout=timeout_of(request),
            pre_admitted=request.get(PRE_ADMITTED))
    except InvalidRequest as exc:
        raise type(exc)(_FIELD.sub(_tei_field, exc.message),
                        field=_FIELD.sub(_tei_field, exc.field) if exc.field else None) from None
    request[TIMINGS] = result.timings
    return result
