"""`SIEImageEmbeddings` ("sie-image" in LanceDB's registry): image vectors for a
table whose source column holds images, searched by text or by image.

The source column holds image file bytes (a `bytes` field, Arrow binary) or
local paths / `file://` URIs (a `str` field), as LanceDB's own open-clip
function takes them; a row whose image is None or empty gets no vector (None),
and the table's `on_bad_vectors` decides about it. A search string is a text,
encoded by the model's text tower into the same space (CLIP, SigLIP); bytes, a
`pathlib.Path` or a PIL image passed to `table.search` is an image (nearest
images by look). Everything else (client, settings persisted in the schema,
no LanceDB retry loop) is SIEEmbeddings'.

    func = get_registry().get("sie-image").create(model="openai/clip-vit-base-patch32")
    class Photo(LanceModel):
        image: bytes = func.SourceField()
        vector: Vector(func.ndims()) = func.VectorField()
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from lancedb.embeddings import register

from sie_client.image_inputs import image_bytes

from .embeddings import SIEEmbeddings

IMAGE_MODEL = "openai/clip-vit-base-patch32"


def _image_item(image: Any) -> dict | None:
    if image is None or (isinstance(image, (bytes, str)) and not image):
        return None
    return {"image": image_bytes(image)}


@register("sie-image")
class SIEImageEmbeddings(SIEEmbeddings):
    """Dense image vectors from an SIE image-text model (the fields are SIEEmbeddings')."""

    model: str = IMAGE_MODEL

    def sanitize_input(self, images: Any) -> list[Any]:
        """One image or a column of them -> a list (bytes are one image, not a sequence)."""
        if isinstance(images, (str, bytes)):
            return [images]
        if isinstance(images, pa.ChunkedArray):
            images = images.combine_chunks()
        if isinstance(images, pa.Array):
            return images.to_pylist()
        return list(images)

    # LanceDB passes the source column positionally; the parameter is named for what it holds
    def compute_source_embeddings(self, images: Any, *args, **kwargs) -> list:  # type: ignore[override]
        """Document-mode vectors of the source column's images (None for a None or empty one)."""
        return self._encode_items([_image_item(image) for image in self.sanitize_input(images)], is_query=False)

    def compute_query_embeddings(self, query: Any, *args, **kwargs) -> list:
        """A search string through the text tower (query mode); an image (bytes, path, PIL) through the image tower."""
        if isinstance(query, str):
            return self._encode([query], is_query=True)
        return self._encode_items([_image_item(query)], is_query=True)
