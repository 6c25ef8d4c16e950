"""Small synthetic videos encoded with PyAV (FFmpeg's MPEG-4 Part 2 and H.264 in MP4, VP8 in WebM), and
Qwen3-VL-Embedding's and Qwen3-VL-Reranker's published recipes for video items over transformers, the
references of tests/engine/families/test_qwen3_vl_video.py.

The recipe (`Qwen3VLEmbedder.format_model_input`: a video file as `{video, fps: 1, max_frames: 64}`,
the user turn's video first, then its text) goes through qwen_vl_utils' `fetch_video`, written out
here as the fixtures write out the scripts (qwen_vl_utils needs torchvision, which SIE does not
install): every frame decoded to RGB with PyAV (torchvision's reader), `smart_nframes`' count, the
frames at `linspace(0, total - 1, n)` rounded, `smart_resize` at the video bounds and torchvision's
bicubic antialiased resize; then transformers' own Qwen3VLVideoProcessor (`do_resize=False`,
`do_sample_frames=False`) patchifies them, Qwen3VLProcessor's `replace_video_token` writes the
timestamps, replacing the chat template's `<|vision_start|><|video_pad|><|vision_end|>` as
transformers 4.57 (the script's) did, and Qwen3VLModel runs the prompt. Where torchvision is not
installed, its two functions the video processor calls on this path stand in: `grayscale_to_rgb`
(nothing to do for RGB) and `normalize` ((x - mean) / std per channel).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from qwen3_vl_fixtures import EMBED_INSTRUCTION, IMAGE, MERGE, PATCH, chat, expand_images, reranker_prompt

VIDEO = "<|vision_start|><|video_pad|><|vision_end|>"  # the chat template's rendering of a video


def synthetic_frames(count: int, width: int, height: int, seed: int = 0) -> np.ndarray:
    """`[count, height, width, 3]` uint8: a gradient that moves and changes colour frame by frame."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, size=(height // 8 + 1, width // 8 + 1, 3)).repeat(8, 0).repeat(8, 1)[:height, :width]
    frames = [np.roll(base, shift=3 * i, axis=1) // 2 + (i * 9) % 128 for i in range(count)]
    return np.stack(frames).astype(np.uint8)


CODECS = {"mp4": ("mp4", "mpeg4", {"g": "1", "qscale": "2"}),
          "webm": ("webm", "libvpx", {"g": "1", "crf": "4", "b": "2M"}),
          # H.264 as cameras and phones write it: a keyframe a second, B-frames between
          "h264": ("mp4", "libx264", {"crf": "18", "preset": "veryfast"})}


def encode_video(frames: np.ndarray, fps: int, container: str = "mp4") -> bytes:
    """The frames as a video file: MPEG-4 Part 2 in MP4 or VP8 in WebM, every frame a keyframe at high
    quality, so decoding returns them closely; or ("h264") H.264 in MP4 with B-frames."""
    import av

    out = io.BytesIO()
    fmt, codec, options = CODECS[container]
    with av.open(out, mode="w", format=fmt) as video:
        stream = video.add_stream(codec, rate=fps)
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        stream.options = options
        for array in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(array, format="rgb24")):
                video.mux(packet)
        for packet in stream.encode():
            video.mux(packet)
    return out.getvalue()


def decoded_frames(data: bytes) -> tuple[np.ndarray, float]:
    """Every frame as RGB and the stream's average rate: what torchvision's `read_video` gives."""
    import av

    with av.open(io.BytesIO(data)) as video:
        stream = video.streams.video[0]
        frames = [frame.to_ndarray(format="rgb24") for frame in video.decode(stream)]
        return np.stack(frames), float(stream.average_rate)


def _smart_resize(height: int, width: int, factor: int, min_pixels: float, max_pixels: float) -> tuple[int, int]:
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar, w_bar = math.floor(height / beta / factor) * factor, math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def torchvision_resize(video, height: int, width: int):
    """torchvision's `resize(video, [h, w], BICUBIC, antialias=True)` of a uint8 `[n, 3, H, W]`, or, without
    torchvision, what it computes for one (interpolated in float, clamped, rounded)."""
    import torch

    try:
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms import functional as tv
    except ImportError:
        out = torch.nn.functional.interpolate(video.float(), size=(height, width), mode="bicubic",
                                              align_corners=False, antialias=True)
        return out.clamp(0, 255).round()
    return tv.resize(video, [height, width], interpolation=InterpolationMode.BICUBIC, antialias=True).float()


def fetch_video(data: bytes, fps: float = 1.0, max_frames: int = 64):
    """qwen_vl_utils' `fetch_video(..., image_patch_size=16, return_video_metadata=True)` of a video file
    -> (frames `[n, 3, h, w]` float, metadata)."""
    import torch

    frames, video_fps = decoded_frames(data)
    total = len(frames)
    least = math.ceil(4 / 2) * 2
    most = math.floor(min(max_frames, total) / 2) * 2
    count = math.floor(min(min(max(total / video_fps * fps, least), most), total) / 2) * 2
    indices = torch.linspace(0, total - 1, count).round().long()
    video = torch.from_numpy(frames).permute(0, 3, 1, 2)[indices]
    factor = PATCH * MERGE
    min_pixels = 128 * factor * factor
    total_pixels = 128000 * factor * factor * 0.9
    max_pixels = max(min(768 * factor * factor, total_pixels / count * 2), int(min_pixels * 1.05))
    height, width = _smart_resize(video.shape[2], video.shape[3], factor, min_pixels, max_pixels)
    metadata = {"fps": video_fps, "frames_indices": indices.tolist(), "total_num_frames": total}
    return torchvision_resize(video, height, width), metadata


