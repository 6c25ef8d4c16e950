"""Heads: modules from backbone hidden states `[T, H]` of a packed batch to one
result per work item. Backbones never pool.

A head is an `nn.Module` whose `forward(hidden, batch, items)` returns one value per
item (a vector, a sparse vector, a score, decoded spans); heads that produce vectors
say their width in `dim`. A builder makes a card's heads for one of its outputs from a
`HeadContext` (checkpoint, config, tokenizer, device) and returns them by name; the
names are what work items ask for (`WorkItem.outputs`).

The registry maps an output to its builder as `module:function`, imported only when a
model with that output loads. Add a head: write its module, add a line here.
"""

from __future__ import annotations

import importlib
from typing import Callable

HEADS: dict[str, str] = {
    "dense": "sie_engine.heads.dense:build_dense",
    "sparse": "sie_engine.heads.sparse:build_sparse",
    "multivector": "sie_engine.heads.colbert:build_multivector",
    "score": "sie_engine.heads.classifier:build_score_head",
    "extract": "sie_engine.heads.gliner:build_extract_head",
    "zeroshot": "sie_engine.heads.nli:build_zeroshot_head",
    "relations": "sie_engine.heads.glirel:build_relations_head",
    "gliner2": "sie_engine.heads.gliner2:build_gliner2_head",
    "gliclass": "sie_engine.heads.gliclass:build_gliclass_head",
}


def builder(output: str) -> Callable:
    """The builder of an output's heads: `fn(HeadContext) -> {name: nn.Module}`."""
    module, _, name = HEADS[output].partition(":")
    return getattr(importlib.import_module(module), name)
