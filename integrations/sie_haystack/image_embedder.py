"""`SIEDocumentImageEmbedder`: documents that point at image files -> the same documents with
the image's `embedding`, from an SIE image-text model (CLIP, SigLIP). Haystack's own image
embedder (`SentenceTransformersDocumentImageEmbedder`) has the same interface: the image's path
in `meta[file_path_meta_field]` (default `file_path`, what Haystack's file converters and
`ImageFileToDocument` write), relative to `root_path` when one is given. Pair it with
`SIETextEmbedder` on the same model for text-to-image retrieval: a query runs through the
model's text tower, which puts it in the images' space.

PDF pages (which Haystack's embedder renders) are refused: convert them to images first
(Haystack's `PDFToImageContent`, or any renderer) and point the documents at those files.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.utils import Secret

from sie_client.image_inputs import image_items

from .connection import DEFAULT_KEY, SIEConnection, connection_from_dict


@component
class SIEDocumentImageEmbedder(SIEConnection):
    """Example:
        indexing.add_component("embedder", SIEDocumentImageEmbedder(model="openai/clip-vit-base-patch32"))
        indexing.run({"embedder": {"documents": [Document(content="", meta={"file_path": "cat.png"})]}})

    batch_size: images per SIE request. progress_bar: a bar over the documents.
    """

    def __init__(self, model: str, url: str | None = None, api_key: Secret = DEFAULT_KEY,
                 timeout: float | None = None, file_path_meta_field: str = "file_path", root_path: str | None = None,
                 batch_size: int = 32, progress_bar: bool = True, max_retries: int | None = None):
        SIEConnection.__init__(self, url, api_key, timeout, max_retries)  # @component rebuilds the class
        self.model = model
        self.file_path_meta_field = file_path_meta_field
        self.root_path = root_path
        self.batch_size = batch_size
        self.progress_bar = progress_bar

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, model=self.model, file_path_meta_field=self.file_path_meta_field,
                               root_path=self.root_path, batch_size=self.batch_size, progress_bar=self.progress_bar,
                               **self.connection_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SIEDocumentImageEmbedder:
        return default_from_dict(cls, connection_from_dict(data))

    def _items(self, documents: list[Document]) -> list[dict[str, bytes]]:
        if not isinstance(documents, list) or any(not isinstance(d, Document) for d in documents):
            raise TypeError("SIEDocumentImageEmbedder embeds a list of Documents whose meta names an image file")
        paths = []
        for i, document in enumerate(documents):
            name = document.meta.get(self.file_path_meta_field)
            if not name:
                raise ValueError(f"documents[{i}] (id {document.id}) has no meta[{self.file_path_meta_field!r}]: "
                                 "the path of the image to embed")
            path = Path(self.root_path or "") / str(name)
            if path.suffix.lower() == ".pdf":
                raise ValueError(f"documents[{i}] points at a PDF ({path}): convert its pages to images first")
            paths.append(path)
        return image_items(paths)

    def _options(self) -> dict[str, Any]:
        return dict(output_types=["dense"], is_query=False, batch_size=self.batch_size, progress=self.progress_bar)

    @staticmethod
    def _embedded(documents: list[Document], result) -> dict[str, Any]:
        vectors = result.dense_matrix().tolist() if documents else []
        return {"documents": [replace(d, embedding=v) for d, v in zip(documents, vectors)],
                "meta": {"model": result.model, "usage": {"tokens": result.tokens}}}

    @component.output_types(documents=list[Document], meta=dict[str, Any])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        if not documents:
            return {"documents": [], "meta": {"model": self.model, "usage": {"tokens": 0}}}
        return self._embedded(documents, self.sync_client.encode(self.model, self._items(documents),
                                                                  **self._options()))

    @component.output_types(documents=list[Document], meta=dict[str, Any])
    async def run_async(self, documents: list[Document]) -> dict[str, Any]:
        if not documents:
            return {"documents": [], "meta": {"model": self.model, "usage": {"tokens": 0}}}
        result = await self.call_async("encode", self.model, self._items(documents), **self._options())
        return self._embedded(documents, result)
