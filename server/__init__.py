"""SIE's HTTP server (aiohttp): encode / score / extract, OpenAI embeddings,
metrics, API keys, graceful drain. `create_app(engine, settings)` builds the
app; `sie-server serve` runs it (cli.py).

The names below load on first use: `sie-server --help` and argument errors must
not wait for the engine (torch) to import."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_app, drain
    from .metrics import ServerMetrics
    from .settings import ServerSettings

__all__ = ["ServerMetrics", "ServerSettings", "create_app", "drain"]
_WHERE = {"create_app": ".app", "drain": ".app", "ServerMetrics": ".metrics", "ServerSettings": ".settings"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name], __name__), name)
