"""Worker threads that do not preempt the event loop when it hands them work, and that hold no
OpenMP team of their own.

Every request wakes a tokenising thread and, per batch, an inference thread. Linux's scheduler
lets a thread that was asleep preempt the one that woke it (wake-up preemption): on a box with
few cores the loop thread is then taken off its core at the very `put` that queued the work,
still holding the GIL, and the woken thread's first act is to wait for that GIL. In a GIL-holder
profile of sie-server under 32 one-text clients on 2 cores shared with a test suite (issue 27,
2026-12-04) 23% of the loop's samples were at that `put` (the tokenising hand-off's and the
inference executor's); with one core kept busy, SCHED_BATCH workers gave 1.15x the requests/s.

`SCHED_BATCH` tells the scheduler a thread is throughput work: it is never allowed to preempt a
running thread on waking, and is otherwise scheduled like any normal thread (same nice level, same
share of the CPU; see sched(7)). The loop then runs on until it waits for I/O, and the workers take
the cores it leaves. An unprivileged process may set it; where the platform has no such policy
(macOS, Windows) the threads stay as they are.

The tokenising, image and loading threads run torch on one thread each (`torch_threads=1`): a
thread that runs a torch operator on several threads keeps an OpenMP team for as long as it lives,
and teams beyond the cores slow every team's barriers (inference_threads.py). Their work is many
small items side by side, not one large operator.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor

import torch

log = logging.getLogger(__name__)


def worker_pool(threads: int, name: str, torch_threads: int | None = 1) -> ThreadPoolExecutor:
    """A pool of `threads` worker threads named `name`_N, each marked `SCHED_BATCH`, each running
    torch on `torch_threads` threads (None: as torch gives a new thread)."""
    def start() -> None:
        as_batch_work()
        if torch_threads is not None:
            torch.set_num_threads(torch_threads)

    return ThreadPoolExecutor(threads, thread_name_prefix=name, initializer=start)


def as_batch_work() -> None:
    """Mark the calling thread `SCHED_BATCH`."""
    policy = getattr(os, "SCHED_BATCH", None)
    if policy is None or not hasattr(os, "sched_setscheduler"):
        return
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))  # 0: this thread (Linux schedules threads)
    except OSError as exc:  # a seccomp filter or container runtime that refuses it: a hint only
        log.debug("could not mark a worker thread SCHED_BATCH: %s", exc)
