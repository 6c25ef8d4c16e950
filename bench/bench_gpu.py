"""GPU throughput: SIE's engine (packed batches, varlen attention, float16) against
sentence-transformers float16 on the same GPU and the same texts, for all-MiniLM-L6-v2
and a BERT-base-class model (random weights: throughput does not depend on their
values), plus swap-in time of an evicted model from the pinned host cache.

    python bench/bench_gpu.py --minilm DIR --docs data/debian-dev-docs.jsonl.gz [--copies 5]
        [--variants 1:2 2:2] [--profile]

`--variants` are engine set-ups measured side by side, rounds alternating: batches in flight on
the GPU (each on a CUDA stream of its own) and tokeniser threads; experiments, not engine
options: `2:2:compile` runs the backbone under torch.compile, `2:2:si=0.0005` sets Python's
GIL switch interval to 0.5 ms while the engine runs (default 5 ms). `--profile` shows where the
fastest set-up's time goes: tokenising in one call, the batches back to back with tokens ready,
and six batches under torch's profiler (the top kernels and their total, the GPU's bound).

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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from common import min_cosine  # noqa: E402

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


@dataclass(frozen=True)
class Variant:
    """How SIE's engine is set up: batches in flight on the GPU and tokeniser threads; and, as
    experiments (not engine options), the backbone under torch.compile, or another interval
    at which Python's threads hand over the GIL while the engine runs (`sys.setswitchinterval`)."""
    cuda_batches: int
    tokenizer_threads: int
    compiled: bool = False
    switch_interval: float | None = None

    @staticmethod
    def parse(text: str) -> Variant:
        batches, threads, *options = text.split(":")
        intervals = [float(o.removeprefix("si=")) for o in options if o.startswith("si=")]
        return Variant(int(batches), int(threads), "compile" in options, intervals[0] if intervals else None)

    def __str__(self) -> str:
        compiled = ", backbone compiled" if self.compiled else ""
        interval = f", GIL switch interval {self.switch_interval * 1000:g} ms" if self.switch_interval else ""
        return f"{self.cuda_batches} in flight, {self.tokenizer_threads} tokeniser threads{compiled}{interval}"

    def encode(self, engine: Engine, texts):
        default = sys.getswitchinterval()
        sys.setswitchinterval(self.switch_interval or default)
        try:
            return engine.encode_sync("m", texts)
        finally:
            sys.setswitchinterval(default)


def sie_engine(model_dir: Path, texts, max_len: int, batch_tokens: int, variant: Variant) -> Engine:
    card = ModelCard(id="m", weights=WeightsSource(path=str(model_dir)), pooling="mean", normalize=True,
                     max_seq_len=max_len, max_batch_tokens=batch_tokens, dtype=DTYPE)
    engine = Engine(Catalog([card]), device=DEVICE, limits=Limits(max_items=len(texts)),
                    max_queued_tokens=1 << 28, max_total_queued_tokens=1 << 28,
                    tokenizer_threads=variant.tokenizer_threads, cuda_batches=variant.cuda_batches)
    engine.encode_sync("m", texts[:8])  # loads the model
    if variant.compiled:
        model = engine.pool.resident("m").model
        model.backbone = torch.compile(model.backbone, dynamic=True)
        started = time.perf_counter()
    engine.encode_sync("m", texts[:2048])  # warms the kernels (and compiles)
    if variant.compiled:
        print(f"{variant}: warm-up with compilation {time.perf_counter() - started:.1f} s", flush=True)
    return engine


def sie_runs(model_dir: Path, texts, max_len: int, batch_tokens: int, variants: list[Variant], rounds: int):
    """Every variant's engine loaded at once, their rounds alternating (the machine's drift
    hits them alike): per variant (median seconds, tokens, vectors, attention backend); each
    round's rate is printed."""
    engines = [sie_engine(model_dir, texts, max_len, batch_tokens, variant) for variant in variants]
    try:
        times: list[list[float]] = [[] for _ in variants]
        results: list = [None] * len(variants)
        for _ in range(rounds):
            for i, (variant, engine) in enumerate(zip(variants, engines)):
                seconds, results[i] = timed(lambda variant=variant, engine=engine: variant.encode(engine, texts), 1)
                times[i].append(seconds)
        for variant, t, r in zip(variants, times, results):
            print(f"  {variant}: rounds at " + ", ".join(f"{r.tokens / x:,.0f}" for x in t) + " tokens/s", flush=True)
        return [(statistics.median(t), r.tokens, np.stack([item.dense for item in r.items]),
                 e.pool.resident("m").backend.name) for t, r, e in zip(times, results, engines)]
    finally:
        for engine in engines:
            engine.close()


