"""Token-budget batching across requests.

Per (model, task) a FIFO queue of sequences. One dispatcher coroutine picks the
queue whose oldest sequence is oldest among the models that are loaded (starting
loads for the others), takes sequences from its front up to the card's
`max_batch_tokens` real tokens, and runs them as one packed batch on the
inference thread. While a batch runs, new requests queue up and are merged into
the next one; an idle model runs a lone request at once. On CPU two batches may run
side by side, each on half of the threads (see parallelism.py).

Ordering: requests are served oldest first, so nothing starves; inside a request
the engine sorts its sequences by length, so the batches a large request is cut
into hold similar lengths (the CPU attention path then needs little padding).
Results go back to each request in its own order; a request larger than one
batch is split across batches and reassembled.

Admission (admission.py): a request is queued only if the work queued before it finishes
within `max_queue_wait_s` at the measured throughput; the decision comes before the
request is tokenised, from an upper bound of its tokens, so a refusal is immediate.
`max_queued_tokens` stays as a memory guard on what is queued.

Faults stay local: a batch that raises fails only its own requests; a batch that
runs out of device memory is retried in halves after idle models are evicted and
the allocator's cache is emptied (only a sequence that cannot run even alone
fails); a dispatcher that dies is restarted by a watchdog (batches run in tasks
of their own, so those in flight finish and no accepted work is lost), and an
inference thread that is gone is replaced before the next batch.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .admission import PendingCall, Reservation, Throughput, WaitAdmission, cold_allowance
from .errors import DeadlineExceeded, Draining, InferenceFailed, ModelLoadFailed, Overloaded, PayloadTooLarge, SIEError
from .inference_threads import InferenceThreads
from .parallelism import BatchParallelism, worth_widening
from .pool import ModelPool
from .work import WorkItem

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Request:
    model_id: str
    task: str
    size: int
    deadline: float | None = None  # time.monotonic() limit, or None
    # made in __post_init__ (on the running loop), never passed
    future: asyncio.Future = field(init=False)  # list of per-item results
    results: list = field(init=False)
    remaining: int = 0
    enqueued_at: float = 0.0
    started_at: float | None = None
    inference_s: float = 0.0
    # the tokens reserved when the request was admitted, settled as its items are queued
    reservation: Reservation | None = None

    def __post_init__(self):
        self.future = asyncio.get_running_loop().create_future()
        self.results = [None] * self.size
        self.remaining = self.size

    @property
    def finished(self) -> bool:
        return self.future.done()

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


class SchedulerEvents:
    """Hooks for metrics; the server sets them."""

    def batch(self, model_id: str, items: int, tokens: int, padded: int, seconds: float) -> None: ...
    def queue_changed(self, model_id: str, items: int, tokens: int) -> None: ...
    def queue_wait(self, model_id: str, seconds: float) -> None: ...
    def admitted_cold(self, model_id: str) -> None: ...


@dataclass
class _Queue:
    model_id: str
    task: str
    items: deque = field(default_factory=deque)  # WorkItem
    tokens: int = 0


class Scheduler:
    def __init__(
        self,
        pool: ModelPool,
        infer_executor: InferenceThreads,
        *,
        max_queued_tokens: int = 1 << 20,
        max_total_queued_tokens: int = 1 << 22,
        max_queue_wait_s: float = 30.0,
        max_batch_items: int = 1024,
        events: SchedulerEvents | None = None,
        executor_factory: Callable[[], InferenceThreads] | None = None,
        parallelism: BatchParallelism = BatchParallelism(),
    ):
        self.pool = pool
        self._executor = infer_executor  # at least `parallelism.batches` threads
        # replacement inference threads when the current ones are gone (watchdog)
        self._executor_factory = executor_factory or (lambda: InferenceThreads(parallelism))
        self.parallelism = parallelism
        self._replacements: list[InferenceThreads] = []
        self._closing = False
        self.restarts = 0  # dispatcher or inference-thread restarts by the watchdog
        self.oom_splits = 0  # batches split in halves after running out of memory
        self.max_queued_tokens = max_queued_tokens
        self.max_total_queued_tokens = max_total_queued_tokens
        self.max_batch_items = max_batch_items
        self.events = events or SchedulerEvents()
        self._queues: dict[tuple[str, str], _Queue] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._draining = False
        self._inflight: set[Request] = set()
        self._batches: dict[asyncio.Task, int | None] = {}  # running batch -> its torch threads
        # steps that run beside the batches on the same threads (a generating model's decode steps,
        # generation/worker.py) -> their torch threads: counted as running batches are
        self._side_steps: dict[int, int | None] = {}
        # tokens/s per model and the wait bound (admission.py)
        self.admission = WaitAdmission(max_queue_wait_s, Throughput(pool.device.type, pool.param_count),
                                       on_change=self._report)
        # the expected wait as of the last change (a float: read on any thread, see pre_admit)
        self.wait_s = 0.0
        # model -> tokens queued and reserved as of its last change (read on any thread, see pre_admit)
        self._committed: dict[str, float] = {}
        self._reports_due: set[str] = set()  # models whose queue metrics go out at the loop turn's end

    # ---- lifecycle ---------------------------------------------------------
    def wake(self) -> None:
        """Look at the queues again (a load ended: its model may be ready, or failed)."""
        self._wake.set()

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._dispatch_forever(), name="sie-dispatcher")
            self._task.add_done_callback(self._watchdog)

    def _watchdog(self, task: asyncio.Task) -> None:
        """The dispatcher only ends through `close`; any other end is a death: restart it."""
        if self._closing:
            return
        why = "cancelled" if task.cancelled() else repr(task.exception())
        log.error("the dispatcher stopped (%s); restarting it", why)
        self.restarts += 1
        self._task = None
        self.start()

    async def drain(self) -> None:
        """Refuse new work and wait until every accepted request has its answer."""
        self._draining = True
        while self._inflight:
            await asyncio.wait([r.future for r in list(self._inflight)])

    def abort(self, message: str, retry_after: float) -> int:
        """Refuse new work and answer every accepted request that has no answer yet with
        Draining (the drain's time ran out): their queued items are dropped; a batch already
        running finishes on its thread and its results are dropped. Returns how many."""
        self._draining = True
        pending = [r for r in self._inflight if not r.finished]
        for request in pending:
            request.fail(Draining(message, retry_after))
        for queue in self._queues.values():
            self._drop_finished(queue)
        return len(pending)

    async def close(self) -> None:
        self._closing = True
        tasks = [self._task] if self._task is not None else []
        tasks += list(self._batches)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = None
        for queue in self._queues.values():
            queue.items.clear()
            queue.tokens = 0
        for request in list(self._inflight):  # queued, or in a batch that was cancelled
            request.fail(Draining("the engine shut down before this request ran"))
        for executor in self._replacements:
            executor.shutdown(wait=False, cancel_futures=True)

    # ---- state -------------------------------------------------------------
    def has_work(self, model_id: str) -> bool:
        return any(q.items for (m, _), q in self._queues.items() if m == model_id)

    def queued(self, model_id: str | None = None) -> tuple[int, int]:
        """(items, tokens) queued for a model, or in total."""
        queues = [q for (m, _), q in self._queues.items() if model_id is None or m == model_id]
        return sum(len(q.items) for q in queues), sum(q.tokens for q in queues)

    def queued_tokens(self) -> dict[str, int]:
        """model -> tokens queued."""
        tokens: dict[str, int] = {}
        for (model_id, _), queue in self._queues.items():
            tokens[model_id] = tokens.get(model_id, 0) + queue.tokens
        return tokens

    def expected_wait(self) -> float:
        """Seconds before a request arriving now would start (admission.py)."""
        return self.admission.wait(self.queued_tokens())

    def pre_admit(self, model_id: str | None = None, body_bytes: int | None = None,
                  cold_batch: int | None = None) -> PendingCall:
        """Raise Overloaded if the queue already holds more work than the wait bound: the last
        computed wait plus the calls let in here and not decided yet, each charged what it can
        cost (admission.py), or if `model_id` (when the headers name it) is not measured yet
        and holds a batch (`cold_batch`) already. Safe on any thread (a server calls it before
        reading a body); release the call once `admit` has decided. The full decision, with the
        request's own size, is `admit`, on the engine's loop."""
        admission = self.admission
        wait = self.wait_s + admission.pending.seconds
        if wait > admission.max_wait_s:
            raise admission.refusal(wait)
        if model_id is not None and cold_batch is not None and admission.admits_cold(model_id, cold_batch):
            # its own size is not known yet: refused only where any request would be
            committed = self._committed.get(model_id, 0.0)
            if committed >= cold_allowance(cold_batch):
                raise admission.cold_overloaded(model_id, committed, cold_batch)
        return admission.pending.enter(admission.pending_charge(model_id, body_bytes))

    def _report(self, model_id: str) -> None:
        """A model's queue or reservations changed: the wait that admission reads now, and the
        metrics at the end of this turn of the loop (a request changes its queue three or four
        times in one turn, and under load many requests share a turn; a multiprocess gauge's
        `set` alone was 4% of a split engine core's time, 2026-12-03)."""
        self.wait_s = self.expected_wait()
        _, tokens = self.queued(model_id)
        self._committed[model_id] = tokens + self.admission.reserved(model_id)
        if not self._reports_due:  # the scheduler runs on the engine's loop only
            asyncio.get_running_loop().call_soon(self._publish_reports)
        self._reports_due.add(model_id)

    def _publish_reports(self) -> None:
        due, self._reports_due = self._reports_due, set()
        for model_id in due:
            items, tokens = self.queued(model_id)
            self.events.queue_changed(model_id, items, tokens)
            self.events.queue_wait(model_id, self.admission.model_wait(model_id, tokens))

    def _retry_after(self, model_id: str, tokens: float) -> float:
        """Seconds until `tokens` of the model's queue have run at its throughput."""
        return max(1.0, tokens / self.admission.throughput.rate(model_id))

    # ---- admit -------------------------------------------------------------
    def admit(self, model_id: str, tokens: int, cold_batch: int | None = None) -> Reservation:
        """Admit a request of at most `tokens` tokens for a model (before tokenising it): raises
        Overloaded when the queue's work exceeds the wait bound (or, `cold_batch` given, the
        model is not measured yet and holds a batch), Draining while draining. The caller
        releases the reservation when the request has been queued or has ended."""
        if self._draining:
            raise Draining()
        admission = self.admission
        cold = admission.admits_cold(model_id, cold_batch)
        reservation = admission.admit(model_id, tokens, self.queued_tokens(), largest=self.max_queued_tokens,
                                      cold_batch=cold_batch)
        if cold and reservation.refusal is None:
            self.events.admitted_cold(model_id)
        return reservation

    # ---- submit ------------------------------------------------------------
    def submit(self, model_id: str, task: str, items: Sequence[WorkItem], request: Request) -> Request:
        """Queue a request's items (already tokenised); await `request.future` for results.
        May be called several times for one request (tokenised chunk by chunk)."""
        if self._draining:
            raise Draining()
        tokens = sum(it.num_tokens for it in items)
        queue = self._queues.setdefault((model_id, task), _Queue(model_id, task))
        _, model_tokens = self.queued(model_id)
        _, total_tokens = self.queued()
        if tokens > self.max_queued_tokens:
            raise PayloadTooLarge(
                f"the request holds {tokens} tokens, more than the {self.max_queued_tokens} a model may queue; "
                "split it",
                field="items",
            )
        if request.reservation is not None and request.reservation.refusal is not None:
            raise request.reservation.refusal  # admission refused it; it was not too large to queue
        if model_tokens + tokens > self.max_queued_tokens:
            raise Overloaded(f"model {model_id!r} has {model_tokens} tokens queued",
                             self._retry_after(model_id, model_tokens + tokens - self.max_queued_tokens))
        if total_tokens + tokens > self.max_total_queued_tokens:
            raise Overloaded(f"the server has {total_tokens} tokens queued",
                             max(1.0, self.expected_wait() * (total_tokens + tokens - self.max_total_queued_tokens)
                                 / max(1, total_tokens)))
        queue.items.extend(items)
        queue.tokens += tokens
        if request.reservation is not None:  # its real tokens are queued now: the estimate goes
            request.reservation.settle(len(items) / max(1, request.size), tokens, notify=False)  # reported below
        if request not in self._inflight:  # a large request is submitted in several chunks
            request.enqueued_at = time.monotonic()
            self._inflight.add(request)
            request.future.add_done_callback(lambda _f: self._inflight.discard(request))
        self._report(model_id)
        self._wake.set()
        return request

    # ---- dispatch ----------------------------------------------------------
    async def _dispatch_forever(self) -> None:
        while True:
            try:
                room = self.parallelism.room_for_another([*self._batches.values(), *self._side_steps.values()])
                queue = self._next_queue() if room else None
                if queue is None:
                    if not self._batches:
                        self.pool.wake_room_waiters()  # no batch will end soon to make room
                    self._wake.clear()
                    await self._wake.wait()  # set by new work, a load's or a batch's end
                    continue
                self._start_batch(queue)
            except asyncio.CancelledError:
                raise
            except Exception:  # never let the dispatcher die (a batch's own errors end in its task)
                log.exception("dispatcher error")
                await asyncio.sleep(0.05)  # a fault that repeats must not spin the loop

    def _next_queue(self) -> _Queue | None:
        best: _Queue | None = None
        for queue in self._queues.values():
            self._drop_finished(queue)
            if not queue.items:
                continue
            state = self.pool.state(queue.model_id)
            if state == "failed":
                failure = self.pool.failure(queue.model_id)
                if failure is not None:  # the pool keeps why while the state is failed
                    self._fail_queue(queue, failure)
                continue
            if state != "loaded":
                if state == "available":
                    self._start_load(queue.model_id)
                continue
            if best is None or queue.items[0].request.enqueued_at < best.items[0].request.enqueued_at:
                best = queue
        return best

    def _start_load(self, model_id: str) -> None:
        async def load():
            try:
                await self.pool.get(model_id)
            except ModelLoadFailed:
                pass  # the queue is failed on the next pass, with the pool's recorded reason
            except SIEError as exc:
                for (m, _), queue in self._queues.items():
                    if m == model_id:
                        self._fail_queue(queue, exc)

        asyncio.get_running_loop().create_task(load())

    @staticmethod
    def _finished(item: WorkItem, now: float) -> bool:
        """True when the item's request already failed, was cancelled or passed its deadline."""
        request = item.request
        if request.deadline is not None and now > request.deadline and not request.finished:
            request.fail(DeadlineExceeded("the request's deadline passed before its work ran"))
        return request.finished

    def _drop_finished(self, queue: _Queue) -> None:
        """Drop finished items from the front of the queue. Only the front: scanning the whole
        queue on every dispatch made a 30,000-item request cost O(n^2) (about a second per
        large request on GPU, 2026-11-29); finished items further back are skipped when reached."""
        now = time.monotonic()
        dropped = False
        while queue.items and self._finished(queue.items[0], now):
            queue.tokens -= queue.items.popleft().num_tokens
            dropped = True
        if dropped:
            self._report(queue.model_id)

    def _fail_queue(self, queue: _Queue, exc: BaseException) -> None:
        for item in queue.items:
            item.request.fail(exc)
        queue.items.clear()
        queue.tokens = 0
        self._report(queue.model_id)

    def _take_batch(self, queue: _Queue, budget: int) -> tuple[list[WorkItem], int]:
        """The queue's front items within `budget` tokens (those of finished requests dropped),
        and their tokens."""
        batch: list[WorkItem] = []
        tokens = 0
        now = time.monotonic()
        while queue.items and len(batch) < self.max_batch_items:
            item = queue.items[0]
            if self._finished(item, now):
                queue.items.popleft()
                queue.tokens -= item.num_tokens
                continue
            if batch and tokens + item.num_tokens > budget:
                break
            queue.items.popleft()
            batch.append(item)
            tokens += item.num_tokens
        queue.tokens -= tokens
        return batch, tokens

    def _start_batch(self, queue: _Queue) -> None:
        """Take a batch from the queue's front and run it in a task of its own (the
        dispatcher goes on at once; it may start another next to it)."""
        runner = self.pool.resident(queue.model_id)
        if runner is None:  # _next_queue picks loaded models only, and nothing evicts one in between
            raise RuntimeError(f"model {queue.model_id!r} is not resident")
        items, tokens = self._take_batch(queue, runner.batch_tokens or runner.card.max_batch_tokens)
        self._report(queue.model_id)
        if not items:  # everything left belonged to finished requests
            return
        wide = worth_widening(runner.shortest_batch_s, tokens, self.admission.throughput.rate(queue.model_id))
        threads = self.parallelism.threads_for(running_alone=wide and self._alone())
        # pinned from now, not from the task's first step: a load that runs in between
        # must not evict the model
        self.pool.pin(queue.model_id)
        self.pool.touch(queue.model_id)
        task = asyncio.get_running_loop().create_task(self._run_batch(queue, runner, items, threads))
        self._batches[task] = threads
        task.add_done_callback(functools.partial(self._batch_done, queue.model_id))

    def _alone(self) -> bool:
        """Whether work starting now has the CPU to itself: nothing running, nothing queued."""
        return not self._batches and not self._side_steps and not any(q.items for q in self._queues.values())

    def begin_side_step(self, step: int) -> int | None:
        """On the event loop, before a decode step (`step`: its caller's key) goes to the inference
        threads: the torch threads it runs on. All of them when nothing else runs or waits (a decode
        step of many rows gains from them as a batch does); a share when batches run or are queued,
        so a batch waiting gets room at the next step (room_for_another)."""
        threads = self.parallelism.threads_for(running_alone=self._alone())
        self._side_steps[step] = threads
        return threads

    def end_side_step(self, step: int) -> None:
        del self._side_steps[step]
        self._wake.set()

    def _batch_done(self, model_id: str, task: asyncio.Task) -> None:
        del self._batches[task]
        self.pool.unpin(model_id)
        self._wake.set()

    async def _run_batch(self, queue: _Queue, runner, items: list[WorkItem], threads: int | None) -> None:
        started = time.monotonic()
        for item in items:
            if item.request.started_at is None:
                item.request.started_at = started
        pending = set(items)  # items whose results are not delivered yet
        try:
            await self._run_items(queue, runner, items, pending, threads)
        except Exception as exc:  # (cancelled only by close, which answers every request)
            log.exception("batch of %d items for %s failed", len(items), queue.model_id)
            error = InferenceFailed(f"inference failed for model {queue.model_id!r}: {type(exc).__name__}: {exc}")
            for item in items:
                if item in pending:
                    item.request.fail(error)

    async def _run_items(self, queue: _Queue, runner, items: list[WorkItem], pending: set,
                         threads: int | None) -> None:
        """Run `items` as one batch and deliver the results. Out of device memory: free
        memory, then run each half on its own; a lone item that still does not fit fails
        its request alone."""
        items = [it for it in items if not it.request.finished]
        if not items:
            return

        def run(batch_items):
            started = time.perf_counter()
            results = runner.run(batch_items)
            runner.shortest_batch_s = min(runner.shortest_batch_s, time.perf_counter() - started)
            return results, runner.last_padded_tokens  # read on the thread that ran it

        started = time.monotonic()
        try:
            results, padded = await self.infer(threads, run, items)
        except torch.OutOfMemoryError as exc:
            self._free_memory(queue.model_id)
            if len(items) == 1:
                log.warning("one sequence of %d tokens for %s does not fit in memory: %s",
                            items[0].num_tokens, queue.model_id, exc)
                items[0].request.fail(InferenceFailed(
                    f"out of memory on model {queue.model_id!r}: one sequence of {items[0].num_tokens} tokens does "
                    f"not fit even alone; send shorter texts"))
                pending.discard(items[0])
                return
            self.oom_splits += 1
            log.warning("out of memory on a batch of %d items for %s: freed memory, running it in halves",
                        len(items), queue.model_id)
            half = len(items) // 2
            await self._run_items(queue, runner, items[:half], pending, threads)
            await self._run_items(queue, runner, items[half:], pending, threads)
            return
        seconds = time.monotonic() - started
        tokens = sum(it.num_tokens for it in items)
        # batches running side by side add up
        budget = runner.batch_tokens or runner.card.max_batch_tokens
        self.admission.throughput.observe(queue.model_id, tokens, seconds, len(self._batches),
                                          full=tokens >= budget / 2, budget=budget)
        self.events.batch(queue.model_id, len(items), tokens, padded, seconds)
        self._report(queue.model_id)  # its rate changed, so its wait did
        touched = set()
        for item, result in zip(items, results):
            pending.discard(item)
            request = item.request
            if request.finished:
                continue
            request.results[item.index] = result
            request.remaining -= 1
            if request not in touched:
                touched.add(request)
                request.inference_s += seconds
            if request.remaining == 0:
                request.future.set_result(request.results)

    async def infer(self, threads: int | None, fn: Callable, *args) -> Any:
        """`fn(*args)` on an inference thread, on `threads` torch threads (batches and decode
        steps alike); a thread that is gone (its executor shut down or broken) is replaced first.
        Submission fails before anything ran, so running the work on the new thread is safe."""
        try:
            future = self._executor.run(threads, fn, *args)
        except (RuntimeError, concurrent.futures.BrokenExecutor) as exc:
            log.error("the inference thread is gone (%s); starting a new one", exc)
            self.restarts += 1
            self._executor = self._executor_factory()
            self._replacements.append(self._executor)
            future = self._executor.run(threads, fn, *args)
        return await asyncio.wrap_future(future)

    def _free_memory(self, running: str) -> None:
        """After an out-of-memory: evict every model with no queued work (never the one
        running) and hand the allocator's cached blocks back to the device."""
        for model_id in self.pool.loaded_ids():
            if model_id != running and not self.has_work(model_id):
                self.pool.evict(model_id)
        if self.pool.device.type == "cuda":
            torch.cuda.empty_cache()
