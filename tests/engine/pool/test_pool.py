"""The model pool: LRU by use, the memory budget, eviction that never loses queued
work, shared concurrent first loads, per-model load failures."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import numpy as np
import pytest

from engine_fixtures import Recorder, make_engine, tiny_cards
from sie_engine import ModelCard, WeightsSource
from sie_engine.errors import DeadlineExceeded, ModelLoadFailed, Overloaded

TEXTS = ["the first text", "a second, longer text about eviction", "third"]
# requests that keep a tiny model busy for longer than the gap between them
HEAVY = TEXTS + [" ".join(["a longer document about model pools and eviction"] * 10)] * 40


@pytest.fixture(scope="module")
def cards(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pool")
    cards = tiny_cards(tmp)
    missing = ModelCard(id="broken/missing", weights=WeightsSource(path=str(tmp / "nothing-here")))
    (tmp / "odd").mkdir()
    (tmp / "odd" / "config.json").write_text('{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}')
    odd = ModelCard(id="broken/arch", weights=WeightsSource(path=str(tmp / "odd")))
    return cards + [missing, odd]


def before_each_build(engine, hook) -> None:
    """Call `hook(card)` on the load thread before the pool builds a model from its checkpoint."""
    original = engine.pool._builder

    def hooked_builder(card, *args):
        hook(card)
        return original(card, *args)

    engine.pool._builder = hooked_builder


def record_builds(engine) -> list[str]:
    """The ids of the models the pool builds from their checkpoints, in order."""
    builds = []
    before_each_build(engine, lambda card: builds.append(card.id))
    return builds


def model_need(engine, model_id) -> int:
    return engine.pool._plan(engine.card(model_id)).need


@pytest.fixture(scope="module")
def expected(cards):
    recorder = Recorder()
    engine = make_engine(cards, recorder)
    try:
        yield {c.id: np.stack([i.dense for i in engine.encode_sync(c.id, TEXTS).items]) for c in cards[:3]}
    finally:
        engine.close()


def engine_holding(cards, models: float, recorder, **options):
    """An engine whose memory budget holds `models` tiny models."""
    probe = make_engine(cards, Recorder())
    need = model_need(probe, "tiny/a")
    probe.close()
    return make_engine(cards, recorder, memory_budget=int(need * models), **options)


def test_lru_is_refreshed_by_use_not_load_order(cards, expected):
    recorder = Recorder()
    engine = engine_holding(cards, 2.5, recorder)
    try:
        engine.encode_sync("tiny/a", TEXTS)
        engine.encode_sync("tiny/b", TEXTS)
        engine.encode_sync("tiny/a", TEXTS)  # a is now the most recently used
        engine.encode_sync("tiny/c", TEXTS)
        assert recorder.evictions == ["tiny/b"]
        assert set(engine.pool.loaded_ids()) == {"tiny/a", "tiny/c"}
        assert engine.pool.used_bytes <= engine.budget_bytes
    finally:
        engine.close()


async def test_budget_for_one_model_serves_interleaved_requests_without_loss(cards, expected):
    recorder = Recorder()
    engine = engine_holding(cards, 1.5, recorder)
    try:
        models = ["tiny/a", "tiny/b", "tiny/c"] * 6
        results = await asyncio.gather(*(engine.encode(m, TEXTS) for m in models))
        for model, result in zip(models, results):
            np.testing.assert_allclose(np.stack([i.dense for i in result.items]), expected[model], atol=1e-5)
        assert len(recorder.evictions) >= 2
        assert len(engine.pool.loaded_ids()) == 1
        assert engine.pool.used_bytes <= engine.budget_bytes
    finally:
        engine.close()


async def test_concurrent_first_requests_share_one_load(cards, expected):
    recorder = Recorder()
    engine = make_engine(cards, recorder)
    builds = record_builds(engine)
    try:
        results = await asyncio.gather(*(engine.encode("tiny/b", TEXTS) for _ in range(10)),
                                       *(engine.load("tiny/b") for _ in range(3)))
        assert builds == ["tiny/b"]
        for result in results[:10]:
            np.testing.assert_allclose(np.stack([i.dense for i in result.items]), expected["tiny/b"], atol=1e-5)
    finally:
        engine.close()


async def test_load_failures_are_per_model_with_a_reason(cards, expected):
    recorder = Recorder()
    engine = make_engine(cards, recorder)
    try:
        with pytest.raises(ModelLoadFailed) as missing:
            await engine.encode("broken/missing", TEXTS)
        assert missing.value.reason == "not_found"
        with pytest.raises(ModelLoadFailed) as odd:
            await engine.encode("broken/arch", TEXTS)
        assert odd.value.reason == "unsupported_architecture" and "GPT2LMHeadModel" in odd.value.message
        # the others are unharmed, and the failure is visible in the model list
        result = await engine.encode("tiny/a", TEXTS)
        np.testing.assert_allclose(np.stack([i.dense for i in result.items]), expected["tiny/a"], atol=1e-5)
        info = engine.model_info("broken/missing")
        assert info.state == "failed" and "not_found" in info.error
        assert ("broken/missing", "not_found") in recorder.failures
    finally:
        engine.close()


def test_model_larger_than_the_budget_fails_clearly(cards):
    engine = make_engine(cards, Recorder(), memory_budget=1000)
    try:
        with pytest.raises(ModelLoadFailed) as info:
            engine.encode_sync("tiny/a", TEXTS)
        assert info.value.reason == "out_of_memory" and "budget" in info.value.message
    finally:
        engine.close()


def test_host_cache_swaps_evicted_models_back_without_reloading(cards, expected):
    recorder = Recorder()
    engine = engine_holding(cards, 1.5, recorder, host_cache=10 * 2**20)
    builds = record_builds(engine)
    try:
        for model in ["tiny/a", "tiny/b", "tiny/a", "tiny/b", "tiny/a"]:
            result = engine.encode_sync(model, TEXTS)
            np.testing.assert_allclose(np.stack([i.dense for i in result.items]), expected[model], atol=1e-5)
        assert builds == ["tiny/a", "tiny/b"], "swap-ins must come from the host cache"
        assert len(recorder.evictions) == 4 and len(engine.pool.loaded_ids()) == 1
    finally:
        engine.close()


async def test_a_load_is_not_starved_by_a_busy_model(cards, expected):
    """A stream of requests keeps one model busy under a budget for one model; a request for
    another model still gets its load and its answer (the busy model is evicted between two
    of its batches, and reloaded afterwards)."""
    recorder = Recorder()
    engine = engine_holding(cards, 1.5, recorder)
    stop = asyncio.Event()

    sent = []

    async def open_loop_stream():  # requests for a arrive whether or not earlier ones finished
        while not stop.is_set() and len(sent) < 200:
            sent.extend(asyncio.ensure_future(engine.encode("tiny/a", HEAVY)) for _ in range(4))
            await asyncio.sleep(0.002)

    try:
        await engine.encode("tiny/a", TEXTS)
        stream = asyncio.ensure_future(open_loop_stream())
        await asyncio.sleep(0.3)
        result = await asyncio.wait_for(engine.encode("tiny/b", TEXTS), timeout=10)
        np.testing.assert_allclose(np.stack([i.dense for i in result.items]), expected["tiny/b"], atol=1e-5)
        stop.set()
        await stream
        answers = await asyncio.gather(*sent, return_exceptions=True)
        # the stream outruns the model: some of it is refused (429), the rest is answered right
        assert all(isinstance(a, Overloaded) for a in answers if isinstance(a, Exception))
        served = [a for a in answers if not isinstance(a, Exception)]
        assert served
        for answer in served:
            np.testing.assert_allclose(np.stack([i.dense for i in answer.items])[:3], expected["tiny/a"], atol=1e-5)
        final = await asyncio.wait_for(engine.encode("tiny/a", TEXTS), timeout=20)
        np.testing.assert_allclose(np.stack([i.dense for i in final.items]), expected["tiny/a"], atol=1e-5)
    finally:
        stop.set()
        engine.close()


async def test_a_load_waiting_for_room_proceeds_when_the_load_ahead_of_it_ends_unused(cards, expected):
    """Under a budget for one model: b's load holds the room, c's load waits for it, and
    b's only request goes away (its client disconnected) before b finishes loading. Nothing
    ever runs on b, so no batch end frees the room: the end of b's load itself must wake c
    (the soak test hung here on a CI run, 2026-11-29)."""
    engine = engine_holding(cards, 1.5, Recorder())
    gate, building = threading.Event(), threading.Event()
    before_each_build(engine, lambda card: card.id == "tiny/b" and (building.set() or gate.wait(10)))
    try:
        await engine.encode("tiny/c", TEXTS)  # c's plan is known: its reload goes straight to the room
        await engine.encode("tiny/a", TEXTS)
        b = asyncio.ensure_future(engine.encode("tiny/b", TEXTS))
        # b holds the room once its build starts; "loading" alone also covers the planning before,
        # which on a loaded machine can outlast c's whole load
        while not building.is_set():
            await asyncio.sleep(0.01)
        c = asyncio.ensure_future(engine.encode("tiny/c", TEXTS))
        while engine.pool.state("tiny/c") != "loading":
            await asyncio.sleep(0.01)
        b.cancel()
        await asyncio.sleep(0.05)
        gate.set()
        result = await asyncio.wait_for(c, timeout=10)
        np.testing.assert_allclose(np.stack([i.dense for i in result.items]), expected["tiny/c"], atol=1e-5)
        assert engine.pool.loaded_ids() == ["tiny/c"]
    finally:
        gate.set()
        engine.close()


async def test_churn_with_disconnects_and_deadlines_leaves_no_request_hanging(cards, expected):
    """Random traffic over three models under a budget for one, where clients disconnect
    and deadlines pass at random moments (during loads, in the queue, mid-batch): every
    request that stays ends with its vectors or a deadline error, quickly."""
    engine = engine_holding(cards, 1.5, Recorder())
    rng = random.Random(7)
    models = ["tiny/a", "tiny/b", "tiny/c"]
    before_each_build(engine, lambda card: time.sleep(0.03))  # loads long enough for clients to leave during them

    async def one(i: int):
        model = rng.choice(models)
        timeout = rng.choice([None, None, 0.005, 0.05])
        call = asyncio.ensure_future(engine.encode(model, TEXTS, timeout=timeout))
        if rng.random() < 0.3:  # the client goes away after a while
            await asyncio.sleep(rng.uniform(0, 0.05))
            call.cancel()
            return None
        try:
            result = await asyncio.wait_for(call, timeout=20)
        except DeadlineExceeded:
            return "deadline"
        np.testing.assert_allclose(np.stack([i.dense for i in result.items]), expected[model], atol=1e-5)
        return "ok"

    async def client(k: int):
        outcomes = []
        for i in range(15):
            outcomes.append(await one(i))
            await asyncio.sleep(rng.uniform(0, 0.01))
        return outcomes

    try:
        for model in models:  # the plans are known: reloads go straight to the room
            await engine.encode(model, TEXTS)
        outcomes = [o for client_outcomes in await asyncio.gather(*(client(k) for k in range(8)))
                    for o in client_outcomes]
        assert outcomes.count("ok") > 20
        final = await asyncio.wait_for(engine.encode("tiny/b", TEXTS), timeout=10)
        np.testing.assert_allclose(np.stack([i.dense for i in final.items]), expected["tiny/b"], atol=1e-5)
    finally:
        engine.close()
