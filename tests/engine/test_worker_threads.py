"""The engine's worker threads are SCHED_BATCH (they never preempt the loop that wakes them) and
only the first inference thread runs torch on all of its threads; the thread that made the engine
keeps its own policy and torch threads."""

from __future__ import annotations

import os
import threading

import pytest
import torch

from sie_engine.card import Catalog
from sie_engine.engine import Engine
from sie_engine.image_pool import on_image_threads
from sie_engine.inference_threads import InferenceThreads
from sie_engine.parallelism import BatchParallelism


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="a Linux scheduling policy")
def test_tokenising_inference_and_image_threads_are_batch_work_and_the_caller_is_not():
    before = os.sched_getscheduler(0)
    engine = Engine(Catalog(), device="cpu")
    try:
        policies = {
            "tokenize": engine._tokenize_pool.submit(os.sched_getscheduler, 0).result(),
            "infer": engine._infer_pool.submit(os.sched_getscheduler, 0).result(),
            "images": engine._sync(lambda: on_image_threads(os.sched_getscheduler, 0))[0],
        }
    finally:
        engine.close()
    assert policies == dict.fromkeys(policies, os.SCHED_BATCH)
    assert os.sched_getscheduler(0) == before


def test_the_tokenising_image_and_loading_threads_run_torch_on_one_thread_and_the_caller_keeps_its_own():
    before = torch.get_num_threads()
    engine = Engine(Catalog(), device="cpu")
    try:
        threads = {
            "tokenize": engine._tokenize_pool.submit(torch.get_num_threads).result(),
            "load": engine._load_pool.submit(torch.get_num_threads).result(),
            "images": engine._sync(lambda: on_image_threads(torch.get_num_threads))[0],
        }
    finally:
        engine.close()
    assert threads == dict.fromkeys(threads, 1)
    assert torch.get_num_threads() == before


def test_only_the_first_inference_thread_runs_torch_on_more_than_a_share():
    """libgomp keeps an OpenMP team per thread that ran wide: one thread holds it (inference_threads.py)."""
    lanes = InferenceThreads(BatchParallelism(batches=2, wide_threads=2, narrow_threads=1), name="lane")

    def where() -> tuple[str, int]:
        return threading.current_thread().name, torch.get_num_threads()

    try:
        assert lanes.run(2, where).result() == ("lane-0_0", 2)
        assert lanes.run(1, where).result() == ("lane-1_0", 1)  # a share: the other lanes first
        assert lanes.submit(where).result()[0] == "lane-1_0"
        gate = threading.Event()
        busy = lanes.run(1, gate.wait, 30)
        assert lanes.run(1, where).result() == ("lane-0_0", 1)  # the other lane busy: the free one
        gate.set()
        assert busy.result() is True
        assert lanes.run(2, where).result() == ("lane-0_0", 2)
    finally:
        lanes.shutdown()
    with pytest.raises(RuntimeError):  # as ThreadPoolExecutor: the scheduler then starts new threads
        lanes.run(1, where)
