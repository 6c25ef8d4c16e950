"""Qwen3-VL-Embedding's and Qwen3-VL-Reranker's video items on tiny random weights: the dense vectors
of `{video}` and `{video, text}` items (MPEG-4 and H.264 in MP4, VP8 in WebM, several frame rates and
sizes, as documents and as queries with the request's instruction) through the Engine equal the
published recipe over transformers (tests/helpers/video_fixtures.py: qwen_vl_utils' sampling and
resize written out, transformers' Qwen3VLVideoProcessor, Qwen3VLProcessor's timestamps, Qwen3VLModel)
within 1e-4, each alone and in a batch beside images; the reranker's scores of video documents and of
a video query against text, image and video documents equal its script's within 1e-5; the sampling
follows qwen_vl_utils' numbers; a video that
cannot be read, is too short, too long or too large is refused with the field it came in; and decode
admission charges a video its decoding from its container, so a second video behind a full bound is
a 429 at once. Where torchvision is installed, the frames' resize equals torchvision's exactly."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from image_fixtures import make_tiny_clip, sample_images
from qwen3_vl_fixtures import make_tiny_qwen3_vl
from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.checkpoints import describe
from sie_engine.errors import InvalidRequest, Overloaded, PayloadTooLarge
from sie_engine.models.qwen3_vl.video import frame_size, resize_frames
from sie_engine.runner import load_tokenizer
from sie_engine.validation import Limits
from sie_engine.videos import DECODED_PIXEL_COST, admission_pixels, sample_video, smart_nframes
from video_fixtures import Video, encode_video, synthetic_frames, video_embedding_reference, video_reranker_reference

EMBEDDING = "Qwen/Qwen3-VL-Embedding-2B"
RERANKER = "Qwen/Qwen3-VL-Reranker-2B"
IMAGES_ONLY = "qwen3-vl-images"  # the embedding card declaring text and image only
RERANKER_IMAGES_ONLY = "qwen3-vl-reranker-images"
VECTOR_TOL = 1e-4
SCORE_TOL = 1e-5


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return make_tiny_qwen3_vl(tmp_path_factory.mktemp("qwen3_vl_video") / "qwen3-vl")


@pytest.fixture(scope="module")
def tiny_long(tmp_path_factory) -> Path:
    """The reranker's stand-in: a pair of a video and its judging prompt (or two videos) passes 512 positions."""
    return make_tiny_qwen3_vl(tmp_path_factory.mktemp("qwen3_vl_video") / "qwen3-vl-2k", seed=2, positions=2048)


@pytest.fixture(scope="module")
def engine(tiny, tiny_long):
    card, reranker = (dataclasses.replace(Catalog.builtin().get(model), weights=WeightsSource(path=str(path)),
                                          dtype="float32")
                      for model, path in ((EMBEDDING, tiny), (RERANKER, tiny_long)))
    cards = [card, dataclasses.replace(card, id=IMAGES_ONLY, modalities=("text", "image")), reranker,
             dataclasses.replace(reranker, id=RERANKER_IMAGES_ONLY, modalities=("text", "image"))]
    with Engine(Catalog(cards), device="cpu") as engine:
        yield engine


@pytest.fixture(scope="module")
def videos() -> dict[str, bytes]:
    return {
        "mp4": encode_video(synthetic_frames(12, 96, 64), fps=4),  # 3 s: 4 frames sampled (the minimum)
        "webm": encode_video(synthetic_frames(7, 70, 50, seed=1), fps=2, container="webm"),  # no frame count
        "h264": encode_video(synthetic_frames(16, 80, 48, seed=3), fps=5, container="h264"),  # B-frames
        "long": encode_video(synthetic_frames(18, 128, 64, seed=2), fps=3),  # 6 s: 6 frames, 3 temporal patches
    }


def encode(engine, items, **fields) -> np.ndarray:
    return np.stack([np.asarray(item.dense) for item in engine.encode_sync(EMBEDDING, items, **fields).items])


def test_video_items_equal_the_published_embedding_recipe(engine, tiny, videos):
    items = [{"video": videos["mp4"]}, {"video": videos["webm"], "text": "a cat"}, {"video": videos["long"]},
             {"video": videos["h264"]}]
    ours = encode(engine, items)
    np.testing.assert_allclose(ours, np.stack(video_embedding_reference(tiny, items)), atol=VECTOR_TOL)
    # each alone equals itself beside images of other sizes and a text
    mixed = encode(engine, [{"image": sample_images()["png_rgb"]}, items[2], {"text": "the dog"}, items[0]])
    np.testing.assert_allclose(mixed[[3, 1]], ours[[0, 2]], atol=1e-5)
    np.testing.assert_allclose(encode(engine, [items[1]])[0], ours[1], atol=1e-5)


