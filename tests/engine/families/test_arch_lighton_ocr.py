"""LightOnOCR (Pixtral vision tower + patch merger + Qwen3 decoder) and SIE's decoder-only decode
path against transformers on the same tiny random weights and processor: every weight loaded, the
page preparation (PixtralImageProcessor's pixels, the chat prompt with one image token per
feature), each page's image features (atol 1e-4), greedy and beam tokens equal to
`LightOnOcrForConditionalGeneration.generate` token for token, the decoded answer equal to the
processor's; batch invariance under continuous batching (pages of other sizes joining at other
steps, a cancelled page's rows freed at once) and the rotary position offset of GenerationRequest
(a whole prompt shifted, its generated tokens offset alike: the same tokens, RoPE being relative)."""

from __future__ import annotations

import dataclasses
import io
import re

import numpy as np
import pytest
import torch
from PIL import Image

from lighton_ocr_fixtures import IMAGE_TOKEN, load_sie_lighton_ocr, tiny_lighton_ocr, tiny_lighton_ocr_processor
from sie_engine.generation import DecodeLoop, GenerationRequest, GenerationSettings
from sie_engine.models.lighton_ocr.serving import LightOnOcrGeneration, LightOnOcrInputs, generation_config
from sie_engine.validation import Limits

CPU = torch.device("cpu")
EOS = [3, 40]  # <|im_end|> and a word the tiny decoder emits often: pages stop at different steps


