"""`ServerSettings`: everything the HTTP layer needs that is not the engine's.

The engine's own knobs (device, memory budget, queue bounds, limits) are
arguments of `sie_engine.Engine`; the CLI builds both from one command line.
A field that an option sets takes its default from that option's declaration
(server/options.py), so flag, variable, help and default are written once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .options import SERVE, default_of


def _option(field: str) -> Any:
    return default_of(SERVE, "settings", field)


@dataclass(frozen=True)
class ServerSettings:
    host: str = _option("host")
    port: int = _option("port")
    # Bearer keys accepted on every route but health, readiness, metrics and
    # the OpenAPI document. Empty (and no key file): no authentication.
    api_keys: tuple[str, ...] = _option("api_keys")
    # One key per line (`#` starts a comment); re-read when its mtime or size
    # changes, so keys rotate without a restart.
    api_key_file: Path | None = _option("api_key_file")
    api_key_poll_s: float = 1.0
    # Admin keys (the admin API, admin.py), one per line, re-read as the API key file is. None: the
    # admin API answers 403. The API keys never grant it.
    admin_key_file: Path | None = _option("admin_key_file")
    # Where runtime cards persist (runtime_cards.py); None: in memory only, gone with the process.
    config_dir: Path | None = _option("config_dir")
    # Models loaded before /readyz turns 200.
    preload: tuple[str, ...] = _option("preload")
    # The pool this server belongs to (reported to the router by /v1/status).
    pool: str = _option("pool")
    # Queue mode (server/queue/): the NATS server whose stream of `pool` this server pulls from; None: off.
    queue_url: str | None = _option("queue_url")
    # Queue mode: messages worked on at once, at most (admission gates each pull first).
    queue_concurrency: int = _option("queue_concurrency")
    # Larger request bodies get 413 before they are parsed.
    max_body_bytes: int = _option("max_body_bytes")
    # All request bodies buffered at once (arriving, parsed, handled): past it 429 (body_budget.py).
    max_buffered_body_bytes: int = _option("max_buffered_body_bytes")
    # After SIGTERM: how long to wait for accepted requests before giving up.
    drain_timeout_s: float = _option("drain_timeout_s")
    # Bodies and answers larger than this are (de)serialised on a worker thread
    # so one big request never stalls the event loop for everyone else.
    offload_bytes: int = 256 * 2**10
    # Browser origins allowed to call the API (CORS). Empty: no CORS headers at
    # all, so browsers refuse cross-origin calls. "*" allows every origin.
    cors_origins: tuple[str, ...] = _option("cors_origins")
    # Open client connections served at once; beyond it a new connection gets
    # 503 with Retry-After and is closed (bounds sockets held by slow clients).
    max_connections: int = _option("max_connections")
    # Connections that may wait beyond max_connections for a probe's request head: /healthz and
    # /readyz are answered there even at the cap, anything else 503 (connections.py).
    probe_connections: int = _option("probe_connections")
    # Slow or idle clients must not hold a connection: a request head must arrive whole within
    # head_timeout_s of its first byte; a connection waits at most keepalive_timeout_s for its
    # next request (also a new one, for its first byte); a body gets body_idle_timeout_s between
    # two reads and body_timeout_s in all (then 408 and the connection closes).
    head_timeout_s: float = _option("head_timeout_s")
    keepalive_timeout_s: float = _option("keepalive_timeout_s")
    body_idle_timeout_s: float = _option("body_idle_timeout_s")
    body_timeout_s: float = _option("body_timeout_s")
    # An answer the client does not read: closed when its write stays blocked this long (nginx send_timeout).
    send_timeout_s: float = _option("send_timeout_s")
    # One line per request on the `sie_server.access` logger, with its request id
    # (never the Authorization header).
    access_log: bool = _option("access_log")

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys) or self.api_key_file is not None
