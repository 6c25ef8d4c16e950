"""Admission of image decoding, charged by pixels.

Decoding and preprocessing an image costs time in proportion to its pixels (Pillow's decoder,
RGB conversion and resize), not to the positions its vision tower runs: a 16M-pixel photo and a
50k-pixel icon are the same few hundred positions for the tower, and admission by tokens alone
let requests of 20 large images queue a minute of decoding (issue #30.4). So a request's
images are charged their pixels, read from each header before a pixel is decoded
(`images.header_pixels`: Pillow reads the size lazily), and decoding is bounded like the token
queue: a request is admitted only if the pixels admitted and not decoded yet finish within the
wait bound at the image threads' measured rate; else 429 `overloaded` with `Retry-After` = the
seconds until that backlog is back under the bound. A lone request is admitted whatever its size
when nothing waits (each image is bounded by `Limits.max_image_pixels`, a request by its items).

The bound holds for the image threads only (image_pool.py): texts never wait on them, so a text
request is admitted and served whatever images are queued.

The rate (pixels/s over all image threads) is an exponential moving average over decoded chunks;
before the first, `PRIOR_PIXELS_PER_S` a thread. A document's pages are rendered there too but are
not charged here (their size is known only once the document is parsed, on those threads); their
chunks do not feed the rate. A video is charged its decoding in image pixels from its container
(`videos.admission_pixels`), and its chunks do not feed the rate either.
"""

from __future__ import annotations

import math
import threading

from .errors import Overloaded

# Pixels one image thread decodes, converts to RGB and resizes per second: about 31M for a
# zlib-squeezed 4,000 x 4,000 PNG and 30M for a 2,000 x 2,000 JPEG on the 2-core box
# (2026-12-02, Pillow 12); replaced by the measured rate after the first chunk.
PRIOR_PIXELS_PER_S = 30e6
# Weight of the newest chunk in the moving average.
EWMA_WEIGHT = 0.3


class DecodeAdmission:
    """Pixels admitted and not yet decoded, against `max_wait_s` at the measured pixels/s.
    Admitted on the engine's loop, decoded on the image threads: a lock guards the sums."""

    def __init__(self, max_wait_s: float, threads: int):
        self.max_wait_s = max_wait_s
        self._lock = threading.Lock()
        self._threads = max(1, threads)
        self.rate = PRIOR_PIXELS_PER_S * self._threads
        self.backlog = 0.0  # pixels admitted, not decoded yet

    def wait(self) -> float:
        """Seconds the image threads need for the decoding admitted so far."""
        return self.backlog / self.rate

    def admit(self, pixels: int) -> DecodeTicket:
        """Admit a request's `pixels` of images, or raise Overloaded (429)."""
        with self._lock:
            if pixels and self.backlog > 0 and math.isfinite(self.max_wait_s):
                wait = (self.backlog + pixels) / self.rate
                if wait > self.max_wait_s:
                    raise Overloaded(
                        f"the image threads hold about {self.backlog / self.rate:.0f}s of image decoding and this "
                        f"request's {pixels} pixels would take {pixels / self.rate:.1f}s more, beyond the "
                        f"{self.max_wait_s:g}s this server admits (--max-queue-wait); retry after Retry-After seconds "
                        "or send smaller images (or shorter videos)",
                        retry_after=max(1.0, math.ceil(wait - self.max_wait_s)))
            self.backlog += pixels
        return DecodeTicket(self, pixels)

    def _take(self, pixels: float) -> None:
        with self._lock:
            self.backlog = max(0.0, self.backlog - pixels)

    def observe(self, pixels: float, seconds: float) -> None:
        """A chunk of `pixels` took `seconds` on one image thread (the others run beside it)."""
        if pixels <= 0 or seconds <= 0:
            return
        with self._lock:
            self.rate = (1 - EWMA_WEIGHT) * self.rate + EWMA_WEIGHT * self._threads * pixels / seconds


class DecodeTicket:
    """One request's admitted pixels; given back as its images are decoded, the rest at its end."""

    def __init__(self, owner: DecodeAdmission, pixels: int):
        self._owner = owner
        self.pixels = pixels
        self._left = float(pixels)

    def decoded(self, fraction: float, seconds: float, measured: bool = True) -> None:
        """`fraction` of the request's images were decoded in `seconds`; `measured`: only images
        sent as files (no document pages), so the chunk is a measure of the rate."""
        pixels = min(self._left, self.pixels * fraction)
        self._left -= pixels
        self._owner._take(pixels)
        if measured:
            self._owner.observe(pixels, seconds)

    def release(self) -> None:
        """The request ended (decoded, refused or failed); idempotent."""
        if self._left > 0:
            self._owner._take(self._left)
            self._left = 0.0
