"""PyLate ColBERT checkpoints as mxbai-edge-colbert-v0 publishes them, against sentence-transformers'
own `MultiVectorEncoder` (which loads PyLate saves natively) on the same tiny random ModernBERT:
the [Q] / [D] prefix tokens, queries cut at `query_length` and not expanded
(`do_query_expansion: false`), documents at `document_length` without punctuation, the 1_Dense
projection, and `do_lower_case` from sentence_bert_config.json, which lowercases every text before a
cased tokenizer sees it. Tolerance 1e-5 (float32)."""

from __future__ import annotations

import json
import string

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from tiny_models import MINILM_VOCAB, save_tiny

DIM = 16
QUERY_LENGTH = 12
DOCUMENT_LENGTH = 40
OPTIONS = {"multivector": {"kind": "colbert", "query_marker": "[Q] ", "document_marker": "[D] ",
                           "query_length": QUERY_LENGTH, "expand_queries": False, "skiplist": "punctuation",
                           "score": "sum"}}
QUERIES = ["Python Package Installer", "How do I read PNG images in Python, and write them back?", "Debian"]
DOCS = [
    "PIP: the Python package installer, installs packages from PyPI.",
    "A library for PNG images (read, write, convert) with NumPy arrays and Pillow.",
    "Tools for Debian packages; dpkg, apt, and more! " * 4,
]


def _pylate_checkpoint(dest, lowercase: bool):
    """A PyLate v3 save: ModernBERT at the root with a cased tokenizer, [Q] / [D] added unnormalised,
    the projection in 1_Dense/, PyLate's settings in config_sentence_transformers.json."""
    from tokenizers import AddedToken, Tokenizer
    from transformers import ModernBertConfig, ModernBertModel

    torch.manual_seed(0)
    config = ModernBertConfig(vocab_size=MINILM_VOCAB + 2, hidden_size=32, num_hidden_layers=3,
                              num_attention_heads=4, intermediate_size=48, max_position_embeddings=512,
                              local_attention=8, pad_token_id=0, bos_token_id=101, cls_token_id=101,
                              eos_token_id=102, sep_token_id=102, initializer_range=0.2)
    root = save_tiny(ModernBertModel(config).eval(), dest)
    tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
    state = json.loads(tokenizer.to_str())
    state["normalizer"]["lowercase"] = False  # cased, as ModernBERT's tokenizer is: "Python" is not "python"
    tokenizer = Tokenizer.from_str(json.dumps(state))
    tokenizer.add_special_tokens([AddedToken("[Q] ", normalized=False), AddedToken("[D] ", normalized=False)])
    tokenizer.save(str(root / "tokenizer.json"))
    tokenizer_config = json.loads((root / "tokenizer_config.json").read_text())
    tokenizer_config["do_lower_case"] = False
    (root / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    (root / "1_Dense").mkdir()
    (root / "1_Dense" / "config.json").write_text(json.dumps(
        {"in_features": 32, "out_features": DIM, "bias": False,
         "activation_function": "torch.nn.modules.linear.Identity"}))
    save_file({"linear.weight": torch.randn(DIM, 32) * 0.2}, str(root / "1_Dense" / "model.safetensors"))
    (root / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"}]))
    (root / "sentence_bert_config.json").write_text(json.dumps(
        {"max_seq_length": DOCUMENT_LENGTH - 1, "do_lower_case": lowercase}))
    (root / "config_sentence_transformers.json").write_text(json.dumps({
        "model_type": "ColBERT", "query_prefix": "[Q] ", "document_prefix": "[D] ",
        "query_length": QUERY_LENGTH, "document_length": DOCUMENT_LENGTH, "do_query_expansion": False,
        "attend_to_expansion_tokens": False, "skiplist_words": list(string.punctuation),
        "similarity_fn_name": "MaxSim"}))
    return root


@pytest.fixture(scope="module", params=[True, False], ids=["do_lower_case", "cased"])
def checkpoint(request, tmp_path_factory):
    return _pylate_checkpoint(tmp_path_factory.mktemp("pylate-edge"), request.param), request.param


@pytest.fixture(scope="module")
def reference(checkpoint):
    from sentence_transformers import MultiVectorEncoder

    return MultiVectorEncoder(str(checkpoint[0]), device="cpu")


@pytest.fixture(scope="module")
def engine(checkpoint):
    card = ModelCard(id="pylate/edge", weights=WeightsSource(path=str(checkpoint[0])), outputs=("multivector",),
                     max_seq_len=DOCUMENT_LENGTH, max_batch_tokens=2048, options=OPTIONS)
    with Engine(Catalog([card]), device="cpu") as engine:
        yield engine


def _reference_vectors(reference, texts, is_query):
    encode = reference.encode_query if is_query else reference.encode_document
    return [np.asarray(v, dtype=np.float32) for v in encode(texts, convert_to_numpy=True)]


@pytest.mark.parametrize("is_query", [True, False], ids=["queries", "documents"])
def test_token_vectors_equal_sentence_transformers(engine, reference, is_query):
    texts = QUERIES if is_query else DOCS
    expected = _reference_vectors(reference, texts, is_query)
    items = engine.encode_sync("pylate/edge", texts, output_types=["multivector"], is_query=is_query).items
    for item, want in zip(items, expected):
        got = np.asarray(item.multivector)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-5)
    if is_query:  # cut at the query length, never padded up to it
        assert max(len(v) for v in expected) == QUERY_LENGTH and min(len(v) for v in expected) < QUERY_LENGTH


def test_lowercasing_follows_the_checkpoint(engine, checkpoint):
    """With do_lower_case the cased tokenizer sees "python" for "Python"; without it, it does not."""
    lowercase = checkpoint[1]
    mixed = engine.encode_sync("pylate/edge", ["Python Packages"], output_types=["multivector"]).items[0]
    lower = engine.encode_sync("pylate/edge", ["python packages"], output_types=["multivector"]).items[0]
    same = np.asarray(mixed.multivector).shape == np.asarray(lower.multivector).shape and np.allclose(
        mixed.multivector, lower.multivector, atol=1e-6)
    assert same == lowercase


def test_maxsim_equals_sentence_transformers(engine, reference):
    scores = engine.score_sync("pylate/edge", QUERIES[1], DOCS).scores
    query = _reference_vectors(reference, [QUERIES[1]], True)[0]
    documents = _reference_vectors(reference, DOCS, False)
    expected = [float((query @ d.T).max(axis=1).sum()) for d in documents]
    for score in scores:
        assert score.score == pytest.approx(expected[score.index], abs=1e-4)
