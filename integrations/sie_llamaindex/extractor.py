"""`SIEEntityExtractor`: a LlamaIndex metadata extractor that adds the entities an
SIE extraction model (GLiNER-style, zero-shot: any labels) finds in each node."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from llama_index.core.bridge.pydantic import Field
from llama_index.core.extractors.interface import BaseExtractor
from llama_index.core.schema import BaseNode, MetadataMode

from .connection import SIEConnection


# BaseExtractor's max_retries (an int, its own retry loop) is the one that counts here (redeclared below).
class SIEEntityExtractor(SIEConnection, BaseExtractor):  # type: ignore[misc]
    """Example:
        pipeline = IngestionPipeline(transformations=[
            SIEEntityExtractor(model="urchade/gliner_small-v2.1", labels=["person", "organization"]), SIEEmbedding()])

    As LlamaIndex's own EntityExtractor: `metadata["entities"]` lists the distinct entity
    texts of a node (in text order); with `label_entities=True` each label gets its own key
    (`metadata["person"] = [...]`). Nodes are read in `metadata_mode` (NONE: the text only).
    """

    model: str = Field(default="urchade/gliner_small-v2.1", description="SIE extraction model.")
    labels: list[str] = Field(description="Entity labels to look for (zero-shot).")
    threshold: float | None = Field(default=None, description="Minimum entity score (SIE's default if None).")
    label_entities: bool = Field(default=False, description="One metadata key per label instead of 'entities'.")
    metadata_mode: MetadataMode = Field(default=MetadataMode.NONE)
    max_retries: int = Field(default=0, ge=0, description="LlamaIndex's retries of a failed aextract (not the "
                             "client's, which keeps its default policy).")

    retries_are_the_clients: ClassVar[bool] = False

    @classmethod
    def class_name(cls) -> str:
        return "SIEEntityExtractor"

    def _metadata(self, item) -> dict[str, Any]:
        entities = sorted(item.entities, key=lambda e: (e.start, e.end))
        if not self.label_entities:
            return {"entities": list(dict.fromkeys(e.text for e in entities))} if entities else {}
        grouped: dict[str, list[str]] = {}
        for e in entities:
            if e.text not in grouped.setdefault(e.label, []):
                grouped[e.label].append(e.text)
        return grouped

    async def aextract(self, nodes: Sequence[BaseNode]) -> list[dict]:
        if not nodes:
            return []
        texts = [node.get_content(metadata_mode=self.metadata_mode) for node in nodes]
        result = await self._clients.call("extract", self.model, texts, self.labels, threshold=self.threshold,
                                          progress=self.show_progress and len(texts) > 1)
        return [self._metadata(item) for item in result.items]
