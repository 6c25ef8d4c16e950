"""Admission by expected wait: a request is queued only if the work queued before it
finishes within `max_queue_wait_s` at the measured throughput of this device.

Why not a token bound alone: a fixed number of queued tokens is a few seconds of work for
one model on a GPU and minutes for another on a CPU (1,048,576 tokens of MiniLM were about
400 s on the 2-core box, issue #19), so clients waited for minutes and were then refused.
Time is what a client and a drain care about, so time is what is bounded.

- Throughput is measured per model: an exponential moving average of tokens/s over its
  full batches (at least half the batch budget: what runs while a queue exists, the only
  time the estimate matters). A smaller batch is mostly fixed cost, so its rate is a lower
  bound of the model's: it can only raise the estimate. Until a full batch, a model measured
  by small ones only is rated as if each of them had cost all fixed (a full batch in the same
  seconds), at most the prior (`Throughput.observe` says why), and the cold bound ends there.
  A decode step (no batch budget) is taken as it is. Before any batch, a prior from the
  model's size.
- The wait of a new request is every queued token of every model on the device at that
  model's rate (the dispatcher serves the oldest work first, so all of it runs before the
  new request), plus tokens of admitted requests not yet tokenised (`Reservation`s).
- The decision comes before tokenisation: an admitted request reserves an upper bound of its
  tokens from its text lengths (`upper_bound_tokens`), replaced by the real count as its
  items are queued. A refusal costs microseconds, and `Retry-After` is the time until the
  queue is back under the bound.
- A server checks even earlier, before reading a request's body (`Pending`): from the last
  computed wait plus the calls let in that admission has not decided yet, each charged what
  it can cost: an average admitted request, at most its declared body (a token is at least a
  byte of text) at its model's rate. In a burst of hundreds of requests at once, all arrive
  before the first is decided; without this each would be read and parsed (~1 ms of the event
  loop each on a 2-core box) only to be refused.
- Only validated, admitted work feeds the estimates (issue #30): the average request is
  taken from the real tokens a request queued, once it has queued them, never from the bound
  of a request that is refused, fails validation or never arrives; an item that is neither a
  text nor an image the model reads counts nothing (validation refuses it). Before, three
  invalid 53 KB requests of 4,096 non-text items (each counted a whole window) made the
  average request 87 s, and one half-sent body charged that made an idle server refuse
  everything for 89 s.
- A model being preloaded and never measured (still loading, or its warm-up failed) is
  admitted a few batches of bounds at a time (`cold_batch`, `cold_allowance`): the prior is a
  guess, and a flood let in on it while the server started held 144 s of work against a 30 s
  bound. Its first batch measures it; the server measures each preloaded model with a warm-up
  batch before it reports ready. A model loaded on demand is admitted on the prior (the
  engine's `_cold_batch` says why).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from typing import Any

from .decode_admission import DecodeTicket
from .errors import Overloaded

# Effective FLOP/s assumed before a model's first batch is measured: about what these devices
# reach at their best (the 2-core CPU box: ~190 GFLOP/s float32, ~430 bfloat16, 2026-11-29).
# A refusal should rest on a measured rate: before one, admission errs towards admitting, and
# the model's first full batch (a second or two of work) replaces the prior. A cautious prior
# (50 GFLOP/s with 350M parameters for an unlooked-at model) refused bursts of a few short
# texts to an idle server: 8 requests of 2 texts "held 34 s of work" before MiniLM had loaded.
PRIOR_FLOPS = {"cpu": 400e9, "cuda": 400e12}
# Parameters assumed for a model whose weights have not been looked at yet: BERT-base's, the
# size of most models served here (the prior uses the real count once the weights are read).
UNKNOWN_PARAMS = 110e6
# Batches of upper-bound tokens a model never measured admits (cold_allowance).
COLD_BATCHES = 4
# Weight of the newest batch in the moving average.
EWMA_WEIGHT = 0.2
# Tokens a sequence may gain beyond its text: special tokens, markers.
SPECIAL_TOKENS = 8


# The smallest patch of the vision towers served (ViT-L/14, SigLIP so400m/14, PaliGemma's).
SMALLEST_PATCH = 14


def image_positions_bound(image_size: int) -> int:
    """Positions a vision tower runs for one image of the card's size, at most (before its
    preprocessor has loaded and says the real count): its patches, plus a class token or the
    few tokens of a prompt (PaliGemma's)."""
    return math.ceil(image_size / SMALLEST_PATCH) ** 2 + SPECIAL_TOKENS


def cold_allowance(batch: int) -> int:
    """Tokens a model never measured may hold, committed and queued, for a batch budget of
    `batch`. What is committed before tokenising is upper bounds (a byte a token: about four
    times the real count of English prose), so `COLD_BATCHES` batches of bounds are about one
    batch of real work for short texts, and a few batches (seconds of work) for window-long
    ones."""
    return COLD_BATCHES * batch


def upper_bound_tokens(fields: Mapping[str, Any], window: int, prompt_bytes: int = 0,
                       image_tokens: int | None = None, document_pages: int = 0,
                       generated_tokens: int = 0) -> int:
    """Tokens a request will queue, at most, from its text lengths alone (before tokenising).

    A token covers at least one byte of UTF-8 (byte-level vocabularies one byte at worst), so
    each item is bounded by its bytes plus the request's shared texts (query, instruction,
    labels: they enter every sequence), the card's prompt (`prompt_bytes`: its template and
    instruction) and special tokens, and by the model's window, which
    truncates every sequence. An image item counts `image_tokens` (the positions its vision tower
    runs: ColPali's 448-px page is ~1,030, far beyond its 512-token text window); any other
    item counts nothing: validation refuses it (a non-text item counted a whole window let
    invalid requests hold the queue, issue #30). A document item counts as its pages: those its
    `pages` names, else `document_pages` (the most a document may render), each an image.
    GLiNER cuts a text longer than the window into several windows; the real count replaces
    this bound as soon as the text is tokenised. A generative model's image or page also counts
    `generated_tokens`: its decoder prompt plus the max_new_tokens it may generate (the charge
    stays reserved while it decodes: its work never sits in the scheduler's queues). A video item
    (with or without its text) counts the window: its frames and prompt are refused past it. A
    reranker's image query enters every pair (`image_tokens` more each); its video query makes
    every pair count the window."""
    items = fields.get("items")
    if not isinstance(items, (list, tuple)):
        return 0
    query = fields.get("query")
    query_media = query if image_tokens is not None and isinstance(query, dict) else {}
    if query_media.get("video") is not None:
        return window * len(items)
    query_image = image_tokens if image_tokens is not None and query_media.get("image") is not None else 0
    shared = SPECIAL_TOKENS + prompt_bytes + query_image
    shared += sum(_text_bytes(value) for name, value in fields.items() if name != "items")
    total = 0
    for item in items:
        text = item.get("text") if isinstance(item, dict) else item
        if image_tokens is not None and isinstance(item, dict) and item.get("video") is not None:
            total += window
        elif isinstance(text, str):
            total += min(_text_bytes(text) + shared, window)
        elif image_tokens is not None and isinstance(item, dict) and item.get("image") is not None:
            total += image_tokens + generated_tokens + query_image
        elif image_tokens is not None and isinstance(item, dict) and item.get("document") is not None:
            pages = item.get("pages")
            total += (image_tokens + generated_tokens) * (len(pages) if isinstance(pages, list) else document_pages)
    return total


def _text_bytes(value: Any) -> int:
    """UTF-8 bytes of the strings in a field (a string, or a list/dict holding strings)."""
    if isinstance(value, str):
        return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, dict):
        value = value.get("text")
        return _text_bytes(value)
    if isinstance(value, (list, tuple)):
        return sum(_text_bytes(v) for v in value if isinstance(v, (str, dict)))
    return 0


