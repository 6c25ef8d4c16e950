"""`SIEScorer`: relevance scores of a text column against a query (a reranker or
late-interaction model), one float per row."""

from __future__ import annotations

from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa

from .batches import texts
from .stage import SIEStage


class SIEScorer(SIEStage):
    """Scores each row's `column` against one fixed `query`, or against the row's own
    `query_column` (query/document pairs, e.g. candidates joined to their queries); writes
    `output_column` (float32).

    Rows are grouped by their query, and each distinct query is one score call (SIE's score
    takes one query and many texts); the groups of a batch are sent `max_concurrency` at a
    time (the client's option), so a batch of true pairs (every query distinct) still keeps
    the Engine's batches full.

    score_options: the rest of `SIEClient.score`'s fields (truncate, instruction).
    """

    def __init__(self, model: str, column: str = "text", *, query: str | None = None, query_column: str | None = None,
                 output_column: str = "score", score_options: dict[str, Any] | None = None, **stage_options: Any):
        if (query is None) == (query_column is None):
            raise ValueError("give exactly one of query (one query for every row) and query_column (a query per row)")
        if query is not None and not isinstance(query, str):
            raise ValueError(f"query must be a string, got {type(query).__name__}")
        self.query = query
        self.query_column = query_column
        self.output_column = output_column
        self.score_options = dict(score_options or {})
        super().__init__(model, column, **stage_options)

    def columns(self, table: pa.Table, items: list[str]) -> dict[str, pa.Array]:
        if self.query is not None:
            queries = [self.query] * len(items)
        else:
            queries = texts(table, str(self.query_column), "query")
        rows_of: dict[str, list[int]] = defaultdict(list)
        for row, query in enumerate(queries):
            rows_of[query].append(row)
        scores: np.ndarray = np.empty(len(items), np.float32)

        def score(query: str, rows: list[int]) -> None:
            result = self.client.score(self.model, query, [items[r] for r in rows], **self.score_options)
            for scored in result.scores:
                scores[rows[scored.index]] = scored.score

        groups = list(rows_of.items())
        if len(groups) == 1:
            score(*groups[0])
        else:
            with ThreadPoolExecutor(min(self.client.max_concurrency, len(groups))) as pool:
                for done in [pool.submit(score, q, rows) for q, rows in groups]:
                    done.result()
        return {self.output_column: pa.array(scores)}
