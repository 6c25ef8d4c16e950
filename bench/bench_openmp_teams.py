"""What a second live OpenMP team costs torch's CPU operators (sie_engine/inference_threads.py).

A loop of small operators on two torch threads (a 16 x 1024 by 1024 x 1024 product and two
elementwise passes over 300k floats, 20 of each per sample, median of 30 samples) in a worker thread,
each case in a fresh process: alone; after another live thread ran torch on all threads (it keeps a
team); after that thread shrank to one thread; after it only ever ran on one thread; after it ended.
Prints each case's ms and its ratio to the loop alone, rounds alternating the cases.

    python bench/bench_openmp_teams.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

CASES = {
    "alone": "the loop's thread is the only one that ran torch",
    "beside a live team": "another live thread ran torch on all threads",
    "beside a shrunk team": "that thread then ran torch on one thread",
    "beside one thread": "another live thread only ever ran torch on one thread",
    "after a team ended": "another thread ran torch on all threads, then ended",
}


def loop_ms(threads: int) -> float:
    import torch

    torch.set_num_threads(threads)
    a, w, x = torch.randn(16, 1024), torch.randn(1024, 1024), torch.randn(300_000)
    samples = []
    for _ in range(30):
        started = time.perf_counter()
        for _ in range(20):
            torch.mm(a, w)
            x.add_(1.0)
            x.mul_(0.999)
        samples.append(time.perf_counter() - started)
    return 1000 * statistics.median(samples)


def warm(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    torch.randn(300_000).add_(1.0)
    torch.mm(torch.randn(16, 1024), torch.randn(1024, 1024))


def case(name: str) -> float:
    with ThreadPoolExecutor(1) as other, ThreadPoolExecutor(1) as measured:
        if name == "beside a live team":
            other.submit(warm, 2).result()
        elif name == "beside a shrunk team":
            other.submit(warm, 2).result()
            other.submit(warm, 1).result()
        elif name == "beside one thread":
            other.submit(warm, 1).result()
        elif name == "after a team ended":
            with ThreadPoolExecutor(1) as gone:
                gone.submit(warm, 2).result()
        return measured.submit(loop_ms, 2).result()


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--case":
        print(case(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ms: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(args.rounds):
        for name in CASES:
            out = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True, text=True, check=True)
            ms[name].append(float(out.stdout))
    alone = statistics.median(ms["alone"])
    for name, why in CASES.items():
        runs, median = " ".join(f"{m:.2f}" for m in ms[name]), statistics.median(ms[name])
        print(f"{name:22} {median:6.2f} ms ({runs})  {median / alone:.2f}x  {why}")


if __name__ == "__main__":
    main()
