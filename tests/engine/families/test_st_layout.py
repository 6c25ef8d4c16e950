"""Directories saved by sentence-transformers (6.x) serve through SIE without a card exactly
as sentence-transformers encodes them (float32, within 1e-5):

- Dense modules after pooling (LaBSE, stella, sentence-t5 layouts): a tiny BERT with
  pooling, two Dense modules (tanh; identity with a residual) and Normalize; the served
  dimension is the last Dense's. A module SIE does not apply after pooling fails the load
  with its name instead of serving other vectors.
- Every pooling mode sentence-transformers offers but concatenations: cls, mean, lasttoken,
  max, weightedmean, mean_sqrt_len_tokens.
- Query and document prompts (`config_sentence_transformers.json`): `is_query` matches
  `encode_query`, documents match `encode_document`; with the pooling's `include_prompt: false`,
  the prompt's tokens left out of the pooling as sentence-transformers leaves them out."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from sie_engine import Catalog, Engine, card_from_local_dir
from sie_engine.errors import ModelLoadFailed
from tiny_models import make_tiny_bert

TEXTS = ["a short query", "a longer document about packages, pooling and projections " * 3, "x"]


def _st_model(tmp_path, residual: bool, prompts: dict | None = None, pooling: str = "mean",
              include_prompt: bool = True):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, Pooling, Transformer

    backbone = Transformer(str(make_tiny_bert(tmp_path / "backbone", seed=5)))
    hidden = backbone.get_embedding_dimension()
    torch.manual_seed(6)
    modules = [backbone, Pooling(hidden, pooling_mode=pooling, include_prompt=include_prompt),
               Dense(hidden, 24)]  # tanh, the default
    if residual:
        modules.append(Dense(24, 16, activation_function=torch.nn.Identity(), use_residual=True))
    modules.append(Normalize())
    model = SentenceTransformer(modules=modules, device="cpu", prompts=prompts)
    model.save(str(tmp_path / "st"))
    return model, tmp_path / "st"


@pytest.mark.parametrize("residual", [False, True])
def test_dense_modules_after_pooling_match_sentence_transformers(tmp_path, residual):
    reference, root = _st_model(tmp_path, residual)
    expected = reference.encode(TEXTS, convert_to_numpy=True)
    card = card_from_local_dir("local/st-dense", root)
    with Engine(Catalog([card]), device="cpu") as engine:
        result = engine.encode_sync("local/st-dense", TEXTS)
        info = engine.model_info("local/st-dense")
    got = np.stack([item.dense for item in result.items])
    assert got.shape == expected.shape == (len(TEXTS), 16 if residual else 24)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert info.dims["dense"] == got.shape[1]


def test_an_unknown_module_after_pooling_fails_the_load_naming_it(tmp_path):
    _, root = _st_model(tmp_path, residual=False)
    modules = json.loads((root / "modules.json").read_text())
    modules.insert(2, {"idx": 9, "name": "9", "path": "9_LayerNorm", "type": "sentence_transformers.models.LayerNorm"})
    (root / "modules.json").write_text(json.dumps(modules))
    card = card_from_local_dir("local/st-odd", root)
    with Engine(Catalog([card]), device="cpu") as engine:
        with pytest.raises(ModelLoadFailed) as failure:
            engine.encode_sync("local/st-odd", TEXTS)
    assert "LayerNorm" in failure.value.message and "after pooling" in failure.value.message


def test_prompts_of_the_saved_model_apply_to_queries_and_documents(tmp_path):
    reference, root = _st_model(tmp_path, residual=False, prompts={"query": "query: ", "document": "passage: "})
    card = card_from_local_dir("local/st-prompts", root)
    assert (card.query_template, card.document_template) == ("query: {text}", "passage: {text}")
    with Engine(Catalog([card]), device="cpu") as engine:
        queries = engine.encode_sync("local/st-prompts", TEXTS, is_query=True)
        documents = engine.encode_sync("local/st-prompts", TEXTS)
    np.testing.assert_allclose(np.stack([i.dense for i in queries.items]), reference.encode_query(TEXTS), atol=1e-5)
    np.testing.assert_allclose(np.stack([i.dense for i in documents.items]), reference.encode_document(TEXTS),
                               atol=1e-5)
    assert queries.tokens == documents.tokens  # "query: " and "passage: " are both 2 tokens here


@pytest.mark.parametrize("pooling", ["cls", "mean", "lasttoken", "max", "weightedmean", "mean_sqrt_len_tokens"])
def test_pooling_modes_match_sentence_transformers(tmp_path, pooling):
    reference, root = _st_model(tmp_path, residual=False, pooling=pooling)
    card = card_from_local_dir("local/st-pooling", root)
    with Engine(Catalog([card]), device="cpu") as engine:
        got = np.stack([i.dense for i in engine.encode_sync("local/st-pooling", TEXTS).items])
    np.testing.assert_allclose(got, reference.encode(TEXTS), atol=1e-5)


@pytest.mark.parametrize("pooling", ["mean", "max", "weightedmean", "mean_sqrt_len_tokens", "cls", "lasttoken"])
def test_prompts_excluded_from_pooling_match_sentence_transformers(tmp_path, pooling):
    """`include_prompt: false`: the prompt's tokens (measured as sentence-transformers does, less the
    tokenizer's trailing [SEP]) are left out of the poolings that read every token."""
    prompts = {"query": "query: represent this sentence for searching relevant passages: ", "document": "passage: "}
    reference, root = _st_model(tmp_path, residual=False, prompts=prompts, pooling=pooling, include_prompt=False)
    card = card_from_local_dir("local/st-no-prompt-pooling", root)
    assert card.options == {"dense": {"include_prompt": False}}
    with Engine(Catalog([card]), device="cpu") as engine:
        queries = np.stack([i.dense for i in engine.encode_sync(card.id, TEXTS, is_query=True).items])
        documents = np.stack([i.dense for i in engine.encode_sync(card.id, TEXTS).items])
    np.testing.assert_allclose(queries, reference.encode_query(TEXTS), atol=1e-5)
    np.testing.assert_allclose(documents, reference.encode_document(TEXTS), atol=1e-5)
    if pooling == "mean":  # leaving the prompt out changes the vectors
        full, _ = _st_model(tmp_path / "with", residual=False, prompts=prompts, pooling=pooling)
        assert np.abs(queries - full.encode_query(TEXTS)).max() > 1e-3
