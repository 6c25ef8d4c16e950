"""When to retry, on tenacity: 429 and 503 answers (honouring `Retry-After`) and
requests that never reached the server, with a bound on attempts, on the total time
spent waiting, and on the request's deadline (`Timeouts.total`).

A request that went out whole and whose answer did not come (a read timeout, a
connection dropped while waiting) may have run on the server: a GET is retried, a POST
only with `retry_read_timeouts=True`. SIE's calls have no side effects, but retrying them
by default multiplies the time a hung server takes to surface, and the load on a slow one.

The sync and async clients run the same policy: `retrying()` and `async_retrying()` build
tenacity's `Retrying` / `AsyncRetrying` from the same wait, stop and retry functions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import tenacity

from .errors import SIEConnectionError, SIEError

IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 6  # tries in all, the first one included (max_retries + 1)
    max_total_wait_s: float = 60.0  # sleeping across all retries of one call never exceeds this
    backoff_s: float = 0.25  # first wait when the server gave no Retry-After; doubled each retry
    max_backoff_s: float = 8.0
    retry_read_timeouts: bool = False  # also retry a POST whose answer did not come (it may have run)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts counts the first try: at least 1")

    @property
    def max_retries(self) -> int:
        return self.max_attempts - 1

    def should_retry(self, error: BaseException, method: str = "POST") -> bool:
        """Whether `error` from a `method` request is worth another try (attempts and time aside)."""
        if not isinstance(error, SIEError) or not error.retryable:
            return False
        if isinstance(error, SIEConnectionError) and error.may_have_run:
            return method.upper() in IDEMPOTENT_METHODS or self.retry_read_timeouts
        return True

    def wait_s(self, error: SIEError, attempt: int) -> float:
        """Seconds to wait after failed try `attempt`: the server's Retry-After, else the back-off."""
        if error.retry_after is not None and error.retry_after >= 0:
            return float(error.retry_after)
        return min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)

    def delay(self, error: SIEError, attempt: int, waited_s: float, method: str = "POST") -> float | None:
        """Seconds to wait before try `attempt + 1`, or None to give up and raise `error`
        (the decision `retrying()` makes, as one function)."""
        if not self.should_retry(error, method) or attempt >= self.max_attempts:
            return None
        wait = self.wait_s(error, attempt)
        return None if waited_s + wait > self.max_total_wait_s else wait

    # ---- tenacity ------------------------------------------------------------
    def _tenacity(self, method: str, deadline: float | None) -> dict:
        def retry(state: tenacity.RetryCallState) -> bool:
            error = state.outcome.exception() if state.outcome is not None and state.outcome.failed else None
            return error is not None and self.should_retry(error, method)

        def wait(state: tenacity.RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome is not None else None
            return self.wait_s(error, state.attempt_number) if isinstance(error, SIEError) else self.backoff_s

        def stop(state: tenacity.RetryCallState) -> bool:
            # tenacity computes the wait before asking stop: `upcoming_sleep` is the next sleep
            if state.attempt_number >= self.max_attempts:
                return True
            if state.idle_for + state.upcoming_sleep > self.max_total_wait_s:
                return True
            return deadline is not None and time.monotonic() + state.upcoming_sleep >= deadline

        return dict(retry=retry, wait=wait, stop=stop, reraise=True)

    def retrying(self, method: str, deadline: float | None = None) -> tenacity.Retrying:
        """tenacity's sync retrier for one `method` request ending by `deadline` (monotonic)."""
        return tenacity.Retrying(**self._tenacity(method, deadline))

    def async_retrying(self, method: str, deadline: float | None = None) -> tenacity.AsyncRetrying:
        """The same policy, sleeping with asyncio."""
        return tenacity.AsyncRetrying(**self._tenacity(method, deadline))

    def with_options(self, max_retries: int | None = None, backoff_s: float | None = None,
                     retry_read_timeouts: bool | None = None) -> RetryPolicy:
        """This policy with the clients' keyword arguments applied (None: unchanged)."""
        changes: dict = {}
        if max_retries is not None:
            if max_retries < 0:
                raise ValueError("max_retries must be 0 or more")
            changes["max_attempts"] = max_retries + 1
        if backoff_s is not None:
            changes["backoff_s"] = backoff_s
        if retry_read_timeouts is not None:
            changes["retry_read_timeouts"] = retry_read_timeouts
        return replace(self, **changes) if changes else self


NO_RETRY = RetryPolicy(max_attempts=1)