def _video_processor():
    import importlib

    # the module itself (the package's lazy attribute is a placeholder where torchvision is missing)
    video_processing_qwen3_vl = importlib.import_module("transformers.models.qwen3_vl.video_processing_qwen3_vl")
    try:
        import torchvision  # noqa: F401
    except ImportError:  # the two torchvision functions this path calls (see the module docstring)
        import torch
        from transformers import image_processing_backends, video_processing_utils

        def normalize(image, mean, std):
            mean = torch.as_tensor(mean, dtype=image.dtype).view(-1, 1, 1)
            std = torch.as_tensor(std, dtype=image.dtype).view(-1, 1, 1)
            return (image - mean) / std

        stand_in = SimpleNamespace(grayscale_to_rgb=lambda video: video, normalize=normalize)
        video_processing_utils.tvF = image_processing_backends.tvF = stand_in
    return video_processing_qwen3_vl.Qwen3VLVideoProcessor(patch_size=PATCH, merge_size=MERGE, temporal_patch_size=2,
                                                            image_mean=[0.5] * 3, image_std=[0.5] * 3)


@dataclass(frozen=True)
class Video:
    """A video file's bytes among a reranker pair's parts (the others: texts and image bytes)."""

    data: bytes


def _video_recipe(path: Path) -> SimpleNamespace:
    """transformers' parts of the recipes over the tiny model at `path`."""
    import torch
    from transformers import AutoTokenizer, Qwen3VLForConditionalGeneration, Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tokenizer = AutoTokenizer.from_pretrained(path)
    video_processor = _video_processor()
    # Qwen3VLProcessor's own method on what it reads of itself (its constructor checks its parts'
    # classes against torchvision's where torchvision is missing)
    processor = SimpleNamespace(video_processor=video_processor, vision_start_token="<|vision_start|>",
                                vision_end_token="<|vision_end|>", video_token="<|video_pad|>",
                                _calculate_timestamps=lambda *args: Qwen3VLProcessor._calculate_timestamps(None, *args))
    model = Qwen3VLForConditionalGeneration.from_pretrained(path, dtype=torch.float32).eval()
    return SimpleNamespace(tokenizer=tokenizer, image_processor=Qwen2VLImageProcessorPil.from_pretrained(path),
                           video_processor=video_processor, processor=processor, model=model)


def _run_prompt(recipe: SimpleNamespace, prompt: str, parts: list) -> Any:
    """The last hidden state of a chat prompt holding `parts`' images and videos in order (its
    `<|image_pad|>` expanded to each image's features, each video's placeholder to its timestamped
    temporal patches, as Qwen3VLProcessor writes them)."""
    import torch
    from transformers import Qwen3VLProcessor

    tokenizer, model = recipe.tokenizer, recipe.model
    prompt, kwargs = expand_images(recipe.image_processor, prompt, [part for part in parts if isinstance(part, bytes)])
    videos = [part.data for part in parts if isinstance(part, Video)]
    if videos:
        fetched = [fetch_video(data) for data in videos]
        processed = recipe.video_processor(videos=[f[0] for f in fetched], video_metadata=[f[1] for f in fetched],
                                           do_resize=False, do_sample_frames=False, return_metadata=True,
                                           return_tensors="pt")
        pieces = prompt.split(VIDEO)
        prompt = pieces[0] + "".join(Qwen3VLProcessor.replace_video_token(recipe.processor, processed, i) + rest
                                     for i, rest in enumerate(pieces[1:]))
        kwargs.update(pixel_values_videos=processed["pixel_values_videos"], video_grid_thw=processed["video_grid_thw"])
    input_ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    kwargs["mm_token_type_ids"] = ((input_ids == model.config.image_token_id).int()
                                   + (input_ids == model.config.video_token_id).int() * 2)
    with torch.no_grad():
        return model.model(input_ids=input_ids, **kwargs).last_hidden_state[0, -1]


def video_embedding_reference(path: Path, items: list[dict], instruction: str | None = None) -> list[np.ndarray]:
    """`Qwen3VLEmbedder.process` over `{video, text?}` items: each item's normalised embedding."""
    import torch

    recipe = _video_recipe(path)
    out = []
    for item in items:
        prompt = chat(instruction or EMBED_INSTRUCTION, [VIDEO] + ([item["text"]] if "text" in item else []))
        last = _run_prompt(recipe, prompt, [Video(item["video"])])
        out.append(torch.nn.functional.normalize(last, dim=-1).numpy())
    return out


def video_reranker_reference(path: Path, pairs: list[tuple[list, list]], instruction: str | None = None) -> list[float]:
    """`Qwen3VLReranker.process`'s scores of (query parts, document parts) pairs, each side's parts in
    the script's order (its video, then its image, then its text; a part: a `Video`, image bytes or a
    text), one pair at a time as the script runs them: sigmoid(last hidden . (lm_head[yes] - lm_head[no]))."""
    import torch

    recipe = _video_recipe(path)
    tokenizer, model = recipe.tokenizer, recipe.model
    row = (model.lm_head.weight[tokenizer.convert_tokens_to_ids("yes")]
           - model.lm_head.weight[tokenizer.convert_tokens_to_ids("no")])

    def rendered(parts: list) -> list[str]:
        return [VIDEO if isinstance(p, Video) else IMAGE if isinstance(p, bytes) else p for p in parts]

    scores = []
    for query, document in pairs:
        prompt = reranker_prompt(rendered(query), rendered(document), instruction)
        with torch.no_grad():
            scores.append(float(torch.sigmoid(_run_prompt(recipe, prompt, query + document) @ row)))
    return scores
