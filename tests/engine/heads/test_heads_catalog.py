"""The built-in cards for reranking, sparse and late-interaction models: each parses with
the head settings its builder accepts, and the hub path serves one end to end offline
(a tiny random model laid out as a Hugging Face cache under the card's real id)."""

from __future__ import annotations

import json

import numpy as np
import torch

from sie_engine import Catalog, Engine
from tiny_models import save_tiny, tiny_bert_config

CARDS = {
    "cross-encoder/ms-marco-MiniLM-L-6-v2": ("bert", ("score",)),
    "cross-encoder/ms-marco-MiniLM-L-12-v2": ("bert", ("score",)),
    "BAAI/bge-reranker-base": ("bert", ("score",)),
    "BAAI/bge-reranker-large": ("bert", ("score",)),
    "BAAI/bge-reranker-v2-m3": ("bert", ("score",)),
    "Alibaba-NLP/gte-reranker-modernbert-base": ("modernbert", ("score",)),
    "naver/splade-cocondenser-ensembledistil": ("bert", ("sparse",)),
    "naver/splade-v3": ("bert", ("sparse",)),
    "prithivida/Splade_PP_en_v1": ("bert", ("sparse",)),
    "opensearch-project/opensearch-neural-sparse-encoding-v1": ("bert", ("sparse",)),
    "sie/splade-tiny": ("bert", ("sparse",)),
    "colbert-ir/colbertv2.0": ("bert", ("multivector",)),
    "answerdotai/answerai-colbert-small-v1": ("bert", ("multivector",)),
    "BAAI/bge-m3": ("bert", ("dense", "sparse", "multivector")),
    "Qwen/Qwen3-Reranker-0.6B": ("qwen3", ("score",)),
    "Qwen/Qwen3-Reranker-4B": ("qwen3", ("score",)),
    "Qwen/Qwen3-Reranker-8B": ("qwen3", ("score",)),
}


def test_cards_parse_with_their_head_settings():
    from sie_engine.heads import colbert, sparse

    catalog = Catalog.builtin()
    for model_id, (family, outputs) in CARDS.items():
        card = catalog.get(model_id)
        assert card is not None, model_id
        assert card.family == family and card.outputs == outputs, model_id
        assert card.description
        if "sparse" in outputs:
            assert card.options["sparse"]["kind"] in sparse.KINDS
        if family == "qwen3":
            assert card.options["score"]["kind"] == "yes-no"
        if "multivector" in outputs:
            options = card.options["multivector"]
            assert options["kind"] in colbert.KINDS and options.get("score", "sum") in colbert.SCORES
            assert set(card.tasks) == {"encode", "score"}


def _hub_snapshot(cache, repo_id: str, build) -> None:
    """A Hugging Face cache entry for `repo_id` (refs/main -> snapshots/<rev>/...)."""
    revision = "0" * 40
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    build(repo / "snapshots" / revision)


def _ms_marco_like(dest):
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    save_tiny(BertForSequenceClassification(tiny_bert_config(num_labels=1)).eval(), dest)
    config = json.loads((dest / "config.json").read_text())
    config["sbert_ce_default_activation_function"] = "torch.nn.modules.linear.Identity"
    (dest / "config.json").write_text(json.dumps(config))


def test_builtin_reranker_card_serves_from_the_hub_cache_offline(tmp_path, monkeypatch):
    from huggingface_hub import constants
    from sentence_transformers import CrossEncoder

    model_id = "cross-encoder/ms-marco-MiniLM-L-6-v2"
    _hub_snapshot(tmp_path, model_id, _ms_marco_like)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    catalog = Catalog([Catalog.builtin().get(model_id)])
    query, docs = "install python packages", ["pip installs packages", "a png library", "football"]
    with Engine(catalog, device="cpu") as engine:
        result = engine.score_sync(model_id, query, docs)
    snapshot = next((tmp_path / ("models--" + model_id.replace("/", "--")) / "snapshots").iterdir())
    reference = CrossEncoder(str(snapshot), device="cpu")
    assert type(reference.activation_fn).__name__ == "Identity"  # raw logits, as the real model's config says
    expected = reference.predict([(query, d) for d in docs])
    got = {s.index: s.score for s in result.scores}
    np.testing.assert_allclose([got[i] for i in range(3)], expected, atol=1e-5)
