"""The router's Prometheus metrics (names and labels as in docs/api.md, "Router")."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Router latency spans a cold model load (seconds) and a warm batch (milliseconds).
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class RouterMetrics:
    """One registry per router app, so several routers (tests) never share series."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "sie_router_requests_total", "Requests answered by the router",
            ["pool", "model", "status"], registry=r)
        self.request_duration = Histogram(
            "sie_router_request_duration_seconds", "End-to-end latency at the router",
            ["pool"], buckets=_LATENCY_BUCKETS, registry=r)
        self.queue_seconds = Histogram(
            "sie_router_queue_seconds", "Time a request was held waiting for a ready worker",
            ["pool"], buckets=_LATENCY_BUCKETS, registry=r)
        self.pending = Gauge(
            "sie_router_pending_requests",
            "Requests held for want of a ready worker (scale-from-zero signal)",
            ["pool", "model"], registry=r)
        self.upstream_errors = Counter(
            "sie_router_upstream_errors_total", "Failed upstream attempts",
            ["worker", "kind"], registry=r)
        self.retries = Counter(
            "sie_router_retries_total", "Attempts retried on another worker",
            ["pool"], registry=r)
        self.worker_up = Gauge(
            "sie_router_worker_up", "1 if the worker answered its last status poll",
            ["worker", "pool"], registry=r)
        self.workers_ready = Gauge(
            "sie_router_workers_ready", "Ready workers", ["pool"], registry=r)
        self.queue_late_answers = Counter(
            "sie_router_queue_late_answers_total",
            "Queue mode: answers that came after their request was answered or given up (dropped)",
            registry=r)
