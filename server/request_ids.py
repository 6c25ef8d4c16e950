"""Identifiers minted per request (X-Request-Id, the compat APIs' answer ids) without a syscall.

`os.urandom` and `uuid4()` read the kernel's random source, and CPython lets go of the GIL
around that read. On the event loop that is a hand-over point: an inference or tokenising
thread waiting for the GIL takes it, and the loop waits until that thread lets go again (up to
the 5 ms switch interval). In a profile of sie-server under 32 one-text clients on a busy box
(issue 27, 2026-12-04) the loop spent 10.7% of its samples waiting at the one `os.urandom` call a
request made. These ids only need to be unique, not secret: a Mersenne Twister seeded from the kernel
once per process (and again in a forked child, which would otherwise repeat its parent's ids).
"""

from __future__ import annotations

import os
import random

_source = random.Random()


def _reseed() -> None:
    _source.seed(os.urandom(32))


_reseed()
os.register_at_fork(after_in_child=_reseed)


def fresh_hex() -> str:
    """32 hex digits, `uuid4().hex`'s length and randomness."""
    return f"{_source.getrandbits(128):032x}"


def fresh_uuid() -> str:
    """A version-4 UUID in its canonical form, as `str(uuid4())` writes it."""
    bits = (_source.getrandbits(128) & ~(0xF000 << 64) & ~(0xC000 << 48)) | (0x4000 << 64) | (0x8000 << 48)
    digits = f"{bits:032x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"