class Throughput:
    """Tokens/s per model: measured over its batches, a prior from its size before that."""

    def __init__(self, device_type: str, params_of: Callable[[str], float | None]):
        """params_of(model id): the model's parameter count if known (its weights looked at)."""
        self._flops = PRIOR_FLOPS.get(device_type, PRIOR_FLOPS["cpu"])
        self._params_of = params_of
        self._full: dict[str, float] = {}  # moving average over full batches (raised by a faster small one)
        # before a full batch: the best decode step (a generating model's rate: its image batches say
        # nothing of its decoding), else what small batches say of a full one (observe)
        self._steps: dict[str, float] = {}
        self._small: dict[str, float] = {}

    def observe(self, model_id: str, tokens: int, seconds: float, side_by_side: int = 1, full: bool = True,
                budget: int | None = None) -> None:
        """A batch of `tokens` took `seconds`, with `side_by_side` batches sharing the device;
        `full`: it held at least half its token budget `budget` (None: a decode step, taken as it
        is, the fastest so far).

        A small batch's rate is a lower bound, and a loose one: one short text through a tiny
        ColBERT in 50 ms of a busy box is 200 tokens/s, a hundredth of the model's rate in full
        batches, and held as the estimate it made the first upload to that model (a few thousand
        tokens) "hold 178 s of work" and refused it. Until a full batch measures the model, a
        small one is read at the other extreme, all fixed cost (half a budget in its seconds),
        capped at the prior: admission errs towards admitting until a queue forms, and the first
        full batch then replaces the guess."""
        rate = tokens / max(seconds, 1e-6) * max(1, side_by_side)
        if full:
            old = self._full.get(model_id)
            self._full[model_id] = rate if old is None else (1 - EWMA_WEIGHT) * old + EWMA_WEIGHT * rate
            return
        if model_id in self._full:  # a lower bound over the average: the average was low
            self._full[model_id] = max(rate, self._full[model_id])
            return
        if budget is None:
            self._steps[model_id] = max(rate, self._steps.get(model_id, 0.0))
            return
        as_full = budget / 2 / max(seconds, 1e-6) * max(1, side_by_side)
        guess = max(rate, min(as_full, self.prior(model_id)))
        self._small[model_id] = max(guess, self._small.get(model_id, 0.0))

    def measured(self, model_id: str) -> bool:
        return model_id in self._full or model_id in self._steps or model_id in self._small

    def rate(self, model_id: str) -> float:
        """Tokens/s: the measured average, else the best decode step, else what small batches say,
        else the prior."""
        for measures in (self._full, self._steps, self._small):
            if model_id in measures:
                return measures[model_id]
        return self.prior(model_id)

    def prior(self, model_id: str) -> float:
        """2 FLOPs per parameter per token at the device's assumed FLOP/s."""
        params = self._params_of(model_id) or UNKNOWN_PARAMS
        return self._flops / (2.0 * params)


