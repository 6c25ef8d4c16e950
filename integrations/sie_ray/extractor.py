"""`SIEExtractor`: zero-shot entities, classifications and relations of a text column."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from .columns import classifications_column, entities_column, relations_column
from .stage import SIEStage


class SIEExtractor(SIEStage):
    """Extracts `labels` from `column` with `model` (GLiNER, an NLI or GLiClass classifier,
    GLiREL); writes `<prefix>entities` (list of {text, label, score, start, end}, character
    offsets into the row's text) and, for models that answer them, `<prefix>classifications`
    (list of {label, score}, best first) and `<prefix>relations` (list of {head, relation,
    tail, score}). Which columns appear depends on the model only, so every batch of a
    Dataset has the same schema.

    extract_options: the rest of `SIEClient.extract`'s fields (threshold, multi_label, ...).
    """

    def __init__(self, model: str, column: str = "text", *, labels: Sequence[str], output_prefix: str = "",
                 extract_options: Mapping[str, Any] | None = None, **stage_options: Any):
        if isinstance(labels, str) or not labels or not all(isinstance(label, str) for label in labels):
            raise ValueError("labels must be a non-empty list of strings, e.g. labels=['person', 'organization']")
        self.labels = list(labels)
        self.output_prefix = output_prefix
        self.extract_options = dict(extract_options or {})
        super().__init__(model, column, **stage_options)

    def columns(self, table: pa.Table, items: list[str]) -> dict[str, pa.Array]:
        result = self.client.extract(self.model, items, self.labels, **self.extract_options)
        prefix = self.output_prefix
        columns = {prefix + "entities": entities_column([item.entities for item in result.items])}
        if any(item.classifications is not None for item in result.items):
            columns[prefix + "classifications"] = classifications_column([i.classifications for i in result.items])
        if any(item.relations is not None for item in result.items):
            columns[prefix + "relations"] = relations_column([item.relations for item in result.items])
        return columns
