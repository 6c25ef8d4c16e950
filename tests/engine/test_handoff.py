"""BatchedHandoff (sie_engine/handoff.py): calls off the loop, results back in batches, none lost."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from sie_engine.handoff import BatchedHandoff


class CountingHandoff(BatchedHandoff):
    """Counts the loop's wake-ups (each one delivers every result waiting)."""

    wakeups = 0

    def _deliver(self, loop):
        self.wakeups += 1
        super()._deliver(loop)


@pytest.fixture
def executor():
    pool = ThreadPoolExecutor(2, thread_name_prefix="test-handoff")
    yield pool
    pool.shutdown(wait=True)


async def test_results_and_errors_come_back_to_their_callers(executor):
    handoff = BatchedHandoff(executor, 2)

    def fail():
        raise ValueError("bad input")

    assert await handoff.run(lambda: 6 * 7) == 42
    with pytest.raises(ValueError, match="bad input"):
        await handoff.run(fail)
    # many calls at once: each gets its own result, and they ran off the loop
    loop_thread = threading.get_ident()
    results = await asyncio.gather(*(handoff.run(lambda i=i: (i, threading.get_ident())) for i in range(500)))
    assert [i for i, _ in results] == list(range(500))
    assert all(thread != loop_thread for _, thread in results)


async def test_results_finished_meanwhile_share_one_wakeup(executor):
    handoff = CountingHandoff(executor, 1)
    gate = threading.Event()
    first = handoff.run(gate.wait)  # holds the only drainer while the others queue up
    rest = [handoff.run(lambda i=i: i) for i in range(200)]
    await asyncio.sleep(0.05)
    gate.set()
    # the loop is kept busy (blocked on its own thread) until the drainer has run every call: each
    # result finished meanwhile then waits for the one wake-up already pending (on a busy box an
    # idle loop could take some results early and be woken again, so that count would vary)
    deadline = time.monotonic() + 30
    while handoff._draining and time.monotonic() < deadline:
        time.sleep(0.001)
    assert await first is True
    assert await asyncio.gather(*rest) == list(range(200))
    assert handoff.wakeups == 1


async def test_a_cancelled_call_is_skipped_and_the_rest_answered(executor):
    handoff = BatchedHandoff(executor, 1)
    gate = threading.Event()
    ran: list[int] = []
    blocker = handoff.run(gate.wait)
    cancelled = handoff.run(lambda: ran.append(1))
    kept = handoff.run(lambda: ran.append(2) or "kept")
    cancelled.cancel()
    gate.set()
    assert await blocker is True and await kept == "kept"
    assert ran == [2]  # the caller that left never had its call run


async def test_close_cancels_calls_not_started_and_refuses_new_ones(executor):
    handoff = BatchedHandoff(executor, 1)
    gate = threading.Event()
    running = handoff.run(gate.wait)
    waiting = handoff.run(lambda: "never")
    await asyncio.sleep(0.02)
    handoff.close()
    gate.set()
    assert await running is True  # a call already running still answers
    with pytest.raises(asyncio.CancelledError):
        await waiting
    with pytest.raises(RuntimeError, match="closed"):
        handoff.run(lambda: None)
