"""The settings both Chroma functions persist in a collection's configuration.

API keys are never written into the collection: the config names the
environment variable to read the key from, as chromadb's own functions do.
"""

from __future__ import annotations

import os
from typing import Any

from sie_client import SIEClient, connect

PERSISTED = ("model", "url", "api_key_env_var", "timeout", "instruction", "dims", "batch_size")


def make_client(url: str | None, api_key: str | None, api_key_env_var: str, timeout: float | None,
                client: SIEClient | None) -> SIEClient:
    if api_key is None:
        api_key = os.environ.get(api_key_env_var)
    return connect(client, url=url, api_key=api_key, timeout=timeout)


def check_config(config: dict[str, Any], kind: str) -> None:
    unknown = set(config) - set(PERSISTED)
    if unknown:
        raise ValueError(f"{kind} config has unknown keys {sorted(unknown)} (known: {', '.join(PERSISTED)})")
    if not isinstance(config.get("model"), str) or not config["model"]:
        raise ValueError(f"{kind} config needs a model id string under 'model'")
