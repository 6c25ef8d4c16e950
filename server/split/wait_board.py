"""The engine's queue wait, published to the frontends in shared memory.

A request is refused (429 with Retry-After) before its body is read when the queue already
holds more work than `--max-queue-wait` (Engine.refuse_if_overloaded). That check reads the
scheduler's last computed wait, which lives in the engine core; the core writes it here each
time a queue changes and every frontend reads it without a message (a float in a mmap'd file).
The full decision, with the request's own size, is still the engine's admission.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from pathlib import Path

from sie_engine.errors import Overloaded

_LAYOUT = struct.Struct("dd")  # the scheduler's wait (s), the bound (s)


class WaitBoard:
    def __init__(self, path: Path, create: bool = False):
        if create:
            path.write_bytes(_LAYOUT.pack(0.0, math.inf))
        fd = os.open(path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, _LAYOUT.size)
        finally:
            os.close(fd)

    def publish(self, wait_s: float, max_wait_s: float) -> None:
        _LAYOUT.pack_into(self._map, 0, wait_s, max_wait_s)

    def read(self) -> tuple[float, float]:
        wait_s, max_wait_s = _LAYOUT.unpack_from(self._map, 0)
        return wait_s, max_wait_s

    def refuse_if_overloaded(self) -> None:
        """Overloaded (429) when the engine's queue is over its bound; the message and
        Retry-After are admission's own (sie_engine/admission.py `refusal`)."""
        wait, max_wait = self.read()
        if wait > max_wait:
            raise Overloaded(
                f"the queue holds about {wait:.0f}s of work, more than the {max_wait:g}s this server "
                f"admits (--max-queue-wait); retry after Retry-After seconds or on another replica",
                retry_after=max(1.0, math.ceil(wait - max_wait)),
            )
