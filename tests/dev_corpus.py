"""The shared dev corpus (../shared/data beside the repository, or $SIE_DATA_DIR)."""

from __future__ import annotations

import json
import os
from pathlib import Path

DATA_DIR = Path(os.environ.get("SIE_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))


def load_docs(limit: int | None = None) -> list[dict]:
    with open(DATA_DIR / "debian-dev-docs.jsonl") as f:
        docs = [json.loads(line) for line in f]
    return docs[:limit] if limit else docs


def load_queries(limit: int | None = None) -> list[dict]:
    with open(DATA_DIR / "debian-dev-queries.jsonl") as f:
        queries = [json.loads(line) for line in f]
    return queries[:limit] if limit else queries
