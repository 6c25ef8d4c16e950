"""A benchmarked system in a process of its own.

libgomp keeps an OpenMP team for every thread that ever ran a torch operator on several threads,
and live teams beyond the cores slow every team's barriers, idle or not (bench_openmp_teams.py:
1.5x on the 2-core box). Two systems in one benchmark process therefore slow each other, so each
system here runs in a spawned process and only its inputs, outputs and timings cross the pipe.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Iterable
from typing import Any


def _serve(conn, factory: Callable[..., Any], args: tuple, threads: int | None, attributes: Iterable[str]) -> None:
    """The system's process: build it, send the attributes asked for, then answer each (method,
    arguments) with (seconds, its result) until None."""
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    system = factory(*args)
    conn.send({name: getattr(system, name) for name in attributes if hasattr(system, name)})
    while (command := conn.recv()) is not None:
        method, arguments = command
        start = time.perf_counter()
        result = getattr(system, method)(*arguments)
        conn.send((time.perf_counter() - start, result))
    if hasattr(system, "close"):
        system.close()
    conn.send(None)


class SystemProcess:
    """`factory(*args)` (a module-level class or function: it is pickled by name) built in a spawned
    process with `threads` torch threads; its `attributes` are copied here once it is built, and its
    methods are called through `call` (the result) or `timed` (the seconds it took there, not
    counting the pipe, and the result). Results cross the pipe pickled: plain types travel safest."""

    def __init__(self, factory: Callable[..., Any], *args: Any, threads: int | None = None,
                 attributes: Iterable[str] = ("name", "precision")):
        context = multiprocessing.get_context("spawn")
        self._conn, theirs = context.Pipe()
        self._process = context.Process(target=_serve, args=(theirs, factory, args, threads, tuple(attributes)),
                                        daemon=True)
        self._process.start()
        theirs.close()  # the child holds its end now: its exit is then an EOF here, not a wait forever
        self._name = getattr(factory, "__qualname__", repr(factory))
        for name, value in self._receive().items():
            setattr(self, name, value)

    def _receive(self) -> Any:
        try:
            return self._conn.recv()
        except EOFError:
            self._process.join()
            raise RuntimeError(f"{self._name}'s process ended (exit code {self._process.exitcode}); "
                               "its traceback is above") from None

    def timed(self, method: str, *args: Any) -> tuple[float, Any]:
        self._conn.send((method, args))
        return self._receive()

    def call(self, method: str, *args: Any) -> Any:
        return self.timed(method, *args)[1]

    def close(self) -> None:
        self._conn.send(None)
        self._receive()
        self._process.join()
