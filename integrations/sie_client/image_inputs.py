"""Images as the database adapters receive them, turned into SIE's encode items.

Each database hands images over in its own form: Chroma as numpy pixel arrays
(`Images`, or what its `ImageLoader` read from `uris`), LanceDB as file bytes or
path / `file://` strings in a source column, Weaviate as base64 blob properties,
and users of any of them as bytes, `pathlib.Path` or PIL images. `image_bytes`
turns each into encoded file bytes: the form an `{"image": ...}` item carries on
the wire (bytes, paths and PIL images as `wire.image_value` makes them) and the
one Weaviate's blob property stores, so every adapter sends the same thing. URLs
are refused rather than fetched: an adapter that downloads whatever a row names
is a request-forgery hole, and the caller knows better where from.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np

from .wire import image_value, is_image


def _pixels(array: np.ndarray) -> bytes:
    """An HxW or HxWxC (C = 1, 3, 4) pixel array as PNG bytes. Values must be 0-255
    integers (or booleans): float arrays are refused, since whether 1.0 means white
    (0-1 images) or nearly black (0-255 images) cannot be told from the array."""
    from PIL import Image

    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (3, 4)) or 0 in array.shape:
        raise ValueError(f"an image array is HxW or HxWxC with C in 1, 3, 4; got shape {array.shape}")
    if array.dtype == bool:
        array = array.astype(np.uint8) * 255
    elif not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"image arrays must hold 0-255 integers (uint8); got {array.dtype}: scale float images "
                         f"yourself, e.g. (array * 255).round().astype('uint8') for 0-1 values")
    elif array.dtype != np.uint8:
        if array.min() < 0 or array.max() > 255:
            raise ValueError(f"image array values must lie in 0-255; got {array.min()}..{array.max()}")
        array = array.astype(np.uint8)
    return image_value(Image.fromarray(np.ascontiguousarray(array)))


def _path(text: str) -> Path:
    parsed = urlparse(text)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme in ("http", "https", "s3", "gs", "ftp"):
        raise ValueError(f"image {text[:80]!r} is a URL: SIE's adapters do not fetch URLs; download it and pass "
                         f"the bytes or a local path")
    return Path(text)


def image_bytes(image: Any, *, str_is: str = "path") -> bytes:
    """Encoded image file bytes for one image given as bytes, a path (`pathlib.Path`, or a
    str: a file path or `file://` URI when `str_is="path"`, base64 when `str_is="base64"`),
    a PIL image, or a numpy pixel array."""
    if isinstance(image, str) and str_is == "base64":
        try:
            return base64.b64decode(image, validate=True)
        except (binascii.Error, ValueError) as error:
            raise ValueError(f"a str image is read as base64 here (Weaviate's blob form) and this one is not "
                             f"({error}); pass a pathlib.Path for a file") from None
    if isinstance(image, str):
        image = _path(image)
    if isinstance(image, np.ndarray):
        return _pixels(image)
    if is_image(image):  # bytes, a path, a PIL image
        try:
            return image_value(image)
        except OSError as error:
            raise ValueError(f"cannot read image file {str(image)[:200]!r}: {error.strerror or error}") from None
    raise TypeError(f"an image is bytes, a path, a PIL image or a numpy pixel array, not {type(image).__name__}")


def image_items(images: Any, *, str_is: str = "path") -> list[dict[str, bytes]]:
    """`[{"image": bytes}, ...]`: SIE encode items for a sequence of images."""
    return [{"image": image_bytes(image, str_is=str_is)} for image in images]



def present(values: Sequence[Any] | None) -> list[int]:
    """Positions of the values given (a None list or entry: that row has no such input)."""
    return [] if values is None else [i for i, value in enumerate(values) if value is not None]


def check_names(vectors: Sequence[Any]) -> None:
    """A database adapter's named vectors (an image vector beside the text ones) need distinct names."""
    names = [v.name for v in vectors]
    if len(set(names)) != len(names):
        raise ValueError(f"named vectors need distinct names, got {names}")


def encode_groups(vectors: Sequence[Any], texts: Sequence[Any] | None, images: Sequence[Any] | None, *,
                  is_query: bool, image_model: str | None,
                  str_is: str = "path") -> tuple[int, list[tuple[str, list, list[int], list]]]:
    """(rows, [(model, items, row positions, vectors)]): the SIE calls that fill a database
    adapter's named vectors (objects with `name`, `kind`, `model` and `source`: "text" or
    "image") for `rows` stored objects or queries, one call per model and input kind.

    A stored object's text feeds the text vectors and its image the image vectors. A query
    text feeds every vector (an image-text model's text tower puts it in the image space);
    a query image feeds the dense vectors of the image model (its own and any text vector
    computed by the same model). A None text or image, or list, leaves the vectors it
    would feed out of that row."""
    if texts is None and images is None:
        raise ValueError("give texts, images or both")
    if texts is not None and images is not None and len(texts) != len(images):
        raise ValueError("texts and images must have the same length (None where a row has no such input)")
    rows = len(texts) if texts is not None else len(images or ())
    if is_query:
        from_text = list(vectors)
        from_image = [v for v in vectors if v.model == image_model and v.kind == "dense"]
    else:
        from_text = [v for v in vectors if v.source == "text"]
        from_image = [v for v in vectors if v.source == "image"]
    if present(images) and not from_image:
        raise ValueError("images need image_model=... (an image-text model such as CLIP or SigLIP)")
    calls = []
    for inputs, wanted_vectors, kind in ((texts, from_text, "text"), (images, from_image, "image")):
        where = present(inputs)
        if not where or not wanted_vectors:
            continue
        chosen = [inputs[i] for i in where]  # type: ignore[index]
        items = image_items(chosen, str_is=str_is) if kind == "image" else chosen
        groups: dict[str, list] = {}
        for v in wanted_vectors:
            groups.setdefault(v.model, []).append(v)
        calls += [(model, items, where, wanted) for model, wanted in groups.items()]
    return rows, calls
