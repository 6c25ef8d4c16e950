"""OWLv2 (Owlv2ForObjectDetection) against transformers on the same tiny random weights: every
checkpoint tensor loaded, the class logits, boxes and objectness equal (float32: 1e-5 absolute, 1e-4 relative), one
image alone equal to the same image in a batch, the image preprocessing equal to Owlv2Processor's,
and the post-processing equal to `post_process_grounded_object_detection` (scores, labels and
boxes in the image's pixels, including images that are not square)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from image_fixtures import sample_pil_images
from owlv2_fixtures import make_tiny_owlv2, reference_detector
from sie_engine import card_from_local_dir
from sie_engine.batch import pack, pack_images
from sie_engine.layers.weights import WeightLoadError, load_checkpoint
from sie_engine.models.owlv2.postprocess import detections
from sie_engine.runner import build_runner
from sie_engine.validation import Limits
from sie_engine.weights import Checkpoint

LABELS = [["a cat", "the dog"], ["x", "the the dog sat on a mat"]]
ATOL, RTOL = 1e-5, 1e-4  # float32; the objectness logits reach about 6


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_owlv2(tmp_path_factory.mktemp("owlv2") / "owlv2")


@pytest.fixture(scope="module")
def reference(tiny):
    return reference_detector(tiny)


@pytest.fixture(scope="module")
def runner(tiny):
    return build_runner(card_from_local_dir("tiny-owlv2", tiny), tiny, torch.device("cpu"))


@pytest.fixture(scope="module")
def pictures():
    images = sample_pil_images()
    return [images["png_rgb"], images["webp_rgb"]]  # 64 x 48 and 33 x 90: padded at the bottom, at the right


@pytest.fixture(scope="module")
def expected(reference, pictures):
    model, processor = reference
    inputs = processor(text=LABELS, images=pictures, return_tensors="pt")
    with torch.no_grad():
        return inputs, model(**inputs)


def label_ids(processor, labels: list[str]) -> list[np.ndarray]:
    """Each label's tokens as SIE runs them: up to its end-of-text token, no padding."""
    ids = processor.tokenizer(labels)["input_ids"]
    return [np.asarray(row, dtype=np.int64) for row in ids]


def sie_outputs(runner, processor, pixel_values: torch.Tensor, labels: list[list[str]]):
    """(logits [B, P, Q], boxes [B, P, 4], objectness [B, P]) from SIE's passes, one packed batch each."""
    model = runner.backbone
    flat = [label for image_labels in labels for label in image_labels]
    batch = pack(label_ids(processor, flat), runner.backend, runner.device)
    with torch.inference_mode():
        hidden = model(batch.input_ids, batch.positions, batch.attn)
        queries = model.query_embeddings(hidden, batch.input_ids, batch.cu_seqlens, batch.seq_index())
        pixels = [p.numpy() for p in pixel_values]
        images = pack_images(pixels, [runner.tokenizer.images.image_tokens] * len(pixels), runner.backend,
                             runner.device, torch.float32)
        features = model.patch_features(model.forward_images(images.pixel_values, images.attn), images.cu_seqlens)
        per_image = queries.split([len(image_labels) for image_labels in labels])
        logits = torch.stack([model.class_logits(features[i], per_image[i]) for i in range(len(labels))])
        return logits, model.boxes(features), model.objectness(features)


def test_every_checkpoint_tensor_is_loaded(tiny, runner):
    """Every tensor of the checkpoint is a parameter of SIE's model or one it knowingly ignores, and
    every parameter is filled from the checkpoint (load_checkpoint fails otherwise)."""
    model = runner.backbone
    with Checkpoint(runner.layout.weight_files) as checkpoint:
        report = load_checkpoint(model, checkpoint, model.weight_spec)
        assert report.loaded == set(checkpoint.keys())
        missing = {name: tensor for name, tensor in checkpoint.items() if not name.startswith("box_head.")}
        with pytest.raises(WeightLoadError, match="box_head"):
            load_checkpoint(model, missing, model.weight_spec)


