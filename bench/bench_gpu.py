"""GPU throughput: SIE's engine (packed batches, varlen attention, float16) against
sentence-transformers float16 on the same GPU and the same texts, for all-MiniLM-L6-v2
and a BERT-base-class model (random weights: throughput does not depend on their
values), plus swap-in time of an evicted model from the pinned host cache.

    python bench/bench_gpu.py --minilm DIR --docs data/debian-dev-docs.jsonl.gz [--copies 5]

DIR holds all-MiniLM-L6-v2 in the Hugging Face layout (float16 weights are fine).
The corpus is repeated `--copies` times so each timed run lasts long enough to measure.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from sie_engine import Catalog, Engine, ModelCard, WeightsSource  # noqa: E402
from sie_engine.pool import PoolEvents  # noqa: E402
from sie_engine.validation import Limits  # noqa: E402

DTYPE = "float16"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def bert_base_dir(minilm: Path, dest: Path) -> Path:
    """A BERT-base-shaped model (110M parameters) with random weights and MiniLM's tokenizer."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig()).to(getattr(torch, DTYPE))
    model.save_pretrained(dest)
    for name in TOKENIZER_FILES:
        if (minilm / name).exists():
            shutil.copy(minilm / name, dest / name)
    return dest


DEVICE = "cuda"  # --device cpu: a dry run of this script where no GPU is


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def timed(fn, rounds: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(rounds):
        sync()
        start = time.perf_counter()
        result = fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def sie_run(model_dir: Path, texts, max_len: int, batch_tokens: int, rounds: int):
    card = ModelCard(id="m", weights=WeightsSource(path=str(model_dir)), pooling="mean", normalize=True,
                     max_seq_len=max_len, max_batch_tokens=batch_tokens, dtype=DTYPE)
    engine = Engine(Catalog([card]), device=DEVICE, limits=Limits(max_items=len(texts)),
                    max_queued_tokens=1 << 28, max_total_queued_tokens=1 << 28)
    try:
        engine.encode_sync("m", texts[:512])
        backend = engine.pool.resident("m").backend.name
        seconds, result = timed(lambda: engine.encode_sync("m", texts), rounds)
        vectors = np.stack([item.dense for item in result.items])
        return seconds, result.tokens, vectors, backend
    finally:
        engine.close()


def st_run(model_dir: Path, texts, max_len: int, batch_size: int, rounds: int):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir), device=DEVICE, model_kwargs={"torch_dtype": getattr(torch, DTYPE)})
    model.max_seq_length = max_len
    model.encode(texts[:512], batch_size=batch_size)
    seconds, vectors = timed(lambda model=model: model.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                                                              convert_to_numpy=True), rounds)
    del model
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return seconds, vectors


def swap_in_times(model_dir: Path, texts) -> list[float]:
    class Loads(PoolEvents):
        seconds: list = []

        def loaded(self, model_id, nbytes, seconds):
            Loads.seconds.append(seconds)

    cards = [ModelCard(id=f"m{i}", weights=WeightsSource(path=str(model_dir)), max_seq_len=256, max_batch_tokens=8192,
                       dtype=DTYPE) for i in range(2)]
    probe = Engine(Catalog(cards), device=DEVICE)
    need = probe.pool._plan(cards[0]).need
    probe.close()
    engine = Engine(Catalog(cards), device=DEVICE, memory_budget=int(need * 1.5), host_cache="2GiB",
                    pool_events=Loads())
    try:
        for i in range(12):
            engine.encode_sync(f"m{i % 2}", texts[:16])
    finally:
        engine.close()
    return Loads.seconds[2:]  # the first two are cold loads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minilm", type=Path, required=True)
    parser.add_argument("--docs", type=Path, required=True)
    parser.add_argument("--copies", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown table here")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--sie-batch-tokens", type=int, nargs="+", default=[16384, 65536])
    parser.add_argument("--st-batch", type=int, nargs="+", default=[32, 256])
    parser.add_argument("--limit", type=int, default=None, help="documents (dry runs)")
    args = parser.parse_args()
    global DEVICE, DTYPE
    DEVICE = args.device
    DTYPE = "float16" if DEVICE == "cuda" else "float32"
    opener = gzip.open if args.docs.suffix == ".gz" else open  # the repository's corpus is gzipped
    with opener(args.docs, "rt", encoding="utf-8") as f:
        base = [json.loads(line)["text"] for line in f][: args.limit]
    texts = base * args.copies
    gpu = torch.cuda.get_device_name() if DEVICE == "cuda" else "none (dry run on CPU)"
    lines = [f"GPU: {gpu}, torch {torch.__version__}; {len(texts)} texts "
             f"({len(base)} dev documents x {args.copies})", "",
             "| model | SIE tokens/s | SIE batch tokens | attention | ST fp16 tokens/s (batch) | SIE / ST "
             "| min cosine |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: |"]
    with tempfile.TemporaryDirectory() as tmp:
        models = [("all-MiniLM-L6-v2", args.minilm, 256),
                  ("BERT-base (random)", bert_base_dir(args.minilm, Path(tmp) / "base"), 512)]
        for name, model_dir, max_len in models:
            best_sie = None
            for batch_tokens in args.sie_batch_tokens:
                seconds, tokens, vectors, backend = sie_run(model_dir, texts, max_len, batch_tokens, args.rounds)
                if best_sie is None or seconds < best_sie[0]:
                    best_sie = (seconds, tokens, vectors, backend, batch_tokens)
                print(f"{name}: SIE batch {batch_tokens}: {tokens / seconds:,.0f} tokens/s ({backend})", flush=True)
            best_st = None
            for batch_size in args.st_batch:
                seconds, vectors = st_run(model_dir, texts, max_len, batch_size, args.rounds)
                if best_st is None or seconds < best_st[0]:
                    best_st = (seconds, vectors, batch_size)
                print(f"{name}: ST batch {batch_size}: {best_sie[1] / seconds:,.0f} tokens/s", flush=True)
            seconds, tokens, vectors, backend, batch_tokens = best_sie
            st_seconds, st_vectors, st_batch = best_st
            cos = (vectors * st_vectors).sum(1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(st_vectors, axis=1)
            lines.append(f"| {name} | {tokens / seconds:,.0f} | {batch_tokens} | {backend} | "
                         f"{tokens / st_seconds:,.0f} ({st_batch}) | {st_seconds / seconds:.2f}x | {cos.min():.5f} |")
        swaps = swap_in_times(args.minilm, base)
        lines += ["", f"Swap-in of an evicted all-MiniLM-L6-v2 from the pinned host cache: median "
                      f"{statistics.median(swaps) * 1000:.1f} ms, max {max(swaps) * 1000:.1f} ms ({len(swaps)} swaps)"]
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
