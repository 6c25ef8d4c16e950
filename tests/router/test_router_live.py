"""The router in front of two real engine workers (`sie-server serve`, real all-MiniLM-L6-v2).

One router subprocess (`sie-server router`) and two workers of pool "cpu" on loopback
ports, shared by the module. The router also knows a pool "gpu" that has no worker (a pool
scaled to zero). The worker-kill test runs last: it kills one of the two workers.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import msgpack
import numpy as np
import pytest

from checkout import REPO
from dev_corpus import load_docs
from helm_tools import chart_metric_names, exposed_metric_names, render_chart
from router_fixtures import start_router, start_workers
from server_fixtures import DEFAULT_MODEL, metric_value

MODEL = DEFAULT_MODEL
ENCODE = f"/v1/encode/{MODEL}"
HOLD_S = 1.5


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two workers of pool "cpu" (model not preloaded) and a router that also knows pool "gpu"."""
    workers = start_workers([["--pool", "cpu", "--memory-budget", "1GiB"]] * 2, tmp_path_factory)
    router = None
    try:
        router = start_router([*[f"--worker={w.url}" for w in workers], "--pool=gpu", "--default-pool=cpu",
                               f"--hold-timeout={HOLD_S}", "--retry-after=2", "--poll-interval=0.2",
                               "--max-attempts=4"], tmp_path_factory.mktemp("router"))
        yield router, workers
    finally:
        if router is not None:
            router.stop()
        for w in workers:
            w.stop()


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [d["text"] for d in load_docs(64)]


def _encode(client: httpx.Client, url: str, texts: list[str], **headers) -> httpx.Response:
    return client.post(url + ENCODE, json={"items": [{"text": t} for t in texts]}, headers=headers, timeout=120)


def _model_state(worker_url: str) -> str:
    return httpx.get(f"{worker_url}/v1/models/{MODEL}", timeout=5).json()["state"]


def test_affinity_loads_a_model_on_one_worker_only(cluster, texts):
    router, workers = cluster
    assert {_model_state(w.url) for w in workers} == {"available"}
    # A concurrent burst before any status poll can show the model loading anywhere.
    with httpx.Client() as client, ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: _encode(client, router.url, texts[i:i + 2]), range(8)))
    assert [a.status_code for a in answers] == [200] * 8, [a.text for a in answers]
    served_by = {a.headers["X-SIE-Worker"] for a in answers}
    assert len(served_by) == 1, served_by
    states = {w.url: _model_state(w.url) for w in workers}
    (holder,) = served_by
    assert states[holder] == "loaded"
    assert [s for u, s in states.items() if u != holder] == ["available"]
    # The router's answer is the worker's: same ids and vectors as a direct call (to batch
    # noise: the burst was packed with other requests, the direct call runs alone).
    with httpx.Client() as client:
        direct = _encode(client, holder, texts[0:2]).json()
    routed = answers[0].json()
    assert [i["id"] for i in routed["items"]] == [i["id"] for i in direct["items"]]
    assert routed["usage"] == direct["usage"]
    np.testing.assert_allclose([i["dense"] for i in routed["items"]],
                               [i["dense"] for i in direct["items"]], atol=1e-5)
    assert len(direct["items"][0]["dense"]) == 384
    # The router's view agrees (status polls every 0.2 s).
    time.sleep(0.5)
    view = router.workers()
    assert view[holder]["models"][MODEL] == "loaded"
    assert all(v["pool"] == "cpu" and v["ready"] for v in view.values())


def test_msgpack_passes_through(cluster, texts):
    router, _ = cluster
    body = msgpack.packb({"items": [{"text": texts[0]}]})
    answer = httpx.post(router.url + ENCODE, content=body, timeout=60,
                        headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"})
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].startswith("application/msgpack")
    decoded = msgpack.unpackb(answer.content)
    tensor = decoded["items"][0]["dense"]
    vector = np.frombuffer(tensor["data"], dtype=tensor["dtype"]).reshape(tensor["shape"])
    as_json = httpx.post(router.url + ENCODE, json={"items": [{"text": texts[0]}]}, timeout=60).json()
    np.testing.assert_allclose(vector, np.asarray(as_json["items"][0]["dense"], dtype=np.float32), atol=1e-6)
    assert answer.headers["X-Request-Id"]


