"""Florence-2 (DaViT + BART) and SIE's decode loop against transformers'
`Florence2ForConditionalGeneration` on the same tiny random weights: every weight loaded, the image
tokens and the encoder's states, greedy and beam tokens equal token for token, batch invariance under
continuous batching (requests joining mid-run, leaving the step they finish), a tied checkpoint with
scaled embeddings, and the layouts SIE does not read refused by name."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from PIL import Image

from florence2_fixtures import load_sie_florence2, tiny_florence2
from sie_engine.generation import DecodeLoop, GenerationRequest, GenerationSettings

CPU = torch.device("cpu")
TASKS = ["<OD>", "<CAPTION>", "<OCR_WITH_REGION>", "<CAPTION_TO_PHRASE_GROUNDING>a red car"]
# Two stop tokens (</s> and a location token the tiny decoder emits often), so sequences end at different steps
EOS = [2, 422]
BLANK = Image.new("RGB", (48, 64))  # the processor's ids do not depend on the image


@pytest.fixture(scope="module")
def florence(tmp_path_factory):
    root = tmp_path_factory.mktemp("florence2")
    reference, processor = tiny_florence2(root)
    model, tensors, report = load_sie_florence2(root)
    torch.manual_seed(1)
    pixels = torch.randn(len(TASKS), 3, 64, 48)
    image = processor.tokenizer.image_token_id
    # the processor's encoder input ids without the image placeholders: `<s>` prompt `</s>`
    input_ids = [processor(text=t, images=BLANK, return_tensors="pt").input_ids for t in TASKS]
    prompts = [[i for i in ids[0].tolist() if i != image] for ids in input_ids]
    with torch.no_grad():
        memory = model.encode(model.encode_images(pixels), prompts)
    generation = json.loads((root / "generation_config.json").read_text())
    return reference, model, tensors, report, pixels, input_ids, prompts, memory, generation, root


def reference_tokens(reference, pixels, input_ids, settings: GenerationSettings) -> list[int]:
    with torch.no_grad():
        out = reference.generate(pixel_values=pixels[None], input_ids=input_ids,
                                 max_new_tokens=settings.max_new_tokens, num_beams=settings.num_beams,
                                 early_stopping=settings.early_stopping, length_penalty=settings.length_penalty,
                                 eos_token_id=list(settings.eos_token_ids))
    assert out[0, 0].item() == 2  # the decoder's start token leads transformers' output, not SIE's
    tokens = out[0, 1:].tolist()
    assert tokens[0] == 0  # Florence-2's generation config forces <s> first
    assert 1 not in tokens  # one sequence is never padded
    return tokens


def test_every_weight_loaded(florence):
    _, _, tensors, report, *_ = florence
    # the encoder's own copy of the token table is counted as read: Florence-2 embeds with `shared`
    assert set(tensors) - report.loaded == set()


def test_image_tokens_and_encoder_equal_transformers(florence):
    reference, _, _, _, pixels, input_ids, _, memory, *_ = florence
    with torch.no_grad():
        features = reference.model.get_image_features(pixels).pooler_output
        assert features.shape == (len(TASKS), 49, 32)
        for i, ids in enumerate(input_ids):
            embeds = reference.get_input_embeddings()(ids)
            placeholders = (ids == reference.config.image_token_id)[..., None]
            embeds = embeds.masked_scatter(placeholders, features[i:i + 1])
            expected = reference.model.language_model.encoder(inputs_embeds=embeds).last_hidden_state[0]
            assert memory[i].shape == expected.shape
            assert (memory[i] - expected).abs().max().item() < 1e-5


# greedy, and Florence-2's own beam search (3 beams); the search variants are the shared decoder's
# (tests/engine/families/test_arch_donut.py runs them all)
@pytest.mark.parametrize("beams, early_stopping, length_penalty", [(1, False, 1.0), (3, True, 1.0), (2, "never", 2.0)])
def test_generate_equals_transformers(florence, beams, early_stopping, length_penalty):
    reference, model, _, _, pixels, input_ids, _, memory, generation, _ = florence
    settings = GenerationSettings.from_generation_config(
        generation, max_new_tokens=10, num_beams=beams, early_stopping=early_stopping,
        length_penalty=length_penalty, eos_token_id=EOS)
    loop = DecodeLoop(model, CPU, torch.float32)
    rows = [0, 1, 3]
    got = loop.run([GenerationRequest(memory[i], [2], settings) for i in rows])
    expected = [reference_tokens(reference, pixels[i], input_ids[i], settings) for i in rows]
    assert [g.tokens for g in got] == expected
    assert len({tuple(t) for t in expected}) > 1  # the answers depend on the image and the prompt
    assert loop.idle and loop.cache.rows == 0 and loop.cache.nbytes() == 0


def test_batch_invariance_with_joins_and_leaves(florence):
    """Greedy and beam requests in one running batch (memories of different lengths: the prompts
    differ), two joining after the others started: each sequence's tokens are the tokens it gets
    alone; a finished request's rows leave that step."""
    _, model, _, _, _, _, _, memory, generation, _ = florence
    greedy = GenerationSettings.from_generation_config(generation, max_new_tokens=12, num_beams=1, eos_token_id=EOS)
    beam = GenerationSettings.from_generation_config(generation, max_new_tokens=8, num_beams=3, early_stopping=True,
                                                     eos_token_id=EOS)
    requests = [GenerationRequest(memory[i], [2], greedy if i % 2 == 0 else beam) for i in range(len(TASKS))]
    assert len({r.memory.shape[0] for r in requests}) > 1
    alone = [DecodeLoop(model, CPU, torch.float32).run([r])[0].tokens for r in requests]

    loop = DecodeLoop(model, CPU, torch.float32)
    handles = [loop.add(requests[0]), loop.add(requests[1])]
    results: dict[int, list[int]] = {}
    for step in range(60):
        if step == 2:
            handles += [loop.add(requests[2]), loop.add(requests[3])]
        rows_before = loop.cache.rows
        finished = loop.step()
        results.update({h: r.tokens for h, r in finished.items()})
        joined = 4 if step in (0, 2) else 0  # each pair of joiners: 1 greedy row + 3 beam rows
        freed = sum(r.settings.num_beams for h, r in zip(handles, requests, strict=False) if h in finished)
        assert loop.cache.rows == rows_before + joined - freed
        if loop.idle:
            break
    assert [results[h] for h in handles] == alone


