"""Bulk embedding on Ray Data: SIE actors (`sie_ray.SIEEncoder`, an Engine per actor) against
a sentence-transformers actor, same data, same cores, side by side in one run.

    python bench/bench_ray.py                        # 2,000 dev documents, 2 alternating rounds
    python bench/bench_ray.py --limit 6000 --rounds 3 --actors 2

Both pipelines are the same Dataset (Parquet-free: `from_items` of the dev corpus in blocks of
`--batch-size` rows), the same `map_batches` shape (`--actors` actors of num_cpus=1, each with
torch on cores // actors threads), the same model files (all-MiniLM-L6-v2) and truncation (256
tokens). A job's time is the whole `materialize()`, actor start and model load included, as a
bulk job pays it. Rounds alternate; medians are reported, with the minimum cosine between the
two systems' vectors.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))
from common import MINILM_DIR, MINILM_ID, load_texts, median, min_cosine  # noqa: E402

MAX_LEN = 256


class SentenceTransformerActor:
    """The peer: what a Ray Data user writes today, a sentence-transformers model per actor."""

    def __init__(self, model_dir: str):
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(model_dir, device="cpu")
        self.model.max_seq_length = MAX_LEN

    def __call__(self, batch: pa.Table) -> pa.Table:
        vectors = self.model.encode(batch.column("text").to_pylist(), batch_size=32, convert_to_numpy=True)
        flat = pa.array(vectors.astype(np.float32).reshape(-1))
        return batch.append_column("dense", pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1]))


def pipeline(ray, texts: list[str], system: str, actors: int, batch_size: int, threads: int):
    from sie_ray import SIEEncoder

    ds = ray.data.from_items([{"row": i, "text": t} for i, t in enumerate(texts)],
                             override_num_blocks=max(1, len(texts) // batch_size))
    if system == "sie":
        cls, kwargs = SIEEncoder, {"model": MINILM_ID, "column": "text", "device": "cpu"}
    else:
        cls, kwargs = SentenceTransformerActor, {"model_dir": str(MINILM_DIR)}
    return ds.map_batches(cls, fn_constructor_kwargs=kwargs, compute=ray.data.ActorPoolStrategy(size=actors),
                          batch_size=batch_size, batch_format="pyarrow", num_cpus=1,
                          runtime_env={"env_vars": {"OMP_NUM_THREADS": str(threads)}})


def run_job(ray, texts, system, actors, batch_size, threads) -> tuple[float, np.ndarray]:
    started = time.perf_counter()
    table = pa.concat_tables(ray.get(pipeline(ray, texts, system, actors, batch_size, threads)
                                     .materialize().to_arrow_refs()))
    seconds = time.perf_counter() - started
    table = table.sort_by("row")
    column = table.column("dense").combine_chunks()
    return seconds, column.flatten().to_numpy().reshape(len(column), column.type.list_size)


def count_tokens(texts: list[str]) -> int:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(MINILM_DIR / "tokenizer.json"))
    tokenizer.enable_truncation(MAX_LEN)
    return sum(len(e.ids) for e in tokenizer.encode_batch(texts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--actors", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()

    import ray

    cores = os.cpu_count() or 1
    threads = max(1, cores // args.actors)
    # the actors' slots plus one for Ray Data's own tasks
    ray.init(num_cpus=args.actors + 1, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    texts = load_texts(args.limit)
    tokens = count_tokens(texts)
    times: dict[str, list[float]] = {"sie": [], "sentence-transformers": []}
    vectors: dict[str, np.ndarray] = {}
    for round_ in range(args.rounds):
        for system in ("sie", "sentence-transformers") if round_ % 2 == 0 else ("sentence-transformers", "sie"):
            seconds, vectors[system] = run_job(ray, texts, system, args.actors, args.batch_size, threads)
            times[system].append(seconds)
            print(f"round {round_ + 1} {system}: {seconds:.1f} s", file=sys.stderr)
    ray.shutdown()

    report = {
        "documents": len(texts), "tokens": tokens, "actors": args.actors, "threads_per_actor": threads,
        "cores": cores, "batch_size": args.batch_size, "rounds": args.rounds,
        "systems": {system: {"job_s": round(median(t), 2), "tokens_per_s": round(tokens / median(t)),
                             "docs_per_s": round(len(texts) / median(t), 1), "runs_s": [round(x, 1) for x in t]}
                    for system, t in times.items()},
        "sie_over_sentence_transformers": round(median(times["sentence-transformers"]) / median(times["sie"]), 2),
        "min_cosine": round(min_cosine(vectors["sie"], vectors["sentence-transformers"]), 7),
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
