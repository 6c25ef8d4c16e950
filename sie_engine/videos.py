"""Video items: a video file's frames sampled as qwen_vl_utils' `fetch_video` samples them, decoded
with FFmpeg through PyAV, every bound checked before a frame is decoded.

- Bytes: at most `Limits.max_video_bytes` (413), base64 or raw as an image's (images.file_bytes).
- The container is opened from memory (nothing is fetched or written), its first video stream read:
  the frame size from the stream's codec parameters, at most `Limits.max_image_pixels` a frame (413);
  the frame count from the container's header or, where it has none (WebM, MKV), counted from the
  stream's packets (demuxed, not decoded), at most `Limits.max_video_frames` (413); frames x width x
  height, what decoding up to the last sampled frame costs, at most `Limits.max_video_pixels` (413).
  A file FFmpeg cannot read, or one without a video stream, is a 400.
- Sampling (`smart_nframes`, for a video given as a file with `fps`): n = total / video_fps * fps,
  within [min_frames, max_frames] (each rounded to an even count) and the total, floored to an even
  count; the frames at linspace(0, total - 1, n), rounded.
- Decoding goes frame by frame up to the last sampled frame, keeping only the sampled ones as RGB
  (what torchvision's and decord's readers give qwen_vl_utils); a frame whose size differs from the
  stream's is a 400, and so is a stream that ends well before its container's count (one that ends a
  frame or two short gives its last frame for those).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np

from .errors import InvalidRequest, PayloadTooLarge
from .images import file_bytes
from .validation import Limits

FRAME_FACTOR = 2  # qwen_vl_utils: frames come in pairs (a temporal patch)
# What a frame pixel FFmpeg decodes costs in image pixels (decode admission's unit: Pillow's decode, RGB
# conversion and resize), the costliest codec measured rounded up: 720p VP8 0.23, MPEG-4 Part 2 0.13,
# H.264 0.10 of the fastest image path's cost per pixel (bench/bench_video_decode.py, bench/RESULTS.md).
DECODED_PIXEL_COST = 0.25
DECODED_AT_LEAST = 0.9  # of a container's frame count, for a stream that ends short (_decode_at)


@dataclass(frozen=True)
class SampledVideo:
    """The sampled frames `[n, H, W, 3]` (uint8 RGB), their indices in the video and its frame rate."""

    frames: np.ndarray
    indices: np.ndarray
    fps: float

    def timestamps(self, temporal_patch: int) -> list[float]:
        """Seconds of each temporal patch: the mean of its first and last frame's time (Qwen3VLProcessor's
        `_calculate_timestamps`, the indices padded with the last to a whole patch)."""
        indices = list(self.indices) + [self.indices[-1]] * (-len(self.indices) % temporal_patch)
        times = [int(i) / self.fps for i in indices]
        return [(times[i] + times[i + temporal_patch - 1]) / 2 for i in range(0, len(times), temporal_patch)]


def smart_nframes(total: int, video_fps: float, fps: float, min_frames: int, max_frames: int) -> int:
    """How many frames qwen_vl_utils samples from `total` frames at `video_fps` for `fps` a second."""
    least = math.ceil(min_frames / FRAME_FACTOR) * FRAME_FACTOR
    most = math.floor(min(max_frames, total) / FRAME_FACTOR) * FRAME_FACTOR
    count = min(min(max(total / video_fps * fps, least), most), total)
    return int(math.floor(count / FRAME_FACTOR) * FRAME_FACTOR)


@dataclass(frozen=True)
class VideoProbe:
    """What a video's container says, read without decoding a frame."""

    width: int
    height: int
    fps: float
    frames: int


def probe_video(data: bytes, limits: Limits, field: str) -> VideoProbe:
    """The video's frame size, rate and count, each within its bound (see the module docstring)."""
    import av

    with av.open(io.BytesIO(data), mode="r") as container:
        stream = _video_stream(container, field)
        width, height = stream.codec_context.width, stream.codec_context.height
        if width * height > limits.max_image_pixels:
            raise PayloadTooLarge(f"{field} has {width} x {height} pixel frames; at most {limits.max_image_pixels} "
                                  "pixels a frame (downscale it)", field=field)
        rate = stream.average_rate or stream.guessed_rate
        if not rate or rate <= 0:
            raise InvalidRequest(f"{field} has no frame rate in its container (remux it as MP4)", field=field)
        total = stream.frames or _count_packets(container, stream, limits.max_video_frames)
    if total > limits.max_video_frames:
        raise PayloadTooLarge(f"{field} has {total} frames; at most {limits.max_video_frames} per video (cut it)",
                              field=field)
    if total * width * height > limits.max_video_pixels:
        raise PayloadTooLarge(f"{field} has {total} frames of {width} x {height} pixels: {total * width * height} "
                              f"to decode; at most {limits.max_video_pixels} per video (cut or downscale it)",
                              field=field)
    return VideoProbe(width, height, float(rate), total)


