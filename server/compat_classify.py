"""Fixed-label classification for the compat APIs (TEI's `/predict`, Infinity's `/classify`, Hugging
Face's `text_classification`): `extract` on a `classifier` card, every label or the k best of each text.

TEI and Infinity answer every label of the model, best first; the Python call cannot say "every
label" (a keyword left None is a keyword not given), so the request goes to the engine as the
struct a body decodes into, with `top_k: null` in it, as a JSON client would send it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from sie_contract.builtin import EXTRACT
from sie_engine.errors import InvalidRequest

from . import compat
from .handlers import timeout_of
from .state import ENGINE, PRE_ADMITTED, TIMINGS

CLASSIFIER = "classifier"  # the card output of fixed-label classifiers (sie_engine.tasks.classify)
EVERY = None  # top_k: every label


def is_classifier(request: web.Request, model: str) -> bool:
    """Whether the model answers its own labels (404 for a model not served here)."""
    return CLASSIFIER in request.app[ENGINE].model_info(model).outputs


@dataclass(frozen=True)
class Classified:
    model: str
    labels: list[list[dict[str, Any]]]  # per text, `{label, score}` best first
    tokens: int


async def classify(request: web.Request, model: str, texts: list[str], *, names: dict[str, str],
                   top_k: int | None = EVERY, **fields: Any) -> Classified:
    """Per text, its labels best first as `{label, score}` (`top_k` of them; EVERY: all). `names`:
    the engine's field names -> the foreign API's, for errors. `fields` left None are not sent."""
    compat.label(request, model)
    body = {"items": texts, "top_k": top_k, **{name: value for name, value in fields.items() if value is not None}}
    try:
        call = msgspec.convert(body, EXTRACT.request_type)
    except msgspec.ValidationError as exc:  # the compat handlers check their values first: a bug if reached
        raise InvalidRequest(str(exc), field="items") from None
    try:
        result = await request.app[ENGINE].run("extract", model, call, timeout=timeout_of(request),
                                               pre_admitted=request.get(PRE_ADMITTED))
    except InvalidRequest as exc:
        raise compat.renamed(exc, names) from None
    request[TIMINGS] = result.timings
    labels = [[{"label": c.label, "score": float(c.score)} for c in item.classifications or ()]
              for item in result.items]
    return Classified(result.model, labels, int(result.tokens))
