"""The client's settings read from the environment: one place, so the client and every
adapter built on it read the same variables the same way.

SIE_URL: the server or router (`http(s)://host:port`), or "embedded"; unset or empty
    means embedded mode.
SIE_API_KEY: sent as `Authorization: Bearer`; unset or empty means no key.
"""

from __future__ import annotations

import os

URL_VARIABLE = "SIE_URL"
API_KEY_VARIABLE = "SIE_API_KEY"


def url_from_env() -> str | None:
    """`SIE_URL`, or None when it is unset or empty."""
    return os.environ.get(URL_VARIABLE) or None


def api_key_from_env() -> str | None:
    """`SIE_API_KEY`, or None when it is unset or empty."""
    return os.environ.get(API_KEY_VARIABLE) or None
