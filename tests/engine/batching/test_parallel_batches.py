"""Batches side by side on CPU (sie_engine/parallelism.py): the plan that splits torch's
threads, and a real engine over tiny random BERT models running two batches at once,
each on its share of the threads, with the same vectors as one batch at a time."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from engine_fixtures import Recorder, make_engine, patch_run, tiny_cards
from sie_engine.parallelism import WIDE_MIN_SECONDS, BatchParallelism, on_threads, worth_widening

TEXTS = [f"document {i} on {'parallel ' * (i % 4)}batches of packages" for i in range(48)]
CPU = torch.device("cpu")


@contextlib.contextmanager
def torch_threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def test_cpu_batches_share_torchs_threads():
    with torch_threads(4):
        assert BatchParallelism.for_device(CPU) == BatchParallelism(batches=2, wide_threads=4, narrow_threads=2)
        assert BatchParallelism.for_device(CPU, 3) == BatchParallelism(3, 4, 1)
        assert BatchParallelism.for_device(CPU, 8) == BatchParallelism(4, 4, 1)  # never more batches than threads
        assert BatchParallelism.for_device(CPU, 1) == BatchParallelism(1, 4, 4)
    with torch_threads(1):
        assert BatchParallelism.for_device(CPU) == BatchParallelism(1, 1, 1)
    # CUDA: two batches in flight, each on a stream of its own; torch's threads untouched
    assert BatchParallelism.for_device(torch.device("cuda")) == BatchParallelism(2, None, None)
    assert BatchParallelism.for_device(torch.device("cuda"), 1) == BatchParallelism(1, None, None)
    with pytest.raises(ValueError, match="at least 1"):
        BatchParallelism.for_device(CPU, 0)


def test_a_wide_batch_holds_every_core():
    plan = BatchParallelism(2, 4, 2)
    assert plan.threads_for(running_alone=True) == 4 and plan.threads_for(running_alone=False) == 2
    assert plan.room_for_another([]) and plan.room_for_another([2])
    assert not plan.room_for_another([4])  # the lone batch on all threads: the next one waits
    assert not plan.room_for_another([2, 2])
    cuda = BatchParallelism(2)
    assert cuda.room_for_another([]) and cuda.room_for_another([None]) and not cuda.room_for_another([None, None])
    assert not BatchParallelism().room_for_another([None])


def test_a_lone_batch_runs_wide_only_when_it_takes_longer_than_a_teams_spin():
    assert worth_widening(float("inf"), 10, 1e6)  # not measured yet: as it always did
    assert worth_widening(0.008, 10, 1e6)  # all-MiniLM-L6-v2's lone query
    assert not worth_widening(0.001, 100, 1e6)  # a nearly free model's small batch
    assert worth_widening(0.001, int(WIDE_MIN_SECONDS * 1e6), 1e6)  # ... but a full one is long enough


def test_thread_count_is_set_in_the_inference_thread_only():
    main = torch.get_num_threads()
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(on_threads(1, torch.get_num_threads)).result() == 1
    assert torch.get_num_threads() == main
    assert on_threads(None, torch.get_num_threads)() == main  # None: untouched


@pytest.fixture(scope="module")
def cards(tmp_path_factory):
    # 120-token batches: the 48 short texts make several batches
    return tiny_cards(tmp_path_factory.mktemp("parallel"), names=("a",), max_batch_tokens=120)


@pytest.fixture(scope="module")
def one_at_a_time(cards):
    engine = make_engine(cards, Recorder(), cpu_batches=1)
    try:
        return np.stack([item.dense for item in engine.encode_sync("tiny/a", TEXTS).items])
    finally:
        engine.close()


@pytest.fixture
def engine(cards):
    with torch_threads(2):
        engine = make_engine(cards, Recorder(), cpu_batches=2)
    try:
        yield engine
    finally:
        engine.close()


def record_batches(engine, seconds: float) -> list:
    """Wrap the runner's `run`: each batch is slowed by `seconds` and recorded as
    (start, end, torch threads of the thread that ran it)."""
    log, lock = [], threading.Lock()

    def slowed(run, items):
        start = time.monotonic()
        threads = torch.get_num_threads()
        time.sleep(seconds)
        result = run(items)
        with lock:
            log.append((start, time.monotonic(), threads))
        return result

    patch_run(engine, "tiny/a", slowed)
    return log


def overlapping(log) -> bool:
    spans = sorted(log)
    return any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))


async def test_a_large_request_runs_two_batches_at_once_on_half_the_threads(engine, one_at_a_time):
    log = record_batches(engine, 0.2)
    result = await engine.encode("tiny/a", TEXTS)
    assert len(log) >= 3 and overlapping(log)
    assert all(threads == 1 for _, _, threads in log[:-1])  # the last may have run alone
    np.testing.assert_allclose(np.stack([item.dense for item in result.items]), one_at_a_time, atol=1e-6)


async def test_a_lone_request_gets_every_thread_and_holds_them(engine, one_at_a_time):
    log = record_batches(engine, 0.3)
    first = asyncio.ensure_future(engine.encode("tiny/a", TEXTS[:3]))
    await asyncio.sleep(0.1)  # the lone batch runs on both threads
    second = await engine.encode("tiny/a", TEXTS[3:6])
    await first
    assert [threads for _, _, threads in log] == [2, 2]
    assert not overlapping(log)  # the second batch waited for the wide one
    np.testing.assert_allclose(second.items[0].dense, one_at_a_time[3], atol=1e-6)


async def test_a_lone_batch_of_a_cheap_model_runs_on_a_share(engine):
    """A model whose batches take less than a libgomp team spins after one (parallelism.py) runs
    a lone batch on one thread: it gains nothing from the other and would leave it spinning."""
    await engine.encode("tiny/a", TEXTS[:1])
    runner = engine.pool.resident("tiny/a")
    assert 0 < runner.shortest_batch_s < 60  # measured on the inference thread
    # what a nearly free model's batches take (bench_host.py): a 1 ms fixed cost and a full batch in
    # 1 ms (the first batch alone, slow on a busy box, may have measured a rate that widens)
    runner.shortest_batch_s = 0.001
    engine.scheduler.admission.throughput.observe("tiny/a", 120, 0.001)
    log = record_batches(engine, 0)
    await engine.encode("tiny/a", TEXTS[:1])
    await engine.encode("tiny/a", TEXTS[1:3])
    assert [threads for _, _, threads in log] == [1, 1]


async def _on_engine(engine, fn, *args):
    async def call():
        return fn(*args)

    return await engine._on_engine_loop(call)


async def test_a_decode_step_gets_every_thread_alone_and_a_share_beside_batches(engine):
    """A generating model's decode steps (generation/worker.py) run beside the batches: on every
    thread while nothing else runs or waits, and a batch then waits for the step as for a wide
    batch; on a share once work waits, the batch then running beside it on the other share."""
    scheduler = engine.scheduler
    await engine.encode("tiny/a", TEXTS[:1])  # loaded: what follows waits on threads only
    assert await _on_engine(engine, scheduler.begin_side_step, 1) == 2
    log = record_batches(engine, 0.2)
    waiting = asyncio.ensure_future(engine.encode("tiny/a", TEXTS[:3]))
    await asyncio.sleep(0.3)
    assert log == [] and not waiting.done()  # the wide step holds every thread
    assert await _on_engine(engine, scheduler.begin_side_step, 2) == 1  # work waits: the next step narrows
    await _on_engine(engine, scheduler.end_side_step, 1)
    await waiting
    await _on_engine(engine, scheduler.end_side_step, 2)
    assert [threads for _, _, threads in log] == [1]  # beside the narrow step, on the other share
    assert await _on_engine(engine, scheduler.begin_side_step, 3) == 2  # alone again
    await _on_engine(engine, scheduler.end_side_step, 3)


def test_each_batch_that_may_run_at_once_reserves_its_activations(cards, engine):
    """Two batches of one model may run side by side (on CPU or, as streams, on a GPU): the pool
    charges the model the activations of both, not of one."""
    one = make_engine(cards, Recorder(), cpu_batches=1)
    try:
        single = one.pool._plan(cards[0]).reserve
    finally:
        one.close()
    assert engine.parallelism.batches == 2 and single > 0
    assert engine.pool._plan(cards[0]).reserve == 2 * single
