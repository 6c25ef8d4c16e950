"""Queue mode (issue #32.2) against real parts: one `nats-server -js` on a loopback port, a real
`sie-server router --queue` and two real engines (`sie-server serve --queue`, all-MiniLM-L6-v2
preloaded) of pool "cpu" pulling from it. Pool "gpu" is known to the router and has no engine
(a pool scaled to zero): what is published there waits in its stream.

The tests run in order: the fault tests last (the engine kill, then the router kill).
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import msgpack
import nats
import numpy as np
import pytest

from dev_corpus import load_docs
from nats_fixtures import start_nats
from router_fixtures import start_router, start_workers
from server_fixtures import DEFAULT_MODEL, metric_value, start_server
from tiny_models import MINILM_DIR

ENCODE = f"/v1/encode/{DEFAULT_MODEL}"
ACK_WAIT_S = 1.5
MAX_DELIVER = 2
ADMIN_KEY = "queue-admin"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
CONFIGS = "/v1/configs/models"
ITEMS = 4  # per flood request: about 300 tokens, so a 2-core box answers a flood in seconds


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("queue")
    (tmp / "admin.keys").write_text(ADMIN_KEY + "\n")
    server = start_nats(tmp)
    router = None
    engines: list = []
    router_args = ["--queue", server.url, "--pool", "cpu", "--pool", "gpu", "--default-pool", "cpu",
                   "--hold-timeout", "30", f"--queue-ack-wait={ACK_WAIT_S}", f"--queue-max-deliver={MAX_DELIVER}",
                   "--admin-key-file", str(tmp / "admin.keys")]
    engine_args = ["--pool", "cpu", "--queue", server.url, "--preload", DEFAULT_MODEL, "--memory-budget", "1GiB",
                   "--admin-key-file", str(tmp / "admin.keys")]
    state = {"nats": server, "tmp": tmp, "router_args": router_args, "engine_args": engine_args}
    try:
        (tmp / "router0").mkdir()
        router = start_router(router_args, tmp / "router0")
        engines = start_workers([[*engine_args, "--config-dir", str(tmp / f"engine{i}-config")] for i in range(2)],
                                tmp_path_factory)
        state.update(router=router, engines=engines)
        yield state
    finally:
        for process in [state.get("router"), *state.get("engines", []), *state.get("extra", [])]:
            if process is not None:
                process.stop()
        server.stop()


def test_queue_mode_command_lines(tmp_path):
    """Mistakes in a queue-mode command line are one line and exit 2, before anything starts."""
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "sie_server.cli", *args], capture_output=True, text=True,
                              timeout=60)

    no_pools = run("router", "--queue", "nats://127.0.0.1:4222")
    assert no_pools.returncode == 2 and "--pool NAME" in no_pools.stderr
    bad_url = run("router", "--queue", "http://127.0.0.1:4222", "--pool", "cpu")
    assert bad_url.returncode == 2 and "nats://HOST:PORT" in bad_url.stderr
    bad_pool = run("router", "--queue", "nats://127.0.0.1:4222", "--pool", "a.b")
    assert bad_pool.returncode == 2 and "cannot name a queue" in bad_pool.stderr


def _stream_messages(url: str, stream: str) -> int:
    async def count() -> int:
        nc = await nats.connect(url)
        try:
            return (await nc.jetstream().stream_info(stream)).state.messages
        finally:
            await nc.close()

    return asyncio.run(count())


def _until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            assert value, what
            return value
        time.sleep(0.05)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [d["text"] for d in load_docs(64)]


def test_answers_equal_direct_mode(cluster, texts):
    router, engine = cluster["router"], cluster["engines"][0]
    body = {"items": [{"id": f"d{i}", "text": t} for i, t in enumerate(texts[:8])]}
    queued = httpx.post(router.url + ENCODE, json=body, timeout=60)
    direct = httpx.post(engine.url + ENCODE, json=body, timeout=60)
    assert queued.status_code == 200, queued.text
    assert queued.headers["X-SIE-Worker"] and queued.headers["X-SIE-Queue-Deliveries"] == "1"
    got, want = queued.json(), direct.json()
    assert [i["id"] for i in got["items"]] == [i["id"] for i in want["items"]]
    assert got["usage"] == want["usage"]
    np.testing.assert_allclose([i["dense"] for i in got["items"]], [i["dense"] for i in want["items"]], atol=1e-5)
    # msgpack in and out, byte for byte through the queue; a compat route with the model in its body
    packed = httpx.post(router.url + ENCODE, content=msgpack.packb(body),
                        headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"}, timeout=60)
    assert packed.status_code == 200 and packed.headers["Content-Type"].startswith("application/msgpack")
    assert [i["id"] for i in msgpack.unpackb(packed.content)["items"]] == [f"d{i}" for i in range(8)]
    openai = httpx.post(router.url + "/v1/embeddings", json={"model": DEFAULT_MODEL, "input": texts[:2]}, timeout=60)
    assert openai.status_code == 200 and len(openai.json()["data"]) == 2
    # errors are the engine's own: a bad field, an unknown model
    bad = httpx.post(router.url + ENCODE, json={"items": [{"text": "x"}], "output_types": ["nope"]}, timeout=60)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
    missing = httpx.post(router.url + "/v1/encode/no/such-model", json={"items": [{"text": "x"}]}, timeout=60)
    assert missing.status_code == 404
    models = httpx.get(router.url + "/v1/models", timeout=60)
    assert models.status_code == 200 and DEFAULT_MODEL in [m["id"] for m in models.json()["data"]]


def test_an_answer_larger_than_max_payload_comes_in_parts(cluster, texts):
    """NATS' default max_payload is 1 MiB; 512 vectors of 384 floats as JSON are about 4 MB."""
    router = cluster["router"]
    body = {"items": [{"text": texts[i % 64][:40]} for i in range(512)]}
    answer = httpx.post(router.url + ENCODE, json=body, timeout=120)
    assert answer.status_code == 200, answer.text[:300]
    assert len(answer.content) > 1.5 * 2**20
    assert len(answer.json()["items"]) == 512


