"""PaddleOCR-VL (SigLIP-style vision encoder + projector + ERNIE-4.5 decoder) and SIE's decode loop
against transformers on the same tiny random weights: every weight loaded, the image features of
pages packed at their own sizes, the M-RoPE positions, the input preparation, the prefill's logits
at every prompt position and the logits of cached decode steps (float32, 1e-4), `generate`'s tokens
equal token for token (greedy and beam), and batch invariance: a page's tokens are the same alone
and in a running batch with pages of other sizes joining it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from image_fixtures import noise_page
from paddleocr_vl_fixtures import load_sie_paddleocr_vl, tiny_paddleocr_vl
from sie_engine.generation import DecodeLoop, GenerationRequest, GenerationSettings
from sie_engine.models.glm_ocr.model import rope_index

CPU = torch.device("cpu")
TOL = 1e-4
# a stop token the tiny decoder emits often: sequences end at different steps
EOS = [101]
# (height, width) of the pages: each resizes to its own grid of patches (the smallest is scaled up)
SIZES = [(27, 45), (40, 24), (60, 60), (12, 30)]
TASKS = ["ocr", "table", "formula", "chart"]


def page(size: tuple[int, int], seed: int):
    return noise_page(size[1], size[0], seed)


def prompt_text(task: str) -> str:
    from sie_engine.models.paddleocr_vl.tasks import task_prompt

    return task_prompt(task)


@pytest.fixture(scope="module")
def paddle(tmp_path_factory):
    root = tmp_path_factory.mktemp("paddleocr_vl")
    reference, processor = tiny_paddleocr_vl(root)
    model, tensors, report = load_sie_paddleocr_vl(root)
    pages = []
    for i, (size, task) in enumerate(zip(SIZES, TASKS, strict=True)):
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt_text(task)}]}]
        text = processor.apply_chat_template(messages, add_generation_prompt=True)
        pages.append(processor(text=[text], images=[page(size, i)], return_tensors="pt"))
    generation = json.loads((root / "generation_config.json").read_text())
    return reference, model, tensors, report, pages, generation, root


def grid_of(inputs) -> tuple[int, int]:
    _, h, w = (int(n) for n in inputs["image_grid_thw"][0])
    return h, w


def patches_of(inputs) -> torch.Tensor:
    """The processor's `[N, C, p, p]` patches as SIE packs them: `[N, C * p * p]`."""
    return inputs["pixel_values"].flatten(1)


def request(model, inputs, settings: GenerationSettings) -> GenerationRequest:
    """A page's generation request as the serving head builds it: the encoder's features in the
    prompt's embeddings, transformers' M-RoPE positions and rope delta."""
    ids = inputs["input_ids"][0]
    with torch.no_grad():
        features = model.encode_images(patches_of(inputs), (grid_of(inputs),))[0]
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


def test_every_weight_loaded(paddle):
    _, model, tensors, report, *_ = paddle
    assert set(tensors) == report.loaded
    assert model.lm_head is None  # tied: the LM head is the token table, as transformers ties it


def test_image_features_of_packed_pages_equal_transformers(paddle):
    reference, model, _, _, pages, *_ = paddle
    patches = torch.cat([patches_of(p) for p in pages])
    with torch.no_grad():
        got = model.encode_images(patches, tuple(grid_of(p) for p in pages))  # all pages in one packed pass
        for inputs, features in zip(pages, got, strict=True):
            expected = reference.model.get_image_features(inputs["pixel_values"],
                                                          inputs["image_grid_thw"]).pooler_output[0]
            assert features.shape == expected.shape
            assert (features - expected).abs().max().item() < TOL


def test_rope_index_equals_transformers(paddle):
    reference, model, _, _, pages, *_ = paddle
    for inputs in pages:
        positions, delta = rope_index(inputs["input_ids"][0].tolist(), model.config.image_token_id,
                                      grid_of(inputs), model.merge)
        expected, deltas = reference.model.get_rope_index(inputs["input_ids"], inputs["mm_token_type_ids"],
                                                          inputs["image_grid_thw"])
        assert torch.equal(torch.from_numpy(positions), expected[:, 0]) and delta == int(deltas[0, 0])


