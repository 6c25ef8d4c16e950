"""The checks a decoder-only vision-language model over one page (GLM-OCR, PaddleOCR-VL: a
sie_engine.models.page_decoder.PageDecoderLM) passes against its transformers reference on the same
tiny random weights, shared by their test modules: a page's generation request as the serving head
builds it, the prefill's and cached steps' logits, `generate` token for token, batch invariance with
pages of other sizes joining a running batch, and, over HTTP, the model card's transformers usage on
a page alone and the built-in card on the tiny weights.

`pages` are the processor's outputs (`input_ids`, `pixel_values`, `image_grid_thw`) of one page each.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses

import numpy as np
import torch

from sie_engine.generation import DecodeLoop, GenerationRequest, GenerationSettings
from sie_engine.generation.cache import DecodeCache
from sie_engine.models.glm_ocr.model import rope_index

CPU = torch.device("cpu")
TOL = 1e-4


def grid_of(inputs) -> tuple[int, int]:
    _, h, w = (int(n) for n in inputs["image_grid_thw"][0])
    return h, w


def patches_of(inputs) -> torch.Tensor:
    """The processor's patches as SIE packs them: one flat row each (`[N, C * T * p * p]`)."""
    return inputs["pixel_values"].flatten(1)


def request(model, inputs, settings: GenerationSettings) -> GenerationRequest:
    """A page's generation request as the serving head builds it: the vision tower's features in the
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


def check_image_features(reference, model, pages) -> None:
    """All pages through SIE's vision tower in one packed pass, each page's features against
    transformers' `get_image_features` of the page alone."""
    patches = torch.cat([patches_of(p) for p in pages])
    with torch.no_grad():
        got = model.encode_images(patches, tuple(grid_of(p) for p in pages))
        for inputs, features in zip(pages, got, strict=True):
            expected = reference.model.get_image_features(inputs["pixel_values"],
                                                          inputs["image_grid_thw"]).pooler_output[0]
            assert features.shape == expected.shape
            assert (features - expected).abs().max().item() < TOL


def check_rope_index(reference, model, pages) -> None:
    for inputs in pages:
        positions, delta = rope_index(inputs["input_ids"][0].tolist(), model.config.image_token_id,
                                      grid_of(inputs), model.merge)
        expected, deltas = reference.model.get_rope_index(inputs["input_ids"], inputs["mm_token_type_ids"],
                                                          inputs["image_grid_thw"])
        assert torch.equal(torch.from_numpy(positions), expected[:, 0]) and delta == int(deltas[0, 0])


def check_prefill_and_cached_steps(reference, model, pages, generation: dict) -> None:
    """Every prompt position's logits from the prefill, then each cached step's against the logits
    transformers' `generate` computed at that step (its own cache)."""
    settings = GenerationSettings.from_generation_config(generation, max_new_tokens=4, eos_token_id=[])
    text = model.config.text
    for inputs in pages:
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


def check_generate(reference, model, pages, generation: dict, beams: int, eos: list[int]) -> None:
    """All pages in one decode loop against transformers' `generate` of each alone, token for token."""
    settings = GenerationSettings.from_generation_config(generation, max_new_tokens=10, num_beams=beams,
                                                         early_stopping=True, eos_token_id=eos)
    got = DecodeLoop(model, CPU, torch.float32).run([request(model, p, settings) for p in pages])
    expected = [reference_generate(reference, p, settings)[0, p["input_ids"].shape[1]:].tolist() for p in pages]
    assert [g.tokens for g in got] == expected
    assert len({len(t) for t in expected}) > 1 or beams > 1  # some stop on a stop token, others at the limit


def check_batch_invariance(model, pages, generation: dict, eos: list[int], make_request=None) -> None:
    """Greedy and beam requests for pages of four sizes in one running batch, two joining after the
    others started: each page's tokens are the tokens it gets alone, and every step, the one where
    the two join beside the running rows included, is one decoder call over all rows' new tokens
    packed. `make_request` builds a page's request (default `request`: the M-RoPE models')."""
    make_request = make_request or request
    greedy = GenerationSettings.from_generation_config(generation, max_new_tokens=10, eos_token_id=eos)
    beam = GenerationSettings.from_generation_config(generation, max_new_tokens=8, num_beams=2,
                                                     early_stopping=True, eos_token_id=eos)
    requests = [make_request(model, p, greedy if i % 2 == 0 else beam) for i, p in enumerate(pages)]
    alone = [DecodeLoop(model, CPU, torch.float32).run([r])[0].tokens for r in requests]
    loop = DecodeLoop(model, CPU, torch.float32)
    calls: list[tuple[int, ...]] = []  # each decoder call's embeddings' shape
    decode = model.decode_embedded

    def counted(embeddings, positions, cache):
        calls.append(tuple(embeddings.shape[:2]))
        return decode(embeddings, positions, cache)

    model.decode_embedded = counted
    try:
        handles = [loop.add(requests[0]), loop.add(requests[1])]
        results: dict[int, list[int]] = {}
        for step in range(40):
            rows = loop.cache.rows
            if step == 2:
                handles += [loop.add(requests[2]), loop.add(requests[3])]
            results.update({h: r.tokens for h, r in loop.step().items()})
            if step == 2:  # the running rows' one token each, then the joining pages' prompts
                joined = sum(len(r.prompt) * r.settings.num_beams for r in requests[2:])
                assert calls[-1] == (1, rows + joined), calls[-1]
            assert len(calls) == step + 1, "a step is one decoder call"
            if loop.idle:
                break
    finally:
        del model.decode_embedded
    assert [results[h] for h in handles] == alone


