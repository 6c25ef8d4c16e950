"""What the router knows about one engine worker, refreshed from its GET /v1/status."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# Model states (docs/api.md, GET /v1/models) that mean "this worker has, or is getting, the weights".
WARM_STATES = frozenset({"loaded", "loading"})


@dataclass
class Worker:
    url: str
    # Pool from discovery (a --worker POOL=URL label or the headless service); None: unknown yet.
    configured_pool: str | None = None
    pool: str | None = None
    up: bool = False
    ready: bool = False
    draining: bool = False
    queued_tokens: int = 0
    queued_items: int = 0
    model_states: dict[str, str] = field(default_factory=dict)
    # Requests this router has outstanding on the worker: fresher than the last poll.
    inflight: int = 0
    # model -> monotonic time the router last sent it here (affinity before the poll shows it).
    assigned: dict[str, float] = field(default_factory=dict)
    # A 429 makes the worker "overloaded" until this monotonic time.
    busy_until: float = 0.0
    # model id -> digest of the worker's runtime card (admin.py replays the router's when they differ)
    configs: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.pool is None:
            self.pool = self.configured_pool

    def available(self, now: float) -> bool:
        return self.up and self.ready and not self.draining and now >= self.busy_until

    def has_model(self, model: str | None, now: float, grace_s: float) -> bool:
        if model is None:
            return False
        if self.model_states.get(model) in WARM_STATES:
            return True
        sent = self.assigned.get(model)
        return sent is not None and now - sent < grace_s

    def resident_models(self) -> int:
        return sum(1 for s in self.model_states.values() if s in WARM_STATES)

    def apply_status(self, status: dict) -> None:
        """Update from a GET /v1/status body (shape in docs/api.md)."""
        self.up = True
        self.ready = bool(status.get("ready", False))
        self.draining = bool(status.get("draining", False))
        self.queued_tokens = int(status.get("queued_tokens", 0) or 0)
        self.queued_items = int(status.get("queued_items", 0) or 0)
        reported_pool = status.get("pool")
        # A discovery label wins: requests are routed by the service they came from,
        # and a worker started without --pool reports a generic default.
        self.pool = self.configured_pool or reported_pool or "default"
        models = status.get("models") or {}
        self.model_states = {
            str(mid): str((info or {}).get("state", "")) for mid, info in models.items()
        }
        configs = status.get("configs")
        self.configs = {str(k): str(v) for k, v in configs.items()} if isinstance(configs, dict) else {}

    def mark_down(self) -> None:
        """The worker failed a poll or a request: unusable until a poll succeeds."""
        self.up = False
        self.ready = False

    def mark_busy(self, retry_after_s: float) -> None:
        self.busy_until = max(self.busy_until, time.monotonic() + retry_after_s)

    def snapshot(self) -> dict:
        return {
            "url": self.url, "pool": self.pool, "up": self.up, "ready": self.ready,
            "draining": self.draining, "queued_tokens": self.queued_tokens,
            "queued_items": self.queued_items, "inflight": self.inflight,
            "models": dict(self.model_states),
        }
