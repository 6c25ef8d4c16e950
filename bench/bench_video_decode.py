"""What a decoded video pixel costs against a decoded image pixel, on one thread (videos.DECODED_PIXEL_COST).

    python bench/bench_video_decode.py            # 3 rounds, each: the images, then the videos

Decode admission (sie_engine/decode_admission.py) charges a request its pixels at the image threads'
rate, measured on images (Pillow: decode, RGB, resize). A video item's frames are decoded by FFmpeg
through PyAV (sie_engine/videos.py: every frame up to the last sampled one), which is far cheaper per
pixel; admission charges each such pixel `DECODED_PIXEL_COST` image pixels. This prints, side by side
in each round, the pixels per second of a 2,000 x 2,000 JPEG and a zlib-heavy PNG decoded, converted
and resized to 224 x 224 (the images' path), and of `sample_video` on 720p MPEG-4 Part 2 (MP4), VP8
(WebM) and H.264 (MP4, B-frames) videos of synthetic frames, and each one's cost per pixel against the
fastest image path (the ratio admission may charge without under-charging a video).
"""

from __future__ import annotations

import io
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))

from video_fixtures import encode_video, synthetic_frames  # noqa: E402


def image_files() -> dict[str, bytes]:
    from PIL import Image

    rng = np.random.default_rng(0)
    smooth = np.linspace(0, 255, 2000 * 2000 * 3).reshape(2000, 2000, 3).astype(np.uint8)
    noisy = (smooth // 2 + rng.integers(0, 64, smooth.shape, dtype=np.uint8)).astype(np.uint8)
    files = {}
    for name, array, fmt in (("jpeg 2000x2000", noisy, "JPEG"), ("png 2000x2000", smooth, "PNG")):
        out = io.BytesIO()
        Image.fromarray(array).save(out, fmt)
        files[name] = out.getvalue()
    return files


def image_rate(data: bytes) -> float:
    from PIL import Image

    started = time.perf_counter()
    image = Image.open(io.BytesIO(data))
    pixels = image.width * image.height
    image.convert("RGB").resize((224, 224), Image.Resampling.BICUBIC)
    return pixels / (time.perf_counter() - started)


def video_rate(data: bytes, frames: int, width: int, height: int) -> float:
    from sie_engine.validation import Limits
    from sie_engine.videos import sample_video

    started = time.perf_counter()
    sample_video(data, Limits(), "video", 1.0, 4, 64)
    return frames * width * height / (time.perf_counter() - started)


def main() -> int:
    images = image_files()
    videos = {"mp4 1280x720 x120": (encode_video(synthetic_frames(120, 1280, 720), 30), 120, 1280, 720),
              "webm 1280x720 x60": (encode_video(synthetic_frames(60, 1280, 720), 30, "webm"), 60, 1280, 720),
              "h264 1280x720 x120": (encode_video(synthetic_frames(120, 1280, 720), 30, "h264"), 120, 1280, 720)}
    rates: dict[str, list[float]] = {}
    for round_ in range(3):
        for name, data in images.items():
            rates.setdefault(name, []).append(image_rate(data))
        for name, (data, frames, width, height) in videos.items():
            rates.setdefault(name, []).append(video_rate(data, frames, width, height))
        print(f"round {round_ + 1}: " + ", ".join(f"{name} {values[-1] / 1e6:.0f}M px/s"
                                                  for name, values in rates.items()), file=sys.stderr)
    median = {name: statistics.median(values) for name, values in rates.items()}
    image = max(median[name] for name in images)
    print(f"{'input':22} {'M pixels/s (median)':>20} {'cost per pixel vs the fastest image':>36}")
    for name, rate in median.items():
        print(f"{name:22} {rate / 1e6:20.0f} {image / rate:36.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
