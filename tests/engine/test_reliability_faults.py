"""Fault injection on a real engine over tiny random BERT models: a batch that
raises, a device out-of-memory (injected on the CPU by making the model's run
raise `torch.OutOfMemoryError` above a token budget), a model whose load fails,
and a dispatcher or inference thread that dies. Each fault stays local: the
requests it touches get an error naming it, every other request gets the same
answer as without the fault, and nothing accepted is left unanswered."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
import torch

from engine_fixtures import Recorder, make_engine, patch_run, tiny_cards
from sie_engine.errors import InferenceFailed, ModelLoadFailed

TEXTS = [f"text number {i} about {'packages ' * (i % 5)}reliability" for i in range(24)]


@pytest.fixture(scope="module")
def cards(tmp_path_factory):
    return tiny_cards(tmp_path_factory.mktemp("faults"), names=("a", "b"))


@pytest.fixture(scope="module")
def expected(cards):
    engine = make_engine(cards, Recorder())
    try:
        return {c.id: {t: engine.encode_sync(c.id, [t]).items[0].dense for t in TEXTS} for c in cards}
    finally:
        engine.close()


@pytest.fixture
def engine(cards):
    recorder = Recorder()
    engine = make_engine(cards, recorder, load_retry_cooldown_s=0.5)
    engine.recorder = recorder
    try:
        yield engine
    finally:
        engine.close()


def check(result, model, texts, expected):
    for text, item in zip(texts, result.items):
        np.testing.assert_allclose(item.dense, expected[model][text], atol=1e-5)


async def test_a_batch_that_raises_fails_only_its_requests(engine, expected):
    engine.load_sync("tiny/a")
    poison = engine.pool.resident("tiny/a").tokenizer.encode(["zebra"]).ids[0][1]  # a word no other text has

    def raise_on_poison(run, items):
        if any(poison in it.ids for it in items):
            raise RuntimeError("kernel exploded")
        return run(items)

    patch_run(engine, "tiny/a", raise_on_poison)
    with pytest.raises(InferenceFailed) as failed:
        await engine.encode("tiny/a", ["a zebra"])
    assert "RuntimeError: kernel exploded" in failed.value.message and "tiny/a" in failed.value.message
    # the same model and another one go on answering correctly, concurrently
    results = await asyncio.gather(engine.encode("tiny/a", TEXTS[:6]), engine.encode("tiny/b", TEXTS[:6]))
    check(results[0], "tiny/a", TEXTS[:6], expected)
    check(results[1], "tiny/b", TEXTS[:6], expected)
    assert engine.queued() == (0, 0)


async def test_out_of_memory_splits_the_batch_and_frees_idle_models(engine, expected):
    budget = 60  # tokens one batch may hold before the "device" runs out of memory
    seen = []

    def oom_above_budget(run, items):
        tokens = sum(it.num_tokens for it in items)
        seen.append(tokens)
        if tokens > budget:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate for {tokens} tokens")
        return run(items)

    engine.load_sync("tiny/b")  # resident and idle: the OOM recovery may evict it
    patch_run(engine, "tiny/a", oom_above_budget)
    groups = [TEXTS[i:i + 8] for i in range(0, len(TEXTS), 8)]
    results = await asyncio.gather(*(engine.encode("tiny/a", g) for g in groups))
    for group, result in zip(groups, results):
        check(result, "tiny/a", group, expected)
    assert engine.scheduler.oom_splits >= 1 and max(seen) > budget
    assert "tiny/b" in engine.recorder.evictions, "idle models are evicted to make room"
    assert engine.pool.loaded_ids() == ["tiny/a"]

    # a sequence that does not fit even alone fails its own request only
    too_long = "word " * 200
    outcome = await asyncio.gather(engine.encode("tiny/a", [too_long, TEXTS[0]]), engine.encode("tiny/a", TEXTS[:4]),
                                   return_exceptions=True)
    assert isinstance(outcome[0], InferenceFailed) and "out of memory" in outcome[0].message
    assert "tokens does not fit even alone" in outcome[0].message
    check(outcome[1], "tiny/a", TEXTS[:4], expected)
    # the evicted model loads again on demand
    check(await engine.encode("tiny/b", TEXTS[:3]), "tiny/b", TEXTS[:3], expected)


async def test_a_failed_load_is_reported_then_retried_after_the_cool_down(engine, expected):
    original = engine.pool._builder
    broken = {"tiny/b"}

    def builder(card, *args):
        if card.id in broken:
            raise RuntimeError("weights are corrupt")
        return original(card, *args)

    engine.pool._builder = builder
    with pytest.raises(ModelLoadFailed) as failed:
        await engine.encode("tiny/b", TEXTS[:2])
    assert failed.value.reason == "error" and "weights are corrupt" in failed.value.message
    assert failed.value.retry_after > 0
    assert engine.model_info("tiny/b").state == "failed"
    with pytest.raises(ModelLoadFailed):  # within the cool-down: answered at once, no new attempt
        await engine.encode("tiny/b", TEXTS[:2])
    assert engine.recorder.failures == [("tiny/b", "error")]
    check(await engine.encode("tiny/a", TEXTS[:5]), "tiny/a", TEXTS[:5], expected)  # others unharmed

    broken.clear()  # the operator fixed the weights
    await asyncio.sleep(0.6)
    check(await engine.encode("tiny/b", TEXTS[:5]), "tiny/b", TEXTS[:5], expected)
    assert engine.model_info("tiny/b").state == "loaded"


async def test_a_killed_dispatcher_is_restarted_and_loses_no_work(engine, expected):
    def slow(run, items):
        time.sleep(0.2)
        return run(items)

    patch_run(engine, "tiny/a", slow)
    scheduler = engine.scheduler
    pending = [asyncio.ensure_future(engine.encode("tiny/a", TEXTS[i:i + 4])) for i in range(0, 16, 4)]
    await asyncio.sleep(0.1)  # a batch is running
    engine.loop.call_soon_threadsafe(scheduler._task.cancel)
    results = await asyncio.wait_for(asyncio.gather(*pending), timeout=30)
    for i, result in zip(range(0, 16, 4), results):
        check(result, "tiny/a", TEXTS[i:i + 4], expected)
    assert scheduler.restarts == 1

    # a bug in the dispatcher's own code (not in a batch) does not stop it either
    original = scheduler._next_queue
    calls = []

    def failing_once():
        if not calls:
            calls.append(1)
            raise KeyError("scheduler bug")
        return original()

    scheduler._next_queue = failing_once
    check(await asyncio.wait_for(engine.encode("tiny/a", TEXTS[:3]), 30), "tiny/a", TEXTS[:3], expected)
    assert calls


async def test_a_dead_inference_thread_is_replaced(engine, expected):
    engine.load_sync("tiny/a")
    engine._infer_pool.shutdown(wait=True)  # the inference thread is gone
    results = await asyncio.wait_for(
        asyncio.gather(engine.encode("tiny/a", TEXTS[:5]), engine.encode("tiny/b", TEXTS[5:9])), timeout=30)
    check(results[0], "tiny/a", TEXTS[:5], expected)
    check(results[1], "tiny/b", TEXTS[5:9], expected)
    assert engine.scheduler.restarts == 1

