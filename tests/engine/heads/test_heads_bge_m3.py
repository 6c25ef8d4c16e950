"""BGE-M3's three outputs (dense CLS, sparse lexical weights, colbert vectors) from one
forward pass, on a tiny random XLM-R with BGE-M3's extra files (`sparse_linear.pt`,
`colbert_linear.pt`), against FlagEmbedding's formulas written out over transformers'
XLMRobertaModel."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from tiny_models import save_tiny, tiny_xlmr_config

HIDDEN = 32
TEXTS = ["what is bge m3", "BGE-M3 gives dense, sparse and multi-vector outputs from one pass. " * 3, "the the the cat"]
QUERY = "multi vector retrieval"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    from transformers import XLMRobertaModel

    torch.manual_seed(0)
    dest = save_tiny(XLMRobertaModel(tiny_xlmr_config(), add_pooling_layer=False).eval(), tmp_path_factory.mktemp("m3"))
    tokenizer_config = json.loads((dest / "tokenizer_config.json").read_text())
    tokenizer_config["model_input_names"] = ["input_ids", "attention_mask"]
    (dest / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    sparse = torch.nn.Linear(HIDDEN, 1)
    colbert = torch.nn.Linear(HIDDEN, HIDDEN)
    torch.save(sparse.state_dict(), dest / "sparse_linear.pt")
    torch.save(colbert.state_dict(), dest / "colbert_linear.pt")
    return dest


@pytest.fixture(scope="module")
def engine(root):
    cards = [ModelCard(
        id=model_id, weights=WeightsSource(path=str(root)), outputs=("dense", "sparse", "multivector"), pooling="cls",
        normalize=True, max_seq_len=64, max_batch_tokens=1024,
        options={"sparse": {"kind": "bge-m3", **sparse}, "multivector": {"kind": "bge-m3"}},
    ) for model_id, sparse in (("m3/tiny", {}), ("m3/top3", {"top_k": 3}))]
    with Engine(Catalog(cards), device="cpu") as engine:
        yield engine


@pytest.fixture(scope="module")
def reference(root):
    """text -> (dense [H], {token id: weight}, colbert [n - 1, H]) as BGEM3FlagModel computes them."""
    from transformers import AutoTokenizer, XLMRobertaModel

    tokenizer = AutoTokenizer.from_pretrained(str(root))
    model = XLMRobertaModel.from_pretrained(str(root), add_pooling_layer=False).eval()
    sparse = torch.load(root / "sparse_linear.pt")
    colbert = torch.load(root / "colbert_linear.pt")
    unused = {tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id, tokenizer.unk_token_id}

    def encode(text):
        ids = tokenizer.encode(text, truncation=True, max_length=64)
        with torch.no_grad():
            hidden = model(input_ids=torch.tensor([ids])).last_hidden_state[0]
            dense = F.normalize(hidden[0], dim=-1).numpy()
            weights = torch.relu(hidden @ sparse["weight"].T + sparse["bias"]).squeeze(-1).numpy()
            vectors = F.normalize(hidden[1:] @ colbert["weight"].T + colbert["bias"], dim=-1).numpy()
        lexical: dict[int, float] = {}
        for token, weight in zip(ids, weights):
            if token not in unused and weight > lexical.get(token, 0.0):
                lexical[token] = float(weight)
        return dense, lexical, vectors

    return encode


def test_all_three_outputs_from_one_pass(engine, reference):
    result = engine.encode_sync("m3/tiny", TEXTS, output_types=["dense", "sparse", "multivector"])
    for text, item in zip(TEXTS, result.items):
        dense, lexical, vectors = reference(text)
        np.testing.assert_allclose(item.dense, dense, atol=1e-5)
        expected_ids = sorted(k for k, w in lexical.items() if w > 0)
        np.testing.assert_array_equal(item.sparse.indices, expected_ids)
        np.testing.assert_allclose(item.sparse.values, [lexical[k] for k in expected_ids], atol=1e-5)
        np.testing.assert_allclose(item.multivector, vectors, atol=1e-5)


def test_any_subset_per_request(engine, reference):
    only_sparse = engine.encode_sync("m3/tiny", TEXTS[:1], output_types=["sparse"]).items[0]
    assert only_sparse.dense is None and only_sparse.multivector is None and only_sparse.sparse is not None
    default = engine.encode_sync("m3/tiny", TEXTS[:1]).items[0]  # the card's first output
    assert default.dense is not None and default.sparse is None
    np.testing.assert_allclose(default.dense, reference(TEXTS[0])[0], atol=1e-5)


def test_score_is_mean_maxsim_of_colbert_vectors(engine, reference):
    q = reference(QUERY)[2]
    expected = [float((q @ reference(t)[2].T).max(axis=1).mean()) for t in TEXTS]
    result = engine.score_sync("m3/tiny", QUERY, TEXTS)
    got = {s.index: s.score for s in result.scores}
    np.testing.assert_allclose([got[i] for i in range(len(TEXTS))], expected, atol=1e-5)


def test_sparse_top_k_keeps_the_largest_weights(engine, reference):
    result = engine.encode_sync("m3/top3", TEXTS, output_types=["sparse"])
    for text, item in zip(TEXTS, result.items):
        lexical = reference(text)[1]
        best = sorted(sorted(lexical, key=lambda k: -lexical[k])[:3])
        np.testing.assert_array_equal(item.sparse.indices, best)
        np.testing.assert_allclose(item.sparse.values, [lexical[k] for k in best], atol=1e-5)
