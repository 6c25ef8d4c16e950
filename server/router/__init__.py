"""Model-affinity router: one gateway in front of many engine workers (`sie-server router`).

The names below load on first use, so `sie-server router --help` does not import aiohttp."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import create_router_app
    from .config import PoolService, RouterConfig, StaticWorker

__all__ = ["create_router_app", "RouterConfig", "PoolService", "StaticWorker"]
_WHERE = {"create_router_app": ".app", "RouterConfig": ".config", "PoolService": ".config",
          "StaticWorker": ".config"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name], __name__), name)
