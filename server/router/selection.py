"""Pick the worker for a request: model affinity first, then the least-loaded worker.

Sending a model's requests to workers that already hold it keeps each model resident on
few workers (instead of loading it on every worker at once) and lets their batches fill.
"""

from __future__ import annotations

from collections.abc import Iterable

from .worker import Worker


def _queue(w: Worker) -> tuple[int, int]:
    # The router's own in-flight count is fresher than the polled queue; both count.
    return (w.inflight + w.queued_items, w.queued_tokens)


def choose_worker(
    workers: Iterable[Worker],
    pool: str | None,
    model: str | None,
    now: float,
    affinity_grace_s: float,
    exclude: frozenset[str] = frozenset(),
) -> Worker | None:
    """The best available worker of `pool` (None: any pool) for `model`, or None if none is ready.

    `exclude`: worker URLs that already refused this request for a reason of their own.

    1. Workers that have the model loaded (or loading, or just sent it): shortest queue.
    2. Otherwise every available worker of the pool: shortest queue, then fewest
       resident models (spreads models over the pool), then URL (deterministic).
    """
    candidates = [
        w for w in workers
        if w.available(now) and (pool is None or w.pool == pool) and w.url not in exclude
    ]
    if not candidates:
        return None
    warm = [w for w in candidates if w.has_model(model, now, affinity_grace_s)]
    if warm:
        return min(warm, key=lambda w: (_queue(w), w.url))
    return min(candidates, key=lambda w: (_queue(w), w.resident_models(), w.url))
