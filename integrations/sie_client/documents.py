"""Files read through an SIE document model (Florence-2's OCR, Donut), page by page: what the
framework loaders (sie_langchain's `SIEDocumentLoader`, sie_llamaindex's `SIEDocumentReader`,
sie_haystack's `SIEDocumentConverter`) share, each then putting a page into its framework's
Document under its framework's metadata names.

One file is one extract request: a PDF as a document item (rendered server-side, one answer per
page with its number and size), any other file as an image item (one page). A file the server
refuses raises `SIEError` whose message starts with the file's name, so a batch of files says
which one was bad; the request's other failures (server down, overloaded) keep their own type.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from .errors import SIEError
from .types import ExtractResult

DEFAULT_OCR_MODEL = "microsoft/Florence-2-base"
DEFAULT_OCR_TASK = "<OCR>"  # Florence-2's plain reading; "<OCR_WITH_REGION>" adds a box per line
PDF_MAGIC = b"%PDF-"


@dataclass
class OCRPage:
    """One page as the model read it. `number` is 1-based, `total` the pages read from the file; `width` / `height`
    the page's size (points, 1/72 inch, for a PDF; pixels for an image; None when Pillow is not
    installed to read an image's size) and `width_px` / `height_px` the pixels the model saw,
    in which `regions` are (`{"label", "box": [x0, y0, x1, y1], "text"?, "quad_box"?, ...}`); `data` the
    page's parsed JSON where the model gives one (Donut's `token2json`: a receipt's fields, an answer)."""

    text: str
    number: int
    total: int
    width: float | None
    height: float | None
    width_px: int | None
    height_px: int | None
    regions: list[dict[str, Any]] | None = None
    data: Any = None


def is_pdf(data: bytes) -> bool:
    # PDF 1.7 7.5.2: the header may follow up to 1,024 bytes of junk, which readers accept
    return PDF_MAGIC in data[:1024]


def read_source(source: str | PurePath | bytes) -> bytes:
    """A file's bytes (a path or bytes); a missing file raises FileNotFoundError naming it."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    return Path(source).read_bytes()


def source_item(name: str, data: bytes, dpi: int | None = None,
                pages: list[int] | str | None = None) -> dict[str, Any]:
    """The extract item for one file: `{"document": ...}` for a PDF (with its `dpi` / `pages`) or a
    file named `*.pdf` (so a broken one is refused as a PDF, not as an image), `{"image": ...}` otherwise."""
    if not (is_pdf(data) or name.lower().endswith(".pdf")):
        return {"image": data}
    item: dict[str, Any] = {"document": data}
    if dpi is not None:
        item["dpi"] = dpi
    if pages is not None:
        item["pages"] = pages if isinstance(pages, str) else list(pages)  # numbers, or ranges as "1-3,7"
    return item


def ocr_options(task: str | None, prompt: str | None, max_new_tokens: int | None) -> dict[str, Any]:
    return {"task": task, "prompt": prompt, "max_new_tokens": max_new_tokens}


def blames_the_file(error: SIEError) -> bool:
    """Whether SIE refused the file itself (a 400 or 413: not a PDF or image, encrypted, too many
    pages...), rather than the key (401), the model (404), the load (429) or the connection."""
    return 400 <= error.status < 500 and error.status not in (401, 404, 429)


def named_error(name: str, error: SIEError) -> SIEError:
    """`error` with the file's name in front of its message, when it blames the file; other errors
    are returned as they are."""
    if not blames_the_file(error):
        return error
    # the request's one item is the file: "items[0].document is not a PDF" reads "NAME: document is not a PDF"
    message = error.message.removeprefix("items[0].")
    named = SIEError(error.status, error.code, f"{name}: {message}", error.retry_after,
                     reason=error.reason, retryable=error.retryable)
    return named


def _region(region: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"label": region.label, "box": list(region.box)}
    for key in ("text", "score", "quad_box", "polygons"):
        value = getattr(region, key)
        if value is not None:
            out[key] = value
    return out


def _image_size(data: bytes) -> tuple[int, int] | tuple[None, None]:
    """An image file's pixel size from its header (Pillow reads no pixels for it), if Pillow is here."""
    try:
        from PIL import Image
    except ImportError:
        return None, None
    with Image.open(io.BytesIO(data)) as image:
        return image.size


def page_text(text: str | None, regions: list[dict[str, Any]] | None) -> str:
    """The page's text: the model's, or, when each region carries the text it read (OCR with
    regions, whose raw text interleaves location tokens), those texts a line each, in reading order."""
    if regions and all("text" in r for r in regions):
        return "\n".join(r["text"] for r in regions)
    return text or ""


def pages_of(result: ExtractResult, data: bytes) -> list[OCRPage]:
    """The answer to one file's request as its pages, in order."""
    items = result.items
    if items and items[0].page is None:  # an image: one page, its own size
        width, height = _image_size(data)
        item = items[0]
        regions = None if item.regions is None else [_region(r) for r in item.regions]
        return [OCRPage(page_text(item.text, regions), 1, 1, width, height, width, height, regions, item.data)]
    pages = []
    for item in items:
        assert item.page is not None  # a document item's answers each carry their page
        regions = None if item.regions is None else [_region(r) for r in item.regions]
        where = item.page
        pages.append(OCRPage(page_text(item.text, regions), where.number, len(items), where.width, where.height,
                             where.width_px, where.height_px, regions, item.data))
    return pages


def page_extras(page: OCRPage) -> dict[str, Any]:
    """The metadata a page adds where its model gives it: `regions` (boxes) and `data` (parsed JSON)."""
    return {key: value for key, value in (("regions", page.regions), ("data", page.data)) if value is not None}


def read_pages(client: Any, model: str, name: str, data: bytes, *, dpi: int | None = None,
               pages: list[int] | str | None = None, **options: Any) -> list[OCRPage]:
    """One file's pages through `client` (an SIEClient); `options` as `ocr_options` makes them."""
    try:
        result = client.extract(model, [source_item(name, data, dpi, pages)], **options)
    except SIEError as error:
        raise named_error(name, error) from None
    return pages_of(result, data)


async def aread_pages(call: Any, model: str, name: str, data: bytes, *, dpi: int | None = None,
                      pages: list[int] | str | None = None, **options: Any) -> list[OCRPage]:
    """`read_pages` through an awaitable `call(method, *args, **kwargs)` (an adapter's async client)."""
    try:
        result = await call("extract", model, [source_item(name, data, dpi, pages)], **options)
    except SIEError as error:
        raise named_error(name, error) from None
    return pages_of(result, data)
