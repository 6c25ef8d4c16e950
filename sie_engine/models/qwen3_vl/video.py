"""Qwen3-VL-Embedding's and Qwen3-VL-Reranker's video items, as their published scripts
(`Qwen3VLEmbedder.format_model_input`, `Qwen3VLReranker.format_mm_content`: a video file as `{video,
fps: 1, max_frames: 64}`) hand them to qwen_vl_utils (`fetch_video`) and then to Qwen3VLProcessor
with `do_resize=False` and `do_sample_frames=False` (the reranker one pair at a time).

- Frames: sampled by sie_engine/videos.py at one a second, between 4 and 64 of them.
- Their size (qwen_vl_utils' `smart_resize`, factor patch * merge = 32): sides multiples of 32, the
  area between 128 and 768 tokens of 32 x 32 pixels (VIDEO_MIN_TOKEN_NUM, VIDEO_MAX_TOKEN_NUM), or
  less where the video's share of the total budget (MODEL_SEQ_LEN * 32**2 * 0.9 pixels, two frames
  a temporal patch) is smaller; resized as torchvision's `resize(BICUBIC, antialias=True)` resizes
  a uint8 video (interpolated in float, clamped, rounded).
- Pixels: rescaled and normalised as the image processor's (mean and std 0.5 in Qwen3-VL's), two
  consecutive frames one temporal patch: each patch of frames is a grid `[h, w, C * T * p * p]`
  of its own, as an image is (the vision tower attends within each temporal patch, with the same
  positions as an image of that grid: Qwen3VLVisionModel's cu_seqlens and embeddings per frame).
- Prompt: the chat template writes a video as `<|vision_start|><|video_pad|><|vision_end|>`, which
  the processor replaces (transformers 4.57, the script's) by each temporal patch's
  `<{t:.1f} seconds><|vision_start|>` + its features + `<|vision_end|>`, t the mean time of its two
  frames. Each patch's features take an `<|image_pad|>` placeholder here: its token is replaced by
  the features either way, and positions (get_rope_index splits a video into one-frame grids) are
  those of an image of that grid.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import InvalidRequest
from ...videos import FRAME_FACTOR, SampledVideo, sample_video
from ..colqwen2.inputs import MAX_ASPECT_RATIO

VIDEO_FPS = 1.0  # Qwen3VLEmbedder's FPS, and Qwen3VLReranker's
VIDEO_MAX_FRAMES = 64  # and their MAX_FRAMES
VIDEO_MIN_FRAMES = 4  # qwen_vl_utils' FPS_MIN_FRAMES
FRAME_MIN_TOKENS = 128  # qwen_vl_utils' VIDEO_MIN_TOKEN_NUM and VIDEO_MAX_TOKEN_NUM: a frame's area in
FRAME_MAX_TOKENS = 768  # (patch * merge)**2 pixel tokens
MODEL_SEQ_LEN = 128_000  # qwen_vl_utils' default budget of a video's pixels: MODEL_SEQ_LEN tokens, 0.9 of it


def frame_size(frames: int, height: int, width: int, factor: int) -> tuple[int, int]:
    """(height, width) qwen_vl_utils resizes `frames` sampled frames of `height` x `width` to: its
    smart resize (the one Qwen2-VL's image processor runs, transformers' `smart_resize`) between the
    video bounds of a frame's area."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    least = FRAME_MIN_TOKENS * factor ** 2
    budget = MODEL_SEQ_LEN * factor * factor * 0.9
    most = max(min(FRAME_MAX_TOKENS * factor ** 2, budget / frames * FRAME_FACTOR), int(least * 1.05))
    return smart_resize(height, width, factor=factor, min_pixels=least, max_pixels=most)


def resize_frames(frames: np.ndarray, height: int, width: int):
    """`[n, H, W, 3]` uint8 -> `[n, 3, height, width]` float32 of whole values, as torchvision resizes a
    uint8 video (bicubic, antialiased: in float, clamped to [0, 255], rounded)."""
    import torch
    import torch.nn.functional as F

    video = torch.from_numpy(frames).permute(0, 3, 1, 2).float()
    if video.shape[-2:] == (height, width):
        return video
    out = F.interpolate(video, size=(height, width), mode="bicubic", align_corners=False, antialias=True)
    return out.clamp_(0, 255).round_()


def temporal_patches(video, processor: Any) -> tuple[np.ndarray, ...]:
    """`[n, 3, H, W]` resized frames -> each temporal patch's grid `[h, w, C * T * p * p]`, laid out as
    Qwen3VLVideoProcessor's patchify (merge windows in raster order, each window's patches in order)."""
    import torch

    patch, merge, temporal = int(processor.patch_size), int(processor.merge_size), int(processor.temporal_patch_size)
    mean = torch.tensor(processor.image_mean, dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(processor.image_std, dtype=torch.float32).view(1, 3, 1, 1)
    pixels = (video * float(processor.rescale_factor) - mean) / std
    if pad := -pixels.shape[0] % temporal:  # the last frame repeated to a whole patch
        pixels = torch.cat([pixels, pixels[-1:].expand(pad, -1, -1, -1)])
    n, channels, height, width = pixels.shape
    h, w = height // patch, width // patch
    grid = pixels.view(n // temporal, temporal, channels, h // merge, merge, patch, w // merge, merge, patch)
    grid = grid.permute(0, 3, 6, 4, 7, 2, 1, 5, 8).reshape(n // temporal, h, w, -1)
    return tuple(np.ascontiguousarray(frame.numpy()) for frame in grid)


def video_content(sampled: SampledVideo, temporal: int, image_content: str) -> str:
    """The prompt text of a video: each temporal patch's timestamp before its placeholder."""
    return "".join(f"<{seconds:.1f} seconds>{image_content}" for seconds in sampled.timestamps(temporal))


def prepare_video(value: Any, processor: Any, limits, field: str, image_content: str) -> tuple[tuple, str]:
    """A video item -> (each temporal patch's grid, its prompt content); refusals name `field`."""
    sampled = sample_video(value, limits, field, VIDEO_FPS, VIDEO_MIN_FRAMES, VIDEO_MAX_FRAMES)
    count, height, width = sampled.frames.shape[:3]
    if max(height, width) > MAX_ASPECT_RATIO * min(height, width):
        raise InvalidRequest(f"{field} has {width} x {height} pixel frames: this model takes frames whose longer side "
                             f"is at most {MAX_ASPECT_RATIO} times the shorter", field=field)
    factor = int(processor.patch_size) * int(processor.merge_size)
    new_h, new_w = frame_size(count, height, width, factor)
    grids = temporal_patches(resize_frames(sampled.frames, new_h, new_w), processor)
    return grids, video_content(sampled, int(processor.temporal_patch_size), image_content)
