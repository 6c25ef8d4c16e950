"""Token-budget batching: merging across requests, splitting large requests,
results in each caller's order, oldest first (no starvation), budget respected."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from engine_fixtures import Recorder, make_engine, patch_run, tiny_cards

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def text(i: int, words: int) -> str:
    return " ".join(WORDS[(i + j) % len(WORDS)] for j in range(words))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    recorder = Recorder()
    cards = tiny_cards(tmp_path_factory.mktemp("batching"), names=("a",), max_batch_tokens=512)
    # one batch at a time: these tests pin down which batch goes next, and the order in which
    # batches running side by side end is not defined (that mode: test_parallel_batches.py)
    engine = make_engine(cards, recorder, cpu_batches=1)
    engine.load_sync("tiny/a")
    yield engine, recorder
    engine.close()


def solo(engine, texts):
    return {t: engine.encode_sync("tiny/a", [t]).items[0].dense for t in texts}


async def test_concurrent_requests_merge_into_few_batches(setup):
    engine, recorder = setup
    texts = [text(i, 5 + i % 7) for i in range(48)]
    long_texts = [text(i, 100) for i in range(40)]
    expected = solo(engine, texts)
    recorder.batches.clear()
    # The long request's first batch holds the inference thread until every small request is
    # queued behind it, so the test, not the machine's load, decides what is waiting when batches
    # are formed (on a busy box the small ones' tokenising once outlasted a 10 ms head start and
    # they ran in as many batches as they trickled in).
    entered, release = threading.Event(), threading.Event()
    first_batch: list[int] = []

    def held(run, items):
        if not first_batch:
            first_batch.append(len(items))
            entered.set()
            release.wait(timeout=120)
        return run(items)

    runner = engine.pool.resident("tiny/a")
    patch_run(engine, "tiny/a", held)
    try:
        blocker = asyncio.ensure_future(engine.encode("tiny/a", long_texts))
        await until(entered.is_set, "the long request's first batch never ran")
        small = [asyncio.ensure_future(engine.encode("tiny/a", [t])) for t in texts]
        waiting = len(long_texts) - first_batch[0] + len(texts)
        await until(lambda: engine.queued("tiny/a")[0] >= waiting, "the small requests were not all queued")
        release.set()
        results = await asyncio.gather(*small)
        await blocker
    finally:
        release.set()
        del runner.run  # the class's run again, for the module's other tests
    for t, result in zip(texts, results):
        np.testing.assert_allclose(result.items[0].dense, expected[t], atol=1e-5)
    small_batches = [b for b in recorder.batches if b[2] < 512 and b[1] > 1]
    assert len(recorder.batches) < 48 / 4, recorder.batches
    assert max(items for _, items, _ in recorder.batches) >= 8, "concurrent requests were not merged"
    assert small_batches


async def until(condition, failure: str, timeout: float = 120.0) -> None:
    """Poll `condition()` on the loop until it holds; fail naming what never happened."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, failure
        await asyncio.sleep(0.005)


async def test_large_request_splits_and_reassembles_in_order(setup):
    engine, recorder = setup
    texts = [text(i, 3 + (i * 7) % 60) for i in range(120)]
    expected = solo(engine, texts)
    recorder.batches.clear()
    result = await engine.encode("tiny/a", [{"id": f"doc-{i}", "text": t} for i, t in enumerate(texts)])
    assert len(recorder.batches) > 1, "a request over the token budget must be split"
    assert all(tokens <= 512 for _, _, tokens in recorder.batches)
    assert [it.id for it in result.items] == [f"doc-{i}" for i in range(120)]
    for t, item in zip(texts, result.items):
        np.testing.assert_allclose(item.dense, expected[t], atol=1e-5)
    assert result.tokens == sum(tokens for _, _, tokens in recorder.batches)


async def test_oldest_request_is_not_starved_by_a_stream_of_new_ones(setup):
    engine, recorder = setup
    order = []

    async def tracked(name, texts):
        await engine.encode("tiny/a", texts)
        order.append(name)

    async def until(condition, limit_s: float = 10.0) -> None:
        deadline = time.monotonic() + limit_s
        while not condition() and time.monotonic() < deadline:
            await asyncio.sleep(0.001)

    # keep the engine busy, then queue an old long request and a stream of later short ones; each
    # waits for the engine to have the one before queued (tokenising runs off the loop, and on a
    # loaded machine a short request's tokens can be ready before a long one's)
    recorder.batches.clear()
    busy = asyncio.ensure_future(tracked("busy", [text(i, 100) for i in range(20)]))
    await until(lambda: recorder.batches and engine.queued("tiny/a")[0] == 0)  # its last batch runs
    old = asyncio.ensure_future(tracked("old-long", [text(i, 110) for i in range(6)]))
    await until(lambda: engine.queued("tiny/a")[0] >= 6)
    newer = [asyncio.ensure_future(tracked(f"new-{i}", [text(i, 4)])) for i in range(30)]
    await asyncio.gather(busy, old, *newer)
    assert order.index("old-long") < order.index("new-29")
    # no newer request finished before the older one
    assert all(not n.startswith("new") for n in order[:order.index("old-long")])