def test_input_preparation_equals_the_processor(paddle, tmp_path):
    """SIE's prompt (the chat template, its image placeholder repeated per feature) and pixels
    (PaddleOCRVLImageProcessor's patches, each page its own grid) against PaddleOCRVLProcessor's."""
    from sie_engine.models.glm_ocr.serving import expand_image
    from sie_engine.models.paddleocr_vl.serving import PaddleOcrInputs
    from sie_engine.validation import Limits

    _, model, _, _, pages, _, root = paddle
    inputs = PaddleOcrInputs(root, 512)
    pngs = []
    for i, size in enumerate(SIZES):
        path = tmp_path / f"{i}.png"
        page(size, i).save(path)
        pngs.append(path.read_bytes())
    pixels = inputs.images.encode_images(pngs, [f"items[{i}].image" for i in range(len(pngs))], Limits())
    for i, (task, expected, values) in enumerate(zip(TASKS, pages, pixels, strict=True)):
        assert values.shape[:2] == grid_of(expected)
        assert inputs.images.resized(SIZES[i][1], SIZES[i][0]) == (values.shape[1] * 4, values.shape[0] * 4)
        assert np.array_equal(values.reshape(-1, values.shape[-1]), patches_of(expected).numpy())
        ids = expand_image(inputs.prompt_ids(prompt_text(task)), model.config.image_token_id,
                           values.shape[0] * values.shape[1] // 4)
        assert ids == expected["input_ids"][0].tolist()


def test_prefill_and_cached_step_logits_equal_transformers(paddle):
    """Every prompt position's logits from the prefill, then each cached step's against the logits
    transformers' `generate` computed at that step (its own cache)."""
    from sie_engine.generation.cache import DecodeCache

    reference, model, _, _, pages, generation, _ = paddle
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
            assert (model.logits(hidden[0]) - expected_prefill).abs().max().item() < TOL
            out = reference_generate(reference, inputs, settings, output_logits=True, return_dict_in_generate=True)
            tokens = out.sequences[0, len(req.prompt):].tolist()
            for step, token in enumerate(tokens[:-1]):
                slots = cache.begin_step([1])
                positions = (slots + req.position_offset)[None].repeat(3, 1, 1)
                logits = model.decode_embedded(model.token_embeddings(torch.tensor([[token]])), positions, cache)
                cache.end_step()
                assert (logits[0] - out.logits[step + 1][0]).abs().max().item() < TOL


@pytest.mark.parametrize("beams", [1, 3])
def test_generate_equals_transformers(paddle, beams):
    reference, model, _, _, pages, generation, _ = paddle
    settings = GenerationSettings.from_generation_config(generation, max_new_tokens=10, num_beams=beams,
                                                         early_stopping=True, eos_token_id=EOS)
    got = DecodeLoop(model, CPU, torch.float32).run([request(model, p, settings) for p in pages])
    expected = [reference_generate(reference, p, settings)[0, p["input_ids"].shape[1]:].tolist() for p in pages]
    assert [g.tokens for g in got] == expected
    assert len({len(t) for t in expected}) > 1 or beams > 1  # some stop on a stop token, others at the limit


def test_batch_invariance_with_pages_of_other_sizes_joining(paddle):
    """Greedy and beam requests for pages of four sizes in one running batch, two joining after the
    others started: each page's tokens are the tokens it gets alone."""
    _, model, _, _, pages, generation, _ = paddle
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
    from sie_engine.models.paddleocr_vl.model import PaddleOcrVlConfig

    with pytest.raises(ValueError, match="not a PaddleOCR-VL"):
        PaddleOcrVlConfig.from_hf({"model_type": "qwen2_vl"})
    with pytest.raises(ValueError, match="mrope_section"):
        PaddleOcrVlConfig.from_hf({"model_type": "paddleocr_vl", "text_config": {
            "head_dim": 8, "rope_parameters": {"rope_type": "default", "rope_theta": 10000,
                                               "mrope_section": [1, 1, 1]}}})


def test_tasks_refuse_a_prompt_and_unknown_tasks():
    from sie_engine.models.paddleocr_vl.tasks import task_prompt

    assert task_prompt("chart") == "Chart Recognition:"
    with pytest.raises(ValueError, match="tasks: ocr, table, formula, chart"):
        task_prompt("text")
    with pytest.raises(ValueError, match="takes no prompt"):
        task_prompt("ocr", "read it")
