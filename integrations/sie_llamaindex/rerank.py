"""`SIERerank`: a LlamaIndex node postprocessor that reorders retrieved nodes by an
SIE score model (cross-encoder or late interaction) and keeps the best `top_n`."""

from __future__ import annotations

from typing import Any

from llama_index.core.bridge.pydantic import Field
from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from .connection import SIEConnection


class SIERerank(SIEConnection, BaseNodePostprocessor):
    """Example:
        engine = index.as_query_engine(similarity_top_k=20, node_postprocessors=[
            SIERerank(model="cross-encoder/ms-marco-MiniLM-L-6-v2", top_n=5)])

    Nodes are scored on their embed-mode content (text plus embed metadata, as
    LlamaIndex's SentenceTransformerRerank does); each node's score becomes the SIE score.
    """

    model: str = Field(default="cross-encoder/ms-marco-MiniLM-L-6-v2", description="SIE score model.")
    top_n: int | None = Field(default=3, description="Nodes kept (None: all).")
    keep_retrieval_score: bool = Field(default=False, description="Keep the retrieval score in metadata.")

    @classmethod
    def class_name(cls) -> str:
        return "SIERerank"

    def _prepare(self, nodes: list[NodeWithScore],
                 query_bundle: QueryBundle | None) -> tuple[QueryBundle, list[str]]:
        """The query (which must be given) and each node's text as it is embedded."""
        if query_bundle is None:
            raise ValueError("SIERerank needs the query: pass query_bundle or query_str")
        return query_bundle, [n.node.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]

    def _reordered(self, nodes: list[NodeWithScore], scored) -> list[NodeWithScore]:
        out = []
        for s in scored.scores:
            node = nodes[s.index]
            if self.keep_retrieval_score:
                node.node.metadata["retrieval_score"] = node.score
            out.append(NodeWithScore(node=node.node, score=s.score))
        return out

    def _event(self, nodes: list[NodeWithScore], query_bundle: QueryBundle) -> Any:
        return self.callback_manager.event(CBEventType.RERANKING, payload={
            EventPayload.NODES: nodes, EventPayload.MODEL_NAME: self.model,
            EventPayload.QUERY_STR: query_bundle.query_str, EventPayload.TOP_K: self.top_n})

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        if not nodes:
            return []
        query, texts = self._prepare(nodes, query_bundle)
        with self._event(nodes, query) as event:
            reranked = self._reordered(nodes, self._clients.sync.score(self.model, query.query_str, texts,
                                                                       top_k=self.top_n))
            event.on_end(payload={EventPayload.NODES: reranked})
        return reranked

    async def _apostprocess_nodes(self, nodes: list[NodeWithScore],
                                  query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        if not nodes:
            return []
        query, texts = self._prepare(nodes, query_bundle)
        with self._event(nodes, query) as event:
            scored = await self._clients.call("score", self.model, query.query_str, texts, top_k=self.top_n)
            reranked = self._reordered(nodes, scored)
            event.on_end(payload={EventPayload.NODES: reranked})
        return reranked
