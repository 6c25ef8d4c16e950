"""The admin API through the router (issue #32.3): a card posted to the router is checked there,
kept there, sent to every worker in its list, and replayed to a worker that joins later; the
answer says which workers applied it. Two real workers (`sie-server serve`) and a real router;
the second worker starts only after the first card was posted (a pod that joins later). The
card serves the installed all-MiniLM-L6-v2 files under a new id (nothing to build in this process):
what is compared here is the router's answer against a worker's own
(tests/server/test_runtime_config.py compares a runtime card's vectors with transformers').
"""

from __future__ import annotations

import time

import httpx
import pytest

from router_fixtures import free_port, start_router, start_workers
from server_fixtures import start_server
from tiny_models import MINILM_DIR

ADMIN_KEY = "router-admin"
API_KEY = "router-user"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
USER = {"Authorization": f"Bearer {API_KEY}"}
CONFIGS = "/v1/configs/models"
ITEMS = {"items": ["the capital of France is Paris", "bananas are yellow"]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("router-runtime")
    (tmp / "admin.keys").write_text(ADMIN_KEY + "\n")
    root = MINILM_DIR
    late_port = free_port()
    worker_args = ["--no-builtin", "--device", "cpu", "--pool", "cpu", "--api-key", API_KEY,
                   "--admin-key-file", str(tmp / "admin.keys")]
    (first,) = start_workers([worker_args], tmp_path_factory)
    late_url = f"http://127.0.0.1:{late_port}"
    router_args = [f"--worker={first.url}", f"--worker=cpu={late_url}", "--poll-interval=0.5", "--api-key", API_KEY,
                   "--admin-key-file", str(tmp / "admin.keys"), "--config-dir", str(tmp / "router-config")]
    (tmp / "router-log0").mkdir()
    router = start_router(router_args, tmp / "router-log0")
    state = {"router": router, "workers": [first], "root": root, "tmp": tmp, "late_port": late_port,
             "late_url": late_url, "worker_args": worker_args, "router_args": router_args}
    try:
        yield state
    finally:
        state["router"].stop()
        for worker in state["workers"]:
            worker.stop()


def card(root, **fields) -> dict:
    return {"id": "runtime-tiny", "weights": {"path": str(root)}, "family": "bert", "max_seq_len": 128,
            "max_batch_tokens": 512, **fields}


def runtime_ids(url: str) -> list[str]:
    return [c["id"] for c in httpx.get(url + CONFIGS, headers=ADMIN, timeout=10).json()["models"]]


def test_the_router_wants_the_admin_key(cluster):
    url = cluster["router"].url
    for headers in ({}, USER):
        assert httpx.get(url + CONFIGS, headers=headers).status_code == 401
        assert httpx.post(url + CONFIGS, json=card(cluster["root"]), headers=headers).status_code == 401
    assert runtime_ids(cluster["workers"][0].url) == []


def test_a_router_without_an_admin_key_file_answers_403_saying_how_to_enable_it():
    """In-process: a router whose one worker is down (nothing is reached), without --admin-key-file."""
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from sie_server.router.app import create_router_app
    from sie_server.router.config import RouterConfig, StaticWorker

    async def calls() -> list[tuple[int, dict]]:
        config = RouterConfig(workers=(StaticWorker(f"http://127.0.0.1:{free_port()}"),), status_timeout_s=0.5)
        async with TestClient(TestServer(create_router_app(config))) as client:
            answers = [await client.get(CONFIGS, headers=ADMIN), await client.post(CONFIGS, json={"id": "x"}),
                       await client.delete(CONFIGS + "/x", headers=ADMIN)]
            return [(a.status, await a.json()) for a in answers]

    for status, body in asyncio.run(calls()):
        assert status == 403 and body["error"]["code"] == "forbidden", body
        assert "--admin-key-file" in body["error"]["message"]


def test_an_invalid_card_is_refused_at_the_router_and_reaches_no_worker(cluster):
    answer = httpx.post(cluster["router"].url + CONFIGS, json=[card(cluster["root"]), {"id": "x", "pooling": "median"}],
                        headers=ADMIN)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith("invalid model card body[1]: card x: pooling 'median'")
    assert runtime_ids(cluster["router"].url) == [] and runtime_ids(cluster["workers"][0].url) == []


def test_a_card_is_propagated_and_the_answer_names_the_workers(cluster):
    router, (first,) = cluster["router"], cluster["workers"]
    answer = httpx.post(router.url + CONFIGS, json=card(cluster["root"]), headers=ADMIN, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"models": ["runtime-tiny"], "applied": [first.url], "failed": [],
                             "pending": [cluster["late_url"]]}  # the second worker is not up yet
    assert runtime_ids(first.url) == ["runtime-tiny"]
    routed = httpx.post(router.url + "/v1/encode/runtime-tiny", json=ITEMS, headers=USER, timeout=60)
    direct = httpx.post(first.url + "/v1/encode/runtime-tiny", json=ITEMS, headers=USER, timeout=60)
    assert routed.status_code == 200 and routed.headers["X-SIE-Worker"] == first.url
    assert routed.json()["items"] == direct.json()["items"]


def test_a_worker_that_joins_later_gets_the_cards(cluster, tmp_path_factory):
    late = start_server(*cluster["worker_args"], "--port", str(cluster["late_port"]),
                        log_dir=tmp_path_factory.mktemp("late-worker"))
    cluster["workers"].append(late)
    deadline = time.monotonic() + 20
    while runtime_ids(late.url) != ["runtime-tiny"]:
        assert time.monotonic() < deadline, cluster["router"].log.read_text()[-3000:]
        time.sleep(0.2)
    first = cluster["workers"][0]
    # the same card: the same digest on both workers
    digests = [httpx.get(w.url + "/v1/status", timeout=10).json()["configs"] for w in (first, late)]
    assert digests[0] == digests[1] and set(digests[0]) == {"runtime-tiny"}
    answers = [httpx.post(w.url + "/v1/encode/runtime-tiny", json=ITEMS, headers=USER, timeout=60).json()["items"]
               for w in (first, late)]
    assert answers[0] == answers[1]  # same weights, same card: the same vectors


def test_the_router_keeps_its_cards_across_a_restart(cluster):
    cluster["router"].stop()
    log_dir = cluster["tmp"] / "router-log1"
    log_dir.mkdir()
    cluster["router"] = start_router(cluster["router_args"], log_dir)
    assert runtime_ids(cluster["router"].url) == ["runtime-tiny"]


def test_a_delete_reaches_every_worker(cluster):
    router, workers = cluster["router"], cluster["workers"]
    answer = httpx.delete(router.url + CONFIGS + "/runtime-tiny", headers=ADMIN, timeout=30)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["removed"] == "runtime-tiny" and sorted(body["applied"]) == sorted(w.url for w in workers)
    assert body["failed"] == [] and body["pending"] == []
    assert [runtime_ids(w.url) for w in workers] == [[], []]
    assert httpx.post(router.url + "/v1/encode/runtime-tiny", json=ITEMS, headers=USER, timeout=30).status_code == 404
    assert httpx.delete(router.url + CONFIGS + "/runtime-tiny", headers=ADMIN).status_code == 404
