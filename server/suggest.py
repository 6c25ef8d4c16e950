""""Did you mean": the catalog ids a 404 `model_not_found` suggests (issue #30.8).

Users often send a model's short name (`all-MiniLM-L6-v2` for
`sentence-transformers/all-MiniLM-L6-v2`) or a near miss. A served id whose last path part
equals the name (any case) is suggested first, then close matches by difflib's ratio over
whole ids and over last parts.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

MAX_SUGGESTIONS = 3
CUTOFF = 0.75


def suggestions(model: str, served: Iterable[str]) -> list[str]:
    """Up to MAX_SUGGESTIONS served ids, best first."""
    ids = list(served)
    wanted = model.strip().lower()
    if not wanted or not ids:
        return []
    exact_tail = [i for i in ids if i.rsplit("/", 1)[-1].lower() == wanted.rsplit("/", 1)[-1]]
    by_tail = {i.rsplit("/", 1)[-1].lower(): i for i in ids}
    close = difflib.get_close_matches(wanted, [i.lower() for i in ids], MAX_SUGGESTIONS, CUTOFF)
    close_tail = difflib.get_close_matches(wanted.rsplit("/", 1)[-1], list(by_tail), MAX_SUGGESTIONS, CUTOFF)
    lowered = {i.lower(): i for i in ids}
    ranked = exact_tail + [lowered[c] for c in close] + [by_tail[c] for c in close_tail]
    return list(dict.fromkeys(ranked))[:MAX_SUGGESTIONS]


def did_you_mean(model: str, served: Iterable[str]) -> str:
    """`; did you mean 'a' or 'b'?` or an empty string."""
    found = suggestions(model, served)
    if not found:
        return ""
    return "; did you mean " + " or ".join(repr(f) for f in found) + "?"
