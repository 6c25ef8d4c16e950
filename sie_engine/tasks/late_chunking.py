"""Late chunking (`encode` with `late_chunking: true`; Jina's API field of that name): a request's
texts, the chunks of one document in order, are read by the model as one sequence, and each
text's vector is the mean of its own tokens' hidden states there, so every chunk's vector has
seen the whole document (Günther et al., 2024, "Late Chunking: Contextual Chunk Embeddings Using
Long-Context Embedding Models"; `chunked_pooling` of jina-ai/late-chunking).

The sequence: the model's special tokens around the card's template prefix, the texts and the
template suffix, each part tokenised on its own without special tokens (a text's ids are those it
has alone, and its span is exactly them); the template's tokens and the special tokens are read
but pooled into no text's vector. One work item carries the sequence and the texts' spans; the
dense head pools each span (heads/dense.py). Served where this is what the model's own pooling
would give a text alone: the dense output of a mean-pooling text model whose tokens attend to each
other (a static embedder's vectors would be each text's alone). The whole sequence must fit the
model's window: cutting it would drop the last texts, so a longer one is a 400.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..card import template_parts
from ..errors import InvalidRequest
from ..layers.lora import LoRAAdapter
from ..work import WorkItem
from .context import Call, TaskContext

FIELD = "late_chunking"


def check_late_chunking(card, outputs: Sequence[str]) -> None:
    """A 400 where late chunking cannot be served for this model and outputs (image items on a text
    model and `sparse_labels` without a sparse output are refused by encode before this)."""
    why = ("it is an image-text model" if "image" in card.modalities
           else "its tokens do not attend to each other" if card.family == "static"
           else f"it pools by {card.pooling}" if card.pooling != "mean" else None)
    if why is not None:
        raise InvalidRequest(f"late chunking pools each text by the mean of its tokens in the shared sequence, "
                             f"which model {card.id!r} does not serve: {why}; send late_chunking false", field=FIELD)
    if list(outputs) != ["dense"]:
        raise InvalidRequest("late chunking answers dense vectors only: leave output_types out or send ['dense']",
                             field="output_types")


async def late_chunked(engine: TaskContext, call: Call, texts: list[str],
                       template: tuple[str, str | None] | None, is_query: bool,
                       adapter: LoRAAdapter | None) -> tuple[Any, list[dict], int, float]:
    """The work request, each text's raw result (`{"dense": its span's vector}`, as encode's items have),
    the sequence's tokens and the seconds spent tokenising. `template`: the card's (template,
    instruction), or None (the request's `template: false`)."""
    card = call.card
    prefix, suffix = template_parts(*template) if template is not None else ("", "")
    try:
        sequence, tokenize_s = await engine.tokenize(card, "encode_concatenated", texts, prefix=prefix,
                                                     suffix=suffix)
    except ValueError as exc:  # a tokenizer whose post-processor rewrites the texts' ids
        raise InvalidRequest(f"model {card.id!r}: {exc}", field=FIELD) from None
    window = sequence.window
    if len(sequence.ids) > window:
        raise InvalidRequest(f"late chunking reads all {len(texts)} texts as one sequence: {len(sequence.ids)} "
                             f"tokens with the template and special tokens, more than model {card.id!r}'s window "
                             f"of {window}; send fewer or shorter texts per request", field=FIELD)
    for i, (start, end) in enumerate(sequence.spans):
        if start == end:
            raise InvalidRequest(f"items[{i}] has no tokens of its own to pool (an empty text)", field=f"items[{i}]")
    work_request = engine.new_request(call, "encode", 1)
    engine.submit(card, "encode", [WorkItem(work_request, 0, sequence.ids, outputs=frozenset({"dense"}),
                                            extra=is_query, adapter=adapter, spans=tuple(sequence.spans))],
                  work_request)
    raw = await work_request.future
    return work_request, [{"dense": vector} for vector in raw[0]["dense"]], len(sequence.ids), tokenize_s
