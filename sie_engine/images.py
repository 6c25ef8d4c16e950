"""Image items: from the bytes a client sent to the pixel arrays a vision tower takes.

Runs on the tokenizer pool, never on an event loop: base64 decoding, Pillow's decoding and
the checkpoint's own preprocessing (transformers' image processor, PIL backend: resize,
crop, rescale, normalise as its `preprocessor_config.json` says).

Hostile input is refused before it costs memory: the encoded size first (413), then the
format against the allowed list and the pixel count read from the header, before a single
pixel is decoded (a 400 MB PNG of zeros is 400 KB of file: 413). A corrupt, truncated or
non-image file is a 400. No URL is ever fetched: a server that fetches what requests name
can be made to reach the network behind it.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InvalidRequest, PayloadTooLarge
from .validation import Limits


def image_bytes(value: Any, limits: Limits, field: str) -> bytes:
    """An item's `image` as bytes: raw bytes (msgpack), or a base64 string, bare or as a
    `data:image/...;base64,` URI (JSON)."""
    return file_bytes(value, limits.max_image_bytes, field, "image", "data:image/png;base64,...")


def file_bytes(value: Any, max_bytes: int, field: str, what: str, data_uri: str) -> bytes:
    """A file an item carries (an image, a document) as bytes: raw bytes (msgpack), or a base64
    string, bare or as a data: URI (JSON); at most `max_bytes` (413), refused before decoding."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
    elif isinstance(value, str):
        if value.startswith(("http://", "https://", "file:", "ftp:")):
            raise InvalidRequest(f"{field} is a URL; SIE does not fetch URLs: send the {what}'s bytes "
                                 "(base64 in JSON, raw bytes in msgpack)", field=field)
        text = value
        if text.startswith("data:"):
            header, comma, text = text.partition(",")
            if not comma or not header.endswith(";base64"):
                raise InvalidRequest(f"{field}: a data: URI must be base64 ({data_uri})", field=field)
        if len(text) * 3 // 4 > max_bytes + 3:
            raise PayloadTooLarge(f"{field} has about {len(text) * 3 // 4} bytes; at most {max_bytes} "
                                  f"per {what}", field=field)
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequest(f"{field} is not valid base64 (JSON carries an {what} as base64 or a data: URI; "
                                 "msgpack as raw bytes)", field=field) from None
    else:
        raise InvalidRequest(f"{field} must be bytes (msgpack) or a base64 string (JSON), got {type(value).__name__}",
                             field=field)
    if not data:
        raise InvalidRequest(f"{field} is empty", field=field)
    if len(data) > max_bytes:
        raise PayloadTooLarge(f"{field} has {len(data)} bytes; at most {max_bytes} per {what} "
                              f"({'split or compress it' if what == 'document' else 'downscale or recompress it'})",
                              field=field)
    return data


# How much of an image's file is read for its header at admission: PNG, GIF, BMP and WebP give
# their size in the first bytes; a JPEG's frame header follows its EXIF and ICC segments, so a
# file whose size is not found in the first 4 KiB is read again up to 64 KiB.
HEADER_PREFIXES = (4096, 65536)


