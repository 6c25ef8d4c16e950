"""Haystack integration: SIE as Haystack components.

- `SIETextEmbedder` / `SIEDocumentEmbedder`: query and document embedders (SIE's query
  and document modes), for any Haystack document store's embedding retriever.
- `SIEDocumentImageEmbedder`: documents naming image files -> their image embeddings (CLIP, SigLIP).
- `SIERanker`: rerank documents with an SIE score model.
- `SIEEntityExtractor`: annotate documents with SIE's zero-shot entities.
- `SIEDocumentConverter`: PDFs and images (paths, ByteStreams) read by an SIE OCR model, one Document per page.

Every component takes `model=`, `url=` (None: `SIE_URL` when it runs, else embedded
mode), `api_key=` (a Haystack Secret; default: the `SIE_API_KEY` variable) and
`timeout=`, serialises with `to_dict` and has `run_async`.
"""

from .converter import SIEDocumentConverter
from .embedders import SIEDocumentEmbedder, SIETextEmbedder
from .extractor import SIEEntityExtractor
from .image_embedder import SIEDocumentImageEmbedder
from .ranker import SIERanker

__all__ = ["SIEDocumentConverter", "SIEDocumentEmbedder", "SIEDocumentImageEmbedder",
           "SIEEntityExtractor", "SIERanker", "SIETextEmbedder"]