def test_unknown_pool_and_a_body_over_the_queues_limit(cluster):
    router = cluster["router"]
    unknown = httpx.post(router.url + ENCODE, json={"items": [{"text": "x"}]}, headers={"X-SIE-Pool": "tpu"})
    assert unknown.status_code == 400 and "tpu" in unknown.json()["error"]["message"]
    big = httpx.post(router.url + ENCODE, json={"items": [{"text": "x" * 1024}] * 1100}, timeout=60)
    assert big.status_code == 413 and "max_payload" in big.json()["error"]["message"]


def test_deadline_passes_in_the_queue(cluster):
    """Pool "gpu" has no engine: the router answers 504 at the client's deadline, as direct mode
    does, and the message's TTL takes it out of the stream (no lag left for an autoscaler)."""
    router = cluster["router"]
    started = time.monotonic()
    answer = httpx.post(router.url + ENCODE, json={"items": [{"text": "x"}]},
                        headers={"X-SIE-Pool": "gpu", "X-SIE-Timeout-Ms": "400"}, timeout=30)
    waited = time.monotonic() - started
    assert answer.status_code == 504 and answer.json()["error"]["code"] == "deadline_exceeded", answer.text
    assert 0.35 < waited < 5, waited
    assert _stream_messages(cluster["nats"].url, "SIE_WORK_gpu") == 1
    _until(lambda: _stream_messages(cluster["nats"].url, "SIE_WORK_gpu") == 0, 5, "the expired message stays")


def test_an_engine_drops_an_expired_message(cluster):
    """A message whose deadline passed before an engine pulled it is dropped there, unanswered
    (the router answered 504 at the deadline): published here as the router would, a second late."""
    before = sum(metric_value(httpx.get(e.url + "/metrics").text, "sie_queue_messages_total", outcome="expired")
                 for e in cluster["engines"])

    async def publish_expired() -> list:
        nc = await nats.connect(cluster["nats"].url)
        replies: list = []
        inbox = nc.new_inbox()

        async def keep(message) -> None:
            replies.append(message)

        await nc.subscribe(inbox, cb=keep)
        now = time.time()
        headers = {"SIE-Reply": inbox, "SIE-Method": "POST", "SIE-Path": ENCODE, "Content-Type": "application/json",
                   "SIE-Start-By": f"{now + 30:.3f}", "SIE-Deadline": f"{now - 1:.3f}"}
        await nc.jetstream().publish("sie.work.cpu", json.dumps({"items": [{"text": "late"}]}).encode(),
                                     headers=headers)
        await asyncio.sleep(0)
        return nc, replies

    async def run() -> list:
        nc, replies = await publish_expired()
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if (await nc.jetstream().stream_info("SIE_WORK_cpu")).state.messages == 0:
                    break
                await asyncio.sleep(0.05)
            await nc.flush()
            return list(replies)
        finally:
            await nc.close()

    replies = asyncio.run(run())
    assert replies == []  # not even "started"
    _until(lambda: sum(metric_value(httpx.get(e.url + "/metrics").text, "sie_queue_messages_total", outcome="expired")
                       for e in cluster["engines"]) == before + 1, 5, "no engine counted the expired message")


