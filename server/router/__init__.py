"""Model-affinity router: one gateway in front of many engine workers (`sie-server router`)."""

from .app import create_router_app
from .config import PoolService, RouterConfig, StaticWorker

__all__ = ["create_router_app", "RouterConfig", "PoolService", "StaticWorker"]
