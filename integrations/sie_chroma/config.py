"""The settings both Chroma functions persist in a collection's configuration.

API keys are never written into the collection: the config names the
environment variable to read the key from, as chromadb's own functions do.
The URL written is the one the function actually used (the argument, a given
client's, or `SIE_URL`'s), so a collection reopened in another process talks to
the same SIE, not to whatever that process would default to.
"""

from __future__ import annotations

import os
import threading
import warnings
from typing import Any

from sie_client import SIEClient, connect

PERSISTED = ("model", "url", "api_key_env_var", "timeout", "instruction", "dims", "batch_size")

# Chroma rebuilds a reopened collection's function from its config on every add and
# query (when no function is passed to get_collection); reusing the client keeps its
# HTTP connections instead of opening and leaking one client per call.
_rebuilt_clients: dict[tuple, SIEClient] = {}
_rebuilt_lock = threading.Lock()


def make_client(url: str | None, api_key: str | None, api_key_env_var: str, timeout: float | None,
                client: SIEClient | None) -> SIEClient:
    if api_key is None:
        api_key = os.environ.get(api_key_env_var)
    return connect(client, url=url, api_key=api_key, timeout=timeout)


def rebuilt_client(config: dict[str, Any]) -> SIEClient:
    """The client for a function rebuilt from a persisted config, shared by equal configs."""
    api_key = os.environ.get(config.get("api_key_env_var") or "SIE_API_KEY")
    key = (config.get("url"), api_key, config.get("timeout"))
    with _rebuilt_lock:
        if key not in _rebuilt_clients:
            _rebuilt_clients[key] = make_client(config.get("url"), api_key, "", config.get("timeout"), None)
        return _rebuilt_clients[key]


def known_config(config: dict[str, Any], kind: str) -> dict[str, Any]:
    """The keys this version understands. Keys written by a newer version are dropped
    with a warning rather than refused, so its collections still open here."""
    unknown = sorted(set(config) - set(PERSISTED))
    if unknown:
        warnings.warn(f"{kind}: ignoring config keys {unknown} this version of sie_chroma does not know "
                      f"(written by a newer one?)", UserWarning, stacklevel=3)
    return {key: value for key, value in config.items() if key in PERSISTED}


def check_config(config: dict[str, Any], kind: str) -> None:
    if not isinstance(config.get("model"), str) or not config["model"]:
        raise ValueError(f"{kind} config needs a model id string under 'model'")


def check_update(old_config: dict[str, Any], new_config: dict[str, Any]) -> None:
    # Vectors already stored came from the old model and size: mixing would corrupt search.
    for key in ("model", "dims"):
        if key in new_config and new_config[key] != old_config.get(key):
            raise ValueError(f"cannot change {key} of an existing collection's SIE embedding function; "
                             f"re-embed into a new collection")
