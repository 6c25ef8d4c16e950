"""`SIEMultiModalEmbedding`: LlamaIndex's `MultiModalEmbedding` over an SIE image-text model
(CLIP, SigLIP): `SIEEmbedding`'s text and query embeddings plus image embeddings, so
`MultiModalVectorStoreIndex(..., image_embed_model=...)` and image retrievers run on SIE.

LlamaIndex hands images over as `ImageType` (a file path str, or a `BytesIO` from
`ImageNode.resolve_image()`); both become SIE `{"image": bytes}` items. A query text runs
through the model's text tower (SIE's query mode), which puts it in the images' space.
"""

from __future__ import annotations

from io import BytesIO
from typing import Any

from llama_index.core.base.embeddings.base import Embedding
from llama_index.core.embeddings.multi_modal_base import MultiModalEmbedding
from llama_index.core.schema import ImageType

from sie_client.image_inputs import image_items

from .embedding import SIEEmbedding


def _items(images: list[ImageType]) -> list[dict[str, bytes]]:
    return image_items([image.getvalue() if isinstance(image, BytesIO) else image for image in images])


class SIEMultiModalEmbedding(SIEEmbedding, MultiModalEmbedding):
    """Example:
        embed = SIEMultiModalEmbedding(model="openai/clip-vit-base-patch32", url="http://127.0.0.1:8080")
        index = MultiModalVectorStoreIndex.from_documents(documents, embed_model=embed, image_embed_model=embed)
    """

    @classmethod
    def class_name(cls) -> str:
        return "SIEMultiModalEmbedding"

    def _image_options(self) -> dict[str, Any]:
        return {**self._options(False), "instruction": None}  # images take no prompt; dims as for texts

    def _get_image_embedding(self, img_file_path: ImageType) -> Embedding:
        return self._get_image_embeddings([img_file_path])[0]

    async def _aget_image_embedding(self, img_file_path: ImageType) -> Embedding:
        return (await self._aget_image_embeddings([img_file_path]))[0]

    def _get_image_embeddings(self, img_file_paths: list[ImageType]) -> list[Embedding]:
        result = self._clients.sync.encode(self.model_name, _items(list(img_file_paths)), **self._image_options())
        return result.dense_matrix().tolist()

    async def _aget_image_embeddings(self, img_file_paths: list[ImageType]) -> list[Embedding]:
        result = await self._clients.call("encode", self.model_name, _items(list(img_file_paths)),
                                          **self._image_options())
        return result.dense_matrix().tolist()
