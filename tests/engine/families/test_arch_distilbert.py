"""SIE's packed DistilBERT (BERT's forward under DistilBERT's names) against transformers'
DistilBertModel on the same tiny random weights; the backbone out of a DistilBertForMaskedLM
checkpoint; SPLADE over DistilBERT's masked-LM head (vocab_transform, vocab_layer_norm, the tied
vocab_projector) against sentence-transformers' SparseEncoder; and a msmarco-distilbert-style
card (mean pooling, Normalize) against SentenceTransformer. Tolerance 1e-4 (float32)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from arch_fixtures import (
    FP32_TOL,
    MINILM_VOCAB,
    TEXTS,
    check_batch_invariance,
    check_every_weight_loaded,
    max_abs_diff,
    no_segment_ids,
    reference_hidden,
    runner_for,
    save_tiny,
    sie_hidden,
    tiny_card,
)
from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.models import family_for


def tiny_config():
    from transformers import DistilBertConfig

    return DistilBertConfig(vocab_size=MINILM_VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                            max_position_embeddings=512, initializer_range=0.1)


def _perturb_norms(model):
    with torch.no_grad():  # LayerNorms start at 1 / 0: make them count
        for name, p in model.named_parameters():
            if "layer_norm" in name or "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import DistilBertModel

    torch.manual_seed(0)
    model = _perturb_norms(DistilBertModel(tiny_config()).eval())
    return no_segment_ids(save_tiny(model, tmp_path_factory.mktemp("distilbert"))), model


@pytest.fixture(scope="module")
def runner(model_dir):
    return runner_for(model_dir[0], pooling="mean")


@pytest.fixture(scope="module")
def token_ids(runner):
    return runner.tokenizer.encode(TEXTS).ids


def test_registry_config_and_every_weight(runner, model_dir):
    assert family_for(model_dir[1].config.to_dict()).name == "distilbert"
    assert runner.config.type_vocab_size == 0 and runner.config.hidden_size == 32
    assert not runner.tokenizer.uses_type_ids
    check_every_weight_loaded(runner, model_dir[0])


def test_hidden_states_match_transformers(runner, model_dir, token_ids):
    assert max_abs_diff(sie_hidden(runner, token_ids), reference_hidden(model_dir[1], token_ids)) < FP32_TOL


def test_batch_invariance(runner, token_ids):
    check_batch_invariance(runner, token_ids)


@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory):
    from transformers import DistilBertForMaskedLM

    torch.manual_seed(1)
    model = _perturb_norms(DistilBertForMaskedLM(tiny_config()).eval())
    return no_segment_ids(save_tiny(model, tmp_path_factory.mktemp("distilbert_mlm"))), model


def test_backbone_out_of_the_masked_lm_checkpoint(mlm_dir):
    root, model = mlm_dir
    runner = runner_for(root, pooling="mean")
    ids = runner.tokenizer.encode(TEXTS).ids
    assert max_abs_diff(sie_hidden(runner, ids), reference_hidden(model.distilbert, ids)) < FP32_TOL


def test_splade_over_distilbert_matches_sparse_encoder(mlm_dir):
    """opensearch-neural-sparse-encoding-v2-distill / splade_v2_distil's recipe: max over tokens of
    log(1 + relu(MLM logits)), the special tokens' entries dropped."""
    from sentence_transformers import SparseEncoder

    root, _ = mlm_dir
    reference = SparseEncoder(str(root), device="cpu")
    expected = reference.encode(TEXTS, convert_to_tensor=True, convert_to_sparse_tensor=False).to_dense().numpy()
    expected[:, sorted(reference.tokenizer.all_special_ids)] = 0.0
    card = ModelCard(id="tiny/distil-splade", weights=WeightsSource(path=str(root)), outputs=("sparse",),
                     max_seq_len=512, max_batch_tokens=4096, options={"sparse": {"kind": "splade"}})
    with Engine(Catalog([card]), device="cpu") as engine:
        items = engine.encode_sync(card.id, TEXTS).items
    for item, row in zip(items, expected):
        keep = np.nonzero(row > 0)[0]
        np.testing.assert_array_equal(item.sparse.indices, keep)
        np.testing.assert_allclose(item.sparse.values, row[keep], atol=FP32_TOL)


def test_msmarco_distilbert_card_equals_sentence_transformers(model_dir, tmp_path):
    """Transformer, mean Pooling, Normalize (msmarco-distilbert-cos-v5, multi-qa-distilbert-cos-v1)."""
    import shutil

    from sentence_transformers import SentenceTransformer

    root = tmp_path / "st"
    shutil.copytree(model_dir[0], root)
    (root / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]))
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}))
    (root / "2_Normalize").mkdir()
    (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 512, "do_lower_case": False}))
    expected = SentenceTransformer(str(root), device="cpu").encode(TEXTS)
    card = tiny_card(root, pooling="mean", id="tiny/msmarco-distilbert", normalize=True, family="distilbert")
    with Engine(Catalog([card]), device="cpu") as engine:
        got = np.stack([item.dense for item in engine.encode_sync(card.id, TEXTS).items])
    np.testing.assert_allclose(got, expected, atol=FP32_TOL, rtol=0)
