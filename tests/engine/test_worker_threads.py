"""The engine's worker threads are SCHED_BATCH (they never preempt the loop that wakes them);
the thread that made the engine keeps its own policy."""

from __future__ import annotations

import os

import pytest

from sie_engine.card import Catalog
from sie_engine.engine import Engine
from sie_engine.image_pool import on_image_threads

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="a Linux scheduling policy")


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
