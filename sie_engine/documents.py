"""Document items (PDF): from the file a client sent to one image input per page.

A document is planned, then rendered page by page, both on the image threads (image_pool.py),
never on an event loop:

1. plan (`plan_document`): the encoded size (413), the `%PDF-` header (400), pdfium's parse of
   the cross-reference table (malformed: 400; a password needed: 400 saying so, there is no
   password option), the page count against `Limits.max_document_pages` (413, before any page is
   loaded) and each page's box, read without parsing its content: the render scale is the DPI
   asked for, lowered where the page would exceed `Limits.max_page_pixels` (a 200-inch page box
   at 144 DPI would be 829M pixels). The model's own resize bound is checked on that size too.
2. render (`PdfPage.picture`): one page at a time, as the image chunks are prepared, so a
   request holds one rendered page per image thread, never the whole document.

What a page costs is bounded by its pixels and by what its streams inflate to: pdfium draws
images through a scanline stretcher sized to the output, so an image XObject that inflates to
gigabytes is streamed, not held; content, font and object streams it inflates whole, so those are
inflated first, up to `Limits.max_document_inflated_bytes` (pdf_inflation.py).

A document never runs code or reaches anything outside its bytes: forms are never initialised
(no form-fill environment: widgets, their JavaScript and XFA stay inert; pdfium runs scripts only
through that environment, and pypdfium2's wheels have no V8 at all), actions and links are never
followed (rendering runs none), and the document is opened from memory, so external streams and
file specifications (`/F`) point at nothing pdfium reads.

pdfium is not thread-safe (pypdfium2's docs: one thread at a time, across all documents), so
every call into it holds `_PDFIUM`; pages render one at a time server-wide.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sie_contract.shapes import DEFAULT_DPI
from sie_contract.values import Page

from .errors import InvalidRequest, PayloadTooLarge
from .image_pool import on_image_threads
from .images import PictureSource, file_bytes
from .pdf_inflation import check_inflation
from .validation import DocumentItem

if TYPE_CHECKING:
    import pypdfium2

    from .validation import Limits

POINTS_PER_INCH = 72
# The PDF header may follow up to 1,024 bytes of other data (PDF 1.7, annex H.3; pdfium searches as far)
HEADER_WINDOW = 1024
_PDFIUM = threading.Lock()


@dataclass(frozen=True)
class PdfPage(PictureSource):
    """One page of a planned document: rendered at `scale` pixels per point when its picture is
    asked for. `data` is the document's file (shared by its pages), `index` the page's (0-based)."""

    data: bytes
    index: int
    scale: float
    page: Page

    @property
    def size(self) -> tuple[int, int]:
        return self.page.width_px, self.page.height_px

    def picture(self, field: str):
        """The page rendered as pypdfium2 renders it (`PdfPage.render(scale)`, white background,
        annotations drawn, no form fields) -> an RGB PIL image of `size`. InvalidRequest naming
        `field` for a page pdfium cannot load (a page tree that parsed but a page that does not)."""
        import pypdfium2

        with _PDFIUM:
            # opened again per page: pdfium's handles must not outlive the lock (their finalisers would
            # call into pdfium from another thread), and the re-parse is the cross-reference table only
            document = pypdfium2.PdfDocument(self.data)
            try:
                page = document[self.index]
                try:
                    bitmap = page.render(scale=self.scale, may_draw_forms=False)
                    try:
                        image = bitmap.to_pil().convert("RGB")  # a copy: the bitmap's buffer is freed below
                    finally:
                        bitmap.close()
                finally:
                    page.close()
            except pypdfium2.PdfiumError as exc:
                raise InvalidRequest(f"{field} could not be rendered: a malformed page ({exc})", field=field) from None
            finally:
                document.close()
        return image


def plan_document(item: DocumentItem, limits: Limits, field: str, position: int) -> list[PdfPage]:
    """A document item -> its pages to render (in the order asked for), every bound checked and
    nothing rendered yet. `position`: the item's index in the request (each page's `item`)."""
    import pypdfium2

    data = file_bytes(item.data, limits.max_document_bytes, field, "document", "data:application/pdf;base64,...")
    if b"%PDF-" not in data[:HEADER_WINDOW]:
        raise InvalidRequest(f"{field} is not a PDF (no %PDF- header); document items take PDF files", field=field)
    check_inflation(data, limits.max_document_inflated_bytes, field)  # before pdfium inflates anything
    dpi = item.dpi or DEFAULT_DPI
    with _PDFIUM:
        try:
            document = pypdfium2.PdfDocument(data)
        except pypdfium2.PdfiumError as exc:
            raise _unreadable(exc, field) from None
        try:
            count = len(document)
            numbers = _page_numbers(item.pages, count, limits, field)
            sizes = {number: document.get_page_size(number - 1) for number in set(numbers)}
        except pypdfium2.PdfiumError as exc:
            raise InvalidRequest(f"{field} is a malformed PDF: {exc}", field=field) from None
        finally:
            document.close()
    pages = []
    for number in numbers:
        width, height = sizes[number]
        where = f"{field} (page {number})"
        scale = page_scale(width, height, dpi, limits.max_page_pixels, where)
        page = Page(position, number, round(width, 3), round(height, 3),
                    math.ceil(width * scale), math.ceil(height * scale))
        pages.append(PdfPage(data, number - 1, scale, page))
    return pages


def page_scale(width: float, height: float, dpi: int, max_pixels: int, field: str) -> float:
    """Pixels per point for a page of `width` x `height` points: `dpi / 72`, or less where the
    page would render to more than `max_pixels` (pypdfium2 rounds each side up)."""
    if not (math.isfinite(width) and math.isfinite(height)) or width <= 0 or height <= 0:
        raise InvalidRequest(f"{field} has an empty or invalid page box ({width} x {height} points)", field=field)
    scale = dpi / POINTS_PER_INCH
    if math.ceil(width * scale) * math.ceil(height * scale) > max_pixels:
        scale = math.sqrt(max_pixels / (width * height))
        while scale > 0 and math.ceil(width * scale) * math.ceil(height * scale) > max_pixels:
            scale *= 0.999  # the sides' rounding up: a step or two
    if scale <= 0 or math.ceil(width * scale) * math.ceil(height * scale) > max_pixels:
        raise PayloadTooLarge(f"{field}: a {width} x {height} point page cannot be rendered within {max_pixels} "
                              "pixels", field=field)
    return scale


def _page_numbers(pages: list[int] | str | None, count: int, limits: Limits, field: str) -> list[int]:
    """The 1-based page numbers to render: those asked for (numbers, or ranges), else all; 413
    beyond the limit, decided before a range is expanded."""
    most = limits.max_document_pages
    if pages is None:
        if count > most:
            raise PayloadTooLarge(f"{field} has {count} pages; at most {most} are rendered per document: send "
                                  f"`pages` (e.g. [1, 2, 3] or \"1-3\") to choose up to {most}, or split it",
                                  field=field)
        return list(range(1, count + 1))
    where = f"{field}.pages"
    spans = _spans(pages, count) if isinstance(pages, str) else [(number, number) for number in pages]
    asked = sum(max(0, last - first + 1) for first, last in spans)
    if asked > most:
        raise PayloadTooLarge(f"{where} names {asked} pages; at most {most} per document", field=where)
    for first, last in spans:
        if first > last:
            raise InvalidRequest(f"{where} has the range {first}-{last}, which runs backwards", field=where)
        for number in (first, last):
            if not 1 <= number <= count:
                raise InvalidRequest(f"{where} names page {number}, but the document has {count} page(s) "
                                     "(pages are numbered from 1)", field=where)
    return [number for first, last in spans for number in range(first, last + 1)]


def _spans(ranges: str, count: int) -> list[tuple[int, int]]:
    """"1-3,7,10-" (the contract's PAGE_RANGES) -> [(1, 3), (7, 7), (10, count)]."""
    spans = []
    for part in ranges.split(","):
        first, dash, last = (piece.strip() for piece in part.partition("-"))
        spans.append((int(first), (int(last) if last else count) if dash else int(first)))
    return spans


def _unreadable(exc: pypdfium2.PdfiumError, field: str) -> InvalidRequest:
    """pdfium's refusal to open a document -> a 400 that says why."""
    import pypdfium2.raw as pdfium_c

    code = exc.err_code
    if code == pdfium_c.FPDF_ERR_PASSWORD:
        return InvalidRequest(f"{field} is an encrypted PDF that needs a password; SIE takes no passwords: "
                              "send it decrypted", field=field)
    if code == pdfium_c.FPDF_ERR_SECURITY:
        return InvalidRequest(f"{field} is encrypted with a security handler pdfium does not support: send it "
                              "decrypted", field=field)
    return InvalidRequest(f"{field} is a malformed or truncated PDF (pdfium could not open it)", field=field)


@dataclass
class Expanded:
    """A request's items with each document replaced by its pages, in place: `ids`, `texts` and
    `images` as `validation.parse_encode_items` gives them (a page is a PdfPage image), `pages` each
    item's Page (None: not a page), `fields` the path an image's refusal names."""

    ids: list[str]
    texts: list[str | None]
    images: list[Any]
    pages: list[Page | None]
    fields: list[str]
    seconds: float


async def expand_documents(ids: Sequence[str], texts: Sequence[str | None], images: Sequence[Any],
                           limits: Limits) -> Expanded:
    """Plan every document item of a request on the image threads (nothing rendered yet) and
    put its pages in its place. PayloadTooLarge when the pages make more items than a request
    may hold."""
    out = Expanded([], [], [], [], [], 0.0)
    for i, (item_id, text, image) in enumerate(zip(ids, texts, images)):
        if not isinstance(image, DocumentItem):
            out.ids.append(item_id)
            out.texts.append(text)
            out.images.append(image)
            out.pages.append(None)
            out.fields.append(f"items[{i}].image")
            continue
        planned, seconds = await on_image_threads(plan_document, image, limits, f"items[{i}].document", i)
        out.seconds += seconds
        for page in planned:
            out.ids.append(item_id)
            out.texts.append(None)
            out.images.append(page)
            out.pages.append(page.page)
            out.fields.append(f"items[{i}].document (page {page.page.number})")
        if len(out.ids) > limits.max_items:
            raise PayloadTooLarge(f"items make {len(out.ids)} items with their documents' pages (each page is an "
                                  f"item); at most {limits.max_items} per request", field="items")
    return out
