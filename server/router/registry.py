"""The live worker set: discovery refresh, status polling, and "something changed" wake-ups."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import aiohttp

from .config import RouterConfig
from .discovery import discover
from .metrics import RouterMetrics
from .selection import choose_worker
from .worker import Worker

log = logging.getLogger("sie_server.router")


class WorkerRegistry:
    def __init__(self, config: RouterConfig, metrics: RouterMetrics, session: aiohttp.ClientSession):
        self.config = config
        self.metrics = metrics
        self.session = session
        self.workers: dict[str, Worker] = {}
        self.seen_pools: set[str] = set(config.known_pools())
        self._changed = asyncio.Event()
        self._last_discovery = float("-inf")
        # Requests held right now; while any is, DNS is re-read every poll round so a pod
        # KEDA just started (scale from zero) is found within poll_interval_s.
        self.holding = 0
        # Every model id a worker's /v1/status has listed (kept when a pool scales to zero, so
        # requests held for it still carry its label); bounded by the workers' catalogs.
        self.reported_models: set[str] = set()
        # called with each worker whose status poll succeeded (the admin API's replay, admin.py)
        self.after_poll: Callable[[Worker], None] | None = None

    # ---- waiting -------------------------------------------------------------------------

    def notify(self) -> None:
        """Wake every request held in `wait_for_change` (a new generation of the event)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for_change(self, timeout: float) -> None:
        event = self._changed
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    # ---- selection -----------------------------------------------------------------------

    def choose(self, pool: str | None, model: str | None,
               exclude: frozenset[str] = frozenset()) -> Worker | None:
        return choose_worker(
            self.workers.values(), pool, model, time.monotonic(),
            self.config.affinity_grace_s, exclude,
        )

    def reported(self, model: str) -> bool:
        """Whether a worker's /v1/status has listed `model` (in any state: one not loaded yet counts)."""
        return model in self.reported_models

    def pool_known(self, pool: str) -> bool:
        return pool in self.seen_pools

    # ---- refresh -------------------------------------------------------------------------

    async def refresh(self, force_discovery: bool = False) -> None:
        """One round: rediscover (at most every dns_refresh_s), then poll every worker."""
        now = time.monotonic()
        due = now - self._last_discovery >= self.config.dns_refresh_s
        if force_discovery or due or (self.holding and self.config.services):
            self._last_discovery = now
            self._apply_discovery(await discover(self.config))
        await asyncio.gather(*(self._poll(w) for w in list(self.workers.values())))
        self._export_pool_gauges()
        self.notify()

    def _apply_discovery(self, found: dict[str, str | None]) -> None:
        for url, pool in found.items():
            if url not in self.workers:
                log.info("worker discovered: %s (pool %s)", url, pool or "from status")
                self.workers[url] = Worker(url=url, configured_pool=pool)
        for url in list(self.workers):
            if url not in found:
                gone = self.workers.pop(url)
                log.info("worker gone: %s", url)
                self._forget_worker_series(gone)

    def _forget_worker_series(self, worker: Worker) -> None:
        try:
            self.metrics.worker_up.remove(worker.url, worker.pool or "")
        except KeyError:
            pass

    async def _poll(self, worker: Worker) -> None:
        old_pool = worker.pool
        timeout = aiohttp.ClientTimeout(total=self.config.status_timeout_s)
        try:
            async with self.session.get(f"{worker.url}/v1/status", timeout=timeout) as resp:
                if resp.status != 200:
                    raise aiohttp.ClientResponseError(
                        resp.request_info, resp.history, status=resp.status)
                worker.apply_status(await resp.json(content_type=None))
                self.reported_models.update(worker.model_states)
            if self.after_poll is not None:
                self.after_poll(worker)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            if worker.up:
                log.warning("worker %s failed its status poll: %r", worker.url, exc)
            worker.mark_down()
        if old_pool is not None and old_pool != worker.pool:
            try:
                self.metrics.worker_up.remove(worker.url, old_pool)
            except KeyError:
                pass
        if worker.pool:
            self.seen_pools.add(worker.pool)
        self.metrics.worker_up.labels(worker.url, worker.pool or "").set(1 if worker.up else 0)

    def _export_pool_gauges(self) -> None:
        ready: dict[str, int] = {p: 0 for p in self.seen_pools}
        for w in self.workers.values():
            if w.pool and w.up and w.ready and not w.draining:
                ready[w.pool] = ready.get(w.pool, 0) + 1
        for pool, n in ready.items():
            self.metrics.workers_ready.labels(pool).set(n)

    async def run(self) -> None:
        """Background loop (lives in the app's cleanup_ctx)."""
        while True:
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug in one round must not stop routing for good
                log.exception("worker refresh failed")
            await asyncio.sleep(self.config.poll_interval_s)
