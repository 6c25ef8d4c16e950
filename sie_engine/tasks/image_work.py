"""Steps the detection modes share (tasks/detect.py, grounded_detect.py, layout.py): a request's
image and document items read into pictures, and the pictures decoded, preprocessed and queued as
the model's image work, chunk by chunk."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import validation as v
from ..documents import expand_documents
from ..errors import InvalidRequest
from ..image_pool import on_image_threads
from ..work import WorkItem
from .context import TaskContext

# the scheduler's queue of detection images: batches never mix a vision tower's inputs with labels
IMAGE_QUEUE = "extract:image"
IMAGE_CHUNK = 32  # images decoded per step, each step queued at once (encode's reason: tasks/encode.py)
NO_IDS: np.ndarray = np.zeros(0, dtype=np.int32)


@dataclass
class Pictures:
    """A request's items as pictures: an id, a picture (bytes or a document's page), the field an
    error names and the page (None for an image item) each; `seconds` spent reading documents."""

    ids: list[str]
    images: list[Any]
    paths: list[str]
    pages: list[Any]
    seconds: float


def picture_items(engine: TaskContext, items: Any, described: str) -> tuple[list[str], list, list]:
    """(ids, texts, pictures) of a request's items, checked: a text item is a 400. Cheap: a mode checks
    its other fields after this and before `read_pictures` renders any document page."""
    ids, texts, images = v.parse_encode_items(items, engine.limits)
    for i, text in enumerate(texts):
        if text is not None:
            raise InvalidRequest(f"items[{i}] is a text, but {described}: send each image as "
                                 "{\"image\": <base64 or bytes>} or {\"document\": <PDF>}", field=f"items[{i}]")
    return ids, texts, images


async def read_pictures(engine: TaskContext, parsed: tuple[list[str], list, list]) -> Pictures:
    """`picture_items`' answer as pictures: image items as they are and each PDF page as an item of its own."""
    ids, texts, images = parsed
    pages: list[Any] = [None] * len(ids)
    paths = [f"items[{i}].image" for i in range(len(ids))]
    if not any(isinstance(image, v.DocumentItem) for image in images):
        return Pictures(ids, images, paths, pages, 0.0)
    expanded = await expand_documents(ids, texts, images, engine.limits)
    return Pictures(expanded.ids, expanded.images, expanded.fields, expanded.pages, expanded.seconds)


async def submit_images(engine: TaskContext, card: Any, request: Any, images: list, paths: list[str],
                        output: frozenset[str], extra: Callable[[tuple[int, int]], Any]) -> tuple[int, float]:
    """Decode and preprocess the images on the image threads (`inputs.images.encode_sized`), chunk
    by chunk, and queue each chunk for `output` with `extra(size)` riding on each item (size: the
    picture's (height, width) as decoded); returns (positions queued, seconds spent preparing).
    On failure the request fails at once (the images already queued must not wait on it)."""
    try:
        return await _submit(engine, card, request, images, paths, output, extra)
    except BaseException as exc:
        request.fail(exc if isinstance(exc, Exception) else asyncio.CancelledError())
        request.future.exception()  # raised below, not awaited: marked read so asyncio logs no traceback
        raise


async def _submit(engine: TaskContext, card: Any, request: Any, images: list, paths: list[str],
                  output: frozenset[str], extra: Callable[[tuple[int, int]], Any]) -> tuple[int, float]:
    inputs, seconds = await engine.with_tokenizer(card, _itself)
    limits, tokens = engine.limits, 0
    for start in range(0, len(images), IMAGE_CHUNK):
        chunk = list(range(start, min(start + IMAGE_CHUNK, len(images))))
        (pixels, sizes), spent = await on_image_threads(
            inputs.images.encode_sized, [images[i] for i in chunk], [paths[i] for i in chunk], limits)
        seconds += spent
        counts = [inputs.images.positions(p) for p in pixels]
        tokens += sum(counts)
        engine.submit(card, IMAGE_QUEUE, [
            WorkItem(request, i, NO_IDS, outputs=output, pixels=p, image_tokens=count, extra=extra(size))
            for i, p, count, size in zip(chunk, pixels, counts, sizes)
        ], request)
    return tokens, seconds


def _itself(inputs: Any) -> Any:
    return inputs
