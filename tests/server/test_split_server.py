"""`sie-server serve --frontends 2` (issue #27): two HTTP frontend processes on one port and one
engine-core process, on a real server and tiny random models (a dense encoder, a cross-encoder,
a GLiNER extractor).

What one process promises holds across them: answers equal the engine's own (an Engine in this
process on the same weights); /metrics counts every frontend's requests and the engine's batches;
the frontends load no torch; a frontend killed is replaced while its sibling keeps answering; an
engine core killed with requests in flight answers them 503 with Retry-After and is replaced;
SIGTERM drains across the processes, every accepted request answered. What runs when is
controlled by stopping the engine core (SIGSTOP): requests are then accepted by the frontends
and wait for it, as long as the test wants.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from pathlib import Path

import aiohttp
import httpx
import numpy as np
import pytest

from reliability_models import tiny_model_set
from server_fixtures import metric_value, start_server
from sie_contract.answers import to_wire

TEXTS = ["Alice Smith works for Acme Corp in Paris.", "the quick brown fox", "Bob met Carol in Berlin on Monday."]
LABELS = ["person", "organization", "location"]
ENCODE = "/v1/encode/enc"
WAIT_S = 120.0  # bound on waiting for a process to be replaced on a loaded 2-core box


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    return tiny_model_set(tmp_path_factory.mktemp("split-models"))


@pytest.fixture(scope="module")
def server(roots, tmp_path_factory):
    process = start_server(*[a for name in ("enc", "ce", "gl") for a in ("--model", f"{name}={roots[name]}")],
                           "--no-builtin", "--device", "cpu", "--frontends", "2", "--preload", "enc",
                           log_dir=tmp_path_factory.mktemp("split-server"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def engine(roots):
    from sie_engine import Catalog, Engine, card_from_local_dir

    with Engine(Catalog([card_from_local_dir(name, roots[name]) for name in ("enc", "ce", "gl")]),
                device="cpu") as engine:
        yield engine


def latest_pids(log: str) -> dict[str, int]:
    """role ("core", "frontend 0", "frontend 1") -> the pid the supervisor last started."""
    found = re.findall(r"(engine core|frontend \d) started \(pid (\d+)\)", log)
    return {role.replace("engine ", ""): int(pid) for role, pid in found}


def wait_for(condition, what: str, timeout: float = WAIT_S):
    stop = time.monotonic() + timeout
    while time.monotonic() < stop:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def gone(pid: int) -> bool:
    """The process has exited (its sockets closed): no /proc entry, or a zombie not yet reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def metrics(server) -> str:
    return httpx.get(server.url + "/metrics", timeout=30).text


def encode_fresh(server, texts=("hello world",)) -> httpx.Response:
    """On a new connection each time, so the kernel spreads them over the frontends."""
    return httpx.post(server.url + ENCODE, json={"items": list(texts)}, headers={"Connection": "close"}, timeout=60)


def test_engine_errors_cross_as_themselves():
    """Every engine error a frontend gets back is rebuilt as the same class with the same
    attributes, so its HTTP answer (status, code, field, Retry-After, retryable) is one process's."""
    import msgspec

    from sie_engine import errors
    from sie_server.errors import HTTPProblem, error_body, retry_headers, status_for
    from sie_server.split import protocol

    sent = [errors.InvalidRequest("dims must be at most 32", field="dims"), errors.ModelNotFound("no model 'x'"),
            errors.Overloaded("queue full", retry_after=7.0), errors.Draining(),
            errors.ModelLoadFailed("m", "not_found", "no files"), errors.DeadlineExceeded("too late"),
            HTTPProblem("not_ready", "restarting", retry_after=5.0)]
    for error in sent:
        wire = msgspec.msgpack.encode(protocol.Reply(1, failure=protocol.failure_of(error)))
        back = protocol.error_of(protocol.REPLIES.decode(wire).failure)
        assert type(back) is type(error) and back.message == error.message
        assert (status_for(back), error_body(back, False), retry_headers(back)) == \
            (status_for(error), error_body(error, False), retry_headers(error))