def test_a_video_query_carries_the_requests_instruction_as_the_recipe_does(engine, tiny, videos):
    instruction = "Retrieve videos relevant to the user's query."
    items = [{"video": videos["mp4"], "text": "a moving square"}]
    ours = encode(engine, items, is_query=True, instruction=instruction)
    np.testing.assert_allclose(ours, np.stack(video_embedding_reference(tiny, items, instruction)), atol=VECTOR_TOL)


def scores(engine, query, documents, **fields) -> list[float]:
    by_index = {s.index: s.score for s in engine.score_sync(RERANKER, query, documents, **fields).scores}
    return [by_index[i] for i in range(len(documents))]


def test_video_documents_score_as_the_published_reranker_recipe(engine, tiny_long, videos):
    """A text query against video documents (with and without their text) beside text and image
    documents: each pair's prompt holds the document's timestamped temporal patches, then its text."""
    image = sample_images()["png_rgb"]
    documents = [{"video": videos["mp4"]}, "a cat on a mat", {"video": videos["long"], "text": "a moving square"},
                 {"image": image}, {"video": videos["webm"]}]
    parts = [[Video(videos["mp4"])], ["a cat on a mat"], [Video(videos["long"]), "a moving square"], [image],
             [Video(videos["webm"])]]
    for instruction in (None, "Find the clip."):
        wanted = video_reranker_reference(tiny_long, [(["a square"], d) for d in parts], instruction)
        np.testing.assert_allclose(scores(engine, "a square", documents, instruction=instruction), wanted,
                                   atol=SCORE_TOL)
    alone = scores(engine, "a square", [documents[2]], instruction=instruction)
    np.testing.assert_allclose(alone, wanted[2:3], atol=1e-6)  # alone as in the batch


def test_a_video_query_scores_text_image_and_video_documents_as_the_published_reranker_recipe(engine, tiny_long,
                                                                                             videos):
    """The query's video (its text after it) in the query's place of each pair, a document's image or
    video (its text after it) in the document's: one sequence of two media of their own sizes. The
    query's video is sampled and decoded once for all the pairs."""
    image = sample_images()["jpeg_rgb"]
    documents = ["a moving square", {"image": image, "text": "a photo"}, {"video": videos["h264"]}, "x"]
    document_parts = [["a moving square"], [image, "a photo"], [Video(videos["h264"])], ["x"]]
    for query, parts in (({"video": videos["long"], "text": "find this"}, [Video(videos["long"]), "find this"]),
                         ({"video": videos["mp4"]}, [Video(videos["mp4"])])):
        wanted = video_reranker_reference(tiny_long, [(parts, d) for d in document_parts], "Find the clip.")
        np.testing.assert_allclose(scores(engine, query, documents, instruction="Find the clip."), wanted,
                                   atol=SCORE_TOL)


def test_the_query_video_is_sampled_once_for_all_its_pairs(engine, videos, monkeypatch):
    from sie_engine.models.qwen3_vl import inputs as qwen3_vl_inputs

    sampled: list[str] = []
    prepare = qwen3_vl_inputs.prepare_video

    def counting(value, processor, limits, field, content):
        sampled.append(field)
        return prepare(value, processor, limits, field, content)

    monkeypatch.setattr(qwen3_vl_inputs, "prepare_video", counting)
    scores(engine, {"video": videos["mp4"]}, ["a", "b", {"image": sample_images()["png_rgb"]}, "c"])
    assert sampled == ["query.video"]


def test_what_a_reranker_cannot_take_of_a_video_is_refused_with_its_field(engine, videos):
    image = sample_images()["png_rgb"]
    cases = [
        ({"video": b"not a video"}, ["a cat"], "query.video", "is not a video FFmpeg can read"),
        ({"video": videos["mp4"], "image": image}, ["a cat"], "query", "both image and video"),
        ({"video": 7}, ["a cat"], "query.video", "must be bytes"),
        ("a cat", ["fine", {"video": b"not a video"}], "items[1].video", "is not a video FFmpeg can read"),
        ({"video": videos["mp4"]}, ["fine", {"video": b"nope"}], "items[1].video", "is not a video FFmpeg can read"),
        ({"video": b"nope"}, [{"image": image}], "query.video", "is not a video FFmpeg can read"),
    ]
    for query, documents, field, words in cases:
        with pytest.raises(InvalidRequest, match=words) as caught:
            engine.score_sync(RERANKER, query, documents)
        assert caught.value.field == field, (query, documents)
    # a reranker card that declares no video: its video query and items are refused, naming them
    with pytest.raises(InvalidRequest, match="reads images only") as caught:
        engine.score_sync(RERANKER_IMAGES_ONLY, {"video": videos["mp4"]}, ["a cat"])
    assert caught.value.field == "query.video"
    with pytest.raises(InvalidRequest, match="is a video, but model .* reads images only") as caught:
        engine.score_sync(RERANKER_IMAGES_ONLY, "a cat", [{"video": videos["mp4"]}])
    assert caught.value.field == "items[0].video"


