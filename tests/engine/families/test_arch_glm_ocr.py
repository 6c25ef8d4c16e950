"""GLM-OCR (CogViT vision tower + GLM decoder) and SIE's decode loop against transformers on the same
tiny random weights: every weight loaded, the vision tower's image features of pages packed at their
own sizes, the prefill's logits at every prompt position and the logits of cached decode steps
(float32, 1e-4), `generate`'s tokens equal token for token (greedy and beam), and batch invariance:
a page's tokens are the same alone and in a running batch with pages of other sizes joining it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from glm_ocr_fixtures import load_sie_glm_ocr, tiny_glm_ocr
from image_fixtures import noise_page
from sie_engine.generation import DecodeLoop, GenerationRequest, GenerationSettings
from sie_engine.models.glm_ocr.model import rope_index

CPU = torch.device("cpu")
TOL = 1e-4
# a stop token the tiny decoder emits often: sequences end at different steps
EOS = [244]
# (height, width) of the pages: each resizes to its own grid of patches (the smallest is scaled up)
SIZES = [(27, 45), (40, 24), (60, 60), (12, 30)]
TASKS = ["Text Recognition:", "Table Recognition:", "Formula Recognition:", "Text Recognition:"]


def page(size: tuple[int, int], seed: int):
    return noise_page(size[1], size[0], seed)


@pytest.fixture(scope="module")
def glm(tmp_path_factory):
    root = tmp_path_factory.mktemp("glm_ocr")
    reference, processor = tiny_glm_ocr(root)
    model, tensors, report = load_sie_glm_ocr(root)
    pages = []
    for i, (size, task) in enumerate(zip(SIZES, TASKS, strict=True)):
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": task}]}]
        text = processor.apply_chat_template(messages, add_generation_prompt=True)
        pages.append(processor(text=[text], images=[page(size, i)], return_tensors="pt"))
    generation = json.loads((root / "generation_config.json").read_text())
    return reference, model, tensors, report, pages, generation, root


def grid_of(inputs) -> tuple[int, int]:
    _, h, w = (int(n) for n in inputs["image_grid_thw"][0])
    return h, w


def request(model, inputs, settings: GenerationSettings) -> GenerationRequest:
    """A page's generation request as the serving head builds it: the vision tower's features in the
    prompt's embeddings, transformers' M-RoPE positions and rope delta."""
    ids = inputs["input_ids"][0]
    with torch.no_grad():
        features = model.encode_images(inputs["pixel_values"], (grid_of(inputs),))[0]
        embeddings = model.prompt_embeddings(ids, features)
    positions, delta = rope_index(ids.tolist(), model.config.image_token_id, grid_of(inputs), model.merge)
    return GenerationRequest(None, ids.tolist(), settings, prompt_embeddings=embeddings,
                             prompt_positions=torch.from_numpy(positions), position_offset=delta)


def reference_generate(reference, inputs, settings: GenerationSettings, **extra):
    with torch.no_grad():
        return reference.generate(**inputs, max_new_tokens=settings.max_new_tokens, num_beams=settings.num_beams,
                                  do_sample=False, eos_token_id=list(settings.eos_token_ids),
                                  early_stopping=settings.early_stopping, length_penalty=settings.length_penalty,
                                  **extra)


def test_every_weight_loaded(glm):
    _, _, tensors, report, *_ = glm
    assert set(tensors) == report.loaded


def test_image_features_of_packed_pages_equal_transformers(glm):
    reference, model, _, _, pages, *_ = glm
    patches = torch.cat([p["pixel_values"] for p in pages])
    with torch.no_grad():
        got = model.encode_images(patches, tuple(grid_of(p) for p in pages))  # all pages in one packed pass
        for inputs, features in zip(pages, got, strict=True):
            expected = reference.model.get_image_features(inputs["pixel_values"],
                                                          inputs["image_grid_thw"]).pooler_output[0]
            assert features.shape == expected.shape
            assert (features - expected).abs().max().item() < TOL


def test_rope_index_equals_transformers(glm):
    reference, model, _, _, pages, *_ = glm
    for inputs in pages:
        positions, delta = rope_index(inputs["input_ids"][0].tolist(), model.config.image_token_id,
                                      grid_of(inputs), model.merge)
        expected, deltas = reference.model.get_rope_index(inputs["input_ids"], inputs["mm_token_type_ids"],
                                                          inputs["image_grid_thw"])
        assert torch.equal(torch.from_numpy(positions), expected[:, 0]) and delta == int(deltas[0, 0])


def test_input_preparation_equals_the_processor(glm, tmp_path):
    """SIE's prompt (the chat template, its image placeholder repeated per feature) and pixels
    (Glm46VImageProcessor's patches, each page its own grid) against Glm46VProcessor's."""
    from sie_engine.models.glm_ocr.serving import GlmOcrInputs, expand_image
    from sie_engine.validation import Limits

    _, model, _, _, pages, _, root = glm
    inputs = GlmOcrInputs(root, 512)
    pngs = []
    for i, size in enumerate(SIZES):
        path = tmp_path / f"{i}.png"
        page(size, i).save(path)
        pngs.append(path.read_bytes())
    pixels = inputs.images.encode_images(pngs, [f"items[{i}].image" for i in range(len(pngs))], Limits())
    for task, expected, values in zip(TASKS, pages, pixels, strict=True):
        assert values.shape[:2] == grid_of(expected)
        assert np.array_equal(values.reshape(-1, values.shape[-1]), expected["pixel_values"].numpy())
        ids = expand_image(inputs.prompt_ids(task), model.config.image_token_id, values.shape[0] * values.shape[1] // 4)
        assert ids == expected["input_ids"][0].tolist()


def test_prefill_and_cached_step_logits_equal_transformers(glm):
    """Every prompt position's logits from the prefill, then each cached step's against the logits
    transformers' `generate` computed at that step (its own cache)."""
    from sie_engine.generation.cache import DecodeCache

    reference, model, _, _, pages, generation, _ = glm
    settings = GenerationSettings.from_generation_config(generation, max_new_tokens=4, eos_token_id=[])
    text = model.config.text
    for inputs in pages[:2]:
        req = request(model, inputs, settings)
        cache = DecodeCache(text.num_hidden_layers, text.num_key_value_heads, text.head_dim, CPU, torch.float32)
        cache.add_rows(None, len(req.prompt) + 4, 1)
        with torch.no_grad():
            expected_prefill = reference(**inputs).logits[0]
            cache.begin_step([len(req.prompt)])
            hidden = model.hidden(req.prompt_embeddings[None], req.prompt_positions[:, None], cache)
            cache.end_step()
            assert (model.lm_head(hidden[0]) - expected_prefill).abs().max().item() < TOL
            out = reference_generate(reference, inputs, settings, output_logits=True, return_dict_in_generate=True)
            tokens = out.sequences[0, len(req.prompt):].tolist()
            for step, token in enumerate(tokens[:-1]):
                slots = cache.begin_step([1])
                positions = (slots + req.position_offset)[None].repeat(3, 1, 1)
                logits = model.decode_embedded(model.token_embeddings(torch.tensor([[token]])), positions, cache)
                cache.end_step()
                assert (logits[0] - out.logits[step + 1][0]).abs().max().item() < TOL


@pytest.mark.parametrize("beams", [1, 3])
def test_generate_equals_transformers(glm, beams):
    reference, model, _, _, pages, generation, _ = glm
    settings = GenerationSettings.from_generation_config(generation, max_new_tokens=10, num_beams=beams,
                                                         early_stopping=True, eos_token_id=EOS)
    got = DecodeLoop(model, CPU, torch.float32).run([request(model, p, settings) for p in pages])
    expected = [reference_generate(reference, p, settings)[0, p["input_ids"].shape[1]:].tolist() for p in pages]
    assert [g.tokens for g in got] == expected
    assert len({len(t) for t in expected}) > 1 or beams > 1  # some stop on a stop token, others at the limit


def test_batch_invariance_with_pages_of_other_sizes_joining(glm):
    """Greedy and beam requests for pages of four sizes in one running batch, two joining after the
    others started: each page's tokens are the tokens it gets alone."""
    _, model, _, _, pages, generation, _ = glm
    greedy = GenerationSettings.from_generation_config(generation, max_new_tokens=10, eos_token_id=EOS)
    beam = GenerationSettings.from_generation_config(generation, max_new_tokens=8, num_beams=2,
                                                     early_stopping=True, eos_token_id=EOS)
    requests = [request(model, p, greedy if i % 2 == 0 else beam) for i, p in enumerate(pages)]
    alone = [DecodeLoop(model, CPU, torch.float32).run([r])[0].tokens for r in requests]
    loop = DecodeLoop(model, CPU, torch.float32)
    handles = [loop.add(requests[0]), loop.add(requests[1])]
    results: dict[int, list[int]] = {}
    for step in range(40):
        if step == 2:
            handles += [loop.add(requests[2]), loop.add(requests[3])]
        results.update({h: r.tokens for h, r in loop.step().items()})
        if loop.idle:
            break
    assert [results[h] for h in handles] == alone


def test_config_refusals():
    from sie_engine.models.glm_ocr.model import GlmOcrConfig

    with pytest.raises(ValueError, match="not a GLM-OCR"):
        GlmOcrConfig.from_hf({"model_type": "glm4v"})
    with pytest.raises(ValueError, match="mrope_section"):
        GlmOcrConfig.from_hf({"model_type": "glm_ocr", "text_config": {
            "head_dim": 8, "rope_parameters": {"rope_type": "default", "rope_theta": 10000,
                                               "mrope_section": [1, 1, 1]}}})
