"""No file-system paths in answers: clients learn nothing of the server's disk layout.

Load failures, descriptions and exception texts can name local directories or Python's
site-packages (an ImportError names the module's file). `public_text` replaces each
absolute path that starts at a top-level directory of this machine with its last part
(`…/enc`), or its part below site-packages (`<site-packages>/transformers/__init__.py`);
URL paths such as `/v1/encode` are left alone. The full text stays in the server's log.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import overload

# An absolute path: a slash not inside a word, a URL or another path, then path characters.
_PATH = re.compile(r"(?<![\w.:/~-])(/[^\s'\"`:;,()\[\]{}<>|]+)")
_PACKAGES = re.compile(r".*/(?:site|dist)-packages/")


@lru_cache(maxsize=1)
def _roots() -> frozenset[str]:
    """Top-level directories of this machine (`tmp`, `home`, `usr`, ...)."""
    try:
        return frozenset(entry for entry in os.listdir("/") if os.path.isdir("/" + entry))
    except OSError:
        return frozenset()


def _replace(match: re.Match) -> str:
    path = match.group(1)
    if path.split("/", 2)[1] not in _roots():
        return path  # a URL path or a route, not a file
    if _PACKAGES.match(path):
        return _PACKAGES.sub("<site-packages>/", path, count=1)
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return f"…/{name}" if name else "…"


@overload
def public_text(text: str) -> str: ...
@overload
def public_text(text: None) -> None: ...


def public_text(text: str | None) -> str | None:
    """`text` with file-system paths reduced to their last part (None stays None)."""
    return text if not text else _PATH.sub(_replace, text)
