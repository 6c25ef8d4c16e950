"""`SIEConnection`: the fields every SIE LangChain class takes to reach SIE
(`url`, `api_key`, `timeout`, `max_retries`, or ready-made clients), and the clients
made from them; `ShowProgress`, the progress flag under LangChain's name.

`url` and `api_key` default to the `SIE_URL` and `SIE_API_KEY` variables, read when the
object is made, through LangChain's own `from_env` / `secret_from_env` (as LangChain's
partner packages read theirs); no URL at all means embedded mode."""

from __future__ import annotations

from typing import Any

from langchain_core.utils import from_env, secret_from_env
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, model_validator

from sie_client import AsyncSIEClient, Clients, SIEClient
from sie_client.adapters import renamed


class SIEConnection(BaseModel):
    """url: an SIE server, "embedded", or None (default: `SIE_URL`, else embedded mode).
    api_key: defaults to `SIE_API_KEY`. timeout: seconds per request. max_retries: retries
    of a failed call after the first try (None: the client's default). client / async_client:
    clients of your own (with `client` only, async calls run it in a worker thread)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid", protected_namespaces=(),
                              populate_by_name=True)

    url: str | None = Field(default_factory=from_env("SIE_URL", default=None))
    api_key: SecretStr | None = Field(default_factory=secret_from_env("SIE_API_KEY", default=None))
    timeout: float | None = None
    max_retries: int | None = Field(default=None, ge=0)
    client: SIEClient | None = Field(default=None, exclude=True)
    async_client: AsyncSIEClient | None = Field(default=None, exclude=True)

    _clients: Clients = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        key = self.api_key.get_secret_value() if self.api_key else None
        # the client counts retries after the first try, as LangChain's clients do (None: its default)
        self._clients = Clients(url=self.url, api_key=key, timeout=self.timeout, client=self.client,
                                async_client=self.async_client, max_retries=self.max_retries)


class ShowProgress(BaseModel):
    """show_progress: a progress bar over bulk calls (LangChain's name for it; `progress` is a
    deprecated alias, still accepted and readable)."""

    show_progress: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _progress_alias(cls, values: Any) -> Any:
        return renamed(values, "progress", "show_progress", cls.__name__)

    @property
    def progress(self) -> bool | None:
        """Deprecated: `show_progress`."""
        return self.show_progress
