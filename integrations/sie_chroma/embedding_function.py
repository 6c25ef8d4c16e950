"""`SIEEmbeddingFunction`: chromadb's dense EmbeddingFunction protocol over SIE.

Chroma calls `__call__` for documents on add and `embed_query` for
`query(query_texts=...)`; the two map to SIE's document and query encodings
(`is_query`), which differ for models with query templates or instructions.

The input is Chroma's `Embeddable`, `Documents | Images`: with an image model
(CLIP, SigLIP) a multimodal collection adds and queries images, given as
`images=` (numpy pixel arrays) or as `uris=` read by the collection's
`data_loader` (Chroma's `ImageLoader`), and texts query the images.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from chromadb.api.types import Embeddable, EmbeddingFunction, Embeddings, Space, is_image
from chromadb.utils.embedding_functions import known_embedding_functions, register_embedding_function

from sie_client import DEFAULT_MODEL, SIEClient
from sie_client.image_inputs import image_bytes

from .config import PERSISTED, check_config, check_update, known_config, make_client, rebuilt_client

# The name Chroma stores with a collection. Chroma has no plugin discovery: a process
# that reopens the collection must import sie_chroma first, and when it has not,
# Chroma's "Embedding function <name> not found" message is the only one shown, so
# the name is the import path.
NAME = "sie_chroma.SIEEmbeddingFunction"
LEGACY_NAMES = ("sie",)  # written by sie_chroma 0.1.0


@register_embedding_function
class SIEEmbeddingFunction(EmbeddingFunction[Embeddable]):
    """Dense embeddings from an SIE model, of documents and (with an image model) images.

    Example:
        ef = SIEEmbeddingFunction(model="sentence-transformers/all-MiniLM-L6-v2", url="http://127.0.0.1:8080")
        collection = chroma.create_collection("docs", embedding_function=ef,
                                              configuration={"hnsw": {"space": "cosine"}})
        clip = SIEEmbeddingFunction(model="openai/clip-vit-base-patch32")
        photos = chroma.create_collection("photos", embedding_function=clip, data_loader=ImageLoader())
        photos.add(ids=["cat"], uris=["cat.jpg"])      # or images=[pixel array]
        photos.query(query_texts=["a cat"])            # or query_images=, query_uris=
    """

    def __init__(self, model: str = DEFAULT_MODEL, url: str | None = None, api_key: str | None = None, *,
                 api_key_env_var: str = "SIE_API_KEY", timeout: float | None = None, instruction: str | None = None,
                 dims: int | None = None, batch_size: int | None = None, progress: bool | None = None,
                 client: SIEClient | None = None):
        """
        model: SIE model id. url: server URL, "embedded", or None for `SIE_URL` (else embedded).
        api_key: defaults to the variable named by `api_key_env_var`. instruction: query instruction
        override for instruction-tuned models. dims: Matryoshka truncation. progress: a progress bar
        over each add's documents. client: an existing SIEClient (its URL is the one persisted).
        """
        self._client = make_client(url, api_key, api_key_env_var, timeout, client)
        self.model = model
        self.url = self._client.url  # the effective URL, persisted (see config.py)
        self.api_key_env_var = api_key_env_var
        self.timeout = timeout
        self.instruction = instruction
        self.dims = dims
        self.batch_size = batch_size
        self.progress = progress

    def _encode(self, input: Embeddable, is_query: bool) -> Embeddings:
        # Chroma's images are numpy pixel arrays; they go to SIE as PNG image items.
        items = [input] if isinstance(input, str) else [
            {"image": image_bytes(item)} if is_image(item) else item for item in input]
        result = self._client.encode(
            self.model, items, output_types=["dense"], is_query=is_query,
            instruction=self.instruction if is_query else None, dims=self.dims, batch_size=self.batch_size,
            progress=self.progress and not is_query,
        )
        return [np.asarray(v, dtype=np.float32) for v in result.dense_matrix()]

    def __call__(self, input: Embeddable) -> Embeddings:
        return self._encode(input, is_query=False)

    def embed_query(self, input: Embeddable) -> Embeddings:
        return self._encode(input, is_query=True)

    @staticmethod
    def name() -> str:
        return NAME

    def default_space(self) -> Space:
        return "cosine"

    def supported_spaces(self) -> list[Space]:
        return ["cosine", "ip", "l2"]

    def get_config(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in PERSISTED}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> SIEEmbeddingFunction:
        SIEEmbeddingFunction.validate_config(config)
        config = known_config(config, "SIEEmbeddingFunction")
        return SIEEmbeddingFunction(**config, client=rebuilt_client(config))

    @staticmethod
    def validate_config(config: dict[str, Any]) -> None:
        check_config(config, "SIEEmbeddingFunction")

    def validate_config_update(self, old_config: dict[str, Any], new_config: dict[str, Any]) -> None:
        check_update(old_config, new_config)


for _name in LEGACY_NAMES:
    known_embedding_functions[_name] = SIEEmbeddingFunction
