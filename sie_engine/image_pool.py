"""Image decoding and preprocessing on threads of their own.

Images were decoded on the tokenizer pool: two requests of 20 large images held both of its
threads for 65-74 s, and a one-text request to another model waited 45 s for a thread
(issue #30.4). Here images take `IMAGE_THREADS` threads that texts never use, so a text's
tokenisation never queues behind an image; images queue behind each other, in order.
Pillow's decoders and resize release the GIL, so the event loop and the tokenizer threads
keep running beside them. How long one image can take is bounded by the pixels its header
declares (`Limits.max_image_pixels`) and those its resize makes (`images.MAX_RESIZED_PIXELS`),
both checked before decoding.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .worker_threads import worker_pool

T = TypeVar("T")

# Half the cores, one at least: on the 2-core box one image thread beside two tokenizer threads.
IMAGE_THREADS = max(1, (os.cpu_count() or 2) // 2)
_POOL = worker_pool(IMAGE_THREADS, "sie-images")


async def on_image_threads(fn: Callable[..., T], *args: Any) -> tuple[T, float]:
    """`fn(*args)` on the image threads; returns its result and the seconds it took there."""
    def timed() -> tuple[T, float]:
        started = time.monotonic()
        return fn(*args), time.monotonic() - started

    return await asyncio.get_running_loop().run_in_executor(_POOL, timed)