def test_openai_embeddings_route_by_model_in_body(cluster, texts):
    router, _ = cluster
    answer = httpx.post(router.url + "/v1/embeddings", json={"model": MODEL, "input": texts[:2]}, timeout=60)
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["data"]) == 2
    holder = {u for u, w in router.workers().items() if w["models"].get(MODEL) == "loaded"}
    assert answer.headers["X-SIE-Worker"] in holder


def test_pool_without_ready_worker_holds_then_503(cluster):
    router, _ = cluster
    result: dict = {}

    def held_request():
        start = time.monotonic()
        result["answer"] = httpx.post(router.url + ENCODE, json={"items": [{"text": "x"}]},
                                      headers={"X-SIE-Pool": "gpu"}, timeout=30)
        result["elapsed"] = time.monotonic() - start

    thread = threading.Thread(target=held_request)
    thread.start()
    time.sleep(HOLD_S / 2)
    pending_while_held = metric_value(router.metrics(), "sie_router_pending_requests", pool="gpu", model=MODEL)
    thread.join()
    assert pending_while_held == 1.0
    answer = result["answer"]
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "no_worker"
    assert answer.headers["Retry-After"] == "2"
    assert result["elapsed"] >= HOLD_S
    text = router.metrics()
    assert metric_value(text, "sie_router_pending_requests", pool="gpu", model=MODEL) == 0.0
    assert metric_value(text, "sie_router_queue_seconds_sum", pool="gpu") >= HOLD_S
    assert metric_value(text, "sie_router_requests_total", pool="gpu", status="503") >= 1
    assert metric_value(text, "sie_router_workers_ready", pool="gpu") == 0
    # The client's deadline bounds the hold too.
    start = time.monotonic()
    late = httpx.post(router.url + ENCODE, json={"items": [{"text": "x"}]},
                      headers={"X-SIE-Pool": "gpu", "X-SIE-Timeout-Ms": "300"}, timeout=30)
    assert late.status_code == 504 and late.json()["error"]["code"] == "deadline_exceeded"
    assert 0.3 <= time.monotonic() - start < HOLD_S
    # A pool nobody configured is a client error, at once.
    unknown = httpx.post(router.url + ENCODE, json={"items": [{"text": "x"}]},
                         headers={"X-SIE-Pool": "tpu"}, timeout=10)
    assert unknown.status_code == 400 and "tpu" in unknown.json()["error"]["message"]


def test_worker_errors_pass_through(cluster):
    router, _ = cluster
    bad = httpx.post(router.url + ENCODE, json={"items": "not a list"}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
    missing = httpx.post(router.url + "/v1/encode/no-such/model", json={"items": [{"text": "x"}]}, timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    route = httpx.get(router.url + "/v1/nothing-here", timeout=5)
    assert route.status_code == 404 and route.json()["error"]["code"] == "not_found"
    models = httpx.get(router.url + "/v1/models", timeout=30)
    assert models.status_code == 200 and MODEL in {m["id"] for m in models.json()["data"]}


def test_router_and_worker_metrics_agree(cluster, texts):
    router, workers = cluster

    def totals():
        r = metric_value(router.metrics(), "sie_router_requests_total", pool="cpu", model=MODEL, status="200")
        w = sum(metric_value(httpx.get(x.url + "/metrics", timeout=5).text, "sie_requests_total",
                             model=MODEL, status="200") for x in workers)
        return r, w

    router_before, workers_before = totals()
    with httpx.Client() as client, ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda i: _encode(client, router.url, texts[i:i + 1]), range(12)))
    assert all(a.status_code == 200 for a in answers)
    router_after, workers_after = totals()
    assert router_after - router_before == 12
    assert workers_after - workers_before == 12
    text = router.metrics()
    for w in workers:
        assert metric_value(text, "sie_router_worker_up", worker=w.url, pool="cpu") == 1
    assert metric_value(text, "sie_router_workers_ready", pool="cpu") == 2
    assert metric_value(text, "sie_router_request_duration_seconds_count", pool="cpu") >= 12


