"""`SIEConnection`: how an SIE Haystack component reaches SIE. Haystack components
are serialised to YAML (`to_dict`), so they take serialisable settings only: a URL
(None: `SIE_URL` when the pipeline runs, else embedded mode), an API key as a
Haystack `Secret` (by default the `SIE_API_KEY` variable, never written out), a
timeout. The clients are made on first use (or by `warm_up`)."""

from __future__ import annotations

from typing import Any

from haystack.utils import Secret, deserialize_secrets_inplace

from sie_client import Clients

DEFAULT_KEY = Secret.from_env_var("SIE_API_KEY", strict=False)


class SIEConnection:
    def __init__(self, url: str | None, api_key: Secret, timeout: float | None):
        self.url = url
        self.api_key = api_key
        self.timeout = timeout
        self._clients: Clients | None = None

    def warm_up(self) -> None:
        if self._clients is None:
            self._clients = Clients(url=self.url, api_key=self.api_key.resolve_value(), timeout=self.timeout)

    @property
    def clients(self) -> Clients:
        self.warm_up()
        assert self._clients is not None
        return self._clients

    def connection_dict(self) -> dict[str, Any]:
        """The init parameters this base owns, for `default_to_dict` (the key as its Secret's dict:
        haystack 2.x does not serialise Secrets by itself; a token Secret refuses to be written)."""
        return dict(url=self.url, api_key=self.api_key.to_dict(), timeout=self.timeout)


def connection_from_dict(data: dict[str, Any]) -> dict[str, Any]:
    """`data` with its serialised key turned back into a Secret, for `default_from_dict`."""
    deserialize_secrets_inplace(data.get("init_parameters", {}), keys=["api_key"])
    return data


def text_to_embed(content: str | None, meta: dict[str, Any], meta_fields: list[str], separator: str) -> str:
    """A document's text with the chosen meta fields in front (Haystack's embedders' convention)."""
    values = [str(meta[key]) for key in meta_fields if meta.get(key) is not None]
    return separator.join(values + [content or ""])
