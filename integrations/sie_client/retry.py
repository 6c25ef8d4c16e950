"""When to retry: 429 and 503 answers (honouring `Retry-After`) and connection
failures, with a bound on attempts and on the total time spent waiting."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import SIEError


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 6  # tries in all, the first one included
    max_total_wait_s: float = 60.0  # sleeping across all retries of one call never exceeds this
    backoff_s: float = 0.25  # first wait when the server gave no Retry-After
    max_backoff_s: float = 8.0

    def delay(self, error: SIEError, attempt: int, waited_s: float) -> float | None:
        """Seconds to wait before try `attempt + 1`, or None to give up and raise `error`."""
        if not error.retryable or attempt >= self.max_attempts:
            return None
        if error.retry_after is not None and error.retry_after >= 0:
            wait = float(error.retry_after)
        else:
            wait = min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)
        if waited_s + wait > self.max_total_wait_s:
            return None
        return wait


NO_RETRY = RetryPolicy(max_attempts=1)
