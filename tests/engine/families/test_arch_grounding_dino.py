"""Grounding DINO (GroundingDinoForObjectDetection) against transformers on the same tiny random
weights: every checkpoint tensor loaded, the class logits and boxes equal (float32: 1e-5 absolute,
1e-4 relative) for images of two aspect ratios with prompts of their own, one image alone equal
to the same image in a batch, the image preprocessing equal to GroundingDinoProcessor's, the
prompt's phrases equal to the model's own mask and positions, and the post-processing equal to
`post_process_grounded_object_detection` (scores, boxes in the image's pixels, labels decoded
from the prompt's tokens)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from grounding_dino_fixtures import make_tiny_grounding_dino, reference_grounding_dino
from image_fixtures import encode_image, sample_pil_images
from sie_engine import card_from_local_dir
from sie_engine.batch import pack, pack_images
from sie_engine.layers.weights import WeightLoadError, load_checkpoint
from sie_engine.models.grounding_dino.model import phrase_mask
from sie_engine.models.grounding_dino.postprocess import grounded_detections
from sie_engine.models.grounding_dino.prompt import merged_prompt, phrase_positions, phrases
from sie_engine.runner import build_runner
from sie_engine.validation import Limits
from sie_engine.weights import Checkpoint

LABELS = [["a cat", "the dog"], ["remote control", "x", "a mat?"]]
ATOL, RTOL = 1e-5, 1e-4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_grounding_dino(tmp_path_factory.mktemp("gdino") / "gdino")


@pytest.fixture(scope="module")
def reference(tiny):
    return reference_grounding_dino(tiny)


@pytest.fixture(scope="module")
def runner(tiny):
    return build_runner(card_from_local_dir("tiny-gdino", tiny), tiny, torch.device("cpu"))


@pytest.fixture(scope="module")
def pictures():
    images = sample_pil_images()
    return [images["png_rgb"], images["webp_rgb"]]  # 64 x 48 (landscape) and 33 x 90 (portrait)


@pytest.fixture(scope="module")
def expected(reference, pictures):
    """transformers' outputs, each image alone with its prompt (its batches pad images to one size)."""
    model, processor = reference
    out = []
    for picture, labels in zip(pictures, LABELS):
        inputs = processor(images=picture, text=[labels], return_tensors="pt")
        with torch.no_grad():
            out.append((inputs, model(**inputs)))
    return out


def sie_outputs(runner, expected, indices):
    """(logits, boxes) per image from SIE's passes: the prompts' phrases packed in one text batch,
    the images in one image batch at their own sizes, the head's detect per image."""
    model, tokenizer = runner.backbone, runner.tokenizer
    prompts = [LABELS[i] for i in indices]
    ids = [tokenizer.encode([merged_prompt(labels)]).ids[0].astype(np.int64) for labels in prompts]
    spans = [phrases(row) for row in ids]
    pieces = [row[s:e] for row, row_spans in zip(ids, spans) for s, e in row_spans]
    with torch.inference_mode():
        batch = pack(pieces, runner.backend, runner.device)
        text = model(batch.input_ids, batch.positions, batch.attn).split([len(row) for row in ids])
        pixels = [expected[i][0]["pixel_values"][0].permute(1, 2, 0).contiguous().numpy() for i in indices]
        counts = [tokenizer.images.positions(p) for p in pixels]
        images = pack_images(pixels, counts, runner.backend, runner.device, torch.float32, patch_grids=True)
        sources = model.forward_images(images.pixel_values, images.attn, images.grids).split(counts)
        out = []
        for k, (row, row_spans) in enumerate(zip(ids, spans)):
            from sie_engine.models.grounding_dino.model import level_shapes

            shapes = level_shapes(model.config, *images.grids[k])
            mask = phrase_mask(row, row_spans, runner.device, torch.float32)
            out.append(model.detect(sources[k], shapes, text[k], torch.from_numpy(phrase_positions(row)), mask))
        return ids, out


def test_every_checkpoint_tensor_is_loaded(runner):
    model = runner.backbone
    with Checkpoint(runner.layout.weight_files) as checkpoint:
        report = load_checkpoint(model, checkpoint, model.weight_spec)
        assert report.loaded == set(checkpoint.keys())
        missing = {name: t for name, t in checkpoint.items() if "fusion_layer.attn.text_proj" not in name}
        with pytest.raises(WeightLoadError, match="fusion_layer.attn.text_proj"):
            load_checkpoint(model, missing, model.weight_spec)


