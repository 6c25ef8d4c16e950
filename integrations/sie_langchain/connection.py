"""`SIEConnection`: the fields every SIE LangChain class takes to reach SIE
(`url`, `api_key`, `timeout`, or ready-made clients), and the clients made from them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr

from sie_client import AsyncSIEClient, Clients, SIEClient


class SIEConnection(BaseModel):
    """url: an SIE server, "embedded", or None for `SIE_URL` (else embedded mode).
    api_key: defaults to `SIE_API_KEY`. client / async_client: clients of your own
    (with `client` only, async calls run it in a worker thread)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid", protected_namespaces=())

    url: str | None = None
    api_key: SecretStr | None = None
    timeout: float | None = None
    client: SIEClient | None = Field(default=None, exclude=True)
    async_client: AsyncSIEClient | None = Field(default=None, exclude=True)

    _clients: Clients = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        self._clients = Clients(url=self.url, api_key=self.api_key.get_secret_value() if self.api_key else None,
                                timeout=self.timeout, client=self.client, async_client=self.async_client)
