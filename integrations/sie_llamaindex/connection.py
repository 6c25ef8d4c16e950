"""`SIEConnection`: the fields every SIE LlamaIndex component takes to reach SIE
(`url`, `api_key`, `timeout`, or ready-made clients), and the clients made from them.
The key and the clients are excluded from LlamaIndex's serialisation (`to_dict`)."""

from __future__ import annotations

from typing import Any

from llama_index.core.bridge.pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from sie_client import AsyncSIEClient, Clients, SIEClient


class SIEConnection(BaseModel):
    """url: an SIE server, "embedded", or None for `SIE_URL` (else embedded mode).
    api_key: defaults to `SIE_API_KEY`. client / async_client: clients of your own
    (with `client` only, async calls run it in a worker thread)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    url: str | None = Field(default=None, description="SIE server URL, 'embedded', or None for SIE_URL.")
    api_key: str | None = Field(default=None, exclude=True, description="SIE API key (default: SIE_API_KEY).")
    timeout: float | None = Field(default=None, description="Seconds per SIE request.")
    client: SIEClient | None = Field(default=None, exclude=True)
    async_client: AsyncSIEClient | None = Field(default=None, exclude=True)

    _clients: Clients = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        self._clients = Clients(url=self.url, api_key=self.api_key, timeout=self.timeout, client=self.client,
                                async_client=self.async_client)