def test_runtime_cards_reach_every_engine_through_nats(cluster, texts):
    router, engines = cluster["router"], cluster["engines"]
    card = {"id": "queue/runtime-minilm", "weights": {"path": str(MINILM_DIR)}, "family": "bert",
            "max_seq_len": 128, "max_batch_tokens": 512, "pooling": "mean", "normalize": True}
    posted = httpx.post(router.url + CONFIGS, json=card, headers=ADMIN, timeout=30)
    assert posted.status_code == 200, posted.text
    assert posted.json()["bucket"] == "sie_configs" and posted.json()["bucket_revision"] >= 1

    def served_everywhere(status: int) -> bool:
        return all(httpx.get(f"{e.url}/v1/models/{card['id']}", timeout=5).status_code == status for e in engines)

    _until(lambda: served_everywhere(200), 20, "an engine does not serve the runtime card")
    answer = httpx.post(f"{router.url}/v1/encode/{card['id']}", json={"items": [{"text": texts[0]}]}, timeout=60)
    direct = httpx.post(engines[1].url + ENCODE, json={"items": [{"text": texts[0]}]}, timeout=60)
    assert answer.status_code == 200, answer.text
    np.testing.assert_allclose(answer.json()["items"][0]["dense"], direct.json()["items"][0]["dense"], atol=1e-5)
    # the engines persisted it (a restarted pod serves it before the bucket is read)
    assert card["id"] in (cluster["tmp"] / "engine0-config" / "models.yaml").read_text()
    removed = httpx.delete(f"{router.url}{CONFIGS}/{card['id']}", headers=ADMIN, timeout=30)
    assert removed.status_code == 200, removed.text
    _until(lambda: served_everywhere(404), 20, "an engine still serves the removed card")
    # kept in the bucket for the next router: one card left there
    cluster["kept_card"] = {**card, "id": "queue/kept-minilm"}
    assert httpx.post(router.url + CONFIGS, json=cluster["kept_card"], headers=ADMIN, timeout=30).status_code == 200


def test_dead_letter_after_max_deliver(cluster, tmp_path_factory):
    """A message taken MAX_DELIVER times by engines that died before answering (played here by a
    puller that never acks, which is what a killed engine leaves) is moved to the dead-letter stream
    by the next engine, and its client gets 503 `dead_lettered` instead of waiting."""
    router, url = cluster["router"], cluster["nats"].url
    result: dict = {}

    def send() -> None:
        result["answer"] = httpx.post(router.url + ENCODE, json={"items": [{"text": "poison"}]},
                                      headers={"X-SIE-Pool": "gpu"}, timeout=60)

    sender = threading.Thread(target=send)
    sender.start()

    async def die_twice() -> None:
        nc = await nats.connect(url)
        try:
            subscription = await nc.jetstream().pull_subscribe_bind("engines", "SIE_WORK_gpu")
            for _ in range(MAX_DELIVER):
                (message,) = await subscription.fetch(1, timeout=10)  # redelivered after the ack wait
                assert message.metadata.num_delivered == _ + 1
        finally:
            await nc.close()

    asyncio.run(die_twice())
    gpu_engine = start_server(*[a if a != "cpu" else "gpu" for a in cluster["engine_args"]][:4],
                              log_dir=tmp_path_factory.mktemp("gpu-engine"))
    cluster.setdefault("extra", []).append(gpu_engine)
    sender.join(60)
    answer = result["answer"]
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "dead_lettered", answer.text
    assert "SIE_DEAD_gpu" in answer.json()["error"]["message"]
    # the same request would fail the same way: no Retry-After, and the client's retries stop
    assert answer.json()["error"]["retryable"] is False and "Retry-After" not in answer.headers
    assert _stream_messages(url, "SIE_DEAD_gpu") == 1
    # the engine ends the work message just after the client's answer is published (the answer may
    # reach the client first): wait for it rather than read the stream once
    _until(lambda: _stream_messages(url, "SIE_WORK_gpu") == 0, 10, "the dead-lettered message stays in the work stream")
    gpu_engine.stop()


def _flood(url: str, texts: list[str], count: int, results: list, threads: int = 12) -> None:
    def one(i: int):
        body = {"items": [{"id": f"r{i}-{j}", "text": texts[(i + j) % 64]} for j in range(ITEMS)]}
        try:
            answer = httpx.post(url + ENCODE, json=body, timeout=120)
            results[i] = (answer.status_code, answer.json(), answer.headers)
        except httpx.HTTPError as exc:
            results[i] = ("error", repr(exc), {})

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(count)))


