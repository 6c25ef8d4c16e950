"""SIE's engine as a library: model cards, packed forward passes, heads, token-budget
batching and the model pool. No HTTP in here.

The names below load on first use (PEP 562), so a program that only reads cards
(`sie-server models`, `--help`) does not wait for torch to import."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .card import Catalog, ModelCard, WeightsSource
    from .engine import Engine, parse_bytes
    from .errors import SIEError
    from .local_card import card_from_local_dir
    from .postprocess import Quantized
    from .types import EncodedItem, EncodeResult, ModelInfo, SparseVector, Timings

__all__ = [
    "Catalog", "Engine", "EncodedItem", "EncodeResult", "ModelCard", "ModelInfo", "Quantized", "SIEError",
    "SparseVector", "Timings", "WeightsSource", "card_from_local_dir", "parse_bytes",
]
# name -> the module that defines it
_WHERE = {
    "Catalog": ".card", "ModelCard": ".card", "WeightsSource": ".card", "Engine": ".engine",
    "parse_bytes": ".engine", "SIEError": ".errors", "card_from_local_dir": ".local_card",
    "Quantized": ".postprocess", "EncodedItem": ".types", "EncodeResult": ".types", "ModelInfo": ".types",
    "SparseVector": ".types", "Timings": ".types",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name], __name__), name)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
