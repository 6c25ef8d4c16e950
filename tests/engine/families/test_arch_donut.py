"""Donut (DonutSwin + MBart) and SIE's decode loop against transformers' `generate` on the same
tiny random weights: every weight loaded, the encoder's states, greedy and beam tokens equal token
for token, and batch invariance under continuous batching (requests joining mid-run, leaving the
step they finish)."""

from __future__ import annotations

import json

import pytest
import torch

from donut_fixtures import load_sie_donut, tiny_donut
from sie_engine.generation import DecodeLoop, GenerationRequest, GenerationSettings

CPU = torch.device("cpu")
# Two stop tokens (2 and a token the tiny decoder emits often), so sequences end at different steps
EOS = [2, 39]
PROMPTS = [[0, 5], [0, 7, 9, 11], [0, 3], [0, 21, 4]]


@pytest.fixture(scope="module")
def donut(tmp_path_factory):
    root = tmp_path_factory.mktemp("donut")
    reference = tiny_donut(root)
    model, tensors, report = load_sie_donut(root)
    torch.manual_seed(1)
    pixels = torch.randn(len(PROMPTS), 3, 64, 48)
    with torch.no_grad():
        memory = model.encode_images(pixels)
    generation = json.loads((root / "generation_config.json").read_text())
    return reference, model, tensors, report, pixels, memory, generation


def reference_tokens(reference, pixels, prompt, settings: GenerationSettings) -> list[int]:
    with torch.no_grad():
        out = reference.generate(pixel_values=pixels[None], decoder_input_ids=torch.tensor([prompt]),
                                 max_new_tokens=settings.max_new_tokens, num_beams=settings.num_beams,
                                 early_stopping=settings.early_stopping, length_penalty=settings.length_penalty,
                                 eos_token_id=list(settings.eos_token_ids))
    tokens = out[0, len(prompt):].tolist()
    # a finished sequence is padded (pad id 1) to the batch's longest; one sequence is never padded
    assert 1 not in tokens
    return tokens


def test_every_weight_loaded(donut):
    _, _, tensors, report, *_ = donut
    unused = set(tensors) - report.loaded
    # the relative position index is a buffer SIE rebuilds rather than loads (same arithmetic)
    assert unused and all(name.endswith("relative_position_index") for name in unused)


def test_encoder_equals_transformers(donut):
    reference, _, _, _, pixels, memory, _ = donut
    with torch.no_grad():
        expected = reference.encoder(pixel_values=pixels).last_hidden_state
    assert memory.shape == expected.shape
    assert (memory - expected).abs().max().item() < 1e-4


@pytest.mark.parametrize("beams, early_stopping, length_penalty", [
    (1, False, 1.0), (3, True, 1.0), (2, "never", 2.0), (3, False, -0.5)])
def test_generate_equals_transformers(donut, beams, early_stopping, length_penalty):
    reference, model, _, _, pixels, memory, generation = donut
    settings = GenerationSettings.from_generation_config(
        generation, max_new_tokens=8, num_beams=beams, early_stopping=early_stopping,
        length_penalty=length_penalty, eos_token_id=EOS)
    loop = DecodeLoop(model, CPU, torch.float32)
    prompts = PROMPTS[:3]
    got = loop.run([GenerationRequest(memory[i], p, settings) for i, p in enumerate(prompts)])
    expected = [reference_tokens(reference, pixels[i], p, settings) for i, p in enumerate(prompts)]
    assert [g.tokens for g in got] == expected
    # stops differ: some sequences end early on a stop token, others run to the limit (forced EOS)
    assert len({len(t) for t in expected}) > 1 or beams > 1
    assert loop.idle and loop.cache.rows == 0 and loop.cache.nbytes() == 0  # an idle loop holds no cache


def test_batch_invariance_with_joins_and_leaves(donut):
    """Greedy and beam requests in one running batch, two joining after the others started: each
    sequence's tokens are the tokens it gets alone; a finished request's rows leave that step."""
    _, model, _, _, _, memory, generation = donut
    greedy = GenerationSettings.from_generation_config(generation, max_new_tokens=12, eos_token_id=EOS)
    beam = GenerationSettings.from_generation_config(generation, max_new_tokens=8, num_beams=3,
                                                     early_stopping=True, eos_token_id=EOS)
    requests = [GenerationRequest(memory[i], p, greedy if i % 2 == 0 else beam) for i, p in enumerate(PROMPTS)]
    alone = [DecodeLoop(model, CPU, torch.float32).run([r])[0].tokens for r in requests]

    loop = DecodeLoop(model, CPU, torch.float32)
    handles = [loop.add(requests[0]), loop.add(requests[1])]
    results: dict[int, list[int]] = {}
    for step in range(60):
        if step == 2:
            handles += [loop.add(requests[2]), loop.add(requests[3])]
        rows_before = loop.cache.rows
        if step == 2:
            assert rows_before > 0  # the joiners' prompts run beside running sequences
        finished = loop.step()
        results.update({h: r.tokens for h, r in finished.items()})
        joined = 4 if step in (0, 2) else 0  # each pair of joiners: 1 greedy row + 3 beam rows
        freed = sum(r.settings.num_beams for h, r in zip(handles, requests, strict=False) if h in finished)
        assert loop.cache.rows == rows_before + joined - freed
        if loop.idle:
            break
    assert [results[h] for h in handles] == alone


