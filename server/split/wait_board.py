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

# A sequence number, odd while the core is writing (a seqlock: the frontends read without a lock
# and read again when a write overlapped theirs), then the scheduler's wait (s) and the bound (s).
# Writes copy packed bytes in: `Struct.pack_into` zeroes its bytes before it packs them, and a
# frontend reading in between saw a bound of 0 s and refused a request (about 1% of reads under a
# busy core, tests/server/test_wait_board.py).
_SEQUENCE = struct.Struct("<Q")
_VALUES = struct.Struct("<dd")
_SIZE = _SEQUENCE.size + _VALUES.size
_READ_TRIES = 100


class WaitBoard:
    def __init__(self, path: Path, create: bool = False):
        if create:
            path.write_bytes(_SEQUENCE.pack(0) + _VALUES.pack(0.0, math.inf))
        fd = os.open(path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)
        # the writer's count goes on from the board's (a replaced engine core writes the same board)
        self._sequence = _SEQUENCE.unpack_from(self._map, 0)[0] & ~1
        self._last_read = (0.0, math.inf)  # a reader's last whole read

    def publish(self, wait_s: float, max_wait_s: float) -> None:
        """Write both numbers (one writer: the engine core's loop)."""
        self._sequence += 1
        self._map[:_SEQUENCE.size] = _SEQUENCE.pack(self._sequence)  # odd: being written
        self._map[_SEQUENCE.size:_SIZE] = _VALUES.pack(wait_s, max_wait_s)
        self._sequence += 1
        self._map[:_SEQUENCE.size] = _SEQUENCE.pack(self._sequence)

    def read(self) -> tuple[float, float]:
        """The numbers last written whole. When every try overlapped a write (the core was
        descheduled mid-write: spinning longer would not help), this reader's previous whole read
        (at first: 0 s and no bound, nothing to refuse on; admission decides each request in full)."""
        for _ in range(_READ_TRIES):
            before = _SEQUENCE.unpack_from(self._map, 0)[0]
            values = _VALUES.unpack_from(self._map, _SEQUENCE.size)
            if not before & 1 and _SEQUENCE.unpack_from(self._map, 0)[0] == before:
                self._last_read = values
                return values
        return self._last_read

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
