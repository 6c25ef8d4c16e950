"""The router's pure parts: worker choice, status parsing, discovery, command line."""

from __future__ import annotations

import argparse
import time

import pytest

from sie_server.router.cli import add_router_parser, config_from_args
from sie_server.router.config import PoolService
from sie_server.router.discovery import resolve_service
from sie_server.router.selection import choose_worker
from sie_server.router.worker import Worker

M = "sentence-transformers/all-MiniLM-L6-v2"
GRACE = 10.0


def _worker(url, pool="cpu", models=None, queued_items=0, queued_tokens=0, **state):
    w = Worker(url=url)
    w.apply_status({"ready": True, "draining": False, "pool": pool, "queued_items": queued_items,
                    "queued_tokens": queued_tokens,
                    "models": {m: {"state": s} for m, s in (models or {}).items()}})
    for k, v in state.items():
        setattr(w, k, v)
    return w


def test_affinity_beats_an_idle_worker():
    now = time.monotonic()
    warm = _worker("http://b", models={M: "loaded"}, queued_items=5, queued_tokens=900)
    idle = _worker("http://a", models={M: "available"})
    assert choose_worker([idle, warm], "cpu", M, now, GRACE) is warm
    # Among warm workers, the shortest queue (router in-flight counts too).
    warm2 = _worker("http://c", models={M: "loading"}, queued_items=1)
    assert choose_worker([idle, warm, warm2], "cpu", M, now, GRACE) is warm2
    warm2.inflight = 10
    assert choose_worker([idle, warm, warm2], "cpu", M, now, GRACE) is warm


def test_cold_model_goes_to_the_least_loaded_worker_then_sticks():
    now = time.monotonic()
    busy = _worker("http://a", queued_items=3)
    crowded = _worker("http://b", models={"x": "loaded", "y": "loaded"})
    light = _worker("http://c", models={"x": "loaded"})
    chosen = choose_worker([busy, crowded, light], "cpu", M, now, GRACE)
    assert chosen is light  # empty queue, fewest resident models
    # Once sent there, it sticks before any status poll shows the load.
    light.assigned[M] = now
    light.inflight = 5
    assert choose_worker([busy, crowded, light], "cpu", M, now, GRACE) is light
    assert choose_worker([busy, crowded, light], "cpu", M, now + GRACE + 1, GRACE) is not light


def test_pools_exclusions_and_unavailable_workers():
    now = time.monotonic()
    gpu = _worker("http://g", pool="gpu", models={M: "loaded"})
    cpu = _worker("http://c", pool="cpu")
    assert choose_worker([gpu, cpu], "cpu", M, now, GRACE) is cpu
    assert choose_worker([gpu, cpu], "gpu", M, now, GRACE) is gpu
    assert choose_worker([gpu, cpu], None, M, now, GRACE) is gpu
    assert choose_worker([gpu, cpu], "tpu", M, now, GRACE) is None
    assert choose_worker([gpu, cpu], "gpu", M, now, GRACE, exclude=frozenset({"http://g"})) is None
    draining = _worker("http://d", draining=True)
    down = _worker("http://e")
    down.mark_down()
    busy = _worker("http://f")
    busy.mark_busy(30)
    assert choose_worker([draining, down, busy], "cpu", M, time.monotonic(), GRACE) is None
    assert choose_worker([busy], "cpu", M, time.monotonic() + 31, GRACE) is busy


def test_status_parsing_and_discovery_label():
    w = Worker(url="http://x", configured_pool="l4")
    w.apply_status({"ready": True, "draining": False, "pool": "default", "queued_tokens": 7,
                    "queued_items": 2, "models": {M: {"state": "loaded", "queued_tokens": 7}}})
    assert w.pool == "l4"  # the headless service it was found behind wins
    assert (w.up, w.ready, w.queued_tokens, w.queued_items) == (True, True, 7, 2)
    assert w.has_model(M, time.monotonic(), GRACE) and w.resident_models() == 1
    unlabelled = Worker(url="http://y")
    unlabelled.apply_status({"ready": False, "pool": "a100", "models": {}})
    assert unlabelled.pool == "a100" and not unlabelled.available(time.monotonic())


async def test_dns_discovery_of_a_headless_service():
    urls = await resolve_service(PoolService(pool="cpu", host="localhost", port=8081))
    assert "http://127.0.0.1:8081" in urls or "http://[::1]:8081" in urls
    # A headless service with no endpoints has no records: zero workers, not an error.
    assert await resolve_service(PoolService(pool="cpu", host="no-such-pool.invalid", port=8080)) == set()


def _parse(*argv):
    parser = argparse.ArgumentParser(prog="sie-server")
    add_router_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["router", *argv])


def test_command_line(monkeypatch):
    monkeypatch.setenv("SIE_API_KEYS", "k1, k2")
    args = _parse("--worker", "http://10.0.0.1:8080/", "--worker", "gpu=http://10.0.0.2:8080",
                  "--service", "l4=sie-engine-l4.ns.svc.cluster.local:8080", "--pool", "spare",
                  "--default-pool", "gpu", "--hold-timeout", "2.5", "--api-key", "k0")
    config = config_from_args(args)
    assert [(w.url, w.pool) for w in config.workers] == [("http://10.0.0.1:8080", None),
                                                         ("http://10.0.0.2:8080", "gpu")]
    assert config.services == (PoolService("l4", "sie-engine-l4.ns.svc.cluster.local", 8080),)
    assert config.known_pools() == {"gpu", "l4", "spare"}
    assert config.hold_timeout_s == 2.5
    assert config.api_keys == frozenset({"k0", "k1", "k2"})
    assert args.func is not None


@pytest.mark.parametrize("argv, message", [
    (("--worker", "10.0.0.1:8080"), "expected [POOL=]http://HOST:PORT"),
    (("--service", "sie-engine:8080"), "expected POOL=HOST:PORT"),
    (("--worker", "http://a:1", "--hold-timeout", "0"), "must be > 0"),
])
def test_command_line_errors_say_what_to_fix(argv, message, capsys):
    with pytest.raises(SystemExit):
        _parse(*argv)
    assert message in capsys.readouterr().err


def test_a_router_needs_workers():
    with pytest.raises(SystemExit, match="--worker or --service"):
        config_from_args(_parse())
