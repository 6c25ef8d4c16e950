"""`SIEConnection`: how an SIE Haystack component reaches SIE. Haystack components
are serialised to YAML (`to_dict`), so they take serialisable settings only: a URL
(None: `SIE_URL` when the pipeline runs, else embedded mode), an API key as a
Haystack `Secret` (by default the `SIE_API_KEY` variable, never written out), a
timeout and a retry count.

The client lifecycle is Haystack's own embedders' (OpenAITextEmbedder and friends):
`warm_up()` makes the sync client, `warm_up_async()` the async one on the serving
event loop, `close()` / `close_async()` release them (a later call makes them again);
`run` / `run_async` warm up by themselves."""

from __future__ import annotations

import warnings
from typing import Any

from haystack.utils import Secret, deserialize_secrets_inplace

from sie_client import AsyncSIEClient, RetryPolicy, SIEClient, connect, connect_async

DEFAULT_KEY = Secret.from_env_var("SIE_API_KEY", strict=False)


class SIEConnection:
    def __init__(self, url: str | None, api_key: Secret, timeout: float | None, max_retries: int | None = None):
        self.url = url
        self.api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        RetryPolicy().with_options(max_retries)  # a bad value fails when the pipeline is built, not when it runs
        self._sync: SIEClient | None = None
        self._async: AsyncSIEClient | None = None

    def _client_options(self) -> dict[str, Any]:
        return dict(url=self.url, api_key=self.api_key.resolve_value(), timeout=self.timeout,
                    max_retries=self.max_retries)  # retries after the first try, as Haystack's embedders count

    def warm_up(self) -> None:
        """Make the sync client (once)."""
        if self._sync is None:
            self._sync = connect(**self._client_options())

    async def warm_up_async(self) -> None:
        """Make the async client (once), on the event loop that will await it."""
        if self._async is None:
            self._async = connect_async(**self._client_options())

    def close(self) -> None:
        """Release the sync client; a later `run` makes a new one."""
        if self._sync is not None:
            self._sync.close()
            self._sync = None

    async def close_async(self) -> None:
        """Release the async client; a later `run_async` makes a new one."""
        if self._async is not None:
            await self._async.close()
            self._async = None

    @property
    def sync_client(self) -> SIEClient:
        self.warm_up()
        assert self._sync is not None
        return self._sync

    async def call_async(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Await `method` (encode, score or extract) on the async client."""
        await self.warm_up_async()
        assert self._async is not None
        return await getattr(self._async, method)(*args, **kwargs)

    def connection_dict(self) -> dict[str, Any]:
        """The init parameters this base owns, for `default_to_dict` (the key as its Secret's dict:
        haystack 2.x does not serialise Secrets by itself; a token Secret refuses to be written)."""
        return dict(url=self.url, api_key=self.api_key.to_dict(), timeout=self.timeout, max_retries=self.max_retries)


def connection_from_dict(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with its serialised key turned back into a Secret, for `default_from_dict`."""
    deserialize_secrets_inplace(data.get("init_parameters", {}), keys=["api_key"])
    return data


def text_to_embed(content: str | None, meta: dict[str, Any], meta_fields: list[str], separator: str,
                  prefix: str = "", suffix: str = "") -> str:
    """A document's text with the chosen meta fields in front, between `prefix` and `suffix`
    (Haystack's embedders' convention)."""
    values = [str(meta[key]) for key in meta_fields if meta.get(key) is not None]
    return prefix + separator.join(values + [content or ""]) + suffix


def dimensions_setting(dimensions: int | None, dims: int | None, owner: str) -> int | None:
    """`dimensions`, or the deprecated `dims` alias it replaced (the name OpenAI's and Haystack's
    embedders use for Matryoshka truncation)."""
    if dims is None:
        return dimensions
    warnings.warn(f"{owner}(dims=...) is deprecated; pass dimensions=...", DeprecationWarning, stacklevel=3)
    if dimensions is not None and dimensions != dims:
        raise ValueError(f"{owner}: dims={dims} and dimensions={dimensions} disagree; pass dimensions only")
    return dims