def sample_video(value, limits: Limits, field: str, fps: float, min_frames: int, max_frames: int) -> SampledVideo:
    """A video item's sampled frames (see the module docstring); refusals name `field`."""
    import av

    data = file_bytes(value, limits.max_video_bytes, field, "video", "data:video/mp4;base64,...")
    try:
        probe = probe_video(data, limits, field)
        count = smart_nframes(probe.frames, probe.fps, fps, min_frames, max_frames)
        if count < FRAME_FACTOR:
            raise InvalidRequest(f"{field} has {probe.frames} frame(s); a video takes at least {FRAME_FACTOR} (send "
                                 "one frame as an image)", field=field)
        indices = np.linspace(0, probe.frames - 1, count).round().astype(np.int64)
        with av.open(io.BytesIO(data), mode="r") as container:
            frames = _decode_at(container, _video_stream(container, field), indices, (probe.width, probe.height), field)
    except (av.error.FFmpegError, UnicodeDecodeError, ValueError) as exc:
        raise InvalidRequest(f"{field} is not a video FFmpeg can read ({type(exc).__name__}); send MP4, WebM, MKV, "
                             "MOV or AVI", field=field) from None
    return SampledVideo(frames, indices, probe.fps)


def admission_pixels(value, limits: Limits, sampled_at_most: int = 64) -> int:
    """What decoding a video item costs the image threads, in image pixels (decode_admission.py
    charges those): its frames' pixels decoded at `DECODED_PIXEL_COST` each, and the pixels of the
    frames it samples (at most `sampled_at_most`), converted and resized as an image's are. Read from
    the container only. 0 for what sampling refuses at once (not a video, over a bound)."""
    import av

    try:
        probe = probe_video(file_bytes(value, limits.max_video_bytes, "video", "video", ""), limits, "video")
    except (InvalidRequest, PayloadTooLarge, av.error.FFmpegError, UnicodeDecodeError, ValueError):
        return 0
    frame = probe.width * probe.height
    return int(probe.frames * frame * DECODED_PIXEL_COST) + min(probe.frames, sampled_at_most) * frame


def _video_stream(container, field: str):
    if not container.streams.video:
        raise InvalidRequest(f"{field} holds no video stream", field=field)
    return container.streams.video[0]


def _count_packets(container, stream, most: int) -> int:
    """The stream's frames counted from its packets (no decoding); stops past `most`."""
    count = 0
    for packet in container.demux(stream):
        if packet.size:  # the demuxer's last, empty packet flushes the decoder: no frame
            count += 1
            if count > most:
                break
    return count


def _decode_at(container, stream, indices: np.ndarray, size: tuple[int, int], field: str) -> np.ndarray:
    """The frames at `indices` (in order, repeats kept), decoded in stream order up to the last one.
    A container's frame count may run a frame or two past what its stream decodes (edit lists, a
    dropped last frame): sampled frames past the end take the last decoded frame, as long as the
    stream decoded at least `DECODED_AT_LEAST` of the count; a shorter stream is a 400."""
    wanted = np.bincount(indices, minlength=int(indices[-1]) + 1)  # a short video samples some frames twice
    kept: list[np.ndarray] = []
    last, decoded = None, 0  # the last frame decoded (converted only if it stands in for missing ones)
    for number, frame in enumerate(container.decode(stream)):
        if (frame.width, frame.height) != size:
            raise InvalidRequest(f"{field} changes its frame size from {size[0]} x {size[1]} to {frame.width} x "
                                 f"{frame.height} at frame {number}; re-encode it at one size", field=field)
        last, decoded = frame, number + 1
        if wanted[number]:
            kept += [frame.to_ndarray(format="rgb24")] * int(wanted[number])
        if number >= len(wanted) - 1:
            break
    if len(kept) < len(indices):
        if last is None or decoded < DECODED_AT_LEAST * len(wanted):
            raise InvalidRequest(f"{field} ends after {decoded} frames where its container says {len(wanted)}; "
                                 "re-encode it", field=field)
        kept += [last.to_ndarray(format="rgb24")] * (len(indices) - len(kept))
    return np.stack(kept)
