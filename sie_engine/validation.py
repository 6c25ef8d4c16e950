"""Checks on request inputs shared by the Python API and the server. Each error
names the field and says what to send instead.

A request's types, unknown fields and fixed bounds are checked first, by the task's
request struct (`sie_contract.shapes`, in `Task.request`, which `Engine.run` calls, and
in the server's decoding); what stays here is what a deployment configures (`Limits`:
items, characters, labels) and what depends on the model (its outputs, its width). The
value checks at the end (`check_optional_bool`, `check_number`, `check_positive_int`)
serve bodies no struct declares: the compatibility APIs' and plug-in fields declared by a
JSON Schema alone."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sie_contract.shapes import MAX_ID_CHARS

from .card import ModelCard
from .errors import InvalidRequest, PayloadTooLarge, UnsupportedOutput


@dataclass(frozen=True)
class DocumentItem:
    """A document item as sent (its file's bytes or base64, the page numbers and DPI asked for; the
    request struct checked their types), rendered into pages later (documents.py)."""

    data: str | bytes | bytearray
    pages: list[int] | str | None = None  # page numbers, or ranges ("1-3,7,10-")
    dpi: int | None = None


@dataclass(frozen=True)
class VideoItem:
    """A video item as sent (its file's bytes or base64), its frames sampled later (videos.py)."""

    data: str | bytes | bytearray


@dataclass(frozen=True)
class Limits:
    max_items: int = 4096
    max_text_chars: int = 262_144
    max_labels: int = 64
    max_label_chars: int = 256
    max_instruction_chars: int = 4096
    # image items (images.py): encoded bytes, decoded pixels (width x height, checked from the
    # header before decoding: decompression bombs) and the formats Pillow may parse
    max_image_bytes: int = 20 * 2**20
    max_image_pixels: int = 50_000_000
    image_formats: tuple[str, ...] = ("PNG", "JPEG", "WEBP", "GIF", "BMP")
    # document items (documents.py): encoded bytes, pages (read from the page count before any
    # page is rendered; admission counts a document as this many images unless it names its pages)
    # and pixels per rendered page (from the page box: a larger page is rendered at a lower scale)
    max_document_bytes: int = 20 * 2**20
    max_document_pages: int = 64
    max_page_pixels: int = 1 << 23
    # what a document's content, font and object streams inflate to (pdf_inflation.py; images are
    # streamed by pdfium and not counted), checked before pdfium parses a page
    max_document_inflated_bytes: int = 32 * 2**20
    # video items (videos.py): encoded bytes, the frames a video may hold (read from its container,
    # or counted from its packets, before a frame is decoded: a long video is refused, not decoded)
    # and the pixels decoding it costs (frames x width x height: sampling decodes up to its last
    # frame); each frame's pixels are bounded by max_image_pixels
    max_video_bytes: int = 20 * 2**20
    max_video_frames: int = 36_000  # 20 minutes at 30 frames a second
    max_video_pixels: int = 36_000 * 1920 * 1080  # those 20 minutes at 1080p


def parse_items(items: Any, limits: Limits, field: str = "items") -> tuple[list[str], list[str]]:
    """Items as strings or `{id?, text}` objects -> (ids, texts). Ids default to the index."""
    ids, texts, _ = _parse_items(items, limits, field, images=False)
    return ids, texts


def parse_encode_items(items: Any, limits: Limits, field: str = "items", image_text: bool = False,
                       videos: bool = False) -> tuple[list[str], list[str | None], list[Any | None]]:
    """Encode's items: strings, `{id?, text}` or `{id?, image}` objects -> (ids, texts, images), each
    position holding a text or an image (the other None); with `image_text`, an `{id?, image, text}`
    object too (both set: the encode task asks the model whether it takes them). An image is only
    type-checked here: its bytes are decoded off the event loop (images.py). With `videos`, an
    `{id?, video}` object too (with `image_text`, `{id?, video, text}`): a `VideoItem` among the images."""
    return _parse_items(items, limits, field, images=True, image_text=image_text, videos=videos)


_ITEM_FIELDS = frozenset({"id", "text"})
_IMAGE_ITEM_FIELDS = frozenset({"id", "text", "image", "document", "pages", "dpi"})
_ENCODE_ITEM_FIELDS = _IMAGE_ITEM_FIELDS | {"video"}


def _parse_items(items: Any, limits: Limits, field: str, images: bool, image_text: bool = False,
                 videos: bool = False):
    kinds = "{id?, text} or {id?, image} objects" if images else "{id?, text} objects"
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise InvalidRequest(f"{field} must be a list of {kinds} or strings", field=field)
    if not items:
        raise InvalidRequest(f"{field} must not be empty", field=field)
    if len(items) > limits.max_items:
        raise PayloadTooLarge(f"{field} holds {len(items)} items; at most {limits.max_items} per request", field=field)
    allowed = (_ENCODE_ITEM_FIELDS if videos else _IMAGE_ITEM_FIELDS) if images else _ITEM_FIELDS
    max_chars = limits.max_text_chars
    ids: list[str] = []
    texts: list[str | None] = []
    pictures: list[Any] = []  # an image as sent (bytes or base64), decoded later; None for a text
    for i, item in enumerate(items):
        image = None
        text: object  # an object's fields are JSON values of any type until checked
        item_id: object
        if type(item) is str:  # the common case, checked inline (check_text words any refusal)
            if len(item) > max_chars:
                check_text(item, limits, f"{field}[{i}].text")
            ids.append(str(i))
            texts.append(item)
            pictures.append(None)
            continue
        if isinstance(item, str):
            item_id, text = str(i), item
        elif isinstance(item, dict):
            item_id, text, image = _object_item(item, f"{field}[{i}]", str(i), allowed, images, image_text)
        else:
            raise InvalidRequest(f"{field}[{i}] must be a string or an object with a "
                                 f"{'text or image' if images else 'text'} field", field=f"{field}[{i}]")
        if image is None:
            if type(text) is not str or len(text) > max_chars:
                text = check_text(text, limits, f"{field}[{i}].text")
            texts.append(text)
        elif image_text and text is not None:  # a text beside its image (a document refused one above)
            texts.append(check_text(text, limits, f"{field}[{i}].text"))
        else:
            texts.append(None)
        pictures.append(image)
        ids.append(item_id)
    return ids, texts, pictures


def _object_item(item: dict[str, Any], where: str, default_id: str, allowed: frozenset[str],
                 images: bool, image_text: bool = False) -> tuple[str, Any, Any]:
    """An `{id?, text}` (or `{id?, image}`, with `image_text` `{id?, image, text}`) item -> (id, text,
    image); the text is checked by the caller."""
    if not allowed.issuperset(item):
        unknown = set(item) - allowed
        raise InvalidRequest(f"{where} has unknown fields {sorted(unknown)} "
                             f"(allowed: {', '.join(sorted(allowed))})", field=where)
    text, item_id = item.get("text"), item.get("id", None)
    image: Any = None  # the raw image, or the document to render
    if item_id is None:
        item_id = default_id
    elif type(item_id) is not str:
        if not isinstance(item_id, (str, int)) or isinstance(item_id, bool):
            raise InvalidRequest(f"{where}.id must be a string", field=f"{where}.id")
        item_id = str(item_id)
    if len(item_id) > MAX_ID_CHARS:
        raise InvalidRequest(f"{where}.id is longer than {MAX_ID_CHARS} characters", field=f"{where}.id")
    if images and item.get("image") is not None:
        image = _binary_member(item, "image", None if image_text else text, where)
    elif images and item.get("document") is not None:
        document = _binary_member(item, "document", text, where)
        image = DocumentItem(document, item.get("pages"), item.get("dpi"))  # rendered off the event loop
    elif images and item.get("video") is not None:  # its frames sampled off the event loop
        image = VideoItem(_binary_member(item, "video", None if image_text else text, where))
    return item_id, text, image


def _binary_member(item: dict[str, Any], name: str, text: Any, where: str) -> str | bytes | bytearray:
    """An item's `image`, `document` or `video`: bytes (msgpack) or base64 (JSON), and never beside a text."""
    if text is not None:
        raise InvalidRequest(f"{where} has both text and {name}; an item carries one of them", field=where)
    value = item[name]
    if not isinstance(value, (str, bytes, bytearray)):
        raise InvalidRequest(f"{where}.{name} must be bytes (msgpack) or a base64 string (JSON), "
                             f"got {type(value).__name__}", field=f"{where}.{name}")
    return value


def check_text(text: Any, limits: Limits, field: str) -> str:
    if not isinstance(text, str):
        raise InvalidRequest(f"{field} must be a string, got {type(text).__name__}", field=field)
    if len(text) > limits.max_text_chars:
        raise PayloadTooLarge(f"{field} has {len(text)} characters; at most {limits.max_text_chars}", field=field)
    return text


def check_output_types(output_types: tuple[str, ...] | list[str] | None, card: ModelCard) -> tuple[str, ...]:
    """The outputs asked for (the request struct checked their names), each one the model offers."""
    offered = card.encode_outputs
    if "multivector" in offered:  # MUVERA encodes a multivector output into one vector
        offered = (*offered, "muvera")
    if output_types is None:
        if not offered:
            raise UnsupportedOutput(f"model {card.id!r} offers no encode outputs (its tasks: {', '.join(card.tasks)})",
                                    field="output_types")
        return (offered[0],)
    for output in output_types:
        if output not in offered:
            raise UnsupportedOutput(
                f"model {card.id!r} does not offer {output!r} output (it offers: {', '.join(offered) or 'none'})",
                field="output_types",
            )
    return tuple(dict.fromkeys(output_types))


def check_optional_bool(value: Any, field: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise InvalidRequest(f"{field} must be true or false", field=field)


def check_dims(dims: int | None, full: int | None, card: ModelCard) -> int | None:
    """Matryoshka dims within the model's width (the request struct bounded them by MAX_DIMS, the
    widest embedding any family has, which is all a card without `dims` is held to here; the
    runner's real width is checked in post-processing)."""
    if dims is not None and full is not None and dims > full:
        raise InvalidRequest(f"dims must be between 1 and {full} for model {card.id!r}", field="dims")
    return dims


def check_instruction(value: str | None, limits: Limits) -> str | None:
    if value is not None and len(value) > limits.max_instruction_chars:
        raise InvalidRequest(f"instruction must be a string of at most {limits.max_instruction_chars} characters",
                             field="instruction")
    return value


def check_number(value: Any, field: str, low: float, high: float, default: float) -> float:
    if value is None:
        return default
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not low <= value <= high):
        raise InvalidRequest(f"{field} must be a number between {low} and {high}", field=field)
    return float(value)


def check_positive_int(value: Any, field: str, high: int | None = None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or (high is not None and value > high):
        bound = f" at most {high}" if high is not None else ""
        raise InvalidRequest(f"{field} must be a positive integer{bound}", field=field)
    return value
