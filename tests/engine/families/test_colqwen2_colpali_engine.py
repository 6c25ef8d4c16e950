"""colpali-engine's ColQwen2.5 / ColQwen2 checkpoints (vidore/colqwen2.5-v0.2, vidore/colqwen2-v1.0: PEFT
LoRA adapters on colpali-engine bases) on tiny random weights: a base saved in colpali-engine's layout
(`model.*`, `visual.*`, `custom_text_proj.*`, a Qwen2.5-VL / Qwen2-VL config naming ColQwen2_5 /
ColQwen2) and an adapter made by peft with colpali-engine's targets. SIE serves the adapter directory
with the built-in card's settings; the reference is the base with peft's `merge_and_unload` applied,
converted to ColQwen2ForRetrieval as transformers' conversion script does, run as colpali-engine runs
it: pages under get_rope_index's 3D positions, queries "Query: " + text + 10 pads without "\\n". Every
vector within 1e-5 at float32; the base alone (no adapter) serves as the unmerged model; an adapter
whose base is not a ColQwen, or that does not fit its base, is refused at load naming it."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch

from colqwen2_fixtures import colpali_engine_queries, colqwen2_mrope_pages, make_tiny_colpali_engine
from image_fixtures import sample_images
from sie_engine import Catalog, Engine, ModelCard, WeightsSource, card_from_local_dir
from sie_engine.checkpoints import describe

CARDS = {True: "vidore/colqwen2.5-v0.2", False: "vidore/colqwen2-v1.0"}
PAGES = ["png_rgb", "jpeg_rgb", "webp_rgb"]
QUERIES = ["the cat", "a much longer question about the cat and the dog on page three"]
VECTOR_TOL = 1e-5


@pytest.fixture(scope="module", params=[True, False], ids=["colqwen2.5", "colqwen2"])
def tiny(request, tmp_path_factory):
    qwen2_5 = request.param
    base, adapter, merged = make_tiny_colpali_engine(tmp_path_factory.mktemp("colpali-engine"), qwen2_5=qwen2_5)
    images = sample_images()
    pages = colqwen2_mrope_pages(merged, [images[name] for name in PAGES])
    return qwen2_5, base, adapter, pages, colpali_engine_queries(merged, QUERIES)


def card_on(card_id: str, path) -> ModelCard:
    # the built-in card's settings on the tiny stand-in, at float32 (the card serves bfloat16)
    return dataclasses.replace(Catalog.builtin().get(card_id), id="tiny", weights=WeightsSource(path=str(path)),
                               dtype="float32")


def encode(engine, items) -> list[np.ndarray]:
    return [np.asarray(item.multivector) for item in engine.encode_sync("tiny", items).items]


def test_the_adapter_merged_into_its_base_equals_peft_merge_and_unload(tiny):
    qwen2_5, _, adapter, pages, queries = tiny
    images = sample_images()
    layout = describe(adapter)
    assert layout.kind == "colpali-engine" and layout.config["vlm_config"]["model_type"] == (
        "qwen2_5_vl" if qwen2_5 else "qwen2_vl")
    with Engine(Catalog([card_on(CARDS[qwen2_5], adapter)]), device="cpu") as engine:
        ours = encode(engine, [{"image": images[name]} for name in PAGES] + QUERIES)
        alone = encode(engine, [{"image": images[PAGES[1]]}])[0]  # a page alone as in the batch
    for got, want in zip(ours, pages + queries, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=VECTOR_TOL)
    np.testing.assert_allclose(alone, ours[1], atol=VECTOR_TOL)
    # the adapter directory as `--model NAME=PATH` gives: a card of its own, the same vectors
    local = card_from_local_dir("tiny", adapter)
    assert local.family == "colqwen2" and local.weights.path == str(adapter.resolve())
    with Engine(Catalog([dataclasses.replace(local, dtype="float32")]), device="cpu") as engine:
        np.testing.assert_allclose(encode(engine, QUERIES[:1])[0], queries[0], atol=VECTOR_TOL)


def test_the_base_alone_serves_the_unmerged_model(tiny):
    """A colpali-engine base (or merged) checkpoint loads by itself; the adapter's deltas change it."""
    qwen2_5, base, adapter, _, queries = tiny
    with Engine(Catalog([card_on(CARDS[qwen2_5], base)]), device="cpu") as engine:
        plain = encode(engine, QUERIES[:1])[0]
    assert plain.shape == queries[0].shape and np.abs(plain - queries[0]).max() > 1e-3


