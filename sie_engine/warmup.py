"""A warm-up batch: one batch of synthetic text through a loaded model, run before a server
reports ready, so admission has the model's measured throughput before the first client does
(issue #30: a flood right after preload was let in on the prior, 17 of 400 long requests
against a 30 s bound, the last answered after 144 s). TEI warms up at start the same way.

The batch holds at least half the model's batch budget (what `Throughput.observe` counts as a
full batch): full-window texts, as many as that takes. It runs the model's first task with the
fields that task needs; a model whose task takes no text (ColPali's page scoring) is not
warmed up, and admission lets it in about one batch at a time until its first full batch.
"""

from __future__ import annotations

import math
from typing import Any

from .card import ModelCard

# A word a tokenizer keeps as at least one token: a text of `window` of them fills the window
# (and is truncated to it, the default).
WORD = "warm "
# Labels for extraction tasks (entities, classes): any will do, the batch's cost is its texts'.
LABELS = ("person", "place")


# Tokens a document model's warm-up pages generate: enough steps to measure its decoding rate.
WARM_NEW_TOKENS = 8


def _blank_page() -> bytes:
    """A white 64 x 64 PNG (the processor resizes it to the model's page size)."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), "white").save(buffer, format="PNG")
    return buffer.getvalue()


WARM_TASK = "<CAPTION>"  # Florence-2's: a task that takes no text input


def warm_up_fields(card: ModelCard, task: str, batch_tokens: int) -> dict[str, Any]:
    """The fields of a `task` call on `card` that fill about half of `batch_tokens` or more."""
    window = card.max_seq_len
    count = max(1, math.ceil(batch_tokens / 2 / window))
    texts = [WORD * window] * count
    if task == "score":
        return {"query": "warm", "items": texts}
    if task == "extract" and "generate" in card.outputs:  # a document model: a blank page, a few tokens
        prompt = (card.options.get("generate") or {}).get("task_prompt", "")
        return {"items": [{"image": _blank_page()}] * 2, "max_new_tokens": WARM_NEW_TOKENS,
                **({"prompt": "warm"} if "{prompt}" in prompt else {}),
                **({"task": WARM_TASK} if "{task}" in prompt else {})}  # a model prompted by task (Florence-2)
    if task == "extract":
        return {"items": texts, "labels": list(LABELS)}
    return {"items": texts}
