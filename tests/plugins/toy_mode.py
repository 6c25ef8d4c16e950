"""A toy extract mode, `nearest`: zero-shot classification by embedding similarity, added from
outside the engine (tests/engine/tasks/test_extract_mode_plugin.py registers it with one line).

Each text and each label runs through the model as its own sequence; the mode's head (below)
mean-pools every sequence's hidden states and L2-normalises them. A text's classifications are
the labels ranked by cosine similarity to it, best first (ties in request order), the cosine as
the score; `top_k` keeps the k best. Texts and labels share the request's batches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from sie_engine import validation as v
from sie_engine.batch import PackedBatch
from sie_engine.heads.base import Head
from sie_engine.heads.context import HeadContext
from sie_engine.heads.pooling import pool
from sie_engine.tasks.common import check_labels, longest_first
from sie_engine.tasks.context import Call, TaskContext
from sie_engine.tasks.extract import ExtractMode
from sie_engine.types import Classification, ExtractedItem, ExtractResult
from sie_engine.work import WorkItem

NEAREST = "nearest"  # the card output that selects the mode, and its head's name
OUTPUTS = frozenset({NEAREST})


class UnitMeanHead(Head):
    """hidden `[T, H]` -> each sequence's mean over its tokens, unit length: `[B, H]` float32 (host)."""

    def forward(self, hidden: torch.Tensor, batch: PackedBatch, items: Sequence = ()) -> np.ndarray:
        pooled = pool("mean", hidden, batch.cu_seqlens, batch.seq_index())  # [B, H]
        return nn.functional.normalize(pooled.float(), dim=-1).cpu().numpy()


def build_nearest(ctx: HeadContext) -> dict[str, nn.Module]:
    return {NEAREST: UnitMeanHead().eval()}


async def run(engine: TaskContext, call: Call) -> ExtractResult:
    card, fields = call.card, call.fields
    ids, texts = v.parse_items(fields["items"], engine.limits)
    labels = check_labels(fields["labels"], engine.limits)
    top_k = v.check_positive_int(fields.get("top_k"), "top_k")
    tokenized, tokenize_s = await engine.tokenize(card, "encode", texts + labels)
    request = engine.new_request(call, NEAREST, len(tokenized.ids))
    work = [WorkItem(request, i, tokenized.ids[i], outputs=OUTPUTS) for i in longest_first(tokenized.ids)]
    vectors = np.stack([r[NEAREST] for r in await engine.run_items(card, NEAREST, work, request)])  # [N + M, H]
    similarity = vectors[:len(texts)] @ vectors[len(texts):].T  # [N, M] cosines
    items = []
    for item_id, row in zip(ids, similarity):
        order = sorted(range(len(labels)), key=lambda j: -row[j])[:top_k]  # stable: ties keep request order
        items.append(ExtractedItem(id=item_id, entities=[],
                                   classifications=[Classification(labels[j], float(row[j])) for j in order]))
    return ExtractResult(card.id, items, tokenized.num_tokens, engine.timings(request, call.started, tokenize_s))


MODE = ExtractMode(
    kind="an embedding-similarity classifier", family="embedding-similarity", labels="candidate classes",
    fields=frozenset({"top_k"}), answers=frozenset({"classifications"}), run=run,
    head=f"{__name__}:build_nearest",
)

# a declaration naming a field the extract task does not have: registration refuses it
BROKEN = dataclasses.replace(MODE, fields=MODE.fields | {"colour"})
