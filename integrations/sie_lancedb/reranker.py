"""`SIEReranker`: LanceDB's Reranker interface over an SIE score model (a
cross-encoder or a late-interaction model), for vector, FTS and hybrid queries."""

from __future__ import annotations

import pyarrow as pa
from lancedb.rerankers import Reranker

from sie_client import SIEClient, connect


class SIEReranker(Reranker):
    """Rerank LanceDB results with `POST /v1/score`.

    Example:
        reranker = SIEReranker(model="cross-encoder/ms-marco-MiniLM-L-6-v2")
        table.search("query", query_type="hybrid").rerank(reranker).to_list()

    model: the SIE score model. column: the text column scored against the query.
    return_score: "relevance" keeps only `_relevance_score`; "all" keeps the search scores too.
    client / url / api_key / timeout: an SIEClient or the options to make one.
    """

    def __init__(self, model: str = "cross-encoder/ms-marco-MiniLM-L-6-v2", column: str = "text",
                 return_score: str = "relevance", *, client: SIEClient | None = None, url: str | None = None,
                 api_key: str | None = None, timeout: float | None = None, batch_size: int | None = None):
        super().__init__(return_score)
        self.model = model
        self.column = column
        self.batch_size = batch_size
        self.client = connect(client, url=url, api_key=api_key, timeout=timeout)

    def __str__(self) -> str:
        return f"SIEReranker(model={self.model})"

    def _rerank(self, results: pa.Table, query: str) -> pa.Table:
        """Append `_relevance_score` (the SIE score of each row) and sort best first."""
        results = self._handle_empty_results(results)
        if len(results) == 0:
            return results
        if self.column not in results.column_names:
            raise ValueError(f"SIEReranker scores column {self.column!r}, which the results lack "
                             f"(columns: {', '.join(results.column_names)}); pass column=...")
        texts = results[self.column].to_pylist()
        scored = self.client.score(self.model, query, texts, batch_size=self.batch_size)
        scores = [0.0] * len(texts)
        for s in scored.scores:
            scores[s.index] = s.score
        results = results.append_column("_relevance_score", pa.array(scores, type=pa.float32()))
        return results.sort_by([("_relevance_score", "descending")])

    def rerank_vector(self, query: str, vector_results: pa.Table) -> pa.Table:
        results = self._rerank(vector_results, query)
        if self.score == "relevance" and "_distance" in results.column_names:
            results = results.drop_columns(["_distance"])
        return results

    def rerank_fts(self, query: str, fts_results: pa.Table) -> pa.Table:
        results = self._rerank(fts_results, query)
        if self.score == "relevance" and "_score" in results.column_names:
            results = results.drop_columns(["_score"])
        return results

    def rerank_hybrid(self, query: str, vector_results: pa.Table, fts_results: pa.Table) -> pa.Table:
        if self.score == "all":
            combined = self._merge_and_keep_scores(vector_results, fts_results)
        else:
            combined = self.merge_results(vector_results, fts_results)
        combined = self._rerank(combined, query)
        if self.score == "relevance":
            combined = self._keep_relevance_score(combined)
        return combined