def test_logits_boxes_and_objectness_equal_transformers(runner, reference, expected):
    _, processor = reference
    inputs, out = expected
    logits, boxes, objectness = sie_outputs(runner, processor, inputs["pixel_values"], LABELS)
    assert logits.shape == out.logits.shape and boxes.shape == out.pred_boxes.shape
    torch.testing.assert_close(logits, out.logits, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(boxes, out.pred_boxes, atol=ATOL, rtol=RTOL)
    torch.testing.assert_close(objectness, out.objectness_logits, atol=ATOL, rtol=RTOL)


def test_an_image_alone_equals_it_in_a_batch(runner, reference, expected):
    _, processor = reference
    inputs, _ = expected
    logits, boxes, _ = sie_outputs(runner, processor, inputs["pixel_values"], LABELS)
    alone_logits, alone_boxes, _ = sie_outputs(runner, processor, inputs["pixel_values"][1:], LABELS[1:])
    torch.testing.assert_close(alone_logits[0], logits[1], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(alone_boxes[0], boxes[1], atol=1e-6, rtol=1e-6)


def test_image_preprocessing_equals_owlv2_processor(runner, pictures, expected):
    """Padding to a square (bottom, right), the anti-aliased resize and normalisation as transformers'."""
    from image_fixtures import encode_image

    inputs, _ = expected
    ours = runner.tokenizer.images.encode_images([encode_image(p, "PNG") for p in pictures],
                                                 ["items[0].image", "items[1].image"], Limits())
    for mine, theirs in zip(ours, inputs["pixel_values"]):
        np.testing.assert_allclose(mine, theirs.numpy(), atol=1e-6)


@pytest.mark.parametrize("threshold", [0.0, "median", 1.0])
def test_post_processing_equals_transformers(reference, expected, pictures, threshold):
    """Kept scores, labels (and their texts) and pixel boxes as post_process_grounded_object_detection,
    with the images' own (height, width) as target sizes."""
    _, processor = reference
    _, out = expected
    scores = out.logits.max(-1).values.sigmoid()
    cut = float(scores.median()) if threshold == "median" else threshold
    sizes = [(p.height, p.width) for p in pictures]
    theirs = processor.post_process_grounded_object_detection(out, threshold=cut, target_sizes=sizes,
                                                              text_labels=LABELS)
    for i, ref in enumerate(theirs):
        ours = detections(out.logits[i], out.pred_boxes[i], cut, sizes[i])
        np.testing.assert_allclose(ours.scores, ref["scores"].numpy(), atol=1e-6)
        assert ours.labels.tolist() == ref["labels"].tolist()
        assert [LABELS[i][k] for k in ours.labels] == ref["text_labels"]
        np.testing.assert_allclose(ours.boxes, ref["boxes"].numpy(), atol=1e-4)
    if threshold == "median":  # the cut keeps some boxes and drops others: the comparison saw both
        kept = sum(len(ref["scores"]) for ref in theirs)
        assert 0 < kept < scores.numel()


def test_registry_resolves_the_checkpoint_to_the_family(tiny):
    import json

    from sie_engine.models import family_for

    config = json.loads((tiny / "config.json").read_text())
    assert family_for(config).name == "owlv2"
    assert family_for({"model_type": "owlv2"}).name == "owlv2"


def test_a_config_whose_widths_cannot_meet_is_refused_naming_them(tiny):
    import json

    from sie_engine.models.owlv2.config import owlv2_config

    config = json.loads((tiny / "config.json").read_text())
    with pytest.raises(ValueError, match="projection_dim 24 != text_config.hidden_size 32"):
        owlv2_config({**config, "projection_dim": 24})


def test_builtin_cards_detect_through_the_engine_as_transformers(tiny, reference, pictures):
    """The catalog's OWLv2 cards, their weights pointed at the tiny model, through Engine.extract with
    image items: the regions of transformers' post-processing (JPEG-free PNG bytes, exact pixels)."""
    import dataclasses
    import io

    from sie_engine import Catalog, Engine, WeightsSource

    cards = [dataclasses.replace(card, weights=WeightsSource(path=str(tiny)))
             for card in Catalog.builtin() if card.family == "owlv2"]
    assert {card.id for card in cards} == {"google/owlv2-base-patch16", "google/owlv2-base-patch16-ensemble",
                                           "google/owlv2-base-patch16-finetuned"}
    files = []
    for picture in pictures:
        buffer = io.BytesIO()
        picture.save(buffer, format="PNG")
        files.append(buffer.getvalue())
    model, processor = reference
    labels = LABELS[1]
    inputs = processor(text=[labels] * len(pictures), images=pictures, return_tensors="pt")
    with torch.no_grad():
        out = model(**inputs)
    threshold = float(out.logits.max(-1).values.sigmoid().median())
    theirs = processor.post_process_grounded_object_detection(
        out, threshold=threshold, target_sizes=[(p.height, p.width) for p in pictures], text_labels=[labels] * 2)
    with Engine(Catalog(cards), device="cpu") as engine:
        for card in cards:
            result = engine.extract_sync(card.id, [{"image": f} for f in files], labels, threshold=threshold)
            for item, ref in zip(result.items, theirs, strict=True):
                assert [r.label for r in item.regions] == ref["text_labels"]
                np.testing.assert_allclose([r.score for r in item.regions], ref["scores"].numpy(), atol=1e-5)
                np.testing.assert_allclose(np.reshape([r.box for r in item.regions], (-1, 4)),
                                           ref["boxes"].numpy().reshape(-1, 4), atol=1e-3)
