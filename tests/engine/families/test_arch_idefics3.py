"""Idefics3 (SigLIP over a page's tiles + pixel-shuffle connector + Llama decoder: granite-docling,
SmolDocling) and SIE's decode loop against transformers on the same tiny random weights: every
weight loaded, the image features of every tile, SIE's input preparation (tiles, the prompt with
its row/column markers and global view) equal to Idefics3Processor's, the prefill's logits at every
prompt position and the logits of cached decode steps (float32, 1e-4), `generate`'s tokens equal
token for token (greedy and beam), and batch invariance: a page's tokens are the same alone and in
a running batch with pages of other sizes joining it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from idefics3_fixtures import load_sie_idefics3, tiny_idefics3
from image_fixtures import noise_page
from page_vlm_checks import check_batch_invariance
from sie_engine.generation import DecodeLoop, GenerationRequest, GenerationSettings
from sie_engine.models.idefics3.serving import DOCLING_PROMPT, tile_grid

CPU = torch.device("cpu")
TOL = 1e-4
# (width, height): every page's longest edge resizes to 64 pixels: 2 x 2 tiles, 2 x 2, 1 x 2, 2 x 1
SIZES = [(20, 30), (64, 60), (70, 30), (30, 70)]
PROMPTS = [DOCLING_PROMPT, DOCLING_PROMPT, "Convert this table to OTSL.", DOCLING_PROMPT]


def page(size: tuple[int, int], seed: int):
    return noise_page(size[0], size[1], seed)


@pytest.fixture(scope="module")
def idefics(tmp_path_factory):
    root = tmp_path_factory.mktemp("idefics3")
    reference, processor = tiny_idefics3(root)
    model, tensors, report = load_sie_idefics3(root)
    pages = []
    for i, (size, prompt) in enumerate(zip(SIZES, PROMPTS, strict=True)):
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        text = processor.apply_chat_template(messages, add_generation_prompt=True)
        pages.append(processor(text=[text], images=[[page(size, i)]], return_tensors="pt"))
    generation = json.loads((root / "generation_config.json").read_text())
    return reference, model, tensors, report, pages, generation, root, processor


def request(model, inputs, settings: GenerationSettings) -> GenerationRequest:
    """A page's generation request as the serving head builds it: the tiles' features in the
    prompt's embeddings (positions 0, 1, ...)."""
    ids = inputs["input_ids"][0]
    with torch.no_grad():
        features = model.encode_tiles(inputs["pixel_values"][0]).flatten(0, 1)
        embeddings = model.prompt_embeddings(ids, features)
    return GenerationRequest(None, ids.tolist(), settings, prompt_embeddings=embeddings)


def reference_generate(reference, inputs, settings: GenerationSettings, **extra):
    with torch.no_grad():
        return reference.generate(**inputs, max_new_tokens=settings.max_new_tokens, num_beams=settings.num_beams,
                                  do_sample=False, eos_token_id=list(settings.eos_token_ids),
                                  early_stopping=settings.early_stopping, length_penalty=settings.length_penalty,
                                  **extra)


def test_every_weight_loaded(idefics):
    _, _, tensors, report, *_ = idefics
    assert set(tensors) == report.loaded


def test_image_features_of_batched_tiles_equal_transformers(idefics):
    reference, model, _, _, pages, *_ = idefics
    tiles = torch.cat([p["pixel_values"][0] for p in pages])
    with torch.no_grad():
        got = model.encode_tiles(tiles).split([p["pixel_values"].shape[1] for p in pages])  # every tile in one batch
        for inputs, features in zip(pages, got, strict=True):
            expected = reference.model.get_image_features(inputs["pixel_values"],
                                                          inputs["pixel_attention_mask"]).pooler_output
            assert features.shape == expected.shape
            assert (features - expected).abs().max().item() < TOL


def test_input_preparation_equals_the_processor(idefics, tmp_path):
    """SIE's pixels (Idefics3ImageProcessor's tiles), tile grid and prompt (the chat template, its
    `<image>` expanded with the row/column markers and the global view) against Idefics3Processor's."""
    from sie_engine.models.idefics3.serving import Idefics3Generation, Idefics3Inputs
    from sie_engine.validation import Limits

    _, model, _, _, pages, _, root, processor = idefics
    inputs = Idefics3Inputs(root, 512)
    head = Idefics3Generation(model, inputs, root, {"task_prompt": DOCLING_PROMPT, "max_new_tokens": 8}, "tiny",
                              torch.float32)
    pngs = []
    for i, size in enumerate(SIZES):
        path = tmp_path / f"{i}.png"
        page(size, i).save(path)
        pngs.append(path.read_bytes())
    pixels, sizes = inputs.images.encode_images_sized(pngs, [f"items[{i}].image" for i in range(len(pngs))], Limits())
    for prompt, expected, values, size in zip(PROMPTS, pages, pixels, sizes, strict=True):
        assert np.array_equal(values, expected["pixel_values"][0].numpy())
        ids = head.page_prompt(inputs.prompt_ids(prompt), values, size)
        assert ids == expected["input_ids"][0].tolist()
        assert inputs.images.positions(values) >= len(ids) - len(inputs.prompt_ids(prompt)) + 1
    grids = {tile_grid(processor.image_processor, *s) for s in SIZES}
    assert grids == {(2, 2), (1, 2), (2, 1)}


