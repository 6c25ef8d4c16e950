"""`SIEDocumentLoader`: a LangChain document loader that reads PDFs and images with an SIE
document model (Florence-2's OCR, Donut) and yields one `Document` per page, as LangChain's PDF
loaders do (`PyPDFLoader`: `source`, a 0-based `page`, `total_pages`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import PurePath
from typing import Any

from langchain_core.document_loaders import BaseLoader
from langchain_core.documents import Document

from sie_client.documents import (
    DEFAULT_OCR_MODEL,
    DEFAULT_OCR_TASK,
    OCRPage,
    aread_pages,
    ocr_options,
    page_extras,
    read_pages,
    read_source,
)

from .connection import SIEConnection


class SIEDocumentLoader(SIEConnection, BaseLoader):
    """Example:
        loader = SIEDocumentLoader(["scan.pdf", "receipt.png"], model="microsoft/Florence-2-base",
                                   url="http://127.0.0.1:8080")
        for doc in loader.lazy_load():   # one per page
            print(doc.metadata["source"], doc.metadata["page"], doc.page_content[:80])

    file_path: a path or a list of paths (PDFs are rendered server-side; any other file is sent as
    an image). task: Florence-2's task token (`<OCR>`; `<OCR_WITH_REGION>` adds a box per line;
    None for Donut, which takes none), prompt its text input (Donut DocVQA's question). dpi / pages:
    how a PDF is rendered and which pages (SIE's document item; None: its defaults, every page).

    Each page's metadata: `source` (the path), `page` (0-based, as LangChain's PDF loaders),
    `total_pages` (pages read from the file), `page_width` / `page_height` (points for a PDF,
    pixels for an image), `width_px` / `height_px` (the pixels the model saw), `model`, and, where
    the model gives boxes, `regions`: `{"label", "box": [x0, y0, x1, y1], "text"?, "quad_box"?}` in
    those pixels (nested: `filter_complex_metadata` drops it for stores that take flat values only), and
    where the model parses the page (Donut), `data`: its JSON.
    With regions that carry text (OCR with regions) `page_content` is their texts, one per line.
    A file SIE refuses raises `SIEError` whose message starts with the file's path.
    """

    file_path: str | PurePath | list[str | PurePath]
    model: str = DEFAULT_OCR_MODEL
    task: str | None = DEFAULT_OCR_TASK
    prompt: str | None = None
    max_new_tokens: int | None = None
    dpi: int | None = None
    pages: list[int] | str | None = None

    def _paths(self) -> Sequence[str | PurePath]:
        return self.file_path if isinstance(self.file_path, list) else [self.file_path]

    def _options(self) -> dict[str, Any]:
        return dict(dpi=self.dpi, pages=self.pages, **ocr_options(self.task, self.prompt, self.max_new_tokens))

    def _document(self, path: str | PurePath, page: OCRPage) -> Document:
        metadata: dict[str, Any] = {"source": str(path), "page": page.number - 1, "total_pages": page.total,
                                    "page_width": page.width, "page_height": page.height,
                                    "width_px": page.width_px, "height_px": page.height_px, "model": self.model}
        metadata.update(page_extras(page))
        return Document(page_content=page.text, metadata=metadata)

    def lazy_load(self) -> Iterator[Document]:
        for path in self._paths():
            for page in read_pages(self._clients.sync, self.model, str(path), read_source(path), **self._options()):
                yield self._document(path, page)

    async def alazy_load(self) -> AsyncIterator[Document]:
        for path in self._paths():
            for page in await aread_pages(self._clients.call, self.model, str(path), read_source(path),
                                          **self._options()):
                yield self._document(path, page)
