"""`SIEDocumentConverter`: a Haystack converter that reads PDFs and images with an SIE document
model (Florence-2's OCR, Donut): sources (paths or `ByteStream`s) in, one `Document` per page out,
with the source's meta merged in, as Haystack's own converters take and give them."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.components.converters.utils import get_bytestream_from_source, normalize_metadata
from haystack.dataclasses import ByteStream
from haystack.utils import Secret

from sie_client import SIEError
from sie_client.documents import (
    DEFAULT_OCR_MODEL,
    DEFAULT_OCR_TASK,
    OCRPage,
    aread_pages,
    blames_the_file,
    ocr_options,
    page_extras,
    read_pages,
)

from .connection import DEFAULT_KEY, SIEConnection, connection_from_dict

logger = logging.getLogger(__name__)


@component
class SIEDocumentConverter(SIEConnection):
    """Example:
        converter = SIEDocumentConverter(model="microsoft/Florence-2-base", url="http://127.0.0.1:8080")
        docs = converter.run(sources=["scan.pdf", "receipt.png"])["documents"]   # one per page

    task: Florence-2's task token (`<OCR>`; `<OCR_WITH_REGION>` adds a box per line; None for
    Donut), prompt its text input. dpi / pages: how a PDF is rendered and which pages (None: SIE's
    defaults, every page). Each page's meta: the source's (`file_path` for a path, a ByteStream's
    own), `meta` given to `run`, `page_number` (1-based, the name Haystack's splitters use),
    `total_pages` (pages read from the source), `page_width` / `page_height` (points for a PDF,
    pixels for an image), `width_px` / `height_px` (the pixels the model saw), `model`, and, where
    the model gives boxes, `regions`: `{"label", "box": [x0, y0, x1, y1], "text"?, "quad_box"?}`, and where
    it parses the page (Donut), `data`: its JSON.

    As Haystack's converters, a source that cannot be read (missing, or refused by SIE with a 4xx
    about the file) is logged with its name and the reason and skipped; `raise_on_failure=True`
    raises instead (the `SIEError`, its message starting with the source's name). Other errors
    (SIE unreachable, overloaded past its retries) raise.
    """

    def __init__(self, model: str = DEFAULT_OCR_MODEL, url: str | None = None, api_key: Secret = DEFAULT_KEY,
                 timeout: float | None = None, task: str | None = DEFAULT_OCR_TASK, prompt: str | None = None,
                 max_new_tokens: int | None = None, dpi: int | None = None, pages: list[int] | str | None = None,
                 raise_on_failure: bool = False, max_retries: int | None = None):
        SIEConnection.__init__(self, url, api_key, timeout, max_retries)  # @component rebuilds the class
        self.model = model
        self.task = task
        self.prompt = prompt
        self.max_new_tokens = max_new_tokens
        self.dpi = dpi
        self.pages = pages
        self.raise_on_failure = raise_on_failure

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, model=self.model, task=self.task, prompt=self.prompt,
                               max_new_tokens=self.max_new_tokens, dpi=self.dpi, pages=self.pages,
                               raise_on_failure=self.raise_on_failure, **self.connection_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SIEDocumentConverter:
        return default_from_dict(cls, connection_from_dict(data))

    def _options(self) -> dict[str, Any]:
        return dict(dpi=self.dpi, pages=self.pages, **ocr_options(self.task, self.prompt, self.max_new_tokens))

    @staticmethod
    def _name(source: str | Path | ByteStream) -> str:
        if isinstance(source, ByteStream):
            return str(source.meta.get("file_path") or source.meta.get("file_name") or "a ByteStream")
        return str(source)

    def _stream(self, source: str | Path | ByteStream) -> ByteStream | None:
        try:
            return get_bytestream_from_source(source)
        except OSError as error:
            if self.raise_on_failure:
                raise
            logger.warning("Could not read %s, skipping it: %s", self._name(source), error)
            return None

    def _failed(self, error: SIEError) -> None:
        if self.raise_on_failure or not blames_the_file(error):
            raise error
        logger.warning("SIE could not read a source, skipping it: %s", error.message)  # the message names it

    def _documents(self, stream: ByteStream, meta: dict[str, Any], pages: list[OCRPage]) -> list[Document]:
        out = []
        for page in pages:
            page_meta: dict[str, Any] = {**stream.meta, **meta, "page_number": page.number, "total_pages": page.total,
                                         "page_width": page.width, "page_height": page.height,
                                         "width_px": page.width_px, "height_px": page.height_px, "model": self.model}
            page_meta.update(page_extras(page))
            out.append(Document(content=page.text, meta=page_meta))
        return out

    @component.output_types(documents=list[Document])
    def run(self, sources: list[str | Path | ByteStream],
            meta: dict[str, Any] | list[dict[str, Any]] | None = None) -> dict[str, list[Document]]:
        """sources: file paths or ByteStreams; meta: one dict for all, or one per source."""
        documents: list[Document] = []
        for source, source_meta in zip(sources, normalize_metadata(meta, len(sources))):
            stream = self._stream(source)
            if stream is None:
                continue
            try:
                pages = read_pages(self.sync_client, self.model, self._name(source), stream.data, **self._options())
            except SIEError as error:
                self._failed(error)
                continue
            documents += self._documents(stream, source_meta, pages)
        return {"documents": documents}

    @component.output_types(documents=list[Document])
    async def run_async(self, sources: list[str | Path | ByteStream],
                        meta: dict[str, Any] | list[dict[str, Any]] | None = None) -> dict[str, list[Document]]:
        documents: list[Document] = []
        for source, source_meta in zip(sources, normalize_metadata(meta, len(sources))):
            stream = self._stream(source)
            if stream is None:
                continue
            try:
                pages = await aread_pages(self.call_async, self.model, self._name(source), stream.data,
                                          **self._options())
            except SIEError as error:
                self._failed(error)
                continue
            documents += self._documents(stream, source_meta, pages)
        return {"documents": documents}
