"""A benchmarked system in a process of its own.

libgomp keeps an OpenMP team for every thread that ever ran a torch operator on several threads,
and live teams beyond the cores slow every team's barriers, idle or not (bench_openmp_teams.py:
1.5x on the 2-core box). Two systems in one benchmark process therefore slow each other, so each
system here runs in a spawned process and only its inputs, outputs and timings cross the pipe.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from typing import Any


def _serve(conn, factory: Callable[..., Any], args: tuple, threads: int | None) -> None:
    """The system's process: build it, then answer ("run", inputs) with (seconds, its result)
    until None."""
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    system = factory(*args)
    conn.send({name: getattr(system, name) for name in ("name", "precision") if hasattr(system, name)})
    while (command := conn.recv()) is not None:
        start = time.perf_counter()
        result = system.run(command[1])
        conn.send((time.perf_counter() - start, result))
    system.close()
    conn.send(None)


class SystemProcess:
    """`factory(*args)` (a module-level class or function: it is pickled by name) built in a spawned
    process with `threads` torch threads; `run(inputs)` returns its result and the seconds it took
    there, not counting the pipe."""

    def __init__(self, factory: Callable[..., Any], *args: Any, threads: int | None = None):
        context = multiprocessing.get_context("spawn")
        self._conn, theirs = context.Pipe()
        self._process = context.Process(target=_serve, args=(theirs, factory, args, threads), daemon=True)
        self._process.start()
        for name, value in self._conn.recv().items():
            setattr(self, name, value)

    def run(self, inputs: Any) -> tuple[float, Any]:
        self._conn.send(("run", inputs))
        return self._conn.recv()

    def close(self) -> None:
        self._conn.send(None)
        self._conn.recv()
        self._process.join()
