"""Florence-2 end to end against transformers on the same tiny weights and processor: images through
the CLIP image processor (PIL), the task prompts as Florence2Processor builds them, the tower, the
encoder, the decode loop (all images in one running batch, Florence-2's 3 beams) and
`post_process_generation` on the generated sequence, equal to `Florence2Processor` +
`Florence2ForConditionalGeneration.generate` + `batch_decode` + `post_process_generation` image by
image; and the post-processing itself on crafted sequences of every task's kind (boxes, quad boxes,
polygons, grounding with banned phrases) against the processor's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from florence2_fixtures import load_sie_florence2, tiny_florence2
from sie_engine.models.florence2 import postprocess
from sie_engine.models.florence2.reader import Florence2Reader
from sie_engine.models.florence2.tasks import PROMPTS_WITH_INPUT, TASKS, task_prompt

CPU = torch.device("cpu")


def _image(width: int, height: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


# wide, tall and small images: boxes come back in each one's own pixels
IMAGES = [_image(90, 40, 0), _image(50, 120, 1), _image(20, 30, 2), _image(640, 480, 3)]
REQUESTS = [("<OD>", None), ("<OCR_WITH_REGION>", None), ("<REGION_PROPOSAL>", None),
            ("<CAPTION_TO_PHRASE_GROUNDING>", "a red car")]


@pytest.fixture(scope="module")
def florence(tmp_path_factory):
    root = tmp_path_factory.mktemp("florence2_reader")
    reference, processor = tiny_florence2(root)
    model, _, _ = load_sie_florence2(root)
    return root, reference, processor, Florence2Reader(model, root, CPU, torch.float32)


def reference_answer(reference, processor, image, task, text, **generate):
    inputs = processor(text=task + (text or ""), images=image, return_tensors="pt")
    with torch.no_grad():
        out = reference.generate(**inputs, **generate)
    decoded = processor.batch_decode(out, skip_special_tokens=False)[0]
    answer = processor.post_process_generation(decoded, task=task, image_size=image.size)[task]
    return out[0, 1:].tolist(), answer


def test_pixels_equal_the_image_processor(florence):
    _, _, processor, reader = florence
    expected = processor.image_processor(images=IMAGES, return_tensors="pt").pixel_values
    got = reader.pixels(IMAGES)
    assert got.shape == expected.shape == (4, 3, 64, 48)
    assert (got - expected).abs().max().item() < 1e-6


@pytest.mark.parametrize("task", TASKS)
def test_prompt_ids_equal_the_processor(florence, task):
    _, _, processor, reader = florence
    text = "a blue sign" if task in PROMPTS_WITH_INPUT else None
    ids = processor(text=task + (text or ""), images=IMAGES[0]).input_ids[0]
    assert reader.prompt_ids(task, text) == [i for i in ids if i != processor.tokenizer.image_token_id]


def test_answers_equal_transformers(florence):
    """Florence-2's published generation config (3 beams stopping early, <s> forced first, no trigram
    twice) on four tasks and four images in one running batch."""
    _, reference, processor, reader = florence
    generate = dict(max_new_tokens=14)
    settings = reader.settings(**generate)
    assert (settings.num_beams, settings.no_repeat_ngram_size, settings.forced_bos_token_id) == (3, 3, 0)
    tasks, texts = [t for t, _ in REQUESTS], [x for _, x in REQUESTS]
    answers = reader.read(IMAGES, tasks, settings, texts)
    boxes = 0
    for image, (task, text), answer in zip(IMAGES, REQUESTS, answers, strict=True):
        tokens, expected = reference_answer(reference, processor, image, task, text, **generate)
        assert answer.tokens == tokens
        assert answer.answer == expected
        assert answer.regions == postprocess.regions(task, expected)
        boxes += len(answer.regions)
    assert boxes > 0  # the tiny decoder's location tokens made boxes to compare


def test_text_task_answers_its_text(florence):
    _, reference, processor, reader = florence
    [answer] = reader.read([IMAGES[1]], ["<CAPTION>"], reader.settings(max_new_tokens=6, num_beams=1))
    _, expected = reference_answer(reference, processor, IMAGES[1], "<CAPTION>", None, max_new_tokens=6,
                                   num_beams=1)
    assert answer.text == answer.answer == expected and answer.regions == []


SIZE = (640, 480)
CRAFTED = [
    ("<OD>", "</s><s>car<loc_52><loc_333><loc_932><loc_774>dog<loc_1><loc_2><loc_3><loc_4><loc_5><loc_6><loc_7>"
             "<loc_8></s>"),
    ("<DENSE_REGION_CAPTION>", "<s>a red car<loc_0><loc_0><loc_999><loc_999>  sign é<loc_10><loc_20><loc_30>"
                               "<loc_40></s><pad>"),
    ("<REGION_PROPOSAL>", "</s><s><loc_52><loc_333><loc_932><loc_774><loc_1><loc_2><loc_3><loc_4></s>"),
    ("<OCR_WITH_REGION>", "</s><s>STOP<loc_100><loc_200><loc_300><loc_200><loc_300><loc_400><loc_100><loc_400>"
                          "exit 12<loc_5><loc_6><loc_7><loc_8><loc_9><loc_10><loc_11><loc_12></s>"),
    ("<OCR>", "</s><s>STOP exit 12</s>"),
    ("<CAPTION_TO_PHRASE_GROUNDING>", "</s><s>a red car<loc_52><loc_333><loc_932><loc_774><loc_1><loc_2><loc_3>"
                                      "<loc_4>it<loc_5><loc_6><loc_7><loc_8>the tree<loc_9><loc_9><loc_99>"
                                      "<loc_99></s>"),
    ("<REFERRING_EXPRESSION_SEGMENTATION>", "</s><s><loc_10><loc_20><loc_30><loc_40><loc_50><loc_60><loc_70>"
                                            "<sep><loc_1><loc_2><loc_3><loc_4></s>"),
    ("<REGION_TO_SEGMENTATION>", "</s><s><poly><loc_10><loc_20><loc_30><loc_40><loc_50><loc_60></poly></s>"),
    ("<OPEN_VOCABULARY_DETECTION>", "</s><s>car<loc_52><loc_333><loc_932><loc_774></s>"),
    ("<OPEN_VOCABULARY_DETECTION>", "</s><s>car<poly><loc_10><loc_20><loc_30><loc_40><loc_50><loc_60></poly>"
                                    "</s>"),
    ("<REGION_TO_CATEGORY>", "</s><s>car<loc_52><loc_333><loc_932><loc_774></s>"),
    ("<OD>", "</s><s>no boxes here</s>"),
]


@pytest.mark.parametrize("task, text", CRAFTED)
def test_post_processing_equals_the_processor(florence, task, text):
    _, _, processor, reader = florence
    expected = processor.post_process_generation(text, task=task, image_size=SIZE)[task]
    assert postprocess.post_process_generation(text, task, SIZE, reader.post_config) == expected


def test_regions_carry_boxes_quad_boxes_and_polygons(florence):
    _, _, processor, reader = florence
    ocr = processor.post_process_generation(CRAFTED[3][1], task="<OCR_WITH_REGION>", image_size=SIZE)
    [stop, _] = postprocess.regions("<OCR_WITH_REGION>", ocr["<OCR_WITH_REGION>"])
    quad = ocr["<OCR_WITH_REGION>"]["quad_boxes"][0]
    assert stop.text == stop.label == "STOP" and stop.quad_box == quad
    assert stop.box == [min(quad[0::2]), min(quad[1::2]), max(quad[0::2]), max(quad[1::2])]
    seg = processor.post_process_generation(CRAFTED[7][1], task="<REGION_TO_SEGMENTATION>", image_size=SIZE)
    [region] = postprocess.regions("<REGION_TO_SEGMENTATION>", seg["<REGION_TO_SEGMENTATION>"])
    assert region.polygons == seg["<REGION_TO_SEGMENTATION>"]["polygons"][0]
    assert region.to_dict().keys() == {"label", "box", "polygons"}


def test_task_prompt_refuses_what_the_task_does_not_take():
    with pytest.raises(ValueError, match="unknown Florence-2 task '<DETECT>'"):
        task_prompt("<DETECT>")
    with pytest.raises(ValueError, match="needs a text input"):
        task_prompt("<CAPTION_TO_PHRASE_GROUNDING>")
    with pytest.raises(ValueError, match="takes no text input"):
        task_prompt("<OD>", "a car")
    assert task_prompt("<REGION_TO_CATEGORY>", "<loc_1><loc_2><loc_3><loc_4>") == \
        "What is the region <loc_1><loc_2><loc_3><loc_4>?"


def test_processor_image_tokens_other_than_the_tower_are_refused(florence, tmp_path):
    import json
    import shutil

    root = florence[0]
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "generation_config.json"):
        shutil.copy(root / name, tmp_path / name)
    config = json.loads((root / "processor_config.json").read_text())
    config["image_processor"]["image_seq_length"] = 577
    (tmp_path / "processor_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="give 49 image tokens, the processor's image_seq_length is 577"):
        Florence2Reader(florence[3].model, tmp_path, CPU, torch.float32)


def test_original_layout_reads_the_same(florence, tmp_path):
    """The original remote-code layout (microsoft/Florence-2-*), whose processor carries no
    post_processor_config (the conversion script's, banned grounding words and all, stands in), reads
    the same answers from the same weights."""
    import json

    from florence2_fixtures import to_original_layout

    root, _, _, reader = florence
    to_original_layout(root, tmp_path)
    config = json.loads((tmp_path / "processor_config.json").read_text())
    del config["post_processor_config"]
    (tmp_path / "processor_config.json").write_text(json.dumps(config))
    model, _, _ = load_sie_florence2(tmp_path)
    original = Florence2Reader(model, tmp_path, CPU, torch.float32)
    assert original.post_config == postprocess.DEFAULT_CONFIG
    settings = reader.settings(max_new_tokens=8)
    tasks = ["<OD>", "<OCR_WITH_REGION>"]
    expected = [(a.tokens, a.answer) for a in reader.read(IMAGES[:2], tasks, settings)]
    assert [(a.tokens, a.answer) for a in original.read(IMAGES[:2], tasks, settings)] == expected


def test_a_card_prompt_is_by_task_or_a_fine_tunes_own_task_token():
    from sie_engine.models.florence2.serving import own_task_token

    assert own_task_token("{task}", "c") is None
    assert own_task_token("<DocVQA>{prompt}", "c") == "<DocVQA>"
    for bad in ("Question: {prompt}", "<DocVQA>", "<DocVQA>{prompt} answer:", "{prompt}"):
        with pytest.raises(ValueError, match="<DocVQA>\\{prompt\\}"):
            own_task_token(bad, "c")
