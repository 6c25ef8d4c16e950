"""The decode worker of one loaded generative model: its running batch (a DecodeLoop), driven from
the engine's event loop, every step on an inference thread.

- A request's pages are jobs. `generate(jobs)` queues them and awaits their answers; a job joins
  the running batch at the next step (its page encoded in that step, with the others joining), and
  leaves it the step it finishes.
- One driver task per model runs while there is work: it hands each step to the scheduler's
  inference threads (`Steps.infer`, which replaces threads that died) and waits for it, so the
  DecodeLoop is touched by one thread at a time, and the event loop only moves jobs in and answers
  out (nothing heavy: encoding, decoding and the answers' parsing all run in the step).
- A caller gone (its task cancelled: a client disconnected, a deadline) cancels its jobs: those
  not yet joined are dropped, the running ones leave the batch at the next step boundary, their
  cache rows freed there (DecodeLoop.cancel), before another token is generated for anyone.
- While it has work the worker pins its model in the pool (never evicted mid-generation) and
  charges the pool its KV cache: bytes per position times the positions its running jobs may
  reach (prompt + max_new_tokens, per beam, plus their encoder memory), beside the weights.
- On a CPU a step runs on all of torch's threads while nothing else runs or waits, on a share of
  them beside the scheduler's batches (Scheduler.begin_side_step), which count it as a running
  batch: a generating model alone decodes as fast as the CPU allows, and encoder work that comes
  meanwhile gets its room at the next step.
- Each step's tokens and seconds feed admission's throughput of the model (decoding is far
  slower per token than an encoder's pass, so the size prior would admit floods).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .head import Answer, GenerationHead
from .job import Job
from .loop import DecodeLoop, GenerationResult


@dataclass
class Done:
    answer: Answer
    result: GenerationResult


class Steps(Protocol):
    """Who runs each step and decides its torch threads beside the other batches (the engine's
    Scheduler: one owner of the inference threads, so a replacement serves batches and steps)."""

    def begin_side_step(self, step: int) -> int | None: ...

    def end_side_step(self, step: int) -> None: ...

    async def infer(self, threads: int | None, fn: Callable, *args) -> Any: ...


class DecodeWorker:
    """observe(tokens, seconds): a step's work (admission's throughput); charge(bytes): the
    cache the model holds now (the pool's); busy(bool): pin while there is work."""

    def __init__(self, head: GenerationHead, steps: Steps, device: torch.device, dtype: torch.dtype,
                 observe: Callable[[int, float], None], charge: Callable[[int], None],
                 busy: Callable[[bool], None], max_rows: int = 64):
        """steps: runs each step on an inference thread, on all torch threads while nothing else
        runs, on a share beside the scheduler's batches (a step shares the CPU with them)."""
        self.head = head
        self.decode = DecodeLoop(head.model, device, dtype, max_rows=max_rows)
        self._steps = steps
        self._observe, self._charge, self._busy = observe, charge, busy
        self._waiting: list[Job] = []  # not yet handed to the DecodeLoop
        self._running: dict[int, Job] = {}  # by handle
        self._driver: asyncio.Task | None = None

    @property
    def idle(self) -> bool:
        return self._driver is None

    @property
    def jobs(self) -> int:
        """Jobs waiting or running."""
        return len(self._waiting) + len(self._running)

    async def generate(self, jobs: Sequence[Job]) -> list[Done]:
        """Queue the jobs and await their answers (in order). Cancelled: the jobs leave the batch."""
        loop = asyncio.get_running_loop()
        for job in jobs:
            job.future = loop.create_future()
        self._waiting.extend(jobs)
        if self._driver is None:
            self._busy(True)
            self._driver = loop.create_task(self._drive(), name="sie-decode")
        try:
            return list(await asyncio.gather(*(job.future for job in jobs)))
        except BaseException:
            self._cancel(jobs)
            raise

    def _cancel(self, jobs: Sequence[Job]) -> None:
        """On the event loop: the jobs' answers are no longer wanted. Those not joined yet are
        dropped now; the driver frees the others' rows before its next step."""
        for job in jobs:
            if not job.future.done():
                job.future.cancel()
        self._waiting = [job for job in self._waiting if not job.future.cancelled()]

    async def _drive(self) -> None:
        try:
            while self._waiting or self._running:
                joining, self._waiting = self._waiting, []
                cancelled = [handle for handle, job in self._running.items() if job.future.cancelled()]
                for handle in cancelled:
                    del self._running[handle]
                running = dict(self._running)  # the step's own view: the loop may change ours meanwhile
                threads = self._steps.begin_side_step(id(self))
                try:
                    joined, finished = await self._steps.infer(threads, self._step, joining, cancelled, running)
                except Exception as exc:  # a failed step fails every job in it; the batch starts afresh
                    for job in [*joining, *self._running.values()]:
                        if not job.future.done():
                            job.future.set_exception(exc)
                    self._running.clear()
                    self.decode = DecodeLoop(self.head.model, self.decode.device, self.decode.dtype,
                                             self.decode.max_rows)
                    continue
                finally:
                    self._steps.end_side_step(id(self))
                self._running.update(joined)
                for handle, done in finished.items():
                    job = self._running.pop(handle)
                    if not job.future.done():
                        job.future.set_result(done)
                self._charge(self._cache_bytes())
        finally:
            self._driver = None
            self._charge(0)
            self._busy(False)

    def _cache_bytes(self) -> int:
        """The pool's charge: every running job's rows at the positions it may reach."""
        return sum(self.head.kv_bytes(job.settings.num_beams, job.charge_positions, job.memory_length)
                   for job in self._running.values())

    def _step(self, joining: list[Job], cancelled: list[int],
              running: dict[int, Job]) -> tuple[dict[int, Job], dict[int, Done]]:
        """On an inference thread: drop the cancelled (their cache rows freed before the next
        token), encode and add the joining, one decode step. Returns the joined jobs by handle and
        the finished jobs' answers."""
        started = time.monotonic()
        for handle in cancelled:
            self.decode.cancel(handle)
        tokens = 0
        joined: dict[int, Job] = {}
        if joining:
            step = self.head.encode_batch
            for lo in range(0, len(joining), step):  # a few pages at a time: their activations are large
                group = joining[lo:lo + step]
                with torch.inference_mode():
                    requests = self.head.requests(group, self.decode.device, self.decode.dtype)
                for request, job in zip(requests, group, strict=True):
                    joined[self.decode.add(request)] = job
                    job.pixels = None  # encoded: the page's pixels are no longer held
                    job.memory_length = 0 if request.memory is None else int(request.memory.shape[0])
                    job.prompt_length = len(request.prompt)
                    tokens += job.memory_length + job.prompt_length
        results = self.decode.step()
        tokens += self.decode.cache.rows + sum(len(r.tokens) > 0 for r in results.values())
        everyone = {**running, **joined}
        finished = {handle: Done(self.head.answer(everyone[handle].prompt, result.tokens, everyone[handle].task,
                                                  everyone[handle].size), result)
                    for handle, result in results.items()}
        self._observe(tokens, time.monotonic() - started)
        return joined, finished


def tokens_generated(done: Sequence[Done]) -> int:
    return sum(len(d.result.tokens) for d in done)


__all__ = ["DecodeWorker", "Done", "Job", "tokens_generated"]