def test_prompt_ids_equal_the_processors(runner, reference, expected):
    for (inputs, _), labels in zip(expected, LABELS):
        ours = runner.tokenizer.encode([merged_prompt(labels)]).ids[0]
        assert ours.tolist() == inputs["input_ids"][0].tolist()


def test_phrases_are_the_models_mask_and_positions():
    """Random id strings over BERT's delimiters: the phrases as sequences are transformers' block
    mask, and the positions its position ids."""
    from transformers.models.grounding_dino.modeling_grounding_dino import (
        generate_masks_with_special_tokens_and_transfer_map,
    )

    rng = np.random.default_rng(0)
    for _ in range(300):
        ids = rng.choice([101, 102, 1012, 1029, 1037, 4937], size=int(rng.integers(1, 12)))
        mask, positions = generate_masks_with_special_tokens_and_transfer_map(torch.tensor(ids)[None])
        ours = np.zeros((len(ids), len(ids)), dtype=bool)
        for start, end in phrases(ids):
            ours[start:end, start:end] = True
        assert (ours == mask[0].numpy()).all(), ids
        assert phrase_positions(ids).tolist() == positions[0].tolist(), ids


def test_logits_and_boxes_equal_transformers(runner, expected):
    _, out = sie_outputs(runner, expected, [0, 1])
    for (logits, boxes), (_, ref) in zip(out, expected):
        assert logits.shape == ref.logits[0].shape and boxes.shape == ref.pred_boxes[0].shape
        finite = torch.isfinite(ref.logits[0])
        assert torch.equal(torch.isfinite(logits), finite)
        torch.testing.assert_close(logits[finite], ref.logits[0][finite], atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(boxes, ref.pred_boxes[0], atol=ATOL, rtol=RTOL)


def test_an_image_alone_equals_it_in_a_batch(runner, expected):
    _, batched = sie_outputs(runner, expected, [0, 1])
    _, alone = sie_outputs(runner, expected, [1])
    # float32 rounding only: the text batch groups the phrases otherwise (the CPU backend's grouped SDPA)
    torch.testing.assert_close(alone[0][0], batched[1][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(alone[0][1], batched[1][1], atol=1e-6, rtol=1e-6)


def test_image_preprocessing_equals_the_processors(runner, pictures, expected):
    images = runner.tokenizer.images
    ours, sizes = images.encode_sized([encode_image(p, "PNG") for p in pictures],
                                      ["items[0].image", "items[1].image"], Limits())
    assert sizes == [(p.height, p.width) for p in pictures]
    for mine, (inputs, _) in zip(ours, expected):
        np.testing.assert_allclose(mine, inputs["pixel_values"][0].permute(1, 2, 0).numpy(), atol=1e-6)


@pytest.mark.parametrize("threshold", ["median", 0.0, 1.0])
@pytest.mark.parametrize("text_threshold", [0.25, 0.6])
def test_post_processing_equals_transformers(reference, expected, pictures, threshold, text_threshold):
    _, processor = reference
    for picture, (inputs, out) in zip(pictures, expected):
        scores = out.logits[0].sigmoid().max(-1).values
        cut = float(scores.median()) if threshold == "median" else threshold
        size = (picture.height, picture.width)
        ref = processor.post_process_grounded_object_detection(out, inputs["input_ids"], threshold=cut,
                                                               text_threshold=text_threshold, target_sizes=[size])[0]
        ours = grounded_detections(out.logits[0], out.pred_boxes[0], inputs["input_ids"][0].numpy(), cut,
                                   text_threshold, size)
        np.testing.assert_allclose(ours.scores, ref["scores"].numpy(), atol=1e-6)
        np.testing.assert_allclose(ours.boxes, ref["boxes"].numpy().reshape(-1, 4), atol=1e-4)
        assert list(processor.batch_decode(ours.tokens)) == ref["text_labels"]
        if threshold == "median":
            assert 0 < len(ours.scores) < scores.numel()


def test_registry_resolves_the_checkpoint_to_the_family(tiny):
    from sie_engine.models import family_for

    config = json.loads((tiny / "config.json").read_text())
    assert family_for(config).name == "grounding-dino"
    assert family_for({"model_type": "grounding-dino"}).name == "grounding-dino"


@pytest.mark.parametrize(("key", "value"), [("two_stage", False), ("decoder_bbox_embed_share", False),
                                            ("position_embedding_type", "learned")])
def test_a_config_this_forward_does_not_implement_is_refused_naming_it(tiny, key, value):
    from sie_engine.models.grounding_dino.config import grounding_dino_config

    config = json.loads((tiny / "config.json").read_text())
    with pytest.raises(ValueError, match=f"{key}={value!r} is not supported"):
        grounding_dino_config({**config, key: value})


def test_builtin_cards_detect_through_the_engine_as_transformers(tiny, reference, pictures, expected):
    """The catalog's Grounding DINO cards, their weights pointed at the tiny model, through
    Engine.extract with image items: the regions of transformers' post-processing, also for two
    requests with prompts of their own at once."""
    import dataclasses

    from sie_engine import Catalog, Engine, WeightsSource

    cards = [dataclasses.replace(card, weights=WeightsSource(path=str(tiny)))
             for card in Catalog.builtin() if card.family == "grounding-dino"]
    assert {card.id for card in cards} == {"IDEA-Research/grounding-dino-tiny", "IDEA-Research/grounding-dino-base"}
    model, processor = reference
    labels = LABELS[0]
    theirs = [_reference(model, processor, p, labels) for p in pictures]
    threshold = float(torch.cat([o.logits[0].sigmoid().max(-1).values for _, o in theirs]).median())
    refs = [processor.post_process_grounded_object_detection(o, i["input_ids"], threshold=threshold,
                                                             target_sizes=[(p.height, p.width)])[0]
            for (i, o), p in zip(theirs, pictures)]
    files = [{"image": encode_image(p, "PNG")} for p in pictures]
    with Engine(Catalog(cards), device="cpu") as engine:
        for card in cards[:1]:  # one engine load: the cards differ only in their published facts
            result = engine.extract_sync(card.id, files, labels, threshold=threshold)
            assert_regions(result.items, refs)
        # two requests at once, each its own prompt: each image answers against its own request's
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(engine.extract_sync, cards[0].id, files, prompt, threshold=0.5) for prompt in LABELS]
            answers = [f.result() for f in futures]
        for prompt, answer in zip(LABELS, answers):
            outputs = [_reference(model, processor, p, prompt) for p in pictures]
            assert_regions(answer.items, [processor.post_process_grounded_object_detection(
                o, i["input_ids"], threshold=0.5, target_sizes=[(p.height, p.width)])[0]
                for (i, o), p in zip(outputs, pictures)])
    assert sum(len(r["scores"]) for r in refs) > 0


def _reference(model, processor, picture, labels):
    inputs = processor(images=picture, text=[labels], return_tensors="pt")
    with torch.no_grad():
        return inputs, model(**inputs)


def assert_regions(items, refs) -> None:
    for item, ref in zip(items, refs, strict=True):
        assert [r.label for r in item.regions] == ref["text_labels"]
        np.testing.assert_allclose([r.score for r in item.regions], ref["scores"].numpy(), atol=1e-5)
        np.testing.assert_allclose(np.reshape([r.box for r in item.regions], (-1, 4)),
                                   ref["boxes"].numpy().reshape(-1, 4), atol=1e-3)


def test_the_published_configuration_parses_with_its_feature_levels():
    """grounding-dino-tiny's config.json (transformers' GroundingDinoConfig defaults with its Swin-T):
    4 levels at strides 8 to 64, 22,223 encoder positions for the processor's largest image (what
    admission counts), the prompt window 256 tokens."""
    from transformers import GroundingDinoConfig

    from sie_engine.models.grounding_dino.config import grounding_dino_config
    from sie_engine.models.grounding_dino.model import LARGEST_IMAGE, level_shapes

    published = GroundingDinoConfig(backbone_config=dict(model_type="swin", embed_dim=96, depths=[2, 2, 6, 2],
                                                         num_heads=[3, 6, 12, 24], window_size=7,
                                                         out_indices=[2, 3, 4]),
                                    text_config=dict(model_type="bert")).to_dict()
    config = grounding_dino_config(published)
    assert (config.d_model, config.num_queries, config.feature_levels, config.max_seq_len) == (256, 900, 4, 256)
    assert config.out_stages == (2, 3, 4) and config.text.hidden_size == 768
    assert level_shapes(config, *LARGEST_IMAGE) == [(100, 167), (50, 84), (25, 42), (13, 21)]
    assert sum(h * w for h, w in level_shapes(config, *LARGEST_IMAGE)) == 22223
