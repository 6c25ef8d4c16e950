"""The supervisor of a split server (`sie-server serve --frontends N`): starts the engine core
and N frontends, prints the one `SIE listening on ...` line once all of them listen, replaces a
process that dies, and runs the drain across them on SIGTERM. No torch, no engine.

- The port: bound here first with SO_REUSEPORT (not listening: it only holds the port, and
  gives `--port 0` its number), then by every frontend with SO_REUSEPORT beside it.
- A frontend dies: its connections are closed by the kernel (its clients see the connection end,
  not a hang); the core is told (`Gone`) so the engine drops that frontend's work; its
  metrics' live gauges are marked dead; a new frontend takes its place.
- The engine core dies: every frontend is signalled (SIGUSR1) and answers the calls waiting
  for it, and new work, 503 `not_ready` with Retry-After; a new core starts and the frontends
  resume once it answers (models load again on first use). A core that dies before it is
  ready ends the server (exit 1): restarting it would fail the same way.
- SIGTERM / SIGINT: every frontend drains (refuses new work, answers what it accepted, as one
  process does); then the core stops. A second signal is passed on: everything quits at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from ..serve import SHUTDOWN_EXTRA_S, STOP_SIGNALS, print_listening
from . import protocol
from .paths import ENGINE_LOST, ENV, INDEX, PORT, READY_FD, USAGE_ERROR, SplitPaths
from .wait_board import WaitBoard

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 600.0  # an engine core's start (torch import, catalog) on a loaded box
CORE_STOP_S = 30.0  # the core's own close after the frontends are gone


class NotStarted(RuntimeError):
    def __init__(self, message: str, code: int | None):
        super().__init__(message)
        self.code = code


@dataclass
class _Child:
    role: str  # "core" or "frontend"
    index: int
    process: asyncio.subprocess.Process

    @property
    def name(self) -> str:
        return "engine core" if self.role == "core" else f"frontend {self.index}"

    @property
    def identity(self) -> bytes:
        return f"frontend-{self.process.pid}".encode()


class Supervisor:
    def __init__(self, argv: list[str], frontends: int, host: str, port: int, drain_timeout_s: float):
        self.argv = argv
        self.count = frontends
        self.host = host
        self.drain_timeout_s = drain_timeout_s
        self.root = Path(tempfile.mkdtemp(prefix="sie-split-"))
        self.paths = SplitPaths(self.root)
        self.paths.metrics.mkdir()
        WaitBoard(self.paths.board, create=True)
        self.reserved = self._reserve(host, port)
        self.port = self.reserved.getsockname()[1]
        self.env = {**os.environ, ENV: str(self.root), "PROMETHEUS_MULTIPROC_DIR": str(self.paths.metrics),
                    PORT: str(self.port)}
        self.core: _Child | None = None
        self.frontends: dict[int, _Child] = {}
        self.stopping = False
        self._context = zmq.asyncio.Context()
        self._notify = self._context.socket(zmq.DEALER)  # the supervisor's line to the core (Gone)
        self._notify.setsockopt(zmq.LINGER, 0)
        self._notify.connect(self.paths.engine_address)

    @staticmethod
    def _reserve(host: str, port: int) -> socket.socket:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))  # raises OSError as one process's listen would (cli turns it into a line)
        return sock

    async def _start(self, role: str, index: int) -> _Child:
        """Start a child and wait until it says it is ready (a core: bound; a frontend: listening)."""
        read_end, write_end = os.pipe()
        began = time.monotonic()
        module = "sie_server.split.core" if role == "core" else "sie_server.split.frontend"
        env = {**self.env, READY_FD: str(write_end), INDEX: str(index)}
        process = await asyncio.create_subprocess_exec(sys.executable, "-m", module, *self.argv, env=env,
                                                       pass_fds=(write_end,), stdin=asyncio.subprocess.DEVNULL,
                                                       start_new_session=True)  # paths.die_with_parent says why
        os.close(write_end)
        child = _Child(role, index, process)
        try:
            ready = await asyncio.wait_for(asyncio.to_thread(os.read, read_end, 1), READY_TIMEOUT_S)
        except asyncio.TimeoutError:
            ready = b""
        finally:
            os.close(read_end)
        if not ready:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise NotStarted(f"the {role} process exited before it was ready (exit {process.returncode})",
                             process.returncode)
        log.info("%s started (pid %d) in %.1fs", child.name, process.pid, time.monotonic() - began)
        return child

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, stop.set)
        try:
            self.core = await self._start("core", 0)
            started = await asyncio.gather(*(self._start("frontend", i) for i in range(self.count)),
                                           return_exceptions=True)
            self.frontends = {i: c for i, c in enumerate(started) if isinstance(c, _Child)}
            failed = [c for c in started if not isinstance(c, _Child)]
            if failed:
                raise failed[0]
        except NotStarted as exc:
            log.error("%s; stopping", exc)
            await self._stop_all(signal.SIGKILL)
            self._cleanup()
            return USAGE_ERROR if exc.code == USAGE_ERROR else 1
        print_listening(self.host, self.port)
        log.info("split server: %d frontend(s) and one engine core (pid %d)", self.count, self.core.process.pid)
        watch = asyncio.create_task(self._watch())
        await stop.wait()
        watch.cancel()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self._quit_now, sig)
        code = await self._drain()
        self._cleanup()
        log.info("split server stopped")
        return code

    # ---- replacing the dead ------------------------------------------------
    async def _watch(self) -> None:
        while True:
            waits = {asyncio.ensure_future(child.process.wait()): child for child in self._children()}
            done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for future in pending:
                future.cancel()
            for future in done:
                await self._replace(waits[future])

    async def _replace(self, child: _Child) -> None:
        from prometheus_client import multiprocess

        log.error("%s (pid %d) died (exit %s); starting another", child.name, child.process.pid,
                  child.process.returncode)
        multiprocess.mark_process_dead(child.process.pid, str(self.paths.metrics))
        try:
            if child.role == "frontend":
                with contextlib.suppress(zmq.ZMQError):
                    await self._notify.send(protocol.ENCODER.encode(protocol.Gone(child.identity)), zmq.NOBLOCK)
                self.frontends[child.index] = await self._start("frontend", child.index)
            else:
                for frontend in self.frontends.values():
                    with contextlib.suppress(ProcessLookupError):
                        frontend.process.send_signal(ENGINE_LOST)
                self.core = await self._start("core", 0)
        except NotStarted as exc:  # it cannot start again: end cleanly rather than serve half
            log.error("%s; stopping the server", exc)
            os.kill(os.getpid(), signal.SIGTERM)

    def _children(self) -> list[_Child]:
        return [c for c in (self.core, *self.frontends.values()) if c is not None and c.process.returncode is None]

    # ---- stopping ----------------------------------------------------------
    async def _drain(self) -> int:
        """Frontends drain first (each answers what it accepted, the core still running), then the core."""
        log.info("stop signal: draining %d frontend(s)", len(self.frontends))
        frontends = [c for c in self.frontends.values() if c.process.returncode is None]
        for child in frontends:
            child.process.send_signal(signal.SIGTERM)
        limit = self.drain_timeout_s + SHUTDOWN_EXTRA_S + 5.0
        codes = await self._wait_all(frontends, limit)
        if self.core is not None and self.core.process.returncode is None:
            self.core.process.send_signal(signal.SIGTERM)
            await self._wait_all([self.core], CORE_STOP_S)
        return 0 if all(code == 0 for code in codes) else 1

    async def _wait_all(self, children: list[_Child], timeout: float) -> list[Any]:
        try:
            return list(await asyncio.wait_for(asyncio.gather(*(c.process.wait() for c in children)), timeout))
        except asyncio.TimeoutError:
            await self._stop_all(signal.SIGKILL)
            return [1]

    async def _stop_all(self, sig: int) -> None:
        for child in self._children():
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(sig)
        for child in [c for c in (self.core, *self.frontends.values()) if c is not None]:
            await child.process.wait()

    def _quit_now(self, sig: int) -> None:
        """A second stop signal: every process quits at once (each one's own second-signal path)."""
        for child in self._children():
            with contextlib.suppress(ProcessLookupError):
                child.process.send_signal(sig)
        log.warning("second %s: quitting now", signal.Signals(sig).name)
        self._cleanup()
        logging.shutdown()
        os._exit(128 + sig)

    def _cleanup(self) -> None:
        self._notify.close()
        self._context.term()
        self.reserved.close()
        shutil.rmtree(self.root, ignore_errors=True)


def serve_split(argv: list[str], frontends: int, host: str, port: int, drain_timeout_s: float) -> int:
    """`sie-server serve --frontends N` (N >= 2): the exit code."""
    supervisor = Supervisor(argv, frontends, host, port, drain_timeout_s)
    return asyncio.run(supervisor.run())