def test_an_engine_killed_mid_flood_loses_no_request(cluster, texts):
    router, victim = cluster["router"], cluster["engines"][1]
    count = 60
    results: list = [None] * count
    flood = threading.Thread(target=_flood, args=(router.url, texts, count, results))
    flood.start()
    # kill it while it holds work: some answers from it are in, more requests are under way
    _until(lambda: sum(1 for r in results if r and r[2].get("X-SIE-Worker", "").endswith(
        ":" + victim.url.rpartition(":")[2])) >= 5, 60, "the victim answered nothing")
    victim.signal(signal.SIGKILL)
    victim.wait(10)
    # a replacement pod joins (the next test drains the keeper); it starts while the flood finishes
    (cluster["tmp"] / "replacement").mkdir()
    replacement: list = []
    joining = threading.Thread(target=lambda: replacement.append(
        start_server(*cluster["engine_args"], log_dir=cluster["tmp"] / "replacement")))
    joining.start()
    flood.join(180)
    statuses = [r[0] for r in results]
    assert statuses == [200] * count, [r for r in results if r[0] != 200][:3]
    for i, (_, body, _) in enumerate(results):  # each client got its own answer
        assert [item["id"] for item in body["items"]] == [f"r{i}-{j}" for j in range(ITEMS)]
    redelivered = [r for r in results if int(r[2]["X-SIE-Queue-Deliveries"]) > 1]
    assert redelivered, "no request was redelivered: the victim held none when it died"
    assert not [r for r in redelivered if r[2]["X-SIE-Worker"].endswith(":" + victim.url.rpartition(":")[2])]
    # each message is acked just after its answer is published: the stream empties a moment after the last answer
    _until(lambda: _stream_messages(cluster["nats"].url, "SIE_WORK_cpu") == 0, 30, "the stream kept answered work")
    joining.join(180)
    cluster["engines"][1] = replacement[0]


def test_an_engine_stopped_with_sigterm_mid_flood_loses_no_request(cluster, texts):
    """A spot node's notice: SIGTERM. The engine stops pulling, serves every message it took (also
    those of its last fetch, past its own draining gate), hands back only what it cannot serve, never
    to its own open pull request, and exits 0; every client gets its answer, none dead-lettered."""
    router, (leaving, staying) = cluster["router"], cluster["engines"]
    count = 40
    results: list = [None] * count
    flood = threading.Thread(target=_flood, args=(router.url, texts, count, results))
    flood.start()
    _until(lambda: sum(1 for r in results if r and r[2].get("X-SIE-Worker", "").endswith(
        ":" + leaving.url.rpartition(":")[2])) >= 3, 60, "the leaving engine answered nothing")
    leaving.signal(signal.SIGTERM)
    assert leaving.wait(60) == 0
    flood.join(180)
    assert [r[0] for r in results] == [200] * count, [r for r in results if r[0] != 200][:3]
    # what it took went past its own draining gate: no message of its was refused there and handed back
    assert not [line for line in leaving.log_text().splitlines() if "POST" in line and "answered 503 draining" in line]
    late = [r for r in results[count // 2:] if r[2]["X-SIE-Worker"].endswith(":" + staying.url.rpartition(":")[2])]
    assert late, "the staying engine answered none of the flood's second half"
    # each message is acked just after its answer is published: the stream empties a moment after the last answer
    _until(lambda: _stream_messages(cluster["nats"].url, "SIE_WORK_cpu") == 0, 30, "the stream kept answered work")
    cluster["engines"] = [staying]


def test_a_router_killed_mid_flood(cluster, texts):
    """What a router's death loses: the answers to the requests it held (their clients see the
    connection drop). What it does not: the work in the stream (engines finish and ack it), the
    streams and the runtime cards (the next router finds them)."""
    router, url = cluster["router"], cluster["nats"].url
    count = 40
    results: list = [None] * count
    flood = threading.Thread(target=_flood, args=(router.url, texts, count, results, 12))
    flood.start()
    _until(lambda: sum(1 for r in results if r) >= 10, 60, "nothing answered before the kill")
    router.process.send_signal(signal.SIGKILL)
    router.process.wait(10)
    flood.join(120)
    answered = [r for r in results if r[0] == 200]
    dropped = [r for r in results if r[0] == "error"]
    assert len(answered) + len(dropped) == count and answered and dropped
    _until(lambda: _stream_messages(url, "SIE_WORK_cpu") == 0, 30, "the stream kept the dead router's work")
    (cluster["tmp"] / "router1").mkdir()
    cluster["router"] = start_router(cluster["router_args"], cluster["tmp"] / "router1")
    again = httpx.post(cluster["router"].url + ENCODE, json={"items": [{"text": texts[0]}]}, timeout=60)
    assert again.status_code == 200, again.text
    listed = httpx.get(cluster["router"].url + CONFIGS, headers=ADMIN, timeout=10).json()["models"]
    assert [c["id"] for c in listed] == ["queue/kept-minilm"]
