"""GLM-OCR (CogViT vision tower + GLM decoder) and SIE's decode loop against transformers on the same
tiny random weights: every weight loaded, the vision tower's image features of pages packed at their
own sizes, the prefill's logits at every prompt position and the logits of cached decode steps
(float32, 1e-4), `generate`'s tokens equal token for token (greedy and beam), and batch invariance:
a page's tokens are the same alone and in a running batch with pages of other sizes joining it (the
checks: page_vlm_checks.py)."""

from __future__ import annotations

import json

import pytest

import page_vlm_checks as checks
from glm_ocr_fixtures import load_sie_glm_ocr, tiny_glm_ocr
from image_fixtures import noise_page

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


def test_every_weight_loaded(glm):
    _, _, tensors, report, *_ = glm
    assert set(tensors) == report.loaded


def test_image_features_of_packed_pages_equal_transformers(glm):
    reference, model, _, _, pages, *_ = glm
    checks.check_image_features(reference, model, pages)


def test_rope_index_equals_transformers(glm):
    reference, model, _, _, pages, *_ = glm
    checks.check_rope_index(reference, model, pages)


def test_input_preparation_equals_the_processor(glm, tmp_path):
    """SIE's prompt (the chat template, its image placeholder repeated per feature) and pixels
    (Glm46VImageProcessor's patches, each page its own grid) against Glm46VProcessor's."""
    from sie_engine.models.glm_ocr.serving import GlmOcrInputs

    _, model, _, _, pages, _, root = glm
    checks.check_input_preparation(GlmOcrInputs(root, 512), model, pages,
                                   [page(size, i) for i, size in enumerate(SIZES)], TASKS, tmp_path, patch=4)


def test_prefill_and_cached_step_logits_equal_transformers(glm):
    reference, model, _, _, pages, generation, _ = glm
    checks.check_prefill_and_cached_steps(reference, model, pages[:2], generation)


@pytest.mark.parametrize("beams", [1, 3])
def test_generate_equals_transformers(glm, beams):
    reference, model, _, _, pages, generation, _ = glm
    checks.check_generate(reference, model, pages, generation, beams, EOS)


def test_batch_invariance_with_pages_of_other_sizes_joining(glm):
    _, model, _, _, pages, generation, _ = glm
    checks.check_batch_invariance(model, pages, generation, EOS)


def test_config_refusals():
    from sie_engine.models.glm_ocr.model import GlmOcrConfig

    with pytest.raises(ValueError, match="not a GLM-OCR"):
        GlmOcrConfig.from_hf({"model_type": "glm4v"})
    with pytest.raises(ValueError, match="mrope_section"):
        GlmOcrConfig.from_hf({"model_type": "glm_ocr", "text_config": {
            "head_dim": 8, "rope_parameters": {"rope_type": "default", "rope_theta": 10000,
                                               "mrope_section": [1, 1, 1]}}})