def test_tied_checkpoint_with_scaled_embeddings(tmp_path):
    """Florence-2's published checkpoints tie the decoder's table and the LM head to `shared`, and a
    BART may scale its token embeddings (never the image tokens)."""
    reference, processor = tiny_florence2(tmp_path, seed=3, text={"scale_embedding": True,
                                                                  "tie_word_embeddings": True})
    assert reference.lm_head.weight.data_ptr() == reference.model.language_model.shared.weight.data_ptr()
    model, tensors, report = load_sie_florence2(tmp_path)
    assert model.lm_head is None and model.language_model.decoder.embed_tokens is None
    assert set(tensors) - report.loaded == set()
    ids = processor(text="<OD>", images=BLANK, return_tensors="pt").input_ids
    prompt = [i for i in ids[0].tolist() if i != processor.tokenizer.image_token_id]
    torch.manual_seed(4)
    pixels = torch.randn(1, 3, 64, 48)
    with torch.no_grad():
        memory = model.encode(model.encode_images(pixels), [prompt])
    generation = json.loads((tmp_path / "generation_config.json").read_text())
    settings = GenerationSettings.from_generation_config(generation, max_new_tokens=8, num_beams=3)
    got = DecodeLoop(model, CPU, torch.float32).run([GenerationRequest(memory[0], [2], settings)])
    assert got[0].tokens == reference_tokens(reference, pixels[0], ids, settings)


def test_original_remote_code_layout_loads_the_same_model(florence, tmp_path_factory):
    """microsoft/Florence-2-* keep the original remote-code layout (other names, `dim_embed`, the projection
    as a raw matrix): the same weights rewritten so load to the same image tokens and encoder states."""
    from florence2_fixtures import to_original_layout

    _, model, _, _, pixels, _, prompts, memory, _, native = florence
    original = tmp_path_factory.mktemp("florence2_original")
    to_original_layout(native, original)
    legacy, tensors, report = load_sie_florence2(original)
    assert legacy.config.vision.original_layout and legacy.config.vision == \
        dataclasses.replace(model.config.vision, original_layout=True)
    assert set(tensors) - report.loaded == set()
    with torch.no_grad():
        image_tokens = legacy.encode_images(pixels)
        assert torch.equal(image_tokens, model.encode_images(pixels))
        again = legacy.encode(image_tokens, prompts)
    assert all(torch.equal(a, b) for a, b in zip(again, memory, strict=True))


def test_other_text_models_and_pooling_are_refused_by_name():
    from sie_engine.models.florence2.model import Florence2Config

    with pytest.raises(ValueError, match="text_config model_type 'mbart'"):
        Florence2Config.from_hf({"vision_config": {}, "text_config": {"model_type": "mbart", "vocab_size": 8}})
    with pytest.raises(ValueError, match="image_feature_source"):
        Florence2Config.from_hf({"vision_config": {"dim_embed": [8], "image_feature_source": ["last_frame"]},
                                 "text_config": {"vocab_size": 8}})


def test_florence2_directory_gets_a_generate_card_prompted_by_task(tmp_path):
    from sie_engine.local_card import card_from_local_dir

    config = {"architectures": ["Florence2ForConditionalGeneration"], "model_type": "florence2",
              "vision_config": {}, "text_config": {"vocab_size": 8, "d_model": 1024}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"size": {"height": 768, "width": 768}}))
    card = card_from_local_dir("tiny-florence2", tmp_path)
    assert (card.family, card.outputs, card.image_size, card.max_seq_len) == ("florence2", ("generate",), 768, 1024)
    assert card.options["generate"] == {"task_prompt": "{task}", "max_new_tokens": 1023}
