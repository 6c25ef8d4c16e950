"""`SIEDocumentReader`: a LlamaIndex reader that reads PDFs and images with an SIE document model
(Florence-2's OCR, Donut): one `Document` per page, as LlamaIndex's `PDFReader` gives them
(`page_label`, `file_name`), usable alone or as a `SimpleDirectoryReader` file extractor."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path, PurePath
from typing import Any

from llama_index.core.bridge.pydantic import Field
from llama_index.core.readers.base import BasePydanticReader
from llama_index.core.schema import Document

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

# metadata kept out of the text LlamaIndex embeds and shows an LLM (and out of its splitters' chunk
# budget, which counts metadata): boxes, sizes and parsed JSON (its text is the page's) are for the
# application, not for retrieval
NOT_FOR_TEXT = ["regions", "data", "page_width", "page_height", "width_px", "height_px", "model", "file_path",
                "total_pages"]


class SIEDocumentReader(SIEConnection, BasePydanticReader):
    """Example:
        reader = SIEDocumentReader(model="microsoft/Florence-2-base", url="http://127.0.0.1:8080")
        docs = reader.load_data("scan.pdf")                 # or a list of paths
        docs = SimpleDirectoryReader("scans", file_extractor={".pdf": reader, ".png": reader}).load_data()

    task: Florence-2's task token (`<OCR>`; `<OCR_WITH_REGION>` adds a box per line; None for
    Donut), prompt its text input. dpi / pages: how a PDF is rendered and which pages (None: SIE's
    defaults, every page). Each page's metadata: `file_path`, `file_name`, `page_label` (the
    1-based page number as a string, as `PDFReader`), `total_pages` (pages read from the file),
    `page_width` / `page_height` (points for a PDF, pixels for an image), `width_px` / `height_px`
    (the pixels the model saw), `model`, and, where the model gives boxes, `regions`: `{"label",
    "box": [x0, y0, x1, y1], "text"?, "quad_box"?}` in those pixels, where the model parses the page
    (Donut), `data`: its JSON; `extra_info` is merged in. All
    but the file name and page label are excluded from the embedded and the LLM's text.
    A file SIE refuses raises `SIEError` whose message starts with the file's path.
    """

    is_remote: bool = False
    model: str = Field(default=DEFAULT_OCR_MODEL, description="SIE document model (OCR).")
    task: str | None = Field(default=DEFAULT_OCR_TASK, description="Florence-2 task token (None for Donut).")
    prompt: str | None = Field(default=None, description="The task's text input (DocVQA's question).")
    max_new_tokens: int | None = Field(default=None, description="Bound on the generated tokens per page.")
    dpi: int | None = Field(default=None, description="PDF rendering resolution (SIE's default if None).")
    pages: list[int] | str | None = Field(default=None, description="PDF pages to read (1-based; None: all).")

    @classmethod
    def class_name(cls) -> str:
        return "SIEDocumentReader"

    def _options(self) -> dict[str, Any]:
        return dict(dpi=self.dpi, pages=self.pages, **ocr_options(self.task, self.prompt, self.max_new_tokens))

    @staticmethod
    def _files(file: str | PurePath | Iterable[str | PurePath]) -> list[str | PurePath]:
        return [file] if isinstance(file, (str, PurePath)) else list(file)

    def _document(self, path: str | PurePath, page: OCRPage, extra_info: dict[str, Any] | None) -> Document:
        metadata: dict[str, Any] = {**(extra_info or {}), "file_path": str(path), "file_name": Path(path).name,
                                    "page_label": str(page.number), "total_pages": page.total,
                                    "page_width": page.width, "page_height": page.height,
                                    "width_px": page.width_px, "height_px": page.height_px, "model": self.model}
        metadata.update(page_extras(page))
        hidden = [key for key in NOT_FOR_TEXT if key in metadata]
        return Document(text=page.text, metadata=metadata, excluded_embed_metadata_keys=hidden,
                        excluded_llm_metadata_keys=hidden)

    def lazy_load_data(self, file: str | PurePath | Iterable[str | PurePath], extra_info: dict[str, Any] | None = None,
                       **kwargs: Any) -> Iterable[Document]:
        """file: a path or paths (SimpleDirectoryReader passes one `Path` and its `extra_info`)."""
        for path in self._files(file):
            for page in read_pages(self._clients.sync, self.model, str(path), read_source(path), **self._options()):
                yield self._document(path, page, extra_info)

    def load_data(self, file: str | PurePath | Iterable[str | PurePath], extra_info: dict[str, Any] | None = None,
                  **kwargs: Any) -> list[Document]:
        return list(self.lazy_load_data(file, extra_info))

    async def aload_data(self, file: str | PurePath | Iterable[str | PurePath],
                         extra_info: dict[str, Any] | None = None, **kwargs: Any) -> list[Document]:
        out = []
        for path in self._files(file):
            for page in await aread_pages(self._clients.call, self.model, str(path), read_source(path),
                                          **self._options()):
                out.append(self._document(path, page, extra_info))
        return out
