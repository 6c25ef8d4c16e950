"""How long the client waits, phase by phase, and in all for one request.

`timeout=` on the clients takes one of:
- `Timeouts(...)` (this module): each bound by name;
- a number `t` (seconds; what `timeout=` took before): read, write and pool `t`,
  connect `min(t, 5)`, total `max(t, 300)`;
- an `httpx.Timeout`: its four phases as given, the default total;
- `None`: no bound at all (a hung server then hangs the call).

The defaults: a refused or black-holed server is known within 5 s; an answer may take
2 minutes to start (a 128-text batch of a large model on a busy CPU); one request,
its retries and their waits included, ends within 5 minutes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TypeAlias

import httpx

DEFAULT_CONNECT_S = 5.0
DEFAULT_READ_S = 120.0
DEFAULT_WRITE_S = 60.0
DEFAULT_POOL_S = 60.0
DEFAULT_TOTAL_S = 300.0


@dataclass(frozen=True)
class Timeouts:
    """Seconds per phase of one HTTP request (None: no bound), as httpx names them, and
    `total`: the bound on one request with its retries and the waits between them (a
    large `encode` sends several requests, each bounded by `total`)."""

    connect: float | None = DEFAULT_CONNECT_S  # opening the TCP (and TLS) connection
    read: float | None = DEFAULT_READ_S  # between bytes of the answer, the first one included
    write: float | None = DEFAULT_WRITE_S  # between bytes of the request body
    pool: float | None = DEFAULT_POOL_S  # waiting for a free connection of the client's pool
    total: float | None = DEFAULT_TOTAL_S

    def __post_init__(self) -> None:
        for name in ("connect", "read", "write", "pool", "total"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"Timeouts.{name} must be a positive number of seconds or None, got {value!r}")

    def deadline(self) -> float | None:
        """The `time.monotonic()` by which a request started now must end, or None."""
        return None if self.total is None else time.monotonic() + self.total

    def phases(self, remaining: float | None) -> httpx.Timeout:
        """httpx's per-phase timeouts for one attempt with `remaining` seconds left of the
        total (None: no total): no phase waits past the deadline."""

        def clip(phase: float | None) -> float | None:
            if remaining is None:
                return phase
            return remaining if phase is None else min(phase, remaining)

        return httpx.Timeout(connect=clip(self.connect), read=clip(self.read), write=clip(self.write),
                             pool=clip(self.pool))


NO_TIMEOUTS = Timeouts(connect=None, read=None, write=None, pool=None, total=None)

TimeoutLike: TypeAlias = Timeouts | httpx.Timeout | float | int | None


def resolve_timeouts(value: TimeoutLike) -> Timeouts:
    """The `Timeouts` a `timeout=` argument means (see the module's docstring)."""
    if isinstance(value, Timeouts):
        return value
    if value is None:
        return NO_TIMEOUTS
    if isinstance(value, httpx.Timeout):
        return Timeouts(connect=value.connect, read=value.read, write=value.write, pool=value.pool)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"timeout= takes seconds, a sie_client.Timeouts, an httpx.Timeout or None, "
                        f"not {type(value).__name__}")
    seconds = float(value)
    return Timeouts(connect=min(seconds, DEFAULT_CONNECT_S), read=seconds, write=seconds, pool=seconds,
                    total=max(seconds, DEFAULT_TOTAL_S))
