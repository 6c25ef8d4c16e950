"""Every option of `sie-server router`, declared once (as server/options.py declares the engine
server's): flag, parser and checks, default, `SIE_ROUTER_*` environment variable, help, and the
`RouterConfig` field it sets. The router's variables carry `ROUTER` in their name, so one
environment (an image, a pod template) can hold both commands' without one reading the other's;
the API keys are the exception, `SIE_API_KEYS` for both, so one Secret serves them.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import urlsplit

from ..options import (
    Option,
    choice,
    count,
    directory,
    existing_file,
    nats_url,
    port,
    positive_size,
    seconds,
    text,
)
from .config import PoolService, RouterConfig, StaticWorker

# the defaults RouterConfig declares (each with its reason there)
_D = RouterConfig()


def static_worker(value: str) -> StaticWorker:
    """`URL` or `POOL=URL`."""
    pool, sep, url = value.partition("=")
    if not sep:
        pool, url = "", value
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError("expected [POOL=]http://HOST:PORT")
    return StaticWorker(url=url.rstrip("/"), pool=pool or None)


def pool_service(value: str) -> PoolService:
    """`POOL=HOST:PORT` (a headless service: one DNS record per pod)."""
    pool, sep, target = value.partition("=")
    host, colon, number = target.rpartition(":")
    if not sep or not pool or not colon or not host or not number.isdigit():
        raise ValueError("expected POOL=HOST:PORT, e.g. "
                         "gpu-l4=sie-engine-gpu-l4-headless.default.svc.cluster.local:8080")
    return PoolService(pool=pool, host=host, port=int(number))


def _option(flag: str, help: str, *args: Any, **kwargs: Any) -> Option:
    """An Option whose variable is SIE_ROUTER_<DEST> unless it names its own."""
    option = Option(flag, help, *args, **kwargs)
    return option if "env" in kwargs else dataclasses.replace(option, env=f"SIE_ROUTER_{option.dest.upper()}")


ROUTER: tuple[Option, ...] = (
    _option("--host", "address to bind (0.0.0.0 for all interfaces)", text, "127.0.0.1"),
    # not SIE_ROUTER_PORT: Kubernetes sets that in every pod of a namespace with a Service named
    # `sie-router` (the chart's router, `<SERVICE>_PORT=tcp://...`)
    _option("--port", "port to listen on", port, 8080, env="SIE_ROUTER_HTTP_PORT"),
    _option("--worker", "a worker; without POOL its /v1/status names it; repeatable", static_worker, (), "router",
            "workers", metavar="[POOL=]URL", repeat=True,
            dest_name="workers"),
    _option("--service", "a headless service whose DNS records are the pool's workers; repeatable", pool_service,
            (), "router", "services", metavar="POOL=HOST:PORT", repeat=True,
            dest_name="services"),
    _option("--pool", "a pool requests may name even while it has no worker; repeatable", text, (), "router",
            metavar="NAME", repeat=True, dest_name="pools"),
    _option("--default-pool", "pool for requests without X-SIE-Pool", text, None, "router", metavar="NAME",
            default_text="any pool"),
    _option("--hold-timeout", "seconds to hold a request while its pool has no ready worker", seconds(),
            _D.hold_timeout_s, "router", "hold_timeout_s", metavar="SECONDS"),
    _option("--retry-after", "Retry-After (seconds) of the 503 sent when the hold times out", count(),
            _D.retry_after_s, "router", "retry_after_s", metavar="SECONDS"),
    _option("--max-attempts", "upstream attempts per request (429s, refused or dropped connections, draining "
            "workers move it to another worker)", count(), _D.max_attempts, "router", metavar="N"),
    _option("--poll-interval", "seconds between two polls of every worker's /v1/status", seconds(),
            _D.poll_interval_s, "router", "poll_interval_s", metavar="SECONDS"),
    _option("--dns-refresh", "seconds between two DNS lookups of each --service (every poll while a request is "
            "held)", seconds(), _D.dns_refresh_s, "router", "dns_refresh_s", metavar="SECONDS"),
    _option("--upstream-timeout", "seconds a worker may take to answer one attempt (then 504)", seconds(),
            _D.upstream_timeout_s, "router", "upstream_timeout_s", metavar="SECONDS"),
    _option("--max-body-bytes", "request body limit (the decompressed size on body-routed paths)", positive_size,
            _D.max_body_bytes, "router", metavar="SIZE"),
    _option("--max-buffered-body-bytes", "request bodies of all connections together held in memory (more: 429 "
            "with Retry-After)", positive_size, _D.max_buffered_body_bytes, "router", metavar="SIZE"),
    _option("--max-connections", "client connections served at once; at the limit an idle one makes room, "
            "else 503 with Retry-After", count(), _D.max_connections, "router", metavar="N"),
    _option("--probe-connections", "connections beyond --max-connections kept just long enough to answer "
            "/healthz and /readyz", count(0), _D.probe_connections, "router", metavar="N"),
    _option("--head-timeout", "a request head must arrive whole within this long of its first byte",
            seconds(), _D.head_timeout_s, "router", "head_timeout_s", metavar="SECONDS"),
    _option("--keepalive-timeout", "how long a connection may wait for its next request (a new one: for its "
            "first)", seconds(), _D.keepalive_timeout_s, "router", "keepalive_timeout_s", metavar="SECONDS"),
    _option("--body-idle-timeout", "longest pause while a request body arrives (then 408)", seconds(),
            _D.body_idle_timeout_s, "router", "body_idle_timeout_s", metavar="SECONDS"),
    _option("--body-timeout", "longest time a whole request body may take to arrive (then 408)", seconds(),
            _D.body_timeout_s, "router", "body_timeout_s", metavar="SECONDS"),
    _option("--send-timeout", "longest a connection may leave an answer unread before it is closed", seconds(),
            _D.send_timeout_s, "router", "send_timeout_s", metavar="SECONDS"),
    _option("--shutdown-timeout", "after SIGTERM, seconds to finish accepted requests", seconds(), 60.0,
            metavar="SECONDS"),
    _option("--api-key", "accepted bearer key; repeatable (SIE_API_KEYS: comma-separated, accepted besides the "
            "flags' keys)", text, (), "router", "api_keys", metavar="KEY", repeat=True, env="SIE_API_KEYS",
            env_adds=True),
    _option("--api-key-file", "file of accepted keys (one per line), re-read when it changes", existing_file, None,
            "router", metavar="PATH"),
    _option("--admin-key-file", "file of admin keys (one per line) for /v1/configs/models, re-read when it changes; "
            "the workers need the same file: the router calls them with its first key", existing_file, None,
            "router", metavar="PATH"),
    _option("--config-dir", "where the router keeps the runtime cards it replays to workers that lack them",
            directory, None, "router", metavar="DIR", default_text="none: in memory"),
    _option("--queue", "queue mode: publish work to each --pool's NATS JetStream stream (engines pull it with "
            "their own --queue) instead of calling workers; needs the `queue` extra", nats_url, None, "router",
            "queue_url", metavar="URL", default_text="off: direct mode"),
    _option("--queue-ack-wait", "queue mode: seconds without an engine's heartbeat before its message goes to "
            "another engine", seconds(), _D.queue_ack_wait_s, "router", "queue_ack_wait_s", metavar="SECONDS"),
    _option("--queue-max-deliver", "queue mode: deliveries of a message before it goes to the pool's dead-letter "
            "stream and its client gets 503", count(), _D.queue_max_deliver, "router", metavar="N"),
    _option("--queue-dead-letter-max", "queue mode: messages each pool's dead-letter stream keeps (the oldest go "
            "first; and none older than 7 days)", count(), _D.queue_dead_letter_max, "router", metavar="N"),
    _option("--log-level", "debug, info, warning or error", choice("debug", "info", "warning", "error"), "info",
            metavar="LEVEL"),
)
