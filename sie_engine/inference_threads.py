"""The inference threads of one device, and which of them may run torch on several CPU threads.

libgomp, the OpenMP runtime of torch's CPU wheels, keeps a team of worker threads for every thread
that ever ran a parallel region on more than one thread, as long as that thread lives. Once the
live teams hold more threads than there are cores, every team's barriers stop spinning after a few
hundred rounds and sleep in the kernel, so each parallel region of every team pays a futex
wake-up. On the 2-core box (2026-12-07, bench/RESULTS.md) a loop of small matrix products and
elementwise passes on two threads took 1.5-1.9x as long while another live thread held a team of
two, and a LightOnOCR decode step 18 ms against 10 ms: the engine's two inference threads each ran
wide batches in turn, so both held teams, and every step and batch paid it.

So on a CPU only the first thread (lane 0) runs work on more threads than a share: a batch or
decode step alone on all of torch's threads goes there (it starts only when nothing else runs,
parallelism.py, so lane 0 is free), work on a share goes to a free lane, the others first. On the
2-core box a share is one thread, which holds no team, so one team lives in the whole engine (the
tokenising, image and loading threads run torch on one thread, worker_threads.py). With 4 cores or
more a share is itself a team, and the two lanes' teams exceed the cores while both live; not
measured. On CUDA the lanes are alike (torch's CPU threads untouched).
"""

from __future__ import annotations

import concurrent.futures
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from .parallelism import BatchParallelism, on_threads
from .worker_threads import worker_pool


class InferenceThreads(Executor):
    """`parallelism.batches` threads, one lane each. `run(threads, fn, *args)` picks the lane;
    `submit` (the Executor interface) is work on a share."""

    def __init__(self, parallelism: BatchParallelism, name: str = "sie-infer"):
        self._lanes = [worker_pool(1, f"{name}-{i}", torch_threads=None) for i in range(parallelism.batches)]
        self._share = parallelism.narrow_threads
        self._running = [0] * len(self._lanes)
        self._lock = threading.Lock()

    def run(self, threads: int | None, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        """`fn(*args)` on `threads` torch threads (None: as they are) on a lane. Raises RuntimeError
        once shut down, as ThreadPoolExecutor does."""
        with self._lock:
            lane = self._lane_for(threads)
            self._running[lane] += 1
        try:
            future = self._lanes[lane].submit(on_threads(threads, fn), *args)
        except BaseException:
            self._release(lane)
            raise
        future.add_done_callback(lambda _: self._release(lane))
        return future

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        return self.run(None, functools.partial(fn, *args, **kwargs))

    def _lane_for(self, threads: int | None) -> int:
        if threads is not None and self._share is not None and threads > self._share:
            return 0  # the one thread whose OpenMP team is as wide as the CPU
        others_first = [*range(1, len(self._lanes)), 0]
        return min(others_first, key=lambda lane: (self._running[lane] > 0, self._running[lane]))

    def _release(self, lane: int) -> None:
        with self._lock:
            self._running[lane] -= 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        for lane in self._lanes:
            lane.shutdown(wait=wait, cancel_futures=cancel_futures)
