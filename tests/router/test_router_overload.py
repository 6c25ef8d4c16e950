"""Back-pressure through the router, with real workers.

Worker "tight" has the model preloaded (so affinity sends it every request) and a small
queue bound (`--max-queued-tokens`), so a burst gets real 429s from it; worker "roomy"
starts cold. The router must retry those 429s on "roomy" and answer every request. Then
"tight" is drained (SIGTERM) in the middle of a flood: every request is answered, by "tight"
(what it accepted) or "roomy", and "tight" leaves the rotation (issue 32.4, direct mode).
"""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from dev_corpus import load_docs
from router_fixtures import start_router, start_workers
from server_fixtures import DEFAULT_MODEL, metric_value

MODEL = DEFAULT_MODEL
ENCODE = f"/v1/encode/{MODEL}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tight, roomy = start_workers(
        [["--pool", "cpu", "--preload", MODEL, "--max-queued-tokens", "700", "--drain-timeout", "10"],
         ["--pool", "cpu"]], tmp_path_factory)
    router = None
    try:
        router = start_router([f"--worker={tight.url}", f"--worker={roomy.url}", "--default-pool=cpu",
                               "--hold-timeout=20", "--poll-interval=0.2", "--max-attempts=6"],
                              tmp_path_factory.mktemp("router"))
        yield router, tight, roomy
    finally:
        if router is not None:
            router.stop()
        tight.stop()
        roomy.stop()


@pytest.fixture(scope="module")
def batches() -> list[list[str]]:
    texts = [d["text"] for d in load_docs(48)]
    return [texts[i:i + 4] for i in range(0, 48, 4)]  # 12 requests of ~300 tokens


def _encode(client: httpx.Client, url: str, texts: list[str]) -> httpx.Response:
    return client.post(url + ENCODE, json={"items": [{"text": t} for t in texts]}, timeout=120)


def test_worker_429s_are_retried_on_another_worker(cluster, batches):
    router, tight, roomy = cluster
    with httpx.Client() as client, ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda b: _encode(client, router.url, b), batches))
    assert [a.status_code for a in answers] == [200] * len(batches), [a.text[:200] for a in answers]
    for batch, answer in zip(batches, answers):
        assert len(answer.json()["items"]) == len(batch)
    served_by = {a.headers["X-SIE-Worker"] for a in answers}
    assert served_by == {tight.url, roomy.url}
    text = router.metrics()
    assert metric_value(text, "sie_router_upstream_errors_total", worker=tight.url, kind="overloaded") >= 1
    assert metric_value(text, "sie_router_retries_total", pool="cpu") >= 1
    # The worker really refused them (its own admission counter), and the router's answers
    # are all 200: no 429 reached the client.
    tight_metrics = httpx.get(tight.url + "/metrics", timeout=5).text
    assert metric_value(tight_metrics, "sie_rejected_total", model=MODEL) >= 1
    assert metric_value(text, "sie_router_requests_total", status="429") == 0


def test_workers_found_through_dns_like_a_headless_service(cluster, batches, tmp_path):
    """`--service POOL=HOST:PORT`: the worker set is whatever the name resolves to.
    This router also requires an API key (the worker does not)."""
    _, _, roomy = cluster
    port = roomy.url.rsplit(":", 1)[1]
    router = start_router([f"--service=cpu=localhost:{port}", "--default-pool=cpu", "--poll-interval=0.2",
                           "--hold-timeout=5", "--api-key=router-key"], tmp_path)
    auth = {"Authorization": "Bearer router-key"}
    try:
        # Health, readiness and metrics are open; the API needs the key.
        assert httpx.get(router.url + "/metrics", timeout=5).status_code == 200
        refused = httpx.post(router.url + ENCODE, json={"items": [{"text": "x"}]}, timeout=10)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
        view = httpx.get(router.url + "/v1/router/workers", headers=auth, timeout=5).json()
        view = {w["url"]: w for w in view["workers"]}
        assert f"http://127.0.0.1:{port}" in view
        assert view[f"http://127.0.0.1:{port}"]["pool"] == "cpu"
        answer = httpx.post(router.url + ENCODE, json={"items": [{"text": batches[0][0]}]}, headers=auth,
                            timeout=60)
        assert answer.status_code == 200
        assert answer.headers["X-SIE-Worker"] == f"http://127.0.0.1:{port}"
    finally:
        router.stop()


def test_a_worker_drained_mid_flood_loses_no_request_and_leaves_the_rotation(cluster, batches):
    """A pool's pod told to stop (SIGTERM, a spot node's notice) while requests are in flight on it:
    it answers what it accepted, the router sends the rest to the other worker, nothing is lost."""
    router, tight, roomy = cluster
    with httpx.Client() as client, ThreadPoolExecutor(len(batches)) as pool:
        futures = [pool.submit(_encode, client, router.url, b) for b in batches]
        deadline = time.monotonic() + 30
        while router.workers()[tight.url]["inflight"] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        inflight = router.workers()[tight.url]["inflight"]
        tight.signal(signal.SIGTERM)
        answers = [f.result() for f in futures]
    assert inflight > 0, "the drain must meet requests in flight"
    assert [a.status_code for a in answers] == [200] * len(batches), [a.text[:200] for a in answers]
    assert [len(a.json()["items"]) for a in answers] == [len(b) for b in batches]
    assert tight.wait(30) == 0
    time.sleep(0.5)
    with httpx.Client() as client:
        after = [_encode(client, router.url, b) for b in batches[:2]]
    assert [a.status_code for a in after] == [200, 200] and {a.headers["X-SIE-Worker"] for a in after} == {roomy.url}
    view = router.workers()
    assert not view[tight.url]["ready"]
    assert metric_value(router.metrics(), "sie_router_workers_ready", pool="cpu") == 1
