"""SIE's HTTP server (aiohttp): encode / score / extract, OpenAI embeddings,
metrics, API keys, graceful drain. `create_app(engine, settings)` builds the
app; `sie-server serve` runs it (cli.py)."""

from .app import create_app, drain
from .metrics import ServerMetrics
from .settings import ServerSettings

__all__ = ["ServerMetrics", "ServerSettings", "create_app", "drain"]