def profile_sie(model_dir: Path, texts, max_len: int, batch_tokens: int, variant: Variant) -> str:
    """Where the time goes: the texts tokenised up front (one call), then the model's batches run
    back to back on this thread (packing, forward, results; nothing overlapped), then a few of
    them under torch's profiler: the kernels that take the GPU's time and their total, which
    bounds what any host-side change can reach."""
    from torch.profiler import ProfilerActivity, profile

    from sie_engine.work import WorkItem

    engine = sie_engine(model_dir, texts, max_len, batch_tokens, variant)
    try:
        runner = engine.pool.resident("m")
        started = time.perf_counter()
        ids = runner.tokenizer.encode(texts).ids
        tokenize_s = time.perf_counter() - started
        outputs = frozenset(runner.card.outputs)
        batches, batch, held = [], [], 0
        for i, row in enumerate(ids):
            if batch and held + len(row) > batch_tokens:
                batches.append(batch)
                batch, held = [], 0
            batch.append(WorkItem(request=None, index=i, ids=row, outputs=outputs))
            held += len(row)
        batches.append(batch)
        tokens = sum(len(row) for row in ids)
        serial_s, _ = timed(lambda: [runner.run(b) for b in batches], 1)
        sample = batches[: min(6, len(batches))]
        sample_tokens = sum(it.num_tokens for b in sample for it in b)
        with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if DEVICE == "cuda" else [])]) as prof:
            sync()
            started = time.perf_counter()
            for b in sample:
                runner.run(b)
            sync()
            wall = time.perf_counter() - started
    finally:
        engine.close()
    # the kernels' own rows (an operator's row repeats its kernels' time)
    kernel_s = sum(e.self_device_time_total for e in prof.key_averages()
                   if e.device_type == torch.autograd.DeviceType.CUDA) / 1e6
    table = prof.key_averages().table(sort_by="self_device_time_total" if DEVICE == "cuda" else "self_cpu_time_total",
                                      row_limit=16, max_name_column_width=70)
    return (f"{variant}: {tokens:,} tokens; tokenising them in one call {tokens / tokenize_s:,.0f} tokens/s; "
            f"{len(batches)} batches run back to back on one thread {tokens / serial_s:,.0f} tokens/s; "
            f"{len(sample)} of them under the profiler: wall {wall:.3f} s, kernels {kernel_s:.3f} s "
            f"(kernel-bound rate {f'{sample_tokens / kernel_s:,.0f}' if kernel_s else 'n/a'} tokens/s)\n{table}")


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
    parser.add_argument("--st-rounds", type=int, default=None, help="sentence-transformers rounds (default --rounds)")
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown table here")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--sie-batch-tokens", type=int, nargs="+", default=[16384, 65536])
    parser.add_argument("--variants", type=Variant.parse, nargs="+", default=[Variant(1, 2), Variant(2, 2)],
                        help="SIE set-ups as BATCHES_IN_FLIGHT:TOKENISER_THREADS[:compile][:si=SECONDS], "
                             "measured side by side")
    parser.add_argument("--st-batch", type=int, nargs="+", default=[32, 256])
    parser.add_argument("--profile", action="store_true", help="also profile the best set-up of each model once")
    parser.add_argument("--models", nargs="+", default=["minilm", "bert-base"], choices=["minilm", "bert-base"])
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
             f"({len(base)} dev documents x {args.copies}); SIE rounds {args.rounds}, alternating set-ups", "",
             "| model | SIE set-up | SIE tokens/s | SIE batch tokens | attention | ST fp16 tokens/s (batch) "
             "| SIE / ST | min cosine |",
             "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |"]
    profiles = []
    with tempfile.TemporaryDirectory() as tmp:
        models = {"minilm": ("all-MiniLM-L6-v2", args.minilm, 256),
                  "bert-base": ("BERT-base (random)", bert_base_dir(args.minilm, Path(tmp) / "base"), 512)}
        for name, model_dir, max_len in (models[key] for key in args.models):
            # per variant: the best batch budget's (seconds, tokens, vectors, backend, batch tokens)
            best: list = [None] * len(args.variants)
            for batch_tokens in args.sie_batch_tokens:
                runs = sie_runs(model_dir, texts, max_len, batch_tokens, args.variants, args.rounds)
                for i, (variant, (seconds, tokens, vectors, backend)) in enumerate(zip(args.variants, runs)):
                    print(f"{name}: SIE batch {batch_tokens}, {variant}: {tokens / seconds:,.0f} tokens/s "
                          f"({backend})", flush=True)
                    if best[i] is None or seconds < best[i][0]:
                        best[i] = (seconds, tokens, vectors, backend, batch_tokens)
            best_st = None
            tokens = best[0][1]
            for batch_size in args.st_batch:
                seconds, vectors = st_run(model_dir, texts, max_len, batch_size, args.st_rounds or args.rounds)
                if best_st is None or seconds < best_st[0]:
                    best_st = (seconds, vectors, batch_size)
                print(f"{name}: ST batch {batch_size}: {tokens / seconds:,.0f} tokens/s", flush=True)
            st_seconds, st_vectors, st_batch = best_st
            for variant, (seconds, tokens, vectors, backend, batch_tokens) in zip(args.variants, best):
                lines.append(f"| {name} | {variant} | {tokens / seconds:,.0f} | {batch_tokens} | {backend} | "
                             f"{tokens / st_seconds:,.0f} ({st_batch}) | {st_seconds / seconds:.2f}x | "
                             f"{min_cosine(vectors, st_vectors):.5f} |")
            if args.profile:
                fastest = min(range(len(best)), key=lambda i: best[i][0])
                profiles.append(f"{name}, batch {best[fastest][4]}: " + profile_sie(
                    model_dir, texts, max_len, best[fastest][4], args.variants[fastest]))
                print(profiles[-1], flush=True)
        swaps = swap_in_times(args.minilm, base)
        lines += ["", f"Swap-in of an evicted all-MiniLM-L6-v2 from the pinned host cache: median "
                      f"{statistics.median(swaps) * 1000:.1f} ms, max {max(swaps) * 1000:.1f} ms ({len(swaps)} swaps)"]
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n\n" + "\n\n".join(profiles) + "\n")


if __name__ == "__main__":
    main()