def test_modules_to_save_replace_the_bases_copy(tmp_path):
    """An adapter that saves the projection whole (peft's modules_to_save) serves its copy."""
    base, adapter, merged = make_tiny_colpali_engine(tmp_path, seed=3, modules_to_save=True)
    assert "modules_to_save" in (adapter / "adapter_config.json").read_text()
    wanted = colpali_engine_queries(merged, QUERIES)
    with Engine(Catalog([card_on(CARDS[True], adapter)]), device="cpu") as engine:
        for got, want in zip(encode(engine, QUERIES), wanted, strict=True):
            np.testing.assert_allclose(got, want, atol=VECTOR_TOL)


def test_an_adapter_that_does_not_fit_a_colqwen_base_is_refused_at_load(tiny, tmp_path):
    qwen2_5, base, adapter, _, _ = tiny
    settings = json.loads((adapter / "adapter_config.json").read_text())
    nameless = shutil.copytree(adapter, tmp_path / "nameless")
    (nameless / "adapter_config.json").write_text(json.dumps({**settings, "base_model_name_or_path": None}))
    with pytest.raises(ValueError, match="names no base_model_name_or_path"):
        describe(nameless)
    other = shutil.copytree(base, tmp_path / "other-base")
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "architectures": ["Qwen2VLForConditionalGeneration"]}))
    elsewhere = shutil.copytree(adapter, tmp_path / "elsewhere")
    (elsewhere / "adapter_config.json").write_text(json.dumps({**settings, "base_model_name_or_path": str(other)}))
    with pytest.raises(ValueError, match="only over a colpali-engine"):
        describe(elsewhere)
    from safetensors.torch import load_file, save_file

    misfit = shutil.copytree(adapter, tmp_path / "misfit")
    tensors = load_file(misfit / "adapter_model.safetensors")
    first = next(name for name in tensors if name.endswith("q_proj.lora_A.weight"))
    for part in (first, first.replace("lora_A", "lora_B")):
        tensors[part.replace("q_proj", "nowhere")] = tensors[part].clone()
    save_file(tensors, misfit / "adapter_model.safetensors")
    with Engine(Catalog([card_on(CARDS[qwen2_5], misfit)]), device="cpu") as engine:
        with pytest.raises(Exception, match="the base has no module .*nowhere"):
            engine.encode_sync("tiny", ["the cat"])
    dora = shutil.copytree(adapter, tmp_path / "dora")
    (dora / "adapter_config.json").write_text(json.dumps({**settings, "use_dora": True}))
    with Engine(Catalog([card_on(CARDS[qwen2_5], dora)]), device="cpu") as engine:
        with pytest.raises(Exception, match="use_dora is not supported"):
            engine.encode_sync("tiny", ["the cat"])
    assert torch.get_default_dtype() == torch.float32


def test_an_adapter_under_colpali_engines_newer_names_fits_a_base_under_the_older(tiny, tmp_path):
    """colpali-engine under newer transformers names the decoder `language_model.` where the released
    bases say `model.`: an adapter saved so still finds its modules."""
    from safetensors.torch import load_file, save_file

    qwen2_5, _, adapter, _, queries = tiny
    newer = shutil.copytree(adapter, tmp_path / "newer-names")
    tensors = load_file(newer / "adapter_model.safetensors")
    save_file({name.replace("base_model.model.model.", "base_model.model.language_model."): value
               for name, value in tensors.items()}, newer / "adapter_model.safetensors")
    assert any(".language_model.layers." in name for name in load_file(newer / "adapter_model.safetensors"))
    with Engine(Catalog([card_on(CARDS[qwen2_5], newer)]), device="cpu") as engine:
        np.testing.assert_allclose(encode(engine, QUERIES[:1])[0], queries[0], atol=VECTOR_TOL)