def header_pixels(value: Any, limits: Limits) -> int:
    """Pixels an image item will decode to, from its header only (Pillow's `open` reads the size
    lazily), for admission before any pixel is decoded: a prefix of the file is base64-decoded
    and opened. 0 for what decoding refuses at once (not an image, over the pixel limit: those
    cost nothing to refuse); `Limits.max_image_pixels` where the size is not in the prefix."""
    from PIL import Image

    if isinstance(value, (bytes, bytearray, memoryview)):
        whole = len(value)

        def prefix(n: int) -> bytes:
            return bytes(value[:n])
    elif isinstance(value, str):
        text = value.partition(",")[2] if value.startswith("data:") else value
        whole = len(text) * 3 // 4

        def prefix(n: int) -> bytes:
            try:
                return base64.b64decode(text[:n * 4 // 3 // 4 * 4])
            except (binascii.Error, ValueError):
                return b""
    else:
        return 0
    for size in HEADER_PREFIXES:
        try:
            width, height = Image.open(io.BytesIO(prefix(size)), formats=list(limits.image_formats)).size
        except Image.DecompressionBombError:
            return 0  # refused before decoding
        except Exception:  # a header Pillow cannot read in this prefix (its plugins raise many kinds)
            if size >= whole:
                return 0  # the whole file: decoding refuses it at once
            continue
        pixels = width * height
        return pixels if pixels <= limits.max_image_pixels else 0
    return limits.max_image_pixels


class PictureSource(ABC):
    """An image input made on the server rather than sent as a file (a document's page): its size
    is known before a pixel is made, so the model's resize bound is checked first."""

    @property
    @abstractmethod
    def size(self) -> tuple[int, int]:
        """(width, height) in pixels of the picture `picture` makes."""

    @abstractmethod
    def picture(self, field: str):
        """The RGB PIL image (InvalidRequest naming `field` where it cannot be made)."""


# The most pixels a checkpoint's resize may make of one image (2048 x 2048). A shortest-edge
# resize (CLIP's) scales the long side by as much as the short one: a 102-byte 1 x 10,000 PNG
# became 224 x 2,240,000 pixels (15-24 s, +4-5 GB) before the centre crop kept 224 x 224 of them
# (issue #30.4). Real pictures stay far below (a 1:20 panorama at 336: 2.3M).
MAX_RESIZED_PIXELS = 1 << 22


def _size_entry(size: Any, key: str) -> int | None:
    """One entry of an image processor's `size` (a dict in its config, transformers' SizeDict on
    the object)."""
    if size is None:
        return None
    value = size.get(key) if isinstance(size, Mapping) else getattr(size, key, None)
    return int(value) if value else None


def resized_size(processor: Any, width: int, height: int) -> tuple[int, int]:
    """(width, height) an image of `width` x `height` has after the processor's resize step
    (transformers' `get_resize_output_image_size` for its `size` entries); the image's own size
    where the processor does not resize or resizes within a fixed bound (NaFlex's patch budget)."""
    size = processor.size if processor.do_resize else None
    shortest, longest = _size_entry(size, "shortest_edge"), _size_entry(size, "longest_edge")
    fixed_h, fixed_w = _size_entry(size, "height"), _size_entry(size, "width")
    if fixed_h and fixed_w:
        return fixed_w, fixed_h
    if shortest:
        short, long = min(width, height), max(width, height)
        new_long = int(shortest * long / short)
        if longest and new_long > longest:
            new_long = longest  # transformers' max_size: the long side capped, the short one follows
        return (shortest, new_long) if width <= height else (new_long, shortest)
    if longest:
        scale = longest / max(width, height)
        return max(1, int(width * scale)), max(1, int(height * scale))
    return width, height


def check_resize(processor: Any, width: int, height: int, field: str) -> None:
    """PayloadTooLarge when the processor's resize would make more than MAX_RESIZED_PIXELS of
    an image of `width` x `height` (read from its header, before a pixel is decoded)."""
    new_w, new_h = resized_size(processor, width, height)
    if new_w * new_h > MAX_RESIZED_PIXELS:
        raise PayloadTooLarge(f"{field} is {width} x {height} pixels: this model's preprocessing would resize it to "
                              f"{new_w} x {new_h} ({new_w * new_h} pixels); at most {MAX_RESIZED_PIXELS} "
                              "(crop it to a less extreme aspect ratio)", field=field)


def decode_image(data: bytes, limits: Limits, field: str, check: Callable[[int, int], None] | None = None):
    """Checked bytes -> an RGB PIL image (the limits are Limits.max_image_* and image_formats);
    `check(width, height)` runs on the header's size before any pixel is decoded."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    allowed = ", ".join(limits.image_formats)
    try:
        image = Image.open(io.BytesIO(data), formats=list(limits.image_formats))  # reads the header only
    except UnidentifiedImageError:
        raise InvalidRequest(f"{field} is not an image in an accepted format ({allowed})", field=field) from None
    except Image.DecompressionBombError as exc:
        raise _too_many_pixels(field, limits, str(exc)) from None
    except (ValueError, OSError, SyntaxError, EOFError) as exc:  # Pillow's plugins raise these for bad headers
        if "too large" in str(exc).lower():  # a PNG text chunk that decompresses beyond Pillow's cap
            raise PayloadTooLarge(f"{field}: a metadata chunk decompresses to too much data ({exc})",
                                  field=field) from None
        raise InvalidRequest(f"{field} is not a readable image ({exc})", field=field) from None
    width, height = image.size
    if width * height > limits.max_image_pixels:
        raise _too_many_pixels(field, limits, f"{width} x {height}")
    if check is not None:
        check(width, height)
    try:
        image.load()
        # a camera's EXIF orientation applied, so the picture is embedded upright, as it is shown
        # (transformers' load_image does the same for files and URLs)
        ImageOps.exif_transpose(image, in_place=True)
        return image if image.mode == "RGB" else image.convert("RGB")  # transformers' convert_to_rgb
    except Image.DecompressionBombError as exc:
        raise _too_many_pixels(field, limits, str(exc)) from None
    except (ValueError, OSError, SyntaxError, EOFError) as exc:
        raise InvalidRequest(f"{field} could not be decoded: truncated or corrupt {image.format} ({exc})",
                             field=field) from None


def _too_many_pixels(field: str, limits: Limits, what: str) -> PayloadTooLarge:
    return PayloadTooLarge(f"{field} is too large in pixels ({what}); at most {limits.max_image_pixels} pixels "
                           "per image (downscale it)", field=field)


def read_image_processor_config(root: Path) -> dict[str, Any]:
    """The image processor's settings: `preprocessor_config.json` (the Hub's checkpoints), or the
    `image_processor` entry of `processor_config.json` (what transformers 5 `save_pretrained` writes)."""
    path = root / "preprocessor_config.json"
    if path.is_file():
        return json.loads(path.read_text())
    path = root / "processor_config.json"
    if path.is_file():
        config = json.loads(path.read_text()).get("image_processor")
        if isinstance(config, dict):
            return config
    raise ValueError(f"{root} has no preprocessor_config.json (nor an image_processor in processor_config.json): "
                     "save the model's processor with it (processor.save_pretrained)")


def load_image_processor(root: Path):
    """transformers' image processor for the checkpoint, its PIL implementation where one exists
    (the default one needs torchvision, which SIE leaves out)."""
    import transformers

    config = read_image_processor_config(Path(root))
    name = config.get("image_processor_type") or config.get("feature_extractor_type") or ""
    name = name.replace("FeatureExtractor", "ImageProcessor")  # the older checkpoints' name for the same class
    # transformers 4 saved its torchvision processors as `...ImageProcessorFast`; transformers 5 dropped the
    # suffix (the name left is a placeholder that needs torchvision): the same settings, the PIL class
    name = name.removesuffix("Fast")
    # transformers' class by the name the checkpoint's config gives (a lookup, not a capability probe)
    cls = getattr(transformers, name + "Pil", None) or getattr(transformers, name, None)
    if cls is None or not name:
        raise ValueError(f"{root}: image processor {name!r} is not one transformers has")
    settings = {k: v for k, v in config.items()
                if k not in ("image_processor_type", "feature_extractor_type", "processor_class")}
    return cls.from_dict(settings)


def first_image(processed: Mapping[str, Any]) -> np.ndarray:
    """The pixel values of the one image a processor call was given (`[C, S, S]`)."""
    return processed["pixel_values"][0]


def prepare_images(processor, values: Sequence[Any], fields: Sequence[str], limits: Limits,
                   take: Callable[[Mapping[str, Any]], np.ndarray] = first_image,
                   sizes: list[tuple[int, int]] | None = None,
                   check_size: Callable[[int, int, str], None] | None = None) -> list[np.ndarray]:
    """Images as sent -> float32 pixel values each (`take` picks them from the processor's output),
    decoded and preprocessed one at a time (one bad image names its item; at most one full-size
    decoded image is held at once). `sizes`, where given, receives each picture's (height, width)
    as decoded (a detector's boxes are answered in those pixels). `check_size(width, height, field)`
    refuses a picture from its header (default: `check_resize` of the processor's `size`; a
    processor whose `size` means something else brings its own)."""
    pixels: list[np.ndarray] = []
    for value, field in zip(values, fields):
        def check(width: int, height: int, field: str = field) -> None:
            if check_size is not None:
                check_size(width, height, field)
            else:
                check_resize(processor, width, height, field)

        if isinstance(value, PictureSource):  # a document's page: its size is known before it is rendered
            check(*value.size)
            picture = value.picture(field)
        else:
            picture = decode_image(image_bytes(value, limits, field), limits, field, check)
        if sizes is not None:
            sizes.append((picture.height, picture.width))
        pixels.append(take(processor(images=[picture], return_tensors="np")).astype(np.float32))
    return pixels


class ImagePreprocessor:
    """The image role of a model's input preparation: the checkpoint's image processor over the
    images a request sent. `image_size`: the side the vision tower expects; `image_tokens`:
    positions it runs per image (patches, plus the class token where the family has one), what
    admission counts an image as before it sees it."""

    def __init__(self, processor: Any, image_size: int, image_tokens: int):
        self.processor = processor
        self.image_size = image_size
        self.image_tokens = image_tokens

    def encode_images(self, values: Sequence[Any], fields: Sequence[str], limits: Limits) -> list[np.ndarray]:
        """Images as sent -> float32 pixel values each (`[C, S, S]`)."""
        return prepare_images(self.processor, values, fields, limits)

    def encode_images_sized(self, values: Sequence[Any], fields: Sequence[str],
                            limits: Limits) -> tuple[list[np.ndarray], list[tuple[int, int]]]:
        """As `encode_images`, with each picture's (width, height) as decoded (a document model's
        boxes are answered in those pixels)."""
        sizes: list[tuple[int, int]] = []
        pixels = prepare_images(self.processor, values, fields, limits, sizes=sizes)
        return pixels, [(width, height) for height, width in sizes]

    def positions(self, pixels: np.ndarray) -> int:
        """Positions the vision tower runs for one prepared image (the batcher's count of it)."""
        return self.image_tokens
