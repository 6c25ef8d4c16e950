"""Real `sie-server serve` subprocesses for tests (reusable by any test module).

    from server_fixtures import server_fixture, metric_value

    server = server_fixture("--preload", "sentence-transformers/all-MiniLM-L6-v2")   # module-scoped fixture

    def test_x(server):
        httpx.post(server.url + "/v1/encode/sentence-transformers/all-MiniLM-L6-v2", json={"items": ["hi"]})

`server_fixture(*args, scope="module", env=None)` returns a pytest fixture that
starts `sie-server serve --host 127.0.0.1 --port 0 *args`, waits for /readyz,
yields a `sie_server.launch.ServerProcess` (`.url`, `.pid`, `.log_text()`,
`.stop()`), and stops it with SIGTERM at the end of the scope. `start_server` is
`sie_server.launch.start_server` forked from a zygote that has imported torch already. Start one server
per module and share it: each start costs several seconds (torch import,
tokenizer and model load). `DEFAULT_MODEL` and `default_server` (a module-scoped
fixture with the default model preloaded) cover the common case.
"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

import server_zygote
from sie_server.launch import ServerProcess
from sie_server.launch import start_server as start_fresh_server

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def start_server(*args: str, **options) -> ServerProcess:
    """`sie_server.launch.start_server`, forked from this test process's zygote where it can be
    (server_zygote.py: a second instead of ten CPU-seconds of imports per server)."""
    return start_fresh_server(*args, spawn=server_zygote.spawn, **options)


def server_fixture(*args: str, scope: str = "module", env: dict[str, str] | None = None):
    @pytest.fixture(scope=scope)
    def _server(tmp_path_factory):
        process = start_server(*args, env=env, log_dir=tmp_path_factory.mktemp("sie-server"))
        try:
            yield process
        finally:
            code = process.stop()
            if code != 0:
                print(process.log_text())

    return _server


default_server = server_fixture("--preload", DEFAULT_MODEL)


def metric_samples(text: str) -> list:
    """All samples in a Prometheus exposition."""
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def metric_value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples called `name` whose labels include `labels` (0.0 if none)."""
    return sum(s.value for s in metric_samples(text)
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def peak_rss(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")


def slowest_healthz_while(url: str, senders: list) -> float:
    """Start the `senders` threads, poll `url`'s /healthz (each answer must be 200) until they
    have all ended, join them, and return the slowest /healthz in seconds."""
    import time

    import httpx

    for sender in senders:
        sender.start()
    slowest = 0.0
    with httpx.Client(base_url=url, timeout=10) as client:
        while any(sender.is_alive() for sender in senders):
            started = time.monotonic()
            assert client.get("/healthz").status_code == 200
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.05)
    for sender in senders:
        sender.join()
    return slowest


__all__ = ["DEFAULT_MODEL", "ServerProcess", "default_server", "metric_samples", "metric_value", "peak_rss",
           "server_fixture", "slowest_healthz_while", "start_server"]
