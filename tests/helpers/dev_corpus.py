"""The dev corpus: Debian package descriptions, queries and labels, shipped in the
repository's `data/` folder (see data/README.md), so a fresh clone runs the suite."""

from __future__ import annotations

import gzip
import json

from checkout import REPO

DATA_DIR = REPO / "data"


def read_jsonl(name: str, limit: int | None = None) -> list[dict]:
    """The first `limit` rows (all with None) of `data/<name>.jsonl.gz`."""
    with gzip.open(DATA_DIR / f"{name}.jsonl.gz", "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return rows[:limit] if limit else rows


def load_docs(limit: int | None = None) -> list[dict]:
    """`{id, text}` per package."""
    return read_jsonl("debian-dev-docs", limit)


def load_queries(limit: int | None = None) -> list[dict]:
    """`{id, query, relevant}`: a package's synopsis and the id of its one relevant document."""
    return read_jsonl("debian-dev-queries", limit)


def load_labels(limit: int | None = None) -> list[dict]:
    """`{id, section, tags}`: Debian's section and debtags of a document."""
    return read_jsonl("debian-dev-labels", limit)
