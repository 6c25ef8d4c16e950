"""`SIEConnection`: the fields every SIE LlamaIndex component takes to reach SIE
(`url`, `api_key`, `timeout`, `max_retries`, or ready-made clients), and the clients
made from them. The key and the clients are excluded from LlamaIndex's serialisation
(`to_dict`).

`url` and `api_key` come from the arguments or else the `SIE_URL` / `SIE_API_KEY`
variables, resolved when the component is made with LlamaIndex's own
`get_from_param_or_env` (as its OpenAI and TEI components resolve theirs); neither
set means embedded mode."""

from __future__ import annotations

from typing import Any, ClassVar

from llama_index.core.base.llms.generic_utils import get_from_param_or_env
from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from sie_client import AsyncSIEClient, Clients, SIEClient


class SIEConnection(BaseModel):
    """url: an SIE server, "embedded", or None for `SIE_URL` (else embedded mode).
    api_key: defaults to `SIE_API_KEY`. max_retries: retries of a failed call after the
    first try (None: the client's default). client / async_client: clients of your own
    (with `client` only, async calls run it in a worker thread)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    url: str | None = Field(default=None, description="SIE server URL, 'embedded', or None for SIE_URL.")
    api_key: str | None = Field(default=None, exclude=True, description="SIE API key (default: SIE_API_KEY).")
    timeout: float | None = Field(default=None, description="Seconds per SIE request.")
    max_retries: int | None = Field(default=None, ge=0, description="Retries of a failed call after the first try.")
    client: SIEClient | None = Field(default=None, exclude=True)
    async_client: AsyncSIEClient | None = Field(default=None, exclude=True)

    _clients: Clients = PrivateAttr()

    # Whether `max_retries` is the client's. LlamaIndex's BaseExtractor has a `max_retries` of its
    # own (its loop around `aextract`, default 0): an extractor keeps that meaning, and its client
    # keeps the client's default policy.
    retries_are_the_clients: ClassVar[bool] = True

    def model_post_init(self, context: Any) -> None:
        if self.client is None and self.async_client is None:
            # "" (neither given nor set) means no URL: embedded mode, as the client decides.
            self.url = get_from_param_or_env("url", self.url, "SIE_URL", "") or None
            self.api_key = get_from_param_or_env("api_key", self.api_key, "SIE_API_KEY", "") or None
        max_retries = self.max_retries if self.retries_are_the_clients else None
        self._clients = Clients(url=self.url, api_key=self.api_key, timeout=self.timeout, client=self.client,
                                async_client=self.async_client, max_retries=max_retries)
