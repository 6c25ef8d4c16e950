"""Router settings: where the workers are and how long to wait for them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..options import SERVE, default_of


def _served(name: str) -> Any:
    """The engine server's default for one of its settings (declared once, server/options.py)."""
    return default_of(SERVE, "settings", name)


@dataclass(frozen=True)
class StaticWorker:
    """A worker named on the command line; `pool` None means "trust the worker's /v1/status"."""

    url: str
    pool: str | None = None


@dataclass(frozen=True)
class PoolService:
    """A Kubernetes headless service whose DNS A/AAAA records are the pool's pods."""

    pool: str
    host: str
    port: int
    scheme: str = "http"


@dataclass(frozen=True)
class RouterConfig:
    workers: tuple[StaticWorker, ...] = ()
    services: tuple[PoolService, ...] = ()
    # Pools that requests may name even while no worker of them exists yet (scaled to zero).
    pools: tuple[str, ...] = ()
    # Pool for requests without X-SIE-Pool; None: any ready worker of any pool.
    default_pool: str | None = None
    poll_interval_s: float = 1.0
    dns_refresh_s: float = 5.0
    status_timeout_s: float = 2.0
    # How long a request is held while no worker of its pool is ready (the KEDA
    # scale-from-zero window: pod start + model load should fit in it).
    hold_timeout_s: float = 30.0
    retry_after_s: int = 5
    # Upstream attempts per request (429s, connection failures, draining workers).
    max_attempts: int = 4
    connect_timeout_s: float = 2.0
    upstream_timeout_s: float = 300.0
    # A worker that got a model is preferred for it for this long even before its
    # /v1/status shows the model loading, so a burst does not load it everywhere.
    affinity_grace_s: float = 10.0
    # The engine server's bounds and defaults (server/options.py), so the router is no softer a
    # target than the workers behind it (issue #30.6): bodies, connections, slow clients.
    max_body_bytes: int = _served("max_body_bytes")
    max_buffered_body_bytes: int = _served("max_buffered_body_bytes")
    max_connections: int = _served("max_connections")
    probe_connections: int = _served("probe_connections")
    head_timeout_s: float = _served("head_timeout_s")
    keepalive_timeout_s: float = _served("keepalive_timeout_s")
    body_idle_timeout_s: float = _served("body_idle_timeout_s")
    body_timeout_s: float = _served("body_timeout_s")
    send_timeout_s: float = _served("send_timeout_s")
    api_keys: frozenset[str] = field(default_factory=frozenset)
    # One key per line (or comma-separated); re-read when it changes (keys rotate without a restart).
    api_key_file: Path | None = None
    # Admin keys for /v1/configs/models (router/admin.py); the router calls the workers with the first.
    admin_key_file: Path | None = None
    # Where the router keeps its runtime cards (replayed to workers that lack them); None: in memory.
    config_dir: Path | None = None
    # Queue mode (server/queue/): the NATS JetStream server work goes through; None: direct mode.
    queue_url: str | None = None
    # Queue mode: the streams' and consumer's settings (server/queue/layout.py says why each).
    queue_ack_wait_s: float = 10.0
    queue_max_deliver: int = 3
    queue_dead_letter_max: int = 10_000

    def queue_pools(self) -> list[str]:
        """The pools queue mode makes streams for: --pool's and --default-pool."""
        return sorted(set(self.pools) | ({self.default_pool} if self.default_pool else set()))

    def known_pools(self) -> set[str]:
        pools = set(self.pools)
        pools.update(s.pool for s in self.services)
        pools.update(w.pool for w in self.workers if w.pool)
        if self.default_pool:
            pools.add(self.default_pool)
        return pools
