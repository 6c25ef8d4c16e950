"""The request fields each route accepts: handlers reject anything else (a typo
must not be silently ignored) and the OpenAPI document lists exactly these."""

from __future__ import annotations

import importlib


def task_options(task: str) -> tuple[str, ...]:
    """Extra request fields a task module accepts (its OPTIONS), passed to it as options."""
    try:
        return tuple(importlib.import_module(f"sie_engine.tasks.{task}").OPTIONS)
    except (ImportError, AttributeError):
        return ()


ENCODE_FIELDS = ("items", "output_types", "is_query", "instruction", "dims", "normalize", "output_dtype", "truncate",
                 "precision")
SCORE_FIELDS = ("query", "items", "top_k") + task_options("score")
EXTRACT_FIELDS = ("items", "labels", "threshold", "flat") + task_options("extract")
EMBEDDINGS_FIELDS = ("model", "input", "encoding_format", "dimensions", "user")
