"""Engine throughput: SIE's engine vs sentence-transformers (and infinity-emb's engine,
when its venv exists) on the dev corpus, side by side in one run.

    python bench/bench_engine.py                 # all 6,000 documents, 3 alternating rounds
    python bench/bench_engine.py --limit 1000 --rounds 2 --precisions float32,bfloat16

Same model files (all-MiniLM-L6-v2), same truncation (256 tokens), same torch threads, each
system in a process of its own (system_process.py). Rounds alternate between systems; each
system's median tokens/s is reported with the minimum cosine of its vectors to
sentence-transformers' float32 vectors, the tokens it computed versus the real tokens
(padding), and its achieved FLOP/s against this machine's measured matmul peak.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import MINILM_DIR, MINILM_FLOP_PER_TOKEN, MINILM_ID, Timer, load_texts, median, min_cosine  # noqa: E402
from system_process import SystemProcess  # noqa: E402

MAX_LEN = 256
INFINITY_PYTHON = Path(__file__).parent / ".venv-infinity" / "bin" / "python"


def matmul_peak(dtype: torch.dtype, tokens: int = 4096) -> float:
    """FLOP/s of this machine for MiniLM's MLP-shaped matmul ([tokens, 384] x [384, 1536])."""
    a = torch.randn(tokens, 384, dtype=dtype)
    b = torch.randn(384, 1536, dtype=dtype)
    for _ in range(3):
        a @ b
    runs = 20
    with Timer() as t:
        for _ in range(runs):
            a @ b
    return 2 * tokens * 384 * 1536 * runs / t.seconds


def st_computed_tokens(texts, tokenizer) -> int:
    """Tokens sentence-transformers computes: it sorts by text length and pads each batch of 32."""
    order = np.argsort([-len(t) for t in texts], kind="stable")
    lengths = [len(x) for x in tokenizer([texts[i] for i in order], truncation=True, max_length=MAX_LEN)["input_ids"]]
    return sum(max(lengths[i:i + 32]) * len(lengths[i:i + 32]) for i in range(0, len(lengths), 32))


class SIESystem:
    def __init__(self, precision: str):
        from sie_engine import Engine
        from sie_engine.scheduler import SchedulerEvents
        from sie_engine.validation import Limits

        class Padding(SchedulerEvents):
            padded = 0

            def batch(self, model_id, items, tokens, padded, seconds):
                Padding.padded += padded

        self.padding = Padding
        self.precision = precision
        # the whole corpus (6,000 documents) is one request: lift the 4,096-item limit
        self.engine = Engine(device="cpu", scheduler_events=Padding(), limits=Limits(max_items=1 << 16))
        self.name = f"SIE engine {precision}"

    def run(self, texts):
        self.padding.padded = 0
        result = self.engine.encode_sync(MINILM_ID, texts, precision=self.precision)
        return np.stack([item.dense for item in result.items]), result.tokens + self.padding.padded

    def close(self):
        self.engine.close()


class STSystem:
    name = "sentence-transformers float32 (batch 32)"

    def __init__(self):
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(str(MINILM_DIR), device="cpu")
        self.model.max_seq_length = MAX_LEN
        self._computed: dict[int, int] = {}  # tokens computed, by corpus size

    def run(self, texts):
        vectors = self.model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
        if len(texts) not in self._computed:
            self._computed[len(texts)] = st_computed_tokens(texts, self.model.tokenizer)
        return vectors, self._computed[len(texts)]

    def close(self):
        pass


INFINITY_SCRIPT = r"""
import asyncio, json, sys, time
import numpy as np
from infinity_emb import AsyncEmbeddingEngine, EngineArgs
texts = json.load(open(sys.argv[1])); rounds = int(sys.argv[2]); out = sys.argv[3]
engine = AsyncEmbeddingEngine.from_args(EngineArgs(model_name_or_path=sys.argv[4], engine="torch", device="cpu",
                                                   batch_size=32, model_warmup=False, bettertransformer=False))
async def main():
    async with engine:
        await engine.embed(sentences=texts[:64])
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            vectors, _ = await engine.embed(sentences=texts)
            times.append(time.perf_counter() - start)
        np.save(out, np.asarray(vectors, dtype=np.float32))
        print(json.dumps({"seconds": times}))
asyncio.run(main())
"""


