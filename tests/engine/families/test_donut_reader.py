"""Donut end to end against transformers on the same tiny weights and processor: pages through
DonutImageProcessor (PIL), the encoder, the decode loop (all pages in one running batch) and
Donut's documented post-processing, equal to `DonutProcessor` + `VisionEncoderDecoderModel.generate`
+ `batch_decode` + `DonutProcessor.token2json` page by page; and token2json itself on crafted
sequences (nested fields, lists, class tokens, unclosed tags, plain text)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from PIL import Image

from donut_fixtures import load_sie_donut, tiny_donut, tiny_donut_processor
from sie_engine.models.donut.reader import DonutReader
from sie_engine.models.donut.token2json import token2json

CPU = torch.device("cpu")
PROMPTS = ["<s_cord-v2>", "<s_docvqa><s_question> what is the total ? </s_question><s_answer>", "<s_rvlcdip>"]


def _page(width: int, height: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


# wide (rotated by align_long_axis), tall and large (resized, thumbnailed), small (padded only)
PAGES = [_page(90, 40, 0), _page(50, 120, 1), _page(20, 30, 2)]


@pytest.fixture(scope="module")
def donut(tmp_path_factory):
    root = tmp_path_factory.mktemp("donut_reader")
    reference = tiny_donut(root)
    processor = tiny_donut_processor(root)
    model, _, _ = load_sie_donut(root)
    return root, reference, processor, DonutReader(model, root, CPU, torch.float32)


def reference_answer(reference, processor, page, prompt, **generate):
    pixels = processor(images=page, return_tensors="pt").pixel_values
    ids = processor.tokenizer(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        out = reference.generate(pixel_values=pixels, decoder_input_ids=ids, **generate)
    sequence = processor.batch_decode(out)[0]
    sequence = sequence.replace(processor.tokenizer.eos_token, "").replace(processor.tokenizer.pad_token, "")
    sequence = re.sub(r"<.*?>", "", sequence, count=1).strip()
    return out[0, ids.shape[1]:].tolist(), sequence, processor.token2json(sequence)


def test_pixels_equal_donut_image_processor(donut):
    _, _, processor, reader = donut
    expected = processor(images=PAGES, return_tensors="pt").pixel_values
    got = reader.pixels(PAGES)
    assert got.shape == expected.shape == (3, 3, 64, 48)
    assert (got - expected).abs().max().item() < 1e-6


@pytest.mark.parametrize("beams", [1, 3])
def test_answers_equal_transformers(donut, beams):
    _, reference, processor, reader = donut
    generate = dict(max_new_tokens=12, num_beams=beams, bad_words_ids=[[processor.tokenizer.unk_token_id]])
    settings = reader.settings(**generate)
    answers = reader.read(PAGES, PROMPTS, settings)
    for page, prompt, answer in zip(PAGES, PROMPTS, answers, strict=True):
        tokens, text, data = reference_answer(reference, processor, page, prompt, **generate)
        assert answer.tokens == tokens
        assert (answer.text, answer.data) == (text, data)


TOKEN2JSON_CASES = [
    "<s_menu><s_nm> coffee </s_nm><s_price> 3.50 </s_price><sep/><s_nm> tea </s_nm><s_price> 2 </s_price></s_menu>",
    "<s_menu><s_nm> coffee </s_nm><s_price> 3.50 </s_price></s_menu><s_total> 3.50 </s_total>",
    "<s_question> what is the total ? </s_question><s_answer> 3.50 </s_answer>",
    "<s_class><invoice/></s_class>",
    "<s_nm> a <sep/> b <sep/> c </s_nm>",
    "<s_menu><s_nm> unclosed </s_menu>",
    "<s_nm> never closed",
    "plain words only",
    "",
]


@pytest.mark.parametrize("sequence", TOKEN2JSON_CASES)
def test_token2json_equals_donut_processor(donut, sequence):
    _, _, processor, reader = donut
    added = processor.tokenizer.get_added_vocab()
    assert token2json(sequence, reader.added_vocab) == processor.token2json(sequence, added_vocab=added)


def test_processor_size_other_than_the_encoder_is_refused(tmp_path):
    tiny_donut(tmp_path, image_size=[32, 32])
    tiny_donut_processor(tmp_path)
    model, _, _ = load_sie_donut(tmp_path)
    with pytest.raises(ValueError, match="encoder's image_size is \\[32, 32\\]"):
        DonutReader(model, tmp_path, CPU, torch.float32)