def test_answers_equal_the_engines_own(server, engine):
    """encode, score and extract through a frontend and the engine core equal the Engine's
    answers in one process on the same weights (batch invariance's tolerance)."""
    http = httpx.Client(base_url=server.url, timeout=60)
    got = http.post(ENCODE, json={"items": TEXTS}).json()
    want = to_wire(engine.encode_sync("enc", TEXTS))
    assert [i["id"] for i in got["items"]] == [i["id"] for i in want["items"]]
    np.testing.assert_allclose([i["dense"] for i in got["items"]], [i["dense"] for i in want["items"]], atol=1e-6)
    assert got["usage"] == want["usage"]

    got = http.post("/v1/score/ce", json={"query": {"text": "where is Paris"}, "items": TEXTS}).json()
    want = to_wire(engine.score_sync("ce", "where is Paris", TEXTS))
    assert [s["index"] for s in got["scores"]] == [s["index"] for s in want["scores"]]
    np.testing.assert_allclose([s["score"] for s in got["scores"]], [s["score"] for s in want["scores"]], atol=1e-6)

    got = http.post("/v1/extract/gl", json={"items": TEXTS, "labels": LABELS, "threshold": 0.3}).json()
    want = to_wire(engine.extract_sync("gl", TEXTS, LABELS, threshold=0.3))
    spans = [[(e["start"], e["end"], e["label"]) for e in item["entities"]] for item in got["items"]]
    assert spans == [[(e["start"], e["end"], e["label"]) for e in item["entities"]] for item in want["items"]]
    assert sum(map(len, spans)) > 0
    for mine, theirs in zip(got["items"], want["items"]):
        np.testing.assert_allclose([e["score"] for e in mine["entities"]], [e["score"] for e in theirs["entities"]],
                                   atol=1e-6)

    # the engine's errors cross as what one process answers: a 400 naming the field, a 404
    bad = http.post(ENCODE, json={"items": [{"text": "a"}], "dims": 100000})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "dims", bad.text
    assert http.post("/v1/encode/nope", json={"items": ["a"]}).status_code == 404


def test_metrics_sum_over_frontends_and_frontends_load_no_torch(server):
    before = metric_value(metrics(server), "sie_requests_total", route="encode", status="200")
    for _ in range(30):
        assert encode_fresh(server).status_code == 200
    log = server.log_containing("frontend-0 sie_server.access", "frontend-1 sie_server.access")
    served_by = {m for m in re.findall(r"(frontend-\d) sie_server\.access: .* \"POST /v1/encode/enc", log)}
    assert served_by == {"frontend-0", "frontend-1"}  # SO_REUSEPORT spread them
    text = metrics(server)
    assert metric_value(text, "sie_requests_total", route="encode", status="200") == before + 30
    assert metric_value(text, "sie_batches_total", model="enc") > 0  # the engine core's own counters
    pids = latest_pids(server.log_text())
    for role in ("frontend 0", "frontend 1"):
        with open(f"/proc/{pids[role]}/maps") as maps:
            assert "libtorch" not in maps.read(), role
    with open(f"/proc/{pids['core']}/maps") as maps:
        assert "libtorch" in maps.read()


def test_a_killed_frontend_is_replaced_and_its_sibling_keeps_answering(server):
    old = latest_pids(server.log_text())
    os.kill(old["frontend 0"], signal.SIGKILL)
    wait_for(lambda: gone(old["frontend 0"]), "the killed frontend to exit")  # its listening socket closed
    answers = [encode_fresh(server).status_code for _ in range(10)]
    assert answers == [200] * 10
    wait_for(lambda: latest_pids(server.log_text())["frontend 0"] != old["frontend 0"], "a new frontend 0")
    wait_for(lambda: f"frontend-{old['frontend 0']} is gone" in server.log_text(), "the core told of it")
    assert [encode_fresh(server).status_code for _ in range(10)] == [200] * 10


async def _in_flight(server, count: int):
    """`count` encode requests accepted by the frontends and waiting for a stopped engine core."""
    session = aiohttp.ClientSession(server.url)

    async def encode(i: int):
        async with session.post(ENCODE, json={"items": [f"text {i}"]}, headers={"Connection": "close"}) as r:
            return r.status, r.headers.get("Retry-After"), await r.json()

    tasks = [asyncio.create_task(encode(i)) for i in range(count)]
    while metric_value(await asyncio.to_thread(metrics, server), "sie_inflight_requests") < count:
        await asyncio.sleep(0.02)
    return session, tasks