# ---- over HTTP ------------------------------------------------------------------------------------

def tiny_card(model_id: str, root, new: int, positions: int):
    """The built-in card on the tiny weights: float32 (transformers' reference runs in it), the tiny
    decoder's positions, a small bound of new tokens."""
    from sie_engine import Catalog, WeightsSource

    card = Catalog.builtin().get(model_id)
    generate = {**card.options["generate"], "max_new_tokens": new}
    return dataclasses.replace(card, weights=WeightsSource(path=str(root)), dtype="float32", max_seq_len=positions,
                               options={**card.options, "generate": generate})


class ReferenceTexts:
    """The model card's transformers usage on a page alone: the chat template over the image and the
    task's text, the processor, greedy `generate`, the new tokens decoded without special tokens
    (each answer computed once)."""

    def __init__(self, model, processor):
        self.model, self.processor = model, processor
        self._answers: dict[tuple, str] = {}

    def __call__(self, page, text: str, new: int) -> str:
        key = (page.tobytes(), page.size, text, new)
        if key not in self._answers:
            messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
            prompt = self.processor.apply_chat_template(messages, add_generation_prompt=True)
            inputs = self.processor(text=[prompt], images=[page.convert("RGB")], return_tensors="pt")
            with torch.no_grad():
                out = self.model.generate(**inputs, max_new_tokens=new, do_sample=False)
            self._answers[key] = self.processor.decode(out[0, inputs["input_ids"].shape[1]:],
                                                       skip_special_tokens=True)
        return self._answers[key]


def check_input_preparation(inputs, model, pages, images, prompts, tmp_path, patch: int) -> None:
    """SIE's input preparation (`inputs`: the family's GlmOcrInputs) against the processor's `pages`
    of the same `images` and task `prompts`: each page's patch grid, its size from the header (the
    processor's resize, `patch`-pixel patches), its pixels, and the chat template's prompt with its
    image placeholder repeated once per image feature."""
    from sie_engine.models.glm_ocr.serving import expand_image
    from sie_engine.validation import Limits

    pngs = []
    for i, image in enumerate(images):
        path = tmp_path / f"{i}.png"
        image.save(path)
        pngs.append(path.read_bytes())
    pixels = inputs.images.encode_images(pngs, [f"items[{i}].image" for i in range(len(pngs))], Limits())
    for image, prompt, expected, values in zip(images, prompts, pages, pixels, strict=True):
        assert values.shape[:2] == grid_of(expected)
        assert inputs.images.resized(*image.size) == (values.shape[1] * patch, values.shape[0] * patch)
        assert np.array_equal(values.reshape(-1, values.shape[-1]), patches_of(expected).numpy())
        ids = expand_image(inputs.prompt_ids(prompt), model.config.image_token_id,
                           values.shape[0] * values.shape[1] // model.merge ** 2)
        assert ids == expected["input_ids"][0].tolist()


@contextlib.contextmanager
def served(card, local: str, root, tmp_path_factory):
    """A real `sie-server serve` of `card` (from a cards folder) and of `root` card-less as `local`."""
    import yaml

    from server_fixtures import start_server

    cards = tmp_path_factory.mktemp("cards")
    (cards / "card.yaml").write_text(yaml.safe_dump(card.to_dict()))
    process = start_server("--models", str(cards), "--model", f"{local}={root}",
                           log_dir=tmp_path_factory.mktemp("sie-server"))
    try:
        yield process
    finally:
        process.stop()


def images_json(pngs) -> list[dict]:
    return [{"image": base64.b64encode(p).decode()} for p in pngs]


def check_pages_answered_as_alone(url: str, model_id: str, pngs, expected: list[str]) -> None:
    """Pages of other sizes in one JSON request: each page's text is its reference alone (`expected`),
    each its own, with neither `data` nor `regions`."""
    import httpx

    response = httpx.post(f"{url}/v1/extract/{model_id}", json={"items": images_json(pngs)}, timeout=60)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert [item["id"] for item in answer["items"]] == [str(i) for i in range(len(pngs))]
    texts = [item["text"] for item in answer["items"]]
    assert texts == expected
    assert all(texts) and len(set(texts)) == len(texts)  # each page its own text
    assert all(item.get("data") is None and "regions" not in item for item in answer["items"])
    assert answer["usage"]["tokens"] > 0


def check_msgpack_equals_json(url: str, model_id: str, pngs, fields: dict, expected: list[str]) -> None:
    """The pages (ids p0, p1, ...) with `fields` over msgpack (raw image bytes): each text is its
    reference (`expected`), and the JSON answer (base64 images) is the same."""
    import httpx
    import msgpack

    body = {"items": [{"image": p, "id": f"p{i}"} for i, p in enumerate(pngs)], **fields}
    response = httpx.post(f"{url}/v1/extract/{model_id}", content=msgpack.packb(body, use_bin_type=True),
                          timeout=60, headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"})
    assert response.status_code == 200, response.text
    items = msgpack.unpackb(response.content, raw=False)["items"]
    assert [item["text"] for item in items] == expected
    assert [item["id"] for item in items] == [f"p{i}" for i in range(len(pngs))]
    as_json = httpx.post(f"{url}/v1/extract/{model_id}", timeout=60,
                         json={**body, "items": [{**image, "id": f"p{i}"}
                                                 for i, image in enumerate(images_json(pngs))]}).json()["items"]
    assert as_json == items