def test_tile_grid_equals_the_processor_over_many_sizes(idefics):
    """The grid SIE derives from a page's size equals the rows and columns the processor reports,
    under the tiny processor's settings and under one whose pages fit one tile (the global view alone)."""
    from sie_engine.models.idefics3.serving import image_text

    tiny = idefics[7].image_processor
    one_tile = type(tiny).from_dict({**tiny.to_dict(), "size": {"longest_edge": 32}})
    for processor in (tiny, one_tile):
        for width, height in [(1, 1), (31, 33), (33, 31), (64, 64), (65, 200), (200, 65), (510, 1000), (1000, 510),
                              (7, 300), (300, 7), (63, 33)]:
            out = processor(images=[page((width, height), 0)], return_tensors="np", return_row_col_info=True)
            assert tile_grid(processor, width, height) == (out["rows"][0][0], out["cols"][0][0]), (width, height)
    assert tile_grid(one_tile, 40, 60) == (0, 0)
    assert image_text(0, 0, 2) == "<fake_token_around_image><global-img><image><image><fake_token_around_image>"


def test_prefill_and_cached_step_logits_equal_transformers(idefics):
    """Every prompt position's logits from the prefill, then each cached step's against the logits
    transformers' `generate` computed at that step (its own cache)."""
    from sie_engine.generation.cache import DecodeCache

    reference, model, _, _, pages, generation, *_ = idefics
    settings = GenerationSettings.from_generation_config(generation, max_new_tokens=4, eos_token_id=[])
    text = model.config.text
    for inputs in pages[:2]:
        req = request(model, inputs, settings)
        prompt = len(req.prompt)
        cache = DecodeCache(text.num_hidden_layers, text.num_key_value_heads, text.head_dim, CPU, torch.float32)
        cache.add_rows(None, prompt + 4, 1)
        with torch.no_grad():
            expected_prefill = reference(**inputs).logits[0]
            cache.begin_step([prompt])
            x = req.prompt_embeddings[None]
            rotary = model.text_model.rotary(torch.arange(prompt))
            for i, layer in enumerate(model.text_model.layers):
                x = layer.decode(x, rotary, i, cache)
            cache.end_step()
            assert (model.lm_head(model.text_model.norm(x[0])) - expected_prefill).abs().max().item() < TOL
            out = reference_generate(reference, inputs, settings, output_logits=True, return_dict_in_generate=True)
            tokens = out.sequences[0, prompt:].tolist()
            for step, token in enumerate(tokens[:-1]):
                slots = cache.begin_step([1])
                logits = model.decode_embedded(model.token_embeddings(torch.tensor([[token]])), slots[None], cache)
                cache.end_step()
                assert (logits[0] - out.logits[step + 1][0]).abs().max().item() < TOL


_stop: list[int] = []


def stop_token(idefics) -> list[int]:
    """A token the tiny decoder emits often, as a stop token: sequences end at different steps."""
    if _stop:
        return _stop
    reference, model, _, _, pages, generation, *_ = idefics
    settings = GenerationSettings.from_generation_config(generation, max_new_tokens=12, eos_token_id=[])
    counts: dict[int, int] = {}
    for p in pages:
        for t in reference_generate(reference, p, settings)[0, p["input_ids"].shape[1]:].tolist():
            counts[t] = counts.get(t, 0) + 1
    _stop.append(max(counts, key=counts.__getitem__))
    return _stop


@pytest.mark.parametrize("beams", [1, 3])
def test_generate_equals_transformers(idefics, beams):
    reference, model, _, _, pages, generation, *_ = idefics
    settings = GenerationSettings.from_generation_config(generation, max_new_tokens=10, num_beams=beams,
                                                         early_stopping=True, eos_token_id=stop_token(idefics))
    got = DecodeLoop(model, CPU, torch.float32).run([request(model, p, settings) for p in pages])
    expected = [reference_generate(reference, p, settings)[0, p["input_ids"].shape[1]:].tolist() for p in pages]
    assert [g.tokens for g in got] == expected
    assert len({len(t) for t in expected}) > 1 or beams > 1  # some stop on the stop token, others at the limit


def test_batch_invariance_with_pages_of_other_sizes_joining(idefics):
    _, model, _, _, pages, generation, *_ = idefics
    check_batch_invariance(model, pages, generation, stop_token(idefics), make_request=request)


def test_config_refusals():
    from sie_engine.models.idefics3.model import Idefics3Config

    with pytest.raises(ValueError, match="not an Idefics3"):
        Idefics3Config.from_hf({"model_type": "idefics2"})
    vision = {"image_size": 512, "patch_size": 16}
    with pytest.raises(ValueError, match="does not divide"):
        Idefics3Config.from_hf({"model_type": "idefics3", "scale_factor": 3, "vision_config": vision})
    with pytest.raises(ValueError, match="Llama decoder"):
        Idefics3Config.from_hf({"model_type": "idefics3", "vision_config": vision,
                                "text_config": {"model_type": "mistral"}})
    with pytest.raises(ValueError, match="rope_type"):  # llama3's scaling runs (the Llama family's tests); yarn not
        Idefics3Config.from_hf({"model_type": "idefics3", "vision_config": vision, "text_config": {
            "model_type": "llama", "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000, "factor": 8.0,
                                                       "original_max_position_embeddings": 8192}}})