def test_frames_are_sampled_and_sized_as_qwen_vl_utils_does(videos):
    # smart_nframes: total / fps * 1 a second, within [4, min(64, total)] (even), floored to even
    assert smart_nframes(12, 4.0, 1.0, 4, 64) == 4
    assert smart_nframes(30, 3.0, 1.0, 4, 64) == 10
    assert smart_nframes(201, 30.0, 1.0, 4, 64) == 6
    assert smart_nframes(9000, 30.0, 1.0, 4, 64) == 64
    assert smart_nframes(3, 30.0, 1.0, 4, 64) == 2
    assert smart_nframes(1, 30.0, 1.0, 4, 64) == 0
    sampled = sample_video(videos["long"], Limits(), "items[0].video", 1.0, 4, 64)
    assert sampled.indices.tolist() == np.linspace(0, 17, 6).round().astype(int).tolist()
    assert sampled.frames.shape == (6, 64, 128, 3) and sampled.fps == 3.0
    # each temporal patch's time: the mean of its two frames' (Qwen3VLProcessor's timestamps)
    assert sampled.timestamps(2) == pytest.approx([(a + b) / 6 for a, b in zip(sampled.indices[::2],
                                                                                sampled.indices[1::2])])
    # 64 x 64 frames grow to 128 tokens of 32 x 32 (VIDEO_MIN_TOKEN_NUM), 720p ones shrink to 768
    assert frame_size(10, 64, 64, 32) == (384, 384)
    height, width = frame_size(64, 720, 1280, 32)
    assert height % 32 == width % 32 == 0 and height * width <= 768 * 32 * 32


def test_what_a_video_cannot_be_is_refused_with_its_field(engine, videos, tmp_path):
    cases = [
        ({"video": b"not a video at all"}, InvalidRequest, "is not a video FFmpeg can read"),
        ({"video": encode_video(synthetic_frames(1, 64, 64), fps=1)}, InvalidRequest, "at least 2"),
        ({"video": "data:video/mp4;base64,@@@"}, InvalidRequest, "not valid base64"),
        ({"video": "https://example.com/a.mp4"}, InvalidRequest, "does not fetch URLs"),
    ]
    for item, error, words in cases:
        with pytest.raises(error, match=words) as caught:
            engine.encode_sync(EMBEDDING, [{"text": "fine"}, item])
        assert caught.value.field == "items[1].video"
    with pytest.raises(InvalidRequest, match="reads images only") as caught:  # a card that declares no video
        engine.encode_sync(IMAGES_ONLY, [{"video": videos["mp4"]}])
    assert caught.value.field == "items[0].video"
    with pytest.raises(ValueError, match="video without image"):
        dataclasses.replace(Catalog.builtin().get(EMBEDDING), modalities=("text", "video"))
    clip = make_tiny_clip(tmp_path / "clip")  # a card may not declare video for a family that reads none
    card = ModelCard(id="clip-video", weights=WeightsSource(path=str(clip)), modalities=("text", "image", "video"),
                     image_size=32)
    with pytest.raises(ValueError, match="the clip family reads no video"):
        load_tokenizer(card, describe(clip))
    with pytest.raises(InvalidRequest, match="one of"):
        engine.encode_sync(EMBEDDING, [{"video": videos["mp4"], "image": sample_images()["png_rgb"]}])
    # bounds read before any frame is decoded
    with pytest.raises(PayloadTooLarge, match="18 frames; at most 10"):
        sample_video(videos["long"], Limits(max_video_frames=10), "items[0].video", 1.0, 4, 64)
    # 10 s: 5 temporal patches of 144 features pass the tiny model's 512 positions (nothing is cut)
    with pytest.raises(InvalidRequest, match="the video and its prompt take 8.. positions; this model reads at most"):
        engine.encode_sync(EMBEDDING, [{"video": encode_video(synthetic_frames(30, 64, 64), fps=3)}])
    with pytest.raises(PayloadTooLarge, match="128 x 64 pixel frames"):
        sample_video(videos["long"], Limits(max_image_pixels=4000), "items[0].video", 1.0, 4, 64)
    with pytest.raises(PayloadTooLarge, match="18 frames of 128 x 64 pixels: 147456 to decode; at most 100000"):
        sample_video(videos["long"], Limits(max_video_pixels=100_000), "items[0].video", 1.0, 4, 64)
    with pytest.raises(PayloadTooLarge, match="at most 1000 per video"):
        sample_video(videos["long"], Limits(max_video_bytes=1000), "items[0].video", 1.0, 4, 64)


