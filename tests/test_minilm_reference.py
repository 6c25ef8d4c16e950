"""The real all-MiniLM-L6-v2 through SIE equals sentence-transformers (cosine >= 0.99999)
on a sample of the dev corpus; the full corpus is in bench/bench_engine.py."""

from __future__ import annotations

import numpy as np
import pytest

from dev_corpus import load_docs
from sie_engine import Engine
from tiny_models import MINILM_DIR

SAMPLE = 400


@pytest.fixture(scope="module")
def docs():
    return [d["text"] for d in load_docs()[::6000 // SAMPLE]]


def test_minilm_matches_sentence_transformers(docs):
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(MINILM_DIR), device="cpu")
    expected = reference.encode(docs, batch_size=32, normalize_embeddings=True)
    with Engine(device="cpu") as engine:
        result = engine.encode_sync("sentence-transformers/all-MiniLM-L6-v2", docs)
        # queries with is_query give the same vectors: MiniLM has no query template
        query = engine.encode_sync("sentence-transformers/all-MiniLM-L6-v2", docs[:3], is_query=True)
    got = np.stack([item.dense for item in result.items])
    cosine = (got * expected).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosine.min() >= 0.99999, cosine.min()
    np.testing.assert_allclose(np.stack([i.dense for i in query.items]), got[:3], atol=1e-6)
    token_counts = [len(reference.tokenizer(d, truncation=True, max_length=256)["input_ids"]) for d in docs]
    assert result.tokens == sum(token_counts)
