"""Hot swap: two models under a memory budget that holds only one, requests alternating
between them. Prints the cold load time, the swap-in time of an evicted model (from the
host cache, and without it), and the throughput lost to swapping versus serving one model.

    python bench/bench_hotswap.py [--docs 64] [--rounds 20] [--device cpu|cuda]

The two models are all-MiniLM-L6-v2 and a second card over the same files (same size, a
separate pool entry), so the swap cost is MiniLM's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import MINILM_DIR, Timer, load_texts  # noqa: E402


def make_engine(device: str, host_cache: int, budget_models: float):
    from sie_engine import Catalog, Engine, ModelCard, WeightsSource
    from sie_engine.pool import PoolEvents

    class Loads(PoolEvents):
        seconds: list = []

        def loaded(self, model_id, nbytes, seconds):
            Loads.seconds.append(seconds)

    cards = [ModelCard(id=f"minilm-{name}", weights=WeightsSource(path=str(MINILM_DIR)), max_seq_len=256,
                       max_batch_tokens=8192) for name in ("a", "b")]
    probe = Engine(Catalog(cards), device=device)
    need = probe.pool._plan(cards[0]).need
    probe.close()
    Loads.seconds = []
    engine = Engine(Catalog(cards), device=device, memory_budget=int(need * budget_models), host_cache=host_cache,
                    pool_events=Loads())
    return engine, Loads


def run(device: str, host_cache: int, texts, rounds: int):
    engine, loads = make_engine(device, host_cache, 1.5)
    try:
        with Timer() as cold:
            engine.load_sync("minilm-a")
        engine.encode_sync("minilm-a", texts)
        with Timer() as single:
            for _ in range(rounds):
                engine.encode_sync("minilm-a", texts)
        loads.seconds.clear()
        with Timer() as alternating:
            for i in range(rounds):
                engine.encode_sync("minilm-b" if i % 2 == 0 else "minilm-a", texts)
        swaps = list(loads.seconds)[1:]  # the first is minilm-b's cold load, not a swap
    finally:
        engine.close()
    return cold.seconds, swaps, single.seconds, alternating.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=64, help="documents per request")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    texts = load_texts(args.docs)
    print(f"{args.device}: requests of {args.docs} documents alternating between two MiniLM-sized models, "
          f"budget for one; {args.rounds} requests")
    print("| swap-in from | cold load ms | swap-in ms (median) | swap-in ms (max) | throughput vs one model |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, cache in (("host cache", 2**30), ("checkpoint (no cache)", 0)):
        cold, swaps, single, alternating = run(args.device, cache, texts, args.rounds)
        print(f"| {label} | {cold * 1000:.0f} | {statistics.median(swaps) * 1000:.1f} | {max(swaps) * 1000:.1f} | "
              f"{single / alternating:.0%} |")


if __name__ == "__main__":
    main()
