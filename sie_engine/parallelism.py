"""How batches share the CPU: several at once, each on a share of the cores.

On CPU the encoder's operators are small (a MiniLM layer over 2,048 tokens is a few
milliseconds of matmul, then attention calls per sequence group, norms and activations):
torch's threads meet at a barrier after every one of them, and the elementwise passes
and attention kernels scale poorly across cores. Two batches side by side, each on half
of the threads, keep every core busy instead (all-MiniLM-L6-v2, dev corpus, 2-core box,
2026-11-30: 1.12x-1.14x the tokens/s of one batch on both threads).

A batch that is alone, with nothing queued behind it, still gets every thread: a lone
request's latency is then what one batch on all cores gives. While such a wide batch
runs, no other starts (the cores would be oversubscribed); the next batch waits for it,
as it always did. Wide work always runs on the same inference thread (inference_threads.py:
each thread that runs torch wide keeps an OpenMP team, and teams beyond the cores slow all).

A batch of a model that is cheap runs on a share even when alone (worth_widening): after each
parallel region libgomp's team spins on its cores for a while (300,000 rounds by default, measured
2-7 ms of a core on the 2-core box, 2026-12-07) before it sleeps, so a lone 1 ms batch of a nearly
free model gained 0.15 ms of latency on two threads and took the other core from the event loop
and the tokenisers meanwhile: under 32 one-text clients the server's CPU per request rose from
0.65 to 0.93 ms and its p99 doubled (bench/bench_host.py). A batch expected to take at least
WIDE_MIN_SECONDS (all-MiniLM-L6-v2's lone query: 6-9 ms on two threads, 10.6 on one) still gets
every thread.

On CUDA two batches are in flight by default, each on an inference thread and a CUDA
stream of its own, and torch's CPU threads are left as they are: while the GPU runs one
batch's kernels, the other thread packs the next batch, copies it over and queues its
kernels, or copies the last results back and hands them out. With one batch at a time
the GPU idles through all of that host work between batches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class BatchParallelism:
    """`batches`: how many may run at once. `wide_threads`: torch threads of a batch that
    runs alone; `narrow_threads`: of a batch that shares the CPU. None: threads untouched."""

    batches: int = 1
    wide_threads: int | None = None
    narrow_threads: int | None = None

    @staticmethod
    def for_device(device: torch.device, batches: int | None = None) -> BatchParallelism:
        """CPU: `batches` at once (default two where there are two threads or more), sharing
        the threads torch was given (`torch.set_num_threads`, `OMP_NUM_THREADS`). CUDA:
        `batches` in flight (default two), torch's threads untouched."""
        if batches is not None and batches < 1:
            raise ValueError(f"{device.type}_batches must be at least 1, not {batches}")
        if device.type != "cpu":
            return BatchParallelism(batches or 2)
        threads = torch.get_num_threads()
        batches = min(batches or 2, threads)
        return BatchParallelism(batches, threads, threads // batches)

    def threads_for(self, running_alone: bool) -> int | None:
        return self.wide_threads if running_alone else self.narrow_threads

    def room_for_another(self, running: list[int | None]) -> bool:
        """May one more batch start next to the ones running (their thread counts)?"""
        if not running:
            return True
        if len(running) >= self.batches:
            return False
        return all(threads == self.narrow_threads for threads in running)


# the shortest lone batch worth all CPU threads: the spin tail a wide batch leaves is of this order
WIDE_MIN_SECONDS = 0.003


def worth_widening(shortest_batch_s: float, tokens: int, tokens_per_s: float) -> bool:
    """Whether a lone batch of `tokens` gains from all threads: its model's shortest batch so far
    (its fixed cost; inf before the first) or its tokens at the model's rate take WIDE_MIN_SECONDS."""
    return max(shortest_batch_s, tokens / max(tokens_per_s, 1e-9)) >= WIDE_MIN_SECONDS


def on_threads(threads: int | None, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` run with `threads` torch threads in the calling thread (a thread-local setting of
    OpenMP and MKL), or untouched when None."""
    if threads is None:
        return fn

    def run(*args):
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        return fn(*args)

    return run
