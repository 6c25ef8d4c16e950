"""Prometheus metrics of one engine server (names and labels: docs/api.md).

`ServerMetrics` owns its own registry (so several apps can live in one
process, as in tests) and hands the engine two hook objects:
`pool_events` (loads, failures, evictions, resident memory) and
`scheduler_events` (batches, queue depth). The engine calls those hooks from
its own thread; prometheus_client's metrics are thread-safe, and the small
queue table kept here for /v1/status is guarded by a lock.
"""

from __future__ import annotations

import os
import threading

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
    multiprocess,
)

from sie_engine.types import Timings

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_TOKEN_BUCKETS = tuple(2**k for k in range(4, 18))  # 16 .. 131072
BATCH_ITEM_BUCKETS = tuple(2**k for k in range(0, 11))  # 1 .. 1024
LOAD_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class ServerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        if not _multiprocess():  # a split server's processes: the collector reads one process only
            ProcessCollector(registry=r)
        self.requests = Counter("sie_requests_total", "Answered requests", ["model", "route", "status"], registry=r)
        self.duration = Histogram("sie_request_duration_seconds", "Request latency by phase",
                                  ["model", "route", "phase"], buckets=LATENCY_BUCKETS, registry=r)
        self.queued_items = Gauge("sie_queued_items", "Items waiting for a batch", ["model"], registry=r,
                                  multiprocess_mode="livesum")
        self.queued_tokens = Gauge("sie_queued_tokens", "Tokens waiting for a batch (autoscaling signal)",
                                   ["model"], registry=r, multiprocess_mode="livesum")
        # admission's estimate (sie_engine/admission.py): the model's queued work in seconds at its
        # measured throughput; summed over a server's models, the wait a new request would see
        self.queue_wait = Gauge("sie_queue_wait_seconds",
                                "Seconds of work queued for the model at its measured throughput (autoscaling signal)",
                                ["model"], registry=r, multiprocess_mode="livesum")
        self.inflight = Gauge("sie_inflight_requests", "Requests accepted and not yet answered", registry=r,
                              multiprocess_mode="livesum")
        self.batch_tokens = Histogram("sie_batch_tokens", "Real tokens per batch", ["model"],
                                      buckets=BATCH_TOKEN_BUCKETS, registry=r)
        self.batch_items = Histogram("sie_batch_items", "Sequences per batch", ["model"],
                                     buckets=BATCH_ITEM_BUCKETS, registry=r)
        self.batches = Counter("sie_batches_total", "Batches run", ["model"], registry=r)
        self.tokens = Counter("sie_tokens_processed_total", "Real tokens computed", ["model"], registry=r)
        self.models_loaded = Gauge("sie_models_loaded", "Resident models", registry=r, multiprocess_mode="livesum")
        self.model_memory = Gauge("sie_model_memory_bytes", "Memory charged to a resident model", ["model"], registry=r,
                                  multiprocess_mode="livesum")
        # every process of a split server sets it to the engine's one budget: the max, not the sum
        self.memory_budget = Gauge("sie_memory_budget_bytes", "The model pool's memory budget", registry=r,
                                   multiprocess_mode="livemax")
        self.loads = Counter("sie_model_loads_total", "Model loads", ["model"], registry=r)
        self.load_failures = Counter("sie_model_load_failures_total", "Failed model loads", ["model"], registry=r)
        self.evictions = Counter("sie_model_evictions_total", "Model evictions", ["model"], registry=r)
        self.load_seconds = Histogram("sie_model_load_seconds", "Model load (or swap-in) time", ["model"],
                                      buckets=LOAD_BUCKETS, registry=r)
        self.rejected = Counter("sie_rejected_total", "Requests refused by admission (429/503/504)",
                                ["model", "reason"], registry=r)
        # the cold allowance (sie_engine/admission.py): a preloaded model admits about one batch at a
        # time until its first batch has measured its throughput
        self.cold_admissions = Counter("sie_cold_admissions_total", "Requests admitted before their model's "
                                       "throughput was measured (the cold allowance)", ["model"], registry=r)
        # queue mode (server/queue/consumer.py): what became of each message this server pulled
        self.queue_messages = Counter("sie_queue_messages_total", "Queue messages pulled, by outcome (answered, "
                                      "expired, dead_lettered, handed_back)", ["outcome"], registry=r)
        self._lock = threading.Lock()
        self._request_children: dict[tuple[str, str, int], tuple] = {}
        self._queue_children: dict[str, tuple] = {}
        self._queues: dict[str, tuple[int, int]] = {}
        self._resident: set[str] = set()
        self._hooks: tuple | None = None

    # ---- the engine's hooks ------------------------------------------------
    # Built on first use: they subclass the engine's event classes, whose modules import torch,
    # and a frontend process of the split server (server/split/) counts requests without an engine.
    @property
    def pool_events(self):
        return self._engine_hooks()[0]

    @property
    def scheduler_events(self):
        return self._engine_hooks()[1]

    def _engine_hooks(self) -> tuple:
        if self._hooks is None:
            from .metrics_hooks import PoolHooks, SchedulerHooks

            self._hooks = (PoolHooks(self), SchedulerHooks(self))
        return self._hooks

    # ---- requests ----------------------------------------------------------
    def observe_request(self, model: str, route: str, status: int, timings: Timings | None, total_s: float) -> None:
        children = self._request_children.get((model, route, status))
        if children is None:
            children = self._request_children[(model, route, status)] = self._children_of(model, route, status)
        count, queue, tokenize, inference, total = children
        count.inc()
        if timings is not None:
            queue.observe(timings.queue)
            tokenize.observe(timings.tokenize)
            inference.observe(timings.inference)
        total.observe(total_s)

    def _children_of(self, model: str, route: str, status: int) -> tuple:
        """A request's counter and phase histograms, looked up once per (model, route, status):
        `labels()` takes a lock and builds its key on every call, five times a request (issue 27).
        The keys are bounded: served model ids (or ""), route names, statuses."""
        return (self.requests.labels(model, route, str(status)),
                *(self.duration.labels(model, route, phase) for phase in ("queue", "tokenize", "inference", "total")))

    def queue_children(self, model: str) -> tuple:
        """A model's queued items, queued tokens and queue wait gauges, looked up once."""
        children = self._queue_children.get(model)
        if children is None:
            children = self._queue_children[model] = (self.queued_items.labels(model),
                                                      self.queued_tokens.labels(model), self.queue_wait.labels(model))
        return children

    # ---- queue table (for /v1/status) --------------------------------------
    def queues(self) -> dict[str, tuple[int, int]]:
        """model -> (queued items, queued tokens)."""
        with self._lock:
            return dict(self._queues)

    def exposition(self) -> tuple[bytes, str]:
        if _multiprocess():  # every process's values, summed (gauges as each declares)
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def _multiprocess() -> bool:
    """prometheus_client's multiprocess mode: a split server (server/split/) names the directory
    where every process writes its values before any of them imports prometheus_client."""
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
