"""Whether the Hugging Face Hub answers, for `sie-server models`: a Hub model that is not cached
is "download" only if the first load could fetch it. Asked once per listing (not per card), on
first need, and bounded by a short timeout, so an offline machine lists the catalog at once.

The question is a HEAD request to the Hub's endpoint (`HF_ENDPOINT`, https://huggingface.co by
default; httpx honours the proxy variables), run on a daemon thread: a resolver that hangs (no
DNS at all) is bounded by the same timeout as a server that never answers."""

from __future__ import annotations

import threading

from sie_engine.weights import WeightsLocation

PROBE_TIMEOUT_S = 2.0
# The AVAILABLE column for a Hub model that is not cached and cannot be fetched now
NOT_CACHED_UNREACHABLE = "not cached (Hub unreachable)"
NOT_CACHED_OFFLINE = "not cached (HF_HUB_OFFLINE)"


def probe_hub(endpoint: str, timeout_s: float) -> str | None:
    """None when `endpoint` answers HTTP at all within `timeout_s`, else why not (an exception's name)."""
    import httpx

    outcome: list[str | None] = []

    def ask() -> None:
        try:
            httpx.head(endpoint, timeout=timeout_s)
            outcome.append(None)
        except (httpx.HTTPError, OSError) as exc:
            outcome.append(type(exc).__name__)

    thread = threading.Thread(target=ask, name="sie-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout_s + 0.5)
    return outcome[0] if outcome else f"no answer within {timeout_s:g} s"


class HubProbe:
    """The Hub's reachability, asked at most once (`unreachable()`)."""

    def __init__(self, timeout_s: float = PROBE_TIMEOUT_S):
        self.timeout_s = timeout_s
        self._asked = False
        self._why: str | None = None

    @property
    def endpoint(self) -> str:
        from huggingface_hub import constants

        return constants.ENDPOINT

    def unreachable(self) -> str | None:
        """None when the Hub answers, else why it does not."""
        if not self._asked:
            self._why = probe_hub(self.endpoint, self.timeout_s)
            self._asked = True
        return self._why


def listed(where: WeightsLocation, is_hub: bool, probe: HubProbe) -> tuple[WeightsLocation, str]:
    """A card's weights as `sie-server models` lists them, and the AVAILABLE column's label.

    A Hub model that is not cached is "download" only while the Hub answers; when it does not, it is
    "unavailable" (as with HF_HUB_OFFLINE), its detail saying so."""
    if where.status == "download":
        why = probe.unreachable()
        if why is None:
            return where, where.status
        detail = (f"not in the hub cache, and the Hub ({probe.endpoint}) did not answer within "
                  f"{probe.timeout_s:g} s ({why}); the first load would fail")
        return WeightsLocation("unavailable", where.source, detail), NOT_CACHED_UNREACHABLE
    if where.status == "unavailable" and is_hub:
        return where, NOT_CACHED_OFFLINE
    return where, where.status
