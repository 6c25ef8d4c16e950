"""Where a split server's processes meet: one private run directory (the supervisor makes it
and names it in SIE_SPLIT_DIR): the engine's ZMQ socket, the wait board, the metrics' files."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from dataclasses import dataclass
from pathlib import Path

ENV = "SIE_SPLIT_DIR"
# what the supervisor tells each child besides the directory
READY_FD = "SIE_SPLIT_READY_FD"  # a pipe: one byte once the child listens (a frontend) or is bound (the core)
PORT = "SIE_SPLIT_PORT"  # the port every frontend binds with SO_REUSEPORT
INDEX = "SIE_SPLIT_INDEX"  # a frontend's place (kept by its replacement)
ENGINE_LOST = signal.SIGUSR1  # to the frontends: the engine core died (client.py's engine_lost)
USAGE_ERROR = 2  # a child's exit code for a mistake in the options: the supervisor exits with it too


def die_with_parent() -> None:
    """A child of the supervisor runs in its own session (a terminal's Ctrl-C or a `timeout`'s
    group signal reaches the supervisor only, which stops the children in order); so that a
    supervisor killed outright leaves no orphans, the kernel sends the child SIGTERM (drain) when
    its parent dies (Linux's PR_SET_PDEATHSIG; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() == 1:  # the parent died before the call above
        os.kill(os.getpid(), signal.SIGTERM)


_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class SplitPaths:
    root: Path

    @classmethod
    def from_env(cls) -> SplitPaths:
        return cls(Path(os.environ[ENV]))

    @property
    def engine_address(self) -> str:
        return f"ipc://{self.root / 'engine.sock'}"

    @property
    def board(self) -> Path:
        return self.root / "wait_board"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics"  # PROMETHEUS_MULTIPROC_DIR