def run_infinity(texts, rounds, threads, workdir: Path):
    """infinity-emb's torch engine in its own venv (bench/.venv-infinity); None if absent."""
    if not INFINITY_PYTHON.exists():
        return None
    (workdir / "texts.json").write_text(json.dumps(texts))
    (workdir / "infinity_bench.py").write_text(INFINITY_SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), HF_HUB_OFFLINE="1", INFINITY_ANONYMOUS_USAGE_STATS="0")
    out = subprocess.run(
        [str(INFINITY_PYTHON), str(workdir / "infinity_bench.py"), str(workdir / "texts.json"), str(rounds),
         str(workdir / "infinity.npy"), str(MINILM_DIR)],
        capture_output=True, text=True, env=env, timeout=3600,
    )
    if out.returncode != 0:
        print("infinity-emb failed:", out.stderr[-2000:], file=sys.stderr)
        return None
    seconds = json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
    return seconds, np.load(workdir / "infinity.npy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=None, help="documents (default: all 6,000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--precisions", default="float32,bfloat16,int8")
    parser.add_argument("--record", action="store_true", help="append the table to bench/RESULTS.md")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    texts = load_texts(args.limit)

    reference = SystemProcess(STSystem, threads=args.threads)
    systems = [reference] + [SystemProcess(SIESystem, p, threads=args.threads)
                             for p in args.precisions.split(",") if p]
    for system in systems:  # warm-up: model load, first-call allocations
        system.call("run", texts[:256])
    times: dict[str, list[float]] = {s.name: [] for s in systems}
    vectors, computed = {}, {}
    for _ in range(args.rounds):
        for system in systems:
            seconds, (vectors[system.name], computed[system.name]) = system.timed("run", texts)
            times[system.name].append(seconds)
    with Engine_tokens() as count:
        real_tokens = count(texts)
    rows = []
    peak = {"float32": matmul_peak(torch.float32), "bfloat16": matmul_peak(torch.bfloat16)}
    base = real_tokens / median(times[reference.name])
    ref_vectors = vectors[reference.name]
    for system in systems:
        tps = real_tokens / median(times[system.name])
        precision = getattr(system, "precision", "float32")
        flops = tps * MINILM_FLOP_PER_TOKEN
        rows.append((system.name, tps, tps / base, min_cosine(vectors[system.name], ref_vectors),
                     computed[system.name] / real_tokens, flops / 1e9, flops / peak.get(precision, peak["float32"])))
    infinity = None
    if args.rounds:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            infinity = run_infinity(texts, args.rounds, args.threads, Path(tmp))
    if infinity is not None:
        seconds, inf_vectors = infinity
        tps = real_tokens / median(seconds)
        rows.insert(1, ("infinity-emb torch engine (batch 32)", tps, tps / base, min_cosine(inf_vectors, ref_vectors),
                        float("nan"), tps * MINILM_FLOP_PER_TOKEN / 1e9, tps * MINILM_FLOP_PER_TOKEN / peak["float32"]))
    header = (f"{len(texts)} documents, {real_tokens} real tokens (truncation {MAX_LEN}), {args.threads} threads, "
              f"median of {args.rounds} alternating rounds; matmul peak fp32 {peak['float32'] / 1e9:.0f} GFLOP/s, "
              f"bf16 {peak['bfloat16'] / 1e9:.0f} GFLOP/s")
    table = ["| system | tokens/s | vs sentence-transformers | min cosine to ST fp32 | computed / real tokens "
             "| GFLOP/s | of matmul peak |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, tps, ratio, cos, pad, gflops, frac in rows:
        table.append(f"| {name} | {tps:,.0f} | {ratio:.2f}x | {cos:.7f} | {pad:.3f} | {gflops:.0f} | {frac:.0%} |")
    print(header)
    print("\n".join(table))
    if not INFINITY_PYTHON.exists():
        print("(infinity-emb: no bench/.venv-infinity; create it with bench/setup_infinity.sh to include it)")
    if args.record:
        with open(Path(__file__).parent / "RESULTS.md", "a") as f:
            f.write(f"\n### Engine throughput, {time.strftime('%Y-%m-%d')}, {machine()}\n\n{header}\n\n"
                    + "\n".join(table) + "\n")
    for system in systems:
        system.close()


class Engine_tokens:
    """Real token count with SIE's tokenizer and the card's truncation."""

    def __enter__(self):
        from sie_engine.tokenizer import TextTokenizer

        self.tokenizer = TextTokenizer(MINILM_DIR, MAX_LEN)
        return lambda texts: self.tokenizer.encode(texts).num_tokens

    def __exit__(self, *exc):
        pass


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}"


if __name__ == "__main__":
    main()
