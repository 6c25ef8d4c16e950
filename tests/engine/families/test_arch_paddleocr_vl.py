"""PaddleOCR-VL (SigLIP-style vision encoder + projector + ERNIE-4.5 decoder) and SIE's decode loop
against transformers on the same tiny random weights: every weight loaded, the image features of
pages packed at their own sizes, the M-RoPE positions, the input preparation, the prefill's logits
at every prompt position and the logits of cached decode steps (float32, 1e-4), `generate`'s tokens
equal token for token (greedy and beam), and batch invariance: a page's tokens are the same alone
and in a running batch with pages of other sizes joining it (the checks: page_vlm_checks.py)."""

from __future__ import annotations

import json

import pytest

import page_vlm_checks as checks
from image_fixtures import noise_page
from paddleocr_vl_fixtures import load_sie_paddleocr_vl, tiny_paddleocr_vl
from sie_engine.models.paddleocr_vl.tasks import task_prompt

# a stop token the tiny decoder emits often: sequences end at different steps
EOS = [101]
# (height, width) of the pages: each resizes to its own grid of patches (the smallest is scaled up)
SIZES = [(27, 45), (40, 24), (60, 60), (12, 30)]
TASKS = ["ocr", "table", "formula", "chart"]


def page(size: tuple[int, int], seed: int):
    return noise_page(size[1], size[0], seed)


@pytest.fixture(scope="module")
def paddle(tmp_path_factory):
    root = tmp_path_factory.mktemp("paddleocr_vl")
    reference, processor = tiny_paddleocr_vl(root)
    model, tensors, report = load_sie_paddleocr_vl(root)
    pages = []
    for i, (size, task) in enumerate(zip(SIZES, TASKS, strict=True)):
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": task_prompt(task)}]}]
        text = processor.apply_chat_template(messages, add_generation_prompt=True)
        pages.append(processor(text=[text], images=[page(size, i)], return_tensors="pt"))
    generation = json.loads((root / "generation_config.json").read_text())
    return reference, model, tensors, report, pages, generation, root


def test_every_weight_loaded(paddle):
    _, model, tensors, report, *_ = paddle
    assert set(tensors) == report.loaded
    assert model.lm_head is None  # tied: the LM head is the token table, as transformers ties it


def test_image_features_of_packed_pages_equal_transformers(paddle):
    reference, model, _, _, pages, *_ = paddle
    checks.check_image_features(reference, model, pages)


def test_rope_index_equals_transformers(paddle):
    reference, model, _, _, pages, *_ = paddle
    checks.check_rope_index(reference, model, pages)


def test_input_preparation_equals_the_processor(paddle, tmp_path):
    """SIE's prompt (the chat template, its image placeholder repeated per feature) and pixels
    (PaddleOCRVLImageProcessor's patches, each page its own grid) against PaddleOCRVLProcessor's."""
    from sie_engine.models.paddleocr_vl.serving import PaddleOcrInputs

    _, model, _, _, pages, _, root = paddle
    checks.check_input_preparation(PaddleOcrInputs(root, 512), model, pages,
                                   [page(size, i) for i, size in enumerate(SIZES)],
                                   [task_prompt(t) for t in TASKS], tmp_path, patch=4)


def test_prefill_and_cached_step_logits_equal_transformers(paddle):
    reference, model, _, _, pages, generation, _ = paddle
    checks.check_prefill_and_cached_steps(reference, model, pages[:2], generation)


@pytest.mark.parametrize("beams", [1, 3])
def test_generate_equals_transformers(paddle, beams):
    reference, model, _, _, pages, generation, _ = paddle
    checks.check_generate(reference, model, pages, generation, beams, EOS)


def test_batch_invariance_with_pages_of_other_sizes_joining(paddle):
    _, model, _, _, pages, generation, _ = paddle
    checks.check_batch_invariance(model, pages, generation, EOS)


def test_config_refusals():
    from sie_engine.models.paddleocr_vl.model import PaddleOcrVlConfig

    with pytest.raises(ValueError, match="not a PaddleOCR-VL"):
        PaddleOcrVlConfig.from_hf({"model_type": "qwen2_vl"})
    with pytest.raises(ValueError, match="mrope_section"):
        PaddleOcrVlConfig.from_hf({"model_type": "paddleocr_vl", "text_config": {
            "head_dim": 8, "rope_parameters": {"rope_type": "default", "rope_theta": 10000,
                                               "mrope_section": [1, 1, 1]}}})


def test_tasks_refuse_a_prompt_and_unknown_tasks():
    assert task_prompt("chart") == "Chart Recognition:"
    with pytest.raises(ValueError, match="tasks: ocr, table, formula, chart"):
        task_prompt("text")
    with pytest.raises(ValueError, match="takes no prompt"):
        task_prompt("ocr", "read it")
