"""What the database and framework adapters share: the clients they hold.

An adapter takes either a client of the user's or the options to make one
(`url` / `api_key` default to `SIE_URL` / `SIE_API_KEY`; no url means embedded
mode). Framework interfaces (LangChain, LlamaIndex, Haystack) have sync and
async methods side by side, so those adapters hold both kinds of client.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from typing import Any

from .client import AsyncSIEClient, SIEClient, connect
from .timeouts import TimeoutLike


def connect_async(client: AsyncSIEClient | None = None, *, url: str | None = None, api_key: str | None = None,
                  timeout: TimeoutLike = None, **options) -> AsyncSIEClient:
    """`connect` for async adapters: the `AsyncSIEClient` given, else a new one from the options."""
    if client is not None:
        if not isinstance(client, AsyncSIEClient):
            raise TypeError(f"this adapter awaits its SIE calls: pass an AsyncSIEClient, not {type(client).__name__}")
        return client
    if timeout is not None:
        options["timeout"] = timeout
    return AsyncSIEClient(url, api_key=api_key, **options)


class Clients:
    """A sync client and an async one with the same options, each made on first use.

    With `client=` only, async calls run the sync client in a worker thread: an
    embedded client's own options (local models, card directories) cannot be
    copied to a new client faithfully, so none is guessed. Pass `async_client=`
    as well for natively awaited calls. With `async_client=` only, a sync client is
    made for its URL, key, timeout and retry policy. `options` (`max_retries`, `retry`,
    `backoff_s`, `retry_read_timeouts`, ...) go to the clients made here.

    The async client works from any number of successive event loops (an HTTP connection
    pool per loop, see `sie_client.loops`), so one `Clients` serves a framework that calls
    `asyncio.run` per step.
    """

    def __init__(self, *, url: str | None = None, api_key: str | None = None, timeout: TimeoutLike = None,
                 client: SIEClient | None = None, async_client: AsyncSIEClient | None = None, **options: Any):
        if client is not None and not isinstance(client, SIEClient):
            raise TypeError(f"client= takes an SIEClient (pass an AsyncSIEClient as async_client=), "
                            f"not {type(client).__name__}")
        self._url, self._api_key, self._timeout = url, api_key, timeout
        self._options = options
        self._sync = client
        self._async = connect_async(async_client) if async_client is not None else None
        if self._async is not None and client is None and url is None:
            # A sync client made later talks to the same server as the async one given.
            self._url, self._api_key, self._timeout = self._async.url, self._async.api_key, self._async.timeout
            self._options = {"retry": self._async.retry, **options}
        self._threaded = client is not None and async_client is None

    @property
    def sync(self) -> SIEClient:
        if self._sync is None:
            self._sync = connect(url=self._url, api_key=self._api_key, timeout=self._timeout, **self._options)
        return self._sync

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Await `method` (encode, score or extract) on the async client, or on the
        sync client in a thread when only a sync client was given."""
        if self._threaded:
            bound: Callable = getattr(self.sync, method)
            return await asyncio.to_thread(bound, *args, **kwargs)
        if self._async is None:
            self._async = connect_async(url=self._url, api_key=self._api_key, timeout=self._timeout,
                                        **self._options)
        return await getattr(self._async, method)(*args, **kwargs)


def renamed(values: Any, old: str, new: str, owner: str) -> Any:
    """A pydantic adapter's init values with the deprecated name `old` moved to `new` (with a
    DeprecationWarning), for `model_validator(mode="before")`: LangChain and LlamaIndex adapters
    renamed `dims` and `progress` to their frameworks' `dimensions` and `show_progress`."""
    if isinstance(values, dict) and old in values:
        warnings.warn(f"{owner}({old}=...) is deprecated; pass {new}=...", DeprecationWarning, stacklevel=4)
        values = dict(values)
        value = values.pop(old)
        if values.get(new) is not None and values[new] != value:
            raise ValueError(f"{owner}: {old}={value!r} and {new}={values[new]!r} disagree; pass {new} only")
        values[new] = value
    return values
