"""`SIEImageEmbeddings`: `SIEEmbeddings` over an SIE image-text model (CLIP, SigLIP) that also
embeds images, with the `embed_image(uris)` method LangChain's image-capable embeddings have
(langchain-experimental's `OpenCLIPEmbeddings`), which LangChain's vector stores call to store
images (`Chroma.add_images(uris)`, `similarity_search_by_image`).

`uris` are local file paths or `file://` URIs (URLs are refused, not fetched: see
sie_client.image_inputs); bytes and PIL images are accepted too. A text query runs through the
model's text tower (SIE's query mode), which puts it in the images' space.
"""

from __future__ import annotations

from typing import Any

from sie_client.image_inputs import image_items

from .embeddings import SIEEmbeddings


class SIEImageEmbeddings(SIEEmbeddings):
    """Example:
        embeddings = SIEImageEmbeddings(model="openai/clip-vit-base-patch32", url="http://127.0.0.1:8080")
        store = Chroma(collection_name="photos", embedding_function=embeddings)
        store.add_images(uris=["photos/cat.png"])
        store.similarity_search("a cat", k=1)
    """

    def _image_options(self) -> dict[str, Any]:
        return {**self._options(False), "instruction": None}  # images take no prompt; dims as for texts

    def embed_image(self, uris: list[Any]) -> list[list[float]]:
        result = self._clients.sync.encode(self.model, image_items(list(uris)), **self._image_options())
        return result.dense_matrix().tolist()

    async def aembed_image(self, uris: list[Any]) -> list[list[float]]:
        result = await self._clients.call("encode", self.model, image_items(list(uris)), **self._image_options())
        return result.dense_matrix().tolist()
