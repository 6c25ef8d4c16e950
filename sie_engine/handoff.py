"""Short calls run off the event loop, their results handed back in batches.

`loop.run_in_executor` costs two cross-thread hand-offs per call: the executor's queue and
concurrent future on the way out, and on the way back a `call_soon_threadsafe` that writes to
the loop's self-pipe and wakes it. For a one-text request's tokenising (50-65 us of work) that
was more than the work: in a profile of sie-server under 32 clients (issue 27, 2026-12-03)
the hand-offs were 11% of the server's busy samples and the tokenising itself 8%.

Here calls wait in one queue that a few drainer threads empty (a drainer is started only when
fewer than `threads` are running), and a result is handed back at once, but the loop is woken
only when no wake-up is pending already: under load one wake-up delivers the results of every
call that finished meanwhile. No result waits for another call to finish.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

_Job = tuple[Callable[[], Any], asyncio.AbstractEventLoop, asyncio.Future]
_Result = tuple[asyncio.Future, Any, BaseException | None]


class BatchedHandoff:
    """`await handoff.run(fn)`: `fn()` on one of `threads` drainers of `executor`."""

    def __init__(self, executor: Executor, threads: int):
        if threads < 1:
            raise ValueError(f"a hand-off needs at least one thread, not {threads}")
        self._executor = executor
        self._threads = threads
        self._lock = threading.Lock()
        self._jobs: collections.deque[_Job] = collections.deque()
        self._draining = 0
        # results waiting for their loop's wake-up, by loop (one loop in practice: the engine's)
        self._results: dict[asyncio.AbstractEventLoop, list[_Result]] = {}
        self._closed = False

    def run(self, fn: Callable[[], Any]) -> asyncio.Future:
        """`fn()`'s result (or exception), as a future of the running loop."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new calls after the hand-off was closed")
            self._jobs.append((fn, loop, future))
            start = self._draining < self._threads
            if start:
                self._draining += 1
        if start:
            try:
                self._executor.submit(self._drain)
            except BaseException:
                with self._lock:
                    self._draining -= 1
                raise
        return future

    def close(self) -> None:
        """Refuse new calls and cancel those not started (a call already running still answers)."""
        with self._lock:
            self._closed = True
            jobs, self._jobs = list(self._jobs), collections.deque()
        for _fn, loop, future in jobs:
            try:
                loop.call_soon_threadsafe(future.cancel)
            except RuntimeError:  # that loop is closed: nobody awaits the future any more
                pass

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._jobs:
                    self._draining -= 1
                    return
                fn, loop, future = self._jobs.popleft()
            if future.cancelled():  # its caller is gone (a read of a flag: safe off the loop)
                continue
            try:
                result: _Result = (future, fn(), None)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, as run_in_executor does
                result = (future, None, exc)
            self._hand_back(loop, result)

    def _hand_back(self, loop: asyncio.AbstractEventLoop, result: _Result) -> None:
        with self._lock:
            waiting = self._results.setdefault(loop, [])
            waiting.append(result)
            wake = len(waiting) == 1  # else a wake-up is pending and will take this one too
        if wake:
            try:
                loop.call_soon_threadsafe(self._deliver, loop)
            except RuntimeError:  # the loop is closed: nobody awaits these results
                with self._lock:
                    self._results.pop(loop, None)

    def _deliver(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            results = self._results.pop(loop, [])
        for future, value, exc in results:
            if future.done():  # cancelled meanwhile
                continue
            if exc is None:
                future.set_result(value)
            else:  # a future refuses StopIteration (it would end the awaiting coroutine's frame)
                future.set_exception(RuntimeError(repr(exc)) if isinstance(exc, StopIteration) else exc)
