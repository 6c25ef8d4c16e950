"""XLM-RoBERTa (multilingual-e5, arctic-embed-l-v2, bge-m3's backbone) through SIE's BERT
forward pass (models/bert/model.py with `position_offset` = padding index + 1) against
transformers' XLMRobertaModel on the same weights.

The tiny model keeps XLM-R's real vocabulary size (250,002) and position table (514
rows, pad index 1), and one test sequence fills the whole 512-token window, so the
largest position id (513) is used.

Tolerances: float32 hidden states and pooled outputs within 1e-4 absolute; bfloat16
(SIE) against float32 (transformers) within 6e-2 absolute on hidden states (post-norm
outputs of unit scale) and a cosine similarity of at least 0.999 on pooled outputs.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from arch_fixtures import (
    FP32_TOL,
    TEXTS,
    check_batch_invariance,
    check_every_weight_loaded,
    cosine,
    max_abs_diff,
    reference_hidden,
    reference_pooled,
    runner_for,
    save_tiny,
    sie_hidden,
    sie_pooled,
    tiny_card,
)
from sie_engine import Catalog, Engine
from sie_engine.models import family_for

XLMR_VOCAB = 250_002
LONG_TEXT = "multilingual retrieval needs long windows " * 120  # > 512 tokens: truncated to the full window


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import XLMRobertaConfig, XLMRobertaModel

    torch.manual_seed(0)
    config = XLMRobertaConfig(vocab_size=XLMR_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=64, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1)
    # Embedding models drop the pooler (sentence-transformers never uses it).
    model = XLMRobertaModel(config, add_pooling_layer=False).eval()
    return save_tiny(model, tmp_path_factory.mktemp("xlmr")), model


@pytest.fixture(scope="module")
def runner(model_dir):
    return runner_for(model_dir[0])


@pytest.fixture(scope="module")
def token_ids(runner):
    ids = runner.tokenizer.encode(TEXTS + [LONG_TEXT]).ids
    assert len(ids[-1]) == 512
    return ids


def test_family_and_window(runner, model_dir):
    assert family_for(model_dir[1].config.to_dict()).name == "bert"
    assert runner.config.position_offset == 2
    assert runner.config.max_seq_len == 512
    assert runner.tokenizer.max_length == 512


def test_every_weight_loaded_with_its_shape(runner, model_dir):
    check_every_weight_loaded(runner, model_dir[0])
    assert runner.backbone.embeddings.word_embeddings.weight.shape == (XLMR_VOCAB, 32)


def test_hidden_states_and_pooling_match_transformers(runner, model_dir, token_ids):
    expected = reference_hidden(model_dir[1], token_ids, pad_id=1)
    assert max_abs_diff(sie_hidden(runner, token_ids), expected) < FP32_TOL
    for pooling in ("mean", "cls"):
        np.testing.assert_allclose(sie_pooled(runner_for(model_dir[0], pooling=pooling), token_ids),
                                   reference_pooled(expected, pooling), atol=FP32_TOL, rtol=0)


def test_bfloat16_close_to_float32_reference(model_dir, token_ids):
    runner = runner_for(model_dir[0], dtype="bfloat16")
    expected = reference_hidden(model_dir[1], token_ids, pad_id=1)
    assert max_abs_diff(sie_hidden(runner, token_ids), expected) < 6e-2
    assert cosine(sie_pooled(runner, token_ids), reference_pooled(expected, "mean")).min() > 0.999


def test_batch_invariance(runner, token_ids):
    check_batch_invariance(runner, token_ids)


def test_engine_end_to_end_with_e5_prefixes(model_dir):
    """Engine API with a multilingual-e5-style card: "query: " / "passage: ", mean pooling, normalised."""
    root, reference = model_dir
    card = tiny_card(root, pooling="mean", id="tiny/e5", normalize=True,
                     query_template="query: {text}", document_template="passage: {text}")
    from transformers import AutoTokenizer

    hf_tok = AutoTokenizer.from_pretrained(str(root))
    engine = Engine(Catalog([card]), device="cpu")
    try:
        for is_query, prefix in ((True, "query: "), (False, "passage: ")):
            got = np.stack([item.dense for item in engine.encode_sync(card.id, TEXTS, is_query=is_query).items])
            ids = [np.asarray(x) for x in hf_tok([prefix + t for t in TEXTS])["input_ids"]]
            expected = reference_pooled(reference_hidden(reference, ids, pad_id=1), "mean")
            np.testing.assert_allclose(got, expected / np.linalg.norm(expected, axis=1, keepdims=True),
                                       atol=FP32_TOL, rtol=0)
    finally:
        engine.close()