def test_cancel_frees_rows_at_once(donut):
    _, model, _, _, _, memory, generation = donut
    settings = GenerationSettings.from_generation_config(generation, max_new_tokens=12, num_beams=2)
    loop = DecodeLoop(model, CPU, torch.float32)
    first = loop.add(GenerationRequest(memory[0], PROMPTS[0], settings))
    second = loop.add(GenerationRequest(memory[1], PROMPTS[1], settings))
    loop.step()
    assert loop.cache.rows == 4
    loop.cancel(first)
    assert loop.cache.rows == 2
    results = {}
    while not loop.idle:
        results.update(loop.step())
    alone = DecodeLoop(model, CPU, torch.float32).run([GenerationRequest(memory[1], PROMPTS[1], settings)])[0]
    assert list(results) == [second] and results[second].tokens == alone.tokens


def test_unsupported_generation_config_is_refused():
    with pytest.raises(ValueError, match="do_sample"):
        GenerationSettings.from_generation_config({"do_sample": True, "max_new_tokens": 4})
    with pytest.raises(ValueError, match="repetition_penalty"):
        GenerationSettings.from_generation_config({"repetition_penalty": 1.2, "max_new_tokens": 4})


def test_encoder_other_than_donut_swin_is_refused(donut):
    from sie_engine.models.donut.model import DonutConfig

    with pytest.raises(ValueError, match="encoder model_type 'vit'"):
        DonutConfig.from_hf({"encoder": {"model_type": "vit"}, "decoder": {"model_type": "mbart", "vocab_size": 8}})


def test_donut_directory_is_served_by_extract_not_as_an_encoder(donut, tmp_path):
    from donut_fixtures import tiny_donut
    from sie_engine.local_card import card_from_local_dir

    tiny_donut(tmp_path)
    card = card_from_local_dir("tiny-donut", tmp_path)
    # image items only, answered by extract (tests/server/test_docextract_http.py); its task prompt is the request's
    assert (card.family, card.outputs, card.tasks, card.modalities) == ("donut", ("generate",), ("extract",),
                                                                        ("image",))
    assert card.options["generate"]["task_prompt"] == "{prompt}"
    assert card.options["generate"]["max_new_tokens"] < card.max_seq_len == 64


def test_memory_projection_where_widths_differ(tmp_path):
    """A decoder wider than the encoder: transformers' `enc_to_dec_proj` sits between them."""
    reference = tiny_donut(tmp_path, decoder={"d_model": 48, "decoder_attention_heads": 4})
    assert reference.enc_to_dec_proj is not None
    model, tensors, report = load_sie_donut(tmp_path)
    assert set(tensors) - report.loaded == {n for n in tensors if n.endswith("relative_position_index")}
    generation = json.loads((tmp_path / "generation_config.json").read_text())
    settings = GenerationSettings.from_generation_config(generation, max_new_tokens=6, num_beams=2,
                                                         eos_token_id=EOS)
    torch.manual_seed(2)
    pixels = torch.randn(1, 3, 64, 48)
    with torch.no_grad():
        memory = model.encode_images(pixels)
    got = DecodeLoop(model, CPU, torch.float32).run([GenerationRequest(memory[0], PROMPTS[1], settings)])
    assert got[0].tokens == reference_tokens(reference, pixels[0], PROMPTS[1], settings)


def test_request_beyond_the_decoder_positions_is_refused(donut):
    _, model, _, _, _, memory, generation = donut
    settings = GenerationSettings.from_generation_config(generation, max_new_tokens=63)
    loop = DecodeLoop(model, CPU, torch.float32)
    with pytest.raises(ValueError, match="exceeds the decoder's 64 positions"):
        loop.add(GenerationRequest(memory[0], PROMPTS[1], settings))
    assert loop.idle