def test_chart_metric_names_exist_in_live_metrics(cluster):
    """Every metric the KEDA triggers, alerts and dashboard query is exposed by SIE itself."""
    router, workers = cluster
    engine_names = exposed_metric_names(httpx.get(workers[0].url + "/metrics", timeout=5).text)
    router_names = exposed_metric_names(router.metrics())
    for values in ((), ("values-gpu.yaml",)):
        used = chart_metric_names(render_chart(*values))
        assert used["keda"] and used["alerts"] and used["dashboard"]
        for where, names in used.items():
            for name in sorted(names):
                exposed = router_names if name.startswith("sie_router_") else engine_names
                assert name in exposed, f"{where} uses {name}, which no live /metrics exposes"


def test_router_metrics_match_the_contract(cluster):
    """docs/api.md's router table: every name, type and label set, and nothing else sie_router_*."""
    from prometheus_client.parser import text_string_to_metric_families

    router, _ = cluster
    api = (REPO / "docs" / "api.md").read_text()
    table = api[api.index("Router (`sie-server router`)"):]
    contract = {}
    for name, kind, labels in re.findall(r"^\| `(sie_router_\w+)` \| (\w+) \| ([^|]*) \|", table, re.M):
        contract[name.removesuffix("_total") if kind == "counter" else name] = (
            kind, {label.strip() for label in labels.split(",") if label.strip()})
    families = {f.name: f for f in text_string_to_metric_families(router.metrics())
                if f.name.startswith("sie_router_") and not f.name.endswith("_created")}
    assert set(families) == set(contract)
    for name, (kind, labels) in contract.items():
        family = families[name]
        assert family.type == kind, name
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == labels, (name, sample)


def test_killing_a_worker_mid_load_loses_no_request(cluster, texts):
    router, workers = cluster
    holder_url = next(u for u, w in router.workers().items() if w["models"].get(MODEL) == "loaded")
    victim = next(w for w in workers if w.url == holder_url)
    survivor = next(w for w in workers if w.url != holder_url)
    reference = httpx.post(holder_url + ENCODE, json={"items": [{"text": t} for t in texts[:4]]},
                           timeout=60).json()["items"]
    batches = [texts[(4 * i) % 48:(4 * i) % 48 + 8] for i in range(12)]  # ~700 tokens each
    batches[0] = texts[:4]

    with httpx.Client() as client, ThreadPoolExecutor(12) as pool:
        futures = [pool.submit(_encode, client, router.url, b) for b in batches]
        # Kill the worker that holds the model while its queue is full of accepted requests.
        time.sleep(0.5)
        inflight = router.workers()[victim.url]["inflight"]
        victim.signal(signal.SIGKILL)
        answers = [f.result() for f in futures]

    assert inflight > 0, "the kill must hit requests in flight"
    assert [a.status_code for a in answers] == [200] * len(batches), [a.text[:200] for a in answers]
    for batch, answer in zip(batches, answers):
        assert len(answer.json()["items"]) == len(batch)
    assert survivor.url in {a.headers["X-SIE-Worker"] for a in answers}
    # The retried answers are the same embeddings, computed by the other worker.
    got = np.asarray([i["dense"] for i in answers[0].json()["items"]])
    np.testing.assert_allclose(got, np.asarray([i["dense"] for i in reference]), atol=1e-5)
    text = router.metrics()
    assert metric_value(text, "sie_router_retries_total", pool="cpu") >= 1
    failed = sum(metric_value(text, "sie_router_upstream_errors_total", worker=victim.url, kind=k)
                 for k in ("connect", "disconnect"))
    assert failed >= 1
    assert _model_state(survivor.url) == "loaded"
    time.sleep(0.5)
    assert metric_value(router.metrics(), "sie_router_worker_up", worker=victim.url, pool="cpu") == 0
    assert "retrying elsewhere" in router.log.read_text()
