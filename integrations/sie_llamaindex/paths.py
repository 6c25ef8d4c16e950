"""`SIEPathExtractor`: a LlamaIndex knowledge-graph extractor (a `kg_extractors` entry of
`PropertyGraphIndex`) that turns each node's text into entity nodes and relations with an SIE
relation model, zero-shot (any entity and relation types), without an LLM."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.bridge.pydantic import Field
from llama_index.core.graph_stores.types import KG_NODES_KEY, KG_RELATIONS_KEY, EntityNode, Relation
from llama_index.core.schema import BaseNode, MetadataMode, TransformComponent

from .connection import SIEConnection

# the label of a relation end that is none of the entity types (LlamaIndex's default entity label)
OTHER_ENTITY = "entity"


class SIEPathExtractor(SIEConnection, TransformComponent):
    """Example:
        index = PropertyGraphIndex.from_documents(docs, embed_model=SIEEmbedding(), kg_extractors=[
            SIEPathExtractor(model="fastino/gliner2-base-v1", entity_labels=["person", "organization"],
                             relation_labels=["works_for", "founded"])])

    Two kinds of model: a GLiNER2 model finds the entities and the relations in one pass; a relation
    model (GLiREL) scores the relations between the entities its `entity_model` (a GLiNER) finds in
    the same request. As LlamaIndex's own path extractors, each node's `metadata["nodes"]` gains an
    `EntityNode` per entity found (name: its text, label: its type) and `metadata["relations"]` a
    `Relation` per triple (head -> tail, label: the relation type, properties: the node's metadata
    and the triple's `score`); a triple whose head and tail are the same span is left out, and a
    triple found twice in a node is kept once.
    """

    model: str = Field(default="fastino/gliner2-base-v1", description="SIE GLiNER2 or relation (GLiREL) model.")
    entity_labels: list[str] = Field(description="Entity types to find (zero-shot).")
    relation_labels: list[str] = Field(description="Relation types to find (zero-shot).")
    entity_model: str | None = Field(default=None, description="With a relation model: the GLiNER model that "
                                                                   "finds the entities. None: `model` is GLiNER2.")
    threshold: float | None = Field(default=None, description="Minimum score (SIE's default if None).")
    metadata_mode: MetadataMode = Field(default=MetadataMode.NONE, description="What of a node is read.")

    @classmethod
    def class_name(cls) -> str:
        return "SIEPathExtractor"

    def _request(self, nodes: Sequence[BaseNode]) -> tuple[list[str], list[str], dict[str, Any]]:
        texts = [node.get_content(metadata_mode=self.metadata_mode) for node in nodes]
        if self.entity_model is None:  # GLiNER2: labels are the entity types
            return texts, list(self.entity_labels), dict(relation_labels=list(self.relation_labels),
                                                         threshold=self.threshold)
        return texts, list(self.relation_labels), dict(entity_model=self.entity_model,
                                                       entity_labels=list(self.entity_labels),
                                                       threshold=self.threshold)

    def _entity(self, entity, properties: dict[str, Any]) -> EntityNode:
        label = entity.label if entity.label in self.entity_labels else OTHER_ENTITY
        return EntityNode(name=entity.text, label=label, properties=dict(properties))

    def _add_paths(self, node: BaseNode, item) -> BaseNode:
        properties = {k: v for k, v in node.metadata.items() if k not in (KG_NODES_KEY, KG_RELATIONS_KEY)}
        entities: dict[tuple[str, str], EntityNode] = {}
        for entity in item.entities:
            found = self._entity(entity, properties)
            entities.setdefault((found.name, found.label), found)
        relations: dict[tuple[str, str, str], Relation] = {}
        for triple in item.relations or ():
            if (triple.head.start, triple.head.end) == (triple.tail.start, triple.tail.end):
                continue
            head, tail = (self._entity(end, properties) for end in (triple.head, triple.tail))
            head = entities.setdefault((head.name, head.label), head)
            tail = entities.setdefault((tail.name, tail.label), tail)
            key = (head.id, triple.relation, tail.id)
            if key not in relations:
                relations[key] = Relation(label=triple.relation, source_id=head.id, target_id=tail.id,
                                          properties={**properties, "score": triple.score})
        node.metadata[KG_NODES_KEY] = [*node.metadata.get(KG_NODES_KEY, []), *entities.values()]
        node.metadata[KG_RELATIONS_KEY] = [*node.metadata.get(KG_RELATIONS_KEY, []), *relations.values()]
        return node

    def __call__(self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any) -> list[BaseNode]:
        nodes = list(nodes)
        if not nodes:
            return []
        texts, labels, options = self._request(nodes)
        result = self._clients.sync.extract(self.model, texts, labels, progress=show_progress and len(nodes) > 1,
                                            **options)
        return [self._add_paths(node, item) for node, item in zip(nodes, result.items)]

    async def acall(self, nodes: Sequence[BaseNode], show_progress: bool = False, **kwargs: Any) -> list[BaseNode]:
        nodes = list(nodes)
        if not nodes:
            return []
        texts, labels, options = self._request(nodes)
        result = await self._clients.call("extract", self.model, texts, labels,
                                          progress=show_progress and len(nodes) > 1, **options)
        return [self._add_paths(node, item) for node, item in zip(nodes, result.items)]