def test_the_frames_resize_as_torchvision_and_patch_as_transformers_with_it():
    torch = pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as tv

    rng = np.random.default_rng(0)
    for n, height, width, new_h, new_w in [(4, 64, 96, 352, 512), (2, 480, 640, 416, 544), (2, 720, 1280, 608, 1088)]:
        frames = rng.integers(0, 256, (n, height, width, 3), dtype=np.uint8)
        wanted = tv.resize(torch.from_numpy(frames).permute(0, 3, 1, 2), [new_h, new_w],
                           interpolation=InterpolationMode.BICUBIC, antialias=True).float()
        torch.testing.assert_close(resize_frames(frames, new_h, new_w), wanted, atol=0, rtol=0)


def test_decode_admission_charges_a_video_from_its_container(tiny, videos):
    frame = 128 * 64  # "long": 18 frames of 128 x 64, all decoded, all sampled at most
    assert admission_pixels(videos["long"], Limits()) == int(18 * frame * DECODED_PIXEL_COST) + 18 * frame
    assert admission_pixels(b"not a video", Limits()) == 0  # refused at once by sampling: costs nothing
    assert admission_pixels(videos["long"], Limits(max_video_frames=10)) == 0
    # 6 s at 1,000 frames a second: 6,000 frames to decode (~12.8M image pixels of charge, ~0.2 s at the
    # image threads' prior rate), 6 sampled; the card's window cut to the tiny model's 512 positions, so
    # the token bound (a video reserves the window) holds a few ms where the decoding bound holds 0.4 s
    fast = encode_video(synthetic_frames(6000, 128, 64), fps=1000)
    card = dataclasses.replace(Catalog.builtin().get(EMBEDDING), weights=WeightsSource(path=str(tiny)),
                               dtype="float32", max_seq_len=512, max_batch_tokens=4096)
    with Engine(Catalog([card]), device="cpu", max_queue_wait_s=0.1) as engine:
        engine.encode_sync(EMBEDDING, ["warm the model up: its batches are measured"])

        async def both():
            return await asyncio.gather(*(engine.encode(EMBEDDING, [{"video": fast}]) for _ in range(2)),
                                        return_exceptions=True)

        answers = asyncio.run_coroutine_threadsafe(both(), engine.loop).result(120)
    refused = [a for a in answers if isinstance(a, BaseException)]  # whichever was admitted second
    assert len(refused) == 1 and isinstance(refused[0], Overloaded), answers
    assert "of image decoding" in str(refused[0]) and "shorter videos" in str(refused[0]), refused


def test_a_stream_a_frame_short_of_its_container_gives_its_last_frame_and_a_much_shorter_one_is_refused(
        videos, monkeypatch):
    from sie_engine import videos as video_module

    honest = video_module.probe_video(videos["long"], Limits(), "items[0].video")  # 18 frames at 3 fps
    whole = sample_video(videos["long"], Limits(), "items[0].video", 1.0, 4, 64)
    # the container says 19: linspace(0, 18, 6) asks for frame 18, past the stream's end
    monkeypatch.setattr(video_module, "probe_video", lambda *args: dataclasses.replace(honest, frames=19))
    padded = sample_video(videos["long"], Limits(), "items[0].video", 1.0, 4, 64)
    assert padded.indices[-1] == 18 and padded.frames.shape == whole.frames.shape
    np.testing.assert_array_equal(padded.frames[-1], whole.frames[-1])  # frame 17, the stream's last
    monkeypatch.setattr(video_module, "probe_video", lambda *args: dataclasses.replace(honest, frames=36))
    with pytest.raises(InvalidRequest, match="ends after 18 frames where its container says 36"):
        sample_video(videos["long"], Limits(), "items[0].video", 1.0, 4, 64)
