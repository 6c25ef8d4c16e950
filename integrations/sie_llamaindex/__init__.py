"""LlamaIndex integration: SIE behind LlamaIndex's own interfaces.

- `SIEEmbedding` (`BaseEmbedding`): text (document) and query mode, sync and async.
- `SIEMultiModalEmbedding` (`MultiModalEmbedding`): `SIEEmbedding` plus image embeddings (CLIP, SigLIP).
- `SIERerank` (`BaseNodePostprocessor`): rerank retrieved nodes with an SIE score model.
- `SIEEntityExtractor` (`BaseExtractor`): entity metadata from SIE's zero-shot extraction.
- `SIEDocumentReader` (`BaseReader`): PDFs and images read by an SIE OCR model, one Document per page
  (also a `SimpleDirectoryReader` file extractor).
- `SIEPathExtractor` (`TransformComponent`, a `PropertyGraphIndex` kg_extractor): entity nodes and
  relations from an SIE GLiNER2 or relation (GLiREL) model, zero-shot, no LLM.

Every class takes `model=`, `url=` (None: `SIE_URL`, else embedded mode), `api_key=`
(None: `SIE_API_KEY`) and `timeout=`, or ready-made `client=` / `async_client=`.
"""

from .embedding import SIEEmbedding
from .extractor import SIEEntityExtractor
from .multimodal import SIEMultiModalEmbedding
from .paths import SIEPathExtractor
from .reader import SIEDocumentReader
from .rerank import SIERerank

__all__ = ["SIEDocumentReader", "SIEEmbedding", "SIEEntityExtractor", "SIEMultiModalEmbedding",
           "SIEPathExtractor", "SIERerank"]