def split_dir(pid: int) -> Path:
    """The run directory the supervisor gave its children (their SIE_SPLIT_DIR)."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return Path(next(v for v in environ if v.startswith(b"SIE_SPLIT_DIR=")).split(b"=", 1)[1].decode())


def test_every_frontend_refuses_on_the_engines_published_wait(server):
    """One admission: the wait the engine core computes is what each frontend refuses on before
    reading a body (429 with Retry-After, answered with the core stopped: no message to it)."""
    from sie_server.split.wait_board import WaitBoard

    core = latest_pids(server.log_text())["core"]
    board = WaitBoard(split_dir(core) / "wait_board")
    wait, bound = board.read()
    assert wait < bound  # the tiny model's queue is empty; the bound is --max-queue-wait's
    os.kill(core, signal.SIGSTOP)
    try:
        board.publish(bound + 41.5, bound)  # as the core's scheduler publishes a queue past its bound
        answers = [encode_fresh(server) for _ in range(12)]
    finally:
        board.publish(wait, bound)
        os.kill(core, signal.SIGCONT)
    assert {a.status_code for a in answers} == {429}
    assert {int(a.headers["Retry-After"]) for a in answers} == {42}
    log = server.log_containing("frontend-0 sie_server.access: 127.0.0.1 \"POST /v1/encode/enc HTTP/1.1\" 429",
                                "frontend-1 sie_server.access: 127.0.0.1 \"POST /v1/encode/enc HTTP/1.1\" 429")
    assert "frontend-0" in log and "frontend-1" in log
    assert encode_fresh(server).status_code == 200


async def test_a_client_gone_cancels_its_work_in_the_engine(server):
    """A client that disconnects cancels its frontend's handler, and the engine core drops the
    call before it runs: no token of it is computed."""
    core = latest_pids(server.log_text())["core"]
    before = metric_value(metrics(server), "sie_tokens_processed_total", model="enc")
    os.kill(core, signal.SIGSTOP)
    try:
        session, tasks = await _in_flight(server, 1)
        tasks[0].cancel()
        await session.close()  # the connection ends: the frontend's handler is cancelled
        while metric_value(await asyncio.to_thread(metrics, server), "sie_inflight_requests") > 0:
            await asyncio.sleep(0.02)
    finally:
        os.kill(core, signal.SIGCONT)
    after = encode_fresh(server, ["one more text"])
    assert after.status_code == 200
    tokens = metric_value(metrics(server), "sie_tokens_processed_total", model="enc")
    assert tokens == before + after.json()["usage"]["tokens"]


async def test_a_killed_engine_core_answers_its_requests_503_and_is_replaced(server):
    core = latest_pids(server.log_text())["core"]
    os.kill(core, signal.SIGSTOP)
    session, tasks = await _in_flight(server, 4)
    try:
        os.kill(core, signal.SIGKILL)
        answers = await asyncio.wait_for(asyncio.gather(*tasks), WAIT_S)
    finally:
        await session.close()
    for status, retry_after, body in answers:
        assert status == 503 and body["error"]["code"] == "not_ready", body
        assert int(retry_after) >= 1
    wait_for(lambda: latest_pids(server.log_text())["core"] != core, "a new engine core")
    wait_for(lambda: encode_fresh(server).status_code == 200, "answers from the new engine core")


async def test_sigterm_drains_across_processes(server, engine):
    """Last in the module: the server stops. Requests accepted before the signal (waiting for a
    stopped core) are all answered 200 with the engine's vectors; new work meanwhile is refused."""
    core = latest_pids(server.log_text())["core"]
    os.kill(core, signal.SIGSTOP)
    session, tasks = await _in_flight(server, 4)
    try:
        server.signal(signal.SIGTERM)
        await asyncio.to_thread(server.log_containing, "frontend-0 sie_server.app: draining",
                                "frontend-1 sie_server.app: draining")
        async with session.get("/readyz") as r:
            assert r.status == 503 and (await r.json())["error"]["code"] == "draining"
        os.kill(core, signal.SIGCONT)
        answers = await asyncio.wait_for(asyncio.gather(*tasks), WAIT_S)
    finally:
        os.kill(core, signal.SIGCONT)
        await session.close()
    assert [status for status, _, _ in answers] == [200] * 4
    want = to_wire(engine.encode_sync("enc", [f"text {i}" for i in range(4)]))
    got = sorted(answers, key=lambda a: a[2]["items"][0]["dense"][0])
    np.testing.assert_allclose(sorted((b["items"][0]["dense"] for _, _, b in answers), key=lambda d: d[0]),
                               sorted((i["dense"] for i in want["items"]), key=lambda d: d[0]), atol=1e-6)
    assert len(got) == 4
    assert await asyncio.to_thread(server.wait, WAIT_S) == 0
    assert "engine core stopped" in server.log_containing("split server stopped")
