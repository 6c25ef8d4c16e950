"""Admission by expected wait: a request is queued only if the work queued before it
finishes within `max_queue_wait_s` at the measured throughput of this device.

Why not a token bound alone: a fixed number of queued tokens is a few seconds of work for
one model on a GPU and minutes for another on a CPU (1,048,576 tokens of MiniLM were about
400 s on the 2-core box, issue #19), so clients waited for minutes and were then refused.
Time is what a client and a drain care about, so time is what is bounded.

- Throughput is measured per model: an exponential moving average of tokens/s over its
  full batches (at least half the batch budget: what runs while a queue exists, the only
  time the estimate matters). A smaller batch is mostly fixed cost, so its rate is a lower
  bound of the model's: it can only raise the estimate. Before any batch, a conservative
  prior from the model's size.
- The wait of a new request is every queued token of every model on the device at that
  model's rate (the dispatcher serves the oldest work first, so all of it runs before the
  new request), plus tokens of admitted requests not yet tokenised (`Reservation`s).
- The decision comes before tokenisation: an admitted request reserves an upper bound of its
  tokens from its text lengths (`upper_bound_tokens`), replaced by the real count as its
  items are queued. A refusal costs microseconds, and `Retry-After` is the time until the
  queue is back under the bound.
- A server checks even earlier, before reading a request's body (`Pending`): from the last
  computed wait plus the calls let in that admission has not decided yet, each counted as
  an average admitted request. In a burst of hundreds of requests at once, all arrive before
  the first is decided; without this each would be read and parsed (~1 ms of the event loop
  each on a 2-core box) only to be refused.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from typing import Any

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


def upper_bound_tokens(fields: Mapping[str, Any], window: int, prompt_bytes: int = 0,
                       image_tokens: int | None = None) -> int:
    """Tokens a request will queue, at most, from its text lengths alone (before tokenising).

    A token covers at least one byte of UTF-8 (byte-level vocabularies one byte at worst), so
    each item is bounded by its bytes plus the request's shared texts (query, instruction,
    labels: they enter every sequence), the card's prompt (`prompt_bytes`: its template and
    instruction) and special tokens, and by the model's window, which
    truncates every sequence. An image item counts `image_tokens` (the positions its vision tower
    runs: ColPali's 448-px page is ~1,030, far beyond its 512-token text window), any other
    item that is not text a whole window.
    GLiNER cuts a text longer than the window into several windows; the real count replaces
    this bound as soon as the text is tokenised."""
    items = fields.get("items")
    if not isinstance(items, (list, tuple)):
        return 0
    shared = SPECIAL_TOKENS + prompt_bytes
    shared += sum(_text_bytes(value) for name, value in fields.items() if name != "items")
    total = 0
    for item in items:
        text = item.get("text") if isinstance(item, dict) else item
        if isinstance(text, str):
            total += min(_text_bytes(text) + shared, window)
        elif image_tokens is not None and isinstance(item, dict) and item.get("image") is not None:
            total += image_tokens
        else:
            total += window
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
        self._rates: dict[str, float] = {}

    def observe(self, model_id: str, tokens: int, seconds: float, side_by_side: int = 1, full: bool = True) -> None:
        """A batch of `tokens` took `seconds`, with `side_by_side` batches sharing the device;
        `full`: it held at least half its token budget."""
        rate = tokens / max(seconds, 1e-6) * max(1, side_by_side)
        old = self._rates.get(model_id)
        if not full:  # a lower bound of the rate (mostly fixed cost): it may only raise the estimate
            if rate > self.rate(model_id):
                self._rates[model_id] = rate
            return
        self._rates[model_id] = rate if old is None else (1 - EWMA_WEIGHT) * old + EWMA_WEIGHT * rate

    def measured(self, model_id: str) -> bool:
        return model_id in self._rates

    def rate(self, model_id: str) -> float:
        """Tokens/s: the measured average, else 2 FLOPs per parameter per token at the prior."""
        rate = self._rates.get(model_id)
        if rate is not None:
            return rate
        params = self._params_of(model_id) or UNKNOWN_PARAMS
        return self._flops / (2.0 * params)


class Reservation:
    """Tokens an admitted request will queue, counted in the wait until they are queued."""

    def __init__(self, owner: WaitAdmission, model_id: str, tokens: int, refusal: Overloaded | None = None):
        self._owner = owner
        self.model_id = model_id
        self.estimate = tokens
        self.tokens = float(tokens)
        # set when the request is refused but is tokenised first: it may be too large to queue
        # at all, a 413 whatever the load (the scheduler raises this once it knows it is not)
        self.refusal = refusal

    def settle(self, fraction: float) -> None:
        """`fraction` of the request's items are queued now (with their real counts)."""
        self._owner._take(self, min(self.tokens, self.estimate * fraction))

    def release(self) -> None:
        """The request is queued in full, or ended before it was."""
        self._owner._take(self, self.tokens)


class Pending:
    """Calls let in before their body was read, not yet decided by admission. Entered on the
    server's thread, left on the engine's: a lock guards the count."""

    def __init__(self):
        self._lock = threading.Lock()
        self.count = 0

    def enter(self) -> PendingCall:
        with self._lock:
            self.count += 1
        return PendingCall(self)


class PendingCall:
    def __init__(self, pending: Pending):
        self._pending = pending
        self._done = False

    def release(self) -> None:
        """Admission decided (or the call ended before it reached admission); idempotent."""
        with self._pending._lock:
            if not self._done:
                self._done = True
                self._pending.count -= 1


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
        self.request_s = 0.0  # an admitted request's estimated seconds, averaged (for `pending`)

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

    def admit(self, model_id: str, tokens: int, queued: Mapping[str, int], largest: int | None = None) -> Reservation:
        """Admit a request of at most `tokens` tokens, or raise Overloaded (429) with the
        seconds until the queue is back under the bound as Retry-After. A request whose bound
        is over `largest` (the most a model may queue: more is a 413) is not refused here: its
        reservation carries the refusal, raised once its real count is known to fit."""
        wait = self.wait(queued)
        if wait > self.max_wait_s:
            refusal = self.refusal(wait)
            if largest is None or tokens <= largest:
                raise refusal
            return Reservation(self, model_id, 0, refusal)
        reservation = Reservation(self, model_id, tokens)
        seconds = tokens / self.throughput.rate(model_id)
        self.request_s = seconds if not self.request_s else (1 - EWMA_WEIGHT) * self.request_s + EWMA_WEIGHT * seconds
        if tokens:
            self._reserved[model_id] = self.reserved(model_id) + tokens
            self._on_change(model_id)
        return reservation

    def refusal(self, wait: float) -> Overloaded:
        """The 429 for a queue of `wait` seconds: Retry-After is the time until it is under the bound."""
        return Overloaded(
            f"the queue holds about {wait:.0f}s of work, more than the {self.max_wait_s:g}s this server "
            f"admits (--max-queue-wait); retry after Retry-After seconds or on another replica",
            retry_after=max(1.0, math.ceil(wait - self.max_wait_s)),
        )

    def _take(self, reservation: Reservation, tokens: float) -> None:
        if tokens <= 0:
            return
        reservation.tokens -= tokens
        left = self.reserved(reservation.model_id) - tokens
        if left > 1e-6:
            self._reserved[reservation.model_id] = left
        else:
            self._reserved.pop(reservation.model_id, None)
        self._on_change(reservation.model_id)