class Reservation:
    """Tokens an admitted request will queue, counted in the wait until they are queued."""

    def __init__(self, owner: WaitAdmission, model_id: str, tokens: int, refusal: Overloaded | None = None):
        self._owner = owner
        self.model_id = model_id
        self.estimate = tokens
        self.tokens = float(tokens)
        self.queued = 0  # real tokens the request has queued (what feeds the average request)
        self._released = False
        # set when the request is refused but is tokenised first: it may be too large to queue
        # at all, a 413 whatever the load (the scheduler raises this once it knows it is not)
        self.refusal = refusal
        # the request's image decoding, admitted by pixels (decode_admission.py; None: no images)
        self.decoding: DecodeTicket | None = None

    def settle(self, fraction: float, tokens: int = 0, notify: bool = True) -> None:
        """`fraction` of the request's items are queued now, `tokens` real tokens. `notify`: tell
        the owner's `on_change` (False for a caller that reports the queue's change itself)."""
        self.queued += tokens
        self._owner._take(self, min(self.tokens, self.estimate * fraction), notify)

    def release(self) -> None:
        """The request is queued in full, or ended before it was; idempotent. What it queued
        (validated work only: nothing for a request refused or invalid) feeds the average."""
        self._owner._take(self, self.tokens)
        if self.decoding is not None:
            self.decoding.release()
        if not self._released:
            self._released = True
            if self.queued:
                self._owner._observe_request(self.model_id, self.queued)


class Pending:
    """Calls let in before their body was read, not yet decided by admission, and the seconds
    of work they are charged together. Entered on the server's thread, left on the engine's:
    a lock guards the sums."""

    def __init__(self):
        self._lock = threading.Lock()
        self.count = 0
        self.seconds = 0.0

    def enter(self, seconds: float = 0.0) -> PendingCall:
        with self._lock:
            self.count += 1
            self.seconds += seconds
        return PendingCall(self, seconds)


class PendingCall:
    def __init__(self, pending: Pending, seconds: float = 0.0):
        self._pending = pending
        self.seconds = seconds
        self._done = False

    def release(self) -> None:
        """Admission decided (or the call ended before it reached admission); idempotent."""
        with self._pending._lock:
            if not self._done:
                self._done = True
                self._pending.count -= 1
                self._pending.seconds = max(0.0, self._pending.seconds - self.seconds)