def _page(width: int, height: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


# resized within 40 px (tall, wide), kept (small; 12 x 20: a ragged last patch row for the 2 x 2 merge)
PAGES = [_page(30, 50, 0), _page(70, 20, 1), _page(20, 12, 2), _page(36, 36, 3)]


def _png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def lighton(tmp_path_factory):
    root = tmp_path_factory.mktemp("lighton_ocr")
    reference = tiny_lighton_ocr(root)
    processor = tiny_lighton_ocr_processor(root)
    model, tensors, report = load_sie_lighton_ocr(root)
    inputs = LightOnOcrInputs(root, 256)
    head = LightOnOcrGeneration(model, inputs.hf, root, {"task_prompt": "{image}", "max_new_tokens": 10}, "tiny",
                                torch.float32, inputs.images.image_tokens)
    prompt = inputs.prompt_ids("{image}")
    pixels = inputs.images.encode_images([_png(p) for p in PAGES], [f"items[{i}]" for i in range(len(PAGES))],
                                         Limits())
    pages = [torch.from_numpy(p) for p in pixels]
    with torch.no_grad():
        features = model.image_features(pages)
    return root, reference, processor, model, tensors, report, head, prompt, pages, features


def requests(lighton, settings: GenerationSettings, which=None, shift: int = 0) -> list[GenerationRequest]:
    *_, model, _, _, head, prompt, pages, features = lighton
    out = []
    for i in which if which is not None else range(len(pages)):
        ids = head.page_ids(prompt, pages[i].shape[-2], pages[i].shape[-1])
        with torch.no_grad():
            embeddings = model.page_prompt(torch.tensor(ids), features[i])
        positions = (torch.arange(len(ids)) + shift)[None] if shift else None
        out.append(GenerationRequest(None, ids, settings, prompt_embeddings=embeddings, prompt_positions=positions,
                                     position_offset=shift))
    return out


def reference_inputs(processor, page: Image.Image):
    conversation = [{"role": "user", "content": [{"type": "image"}]}]
    text = processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    return processor(images=[page], text=[text], return_tensors="pt")


def reference_tokens(reference, processor, page, settings: GenerationSettings) -> list[int]:
    inputs = reference_inputs(processor, page)
    with torch.no_grad():
        out = reference.generate(**inputs, max_new_tokens=settings.max_new_tokens, num_beams=settings.num_beams,
                                 do_sample=False, early_stopping=settings.early_stopping,
                                 length_penalty=settings.length_penalty, eos_token_id=list(settings.eos_token_ids),
                                 pad_token_id=0)
    tokens = out[0, inputs["input_ids"].shape[1]:].tolist()
    assert 0 not in tokens  # one sequence is never padded
    return tokens


def settings_for(lighton, **fields) -> GenerationSettings:
    root = lighton[0]
    return GenerationSettings.from_generation_config(generation_config(root), **{"max_new_tokens": 10,
                                                                                 "eos_token_id": EOS, **fields})


def test_every_weight_loaded(lighton):
    _, _, _, _, tensors, report, *_ = lighton
    assert set(tensors) == report.loaded


def test_pages_and_prompts_equal_the_processor(lighton):
    _, _, processor, _, _, _, head, prompt, pages, _ = lighton
    for image, page in zip(PAGES, pages, strict=True):
        expected = reference_inputs(processor, image)
        height, width = (int(v) for v in expected["image_sizes"][0])
        assert tuple(page.shape) == (3, height, width)
        assert torch.allclose(page, expected["pixel_values"][0, :, :height, :width], atol=1e-6)
        assert head.page_ids(prompt, height, width) == expected["input_ids"][0].tolist()


def test_image_features_equal_transformers(lighton):
    _, reference, processor, _, _, _, _, _, _, features = lighton
    for image, got in zip(PAGES, features, strict=True):
        inputs = reference_inputs(processor, image)
        with torch.no_grad():
            expected = reference.model.get_image_features(pixel_values=inputs["pixel_values"],
                                                          image_sizes=inputs["image_sizes"]).pooler_output[0]
        assert got.shape == expected.shape
        assert (got - expected).abs().max().item() < 1e-4


@pytest.mark.parametrize("beams, early_stopping, length_penalty", [(1, False, 1.0), (3, True, 1.0), (2, "never", 2.0)])
def test_generate_equals_transformers(lighton, beams, early_stopping, length_penalty):
    _, reference, processor, model, *_ = lighton
    settings = settings_for(lighton, num_beams=beams, early_stopping=early_stopping, length_penalty=length_penalty)
    loop = DecodeLoop(model, CPU, torch.float32)
    got = loop.run(requests(lighton, settings))  # every page in one running batch
    expected = [reference_tokens(reference, processor, page, settings) for page in PAGES]
    assert [g.tokens for g in got] == expected
    assert len({len(t) for t in expected}) > 1 or beams > 1  # some stop early, others run to the limit
    assert loop.idle and loop.cache.rows == 0 and loop.cache.nbytes() == 0


def test_answer_is_the_processor_decoding(lighton):
    _, reference, processor, _, _, _, head, prompt, _, _ = lighton
    settings = settings_for(lighton, eos_token_id=[3])
    loop = DecodeLoop(head.model, CPU, torch.float32)
    texts = []
    for request, page in zip(requests(lighton, settings), PAGES, strict=True):
        tokens = loop.run([request])[0].tokens
        expected = processor.decode(reference_tokens(reference, processor, page, settings), skip_special_tokens=True)
        assert head.answer(prompt, tokens, None, None).text == expected
        texts.append(expected)
    assert sum(bool(t) for t in texts) >= 3  # words (a page may stop at once: an empty answer)


def test_batch_invariance_with_joins_leaves_and_cancel(lighton):
    """Pages of four sizes, greedy and beam, joining a running batch at steps 0, 2 and 3, one
    cancelled mid-run: each page's tokens equal its own run alone."""
    model = lighton[3]
    greedy, beams = settings_for(lighton), settings_for(lighton, num_beams=2)
    alone = [DecodeLoop(model, CPU, torch.float32).run(requests(lighton, s, [i]))[0].tokens
             for i, s in ((0, greedy), (3, beams), (2, greedy))]
    assert len(DecodeLoop(model, CPU, torch.float32).run(requests(lighton, greedy, [1]))[0].tokens) > 4
    loop = DecodeLoop(model, CPU, torch.float32)
    first = loop.add(requests(lighton, greedy, [0])[0])
    doomed = loop.add(requests(lighton, greedy, [1])[0])  # still running when it is cancelled
    results = {}
    results.update(loop.step())
    results.update(loop.step())
    second = loop.add(requests(lighton, beams, [3])[0])
    results.update(loop.step())
    rows_before = loop.cache.rows
    loop.cancel(doomed)  # its row freed at once, before another token
    assert loop.cache.rows == rows_before - 1
    third = loop.add(requests(lighton, greedy, [2])[0])
    while not loop.idle:
        results.update(loop.step())
    assert doomed not in results
    assert [results[h].tokens for h in (first, second, third)] == [alone[0], alone[1], alone[2]]
    assert loop.cache.nbytes() == 0


def test_position_offset_shifts_prompt_and_generated_alike(lighton):
    """A prompt's position ids shifted by 7 and its generated tokens offset by 7: the same tokens
    (RoPE scores depend on position differences only), so the offset reaches every step."""
    model = lighton[3]
    settings = settings_for(lighton)
    plain = DecodeLoop(model, CPU, torch.float32).run(requests(lighton, settings, [0, 1]))
    shifted = DecodeLoop(model, CPU, torch.float32).run(requests(lighton, settings, [0, 1], shift=7))
    assert [r.tokens for r in shifted] == [r.tokens for r in plain]


def test_tied_lm_head_checkpoint(tmp_path):
    """A checkpoint whose LM head is its token embeddings (tie_word_embeddings, LightOnOCR's
    default) loads without one and generates as transformers does."""
    reference = tiny_lighton_ocr(tmp_path, seed=3, tie=True)
    model, tensors, report = load_sie_lighton_ocr(tmp_path)
    assert model.lm_head is None and set(tensors) == report.loaded
    torch.manual_seed(0)
    page = torch.randn(3, 16, 24)
    ids = [2, 11] + [IMAGE_TOKEN] * 6 + [3, 2, 12]
    with torch.no_grad():
        embeddings = model.page_prompt(torch.tensor(ids), model.image_features([page])[0])
        expected = reference.generate(input_ids=torch.tensor([ids]), pixel_values=page[None],
                                      image_sizes=torch.tensor([[16, 24]]), max_new_tokens=8, do_sample=False,
                                      eos_token_id=[3], pad_token_id=0)[0, len(ids):].tolist()
    settings = GenerationSettings.from_generation_config({}, max_new_tokens=8, eos_token_id=[3])
    got = DecodeLoop(model, CPU, torch.float32).run([GenerationRequest(None, ids, settings,
                                                                       prompt_embeddings=embeddings)])
    assert got[0].tokens == expected


def test_a_card_less_directory_reads_pages_alone(lighton):
    import json

    from sie_engine.models import family_for

    root = lighton[0]
    config = json.loads((root / "config.json").read_text())
    card = family_for(config).local_card("tiny", root, config)
    assert card.family == "lighton_ocr" and card.outputs == ("generate",) and card.image_size == 40
    assert card.options["generate"] == {"task_prompt": "{image}", "max_new_tokens": 128}


def test_malformed_decoder_only_requests_are_refused(lighton):
    model = lighton[3]
    settings = settings_for(lighton)
    (good,) = requests(lighton, settings, [2])
    loop = DecodeLoop(model, CPU, torch.float32)
    p = len(good.prompt)
    for bad, words in ((dataclasses.replace(good, memory=torch.zeros(4, 32)), "no encoder memory"),
                       (dataclasses.replace(good, prompt_embeddings=good.prompt_embeddings[1:]), f"for {p} prompt"),
                       (dataclasses.replace(good, prompt_positions=torch.zeros(3, p, dtype=torch.long)),
                        f"not [1, {p}]")):
        with pytest.raises(ValueError, match=re.escape(words)):
            loop.add(bad)
    assert loop.idle
