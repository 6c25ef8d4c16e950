"""LangChain integration: SIE behind LangChain's own interfaces.

- `SIEEmbeddings` (`Embeddings`): document and query mode, sync and async.
- `SIEImageEmbeddings`: `SIEEmbeddings` plus `embed_image(uris)` (CLIP, SigLIP).
- `SIEReranker` (`BaseDocumentCompressor`): rerank retrieved documents with an SIE score model.
- `SIEEntityExtractor` (`BaseDocumentTransformer`): tag documents with SIE's zero-shot entities.
- `SIEDocumentLoader` (`BaseLoader`): PDFs and images read by an SIE OCR model, one Document per page.
- `sie_langchain.sparse.SIESparseEmbeddings`: langchain-qdrant's `SparseEmbeddings` (import it
  from there; it needs langchain-qdrant).

Every class takes `model=`, `url=` (None: `SIE_URL`, else embedded mode), `api_key=`
(None: `SIE_API_KEY`) and `timeout=`, or ready-made `client=` / `async_client=`.
"""

from .embeddings import SIEEmbeddings
from .extractor import SIEEntityExtractor
from .images import SIEImageEmbeddings
from .loader import SIEDocumentLoader
from .reranker import SIEReranker

__all__ = ["SIEDocumentLoader", "SIEEmbeddings", "SIEEntityExtractor", "SIEImageEmbeddings", "SIEReranker"]