class WaitAdmission:
    """The wait bound. Queued token counts come from the scheduler (`queued`: model -> tokens)."""

    def __init__(self, max_wait_s: float, throughput: Throughput,
                 on_change: Callable[[str], None] = lambda model_id: None):
        if not max_wait_s > 0:
            raise ValueError(f"the maximum queue wait must be positive, got {max_wait_s}")
        self.max_wait_s = max_wait_s
        self.throughput = throughput
        self._reserved: dict[str, float] = {}
        self._on_change = on_change
        self.pending = Pending()
        # an admitted request's seconds at its model's rate, averaged over the real tokens of
        # validated requests once queued (for `pending`)
        self.request_s = 0.0

    @property
    def bounded(self) -> bool:
        """Whether a wait bound is set (an in-process engine has none by default)."""
        return math.isfinite(self.max_wait_s)

    def reserved(self, model_id: str) -> float:
        return self._reserved.get(model_id, 0.0)

    def model_wait(self, model_id: str, queued_tokens: int) -> float:
        """Seconds this model's own queued and reserved tokens take at its throughput."""
        tokens = queued_tokens + self.reserved(model_id)
        return tokens / self.throughput.rate(model_id) if tokens > 0 else 0.0

    def wait(self, queued: Mapping[str, int]) -> float:
        """Seconds before a new request starts: every model's work on the device."""
        models = set(queued) | set(self._reserved)
        return sum(self.model_wait(m, queued.get(m, 0)) for m in models)

    def admit(self, model_id: str, tokens: int, queued: Mapping[str, int], largest: int | None = None,
              cold_batch: int | None = None) -> Reservation:
        """Admit a request of at most `tokens` tokens, or raise Overloaded (429) with the
        seconds until the queue is back under the bound as Retry-After. A request whose bound
        is over `largest` (the most a model may queue: more is a 413) is not refused here: its
        reservation carries the refusal, raised once its real count is known to fit.
        cold_batch: the model's batch budget; while its throughput is not measured, it is
        admitted about one batch at a time (a lone request of any size when none is waiting)."""
        wait = self.wait(queued)
        refusal = self.refusal(wait) if wait > self.max_wait_s else None
        if refusal is None and cold_batch is not None:
            refusal = self.cold_refusal(model_id, queued.get(model_id, 0), tokens, cold_batch)
        if refusal is not None:
            if largest is None or tokens <= largest:
                raise refusal
            return Reservation(self, model_id, 0, refusal)
        reservation = Reservation(self, model_id, tokens)
        if tokens:
            self._reserved[model_id] = self.reserved(model_id) + tokens
            self._on_change(model_id)
        return reservation

    def admits_cold(self, model_id: str, cold_batch: int | None) -> bool:
        """Whether the cold allowance decides for this model now: it has a batch budget (`cold_batch`:
        a preloaded model), is not measured yet, and a wait bound is set (no bound, the library's
        default, is no bound here either)."""
        return cold_batch is not None and self.bounded and not self.throughput.measured(model_id)

    def cold_refusal(self, model_id: str, queued_tokens: int, tokens: int, batch: int) -> Overloaded | None:
        """The 429 for a model not measured yet that holds a batch already (None: admit):
        Retry-After is about that batch's time at the prior, at least a second."""
        if not self.admits_cold(model_id, batch):
            return None
        committed = queued_tokens + self.reserved(model_id)
        if committed <= 0 or committed + tokens <= cold_allowance(batch):
            return None
        return self.cold_overloaded(model_id, committed, batch)

    def cold_overloaded(self, model_id: str, committed: float, batch: int) -> Overloaded:
        return Overloaded(
            f"model {model_id!r} has not run a batch yet, so its throughput is unknown: it admits about one "
            f"batch ({batch} tokens) until it has; retry after Retry-After seconds",
            retry_after=max(1.0, math.ceil(committed / self.throughput.rate(model_id))),
        )

    def pending_charge(self, model_id: str | None, body_bytes: int | None) -> float:
        """Seconds charged to a call let in before its body was read: an average admitted
        request, at most its declared body's bytes as tokens at its model's rate (a token
        covers at least a byte of text; the full decision follows once the body is read)."""
        seconds = self.request_s
        if model_id is not None and body_bytes is not None:
            seconds = min(seconds, body_bytes / self.throughput.rate(model_id))
        return seconds

    def _observe_request(self, model_id: str, tokens: int) -> None:
        """A validated, admitted request queued `tokens` real tokens: the average request."""
        seconds = tokens / self.throughput.rate(model_id)
        self.request_s = seconds if not self.request_s else (1 - EWMA_WEIGHT) * self.request_s + EWMA_WEIGHT * seconds

    def refusal(self, wait: float) -> Overloaded:
        """The 429 for a queue of `wait` seconds: Retry-After is the time until it is under the bound."""
        return Overloaded(
            f"the queue holds about {wait:.0f}s of work, more than the {self.max_wait_s:g}s this server "
            f"admits (--max-queue-wait); retry after Retry-After seconds or on another replica",
            retry_after=max(1.0, math.ceil(wait - self.max_wait_s)),
        )

    def _take(self, reservation: Reservation, tokens: float, notify: bool = True) -> None:
        if tokens <= 0:
            return
        reservation.tokens -= tokens
        left = self.reserved(reservation.model_id) - tokens
        if left > 1e-6:
            self._reserved[reservation.model_id] = left
        else:
            self._reserved.pop(reservation.model_id, None)
        if notify:
            self._on_change(reservation.model_id)
