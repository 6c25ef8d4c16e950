"""ColPali's token vectors (`multivector`, `options.multivector.kind: colpali`) and MaxSim (`score`):
every token of a query and every position of a page (image features and prompt) is kept, projected
by `embedding_proj_layer` and normalised. The shared heads of heads/colbert.py do the rest; this
builder is the family's own (`Family.heads`), so the shared one names no family. ColQwen2's builder
(models/colqwen2/head.py) shares `page_retrieval_heads`.
"""

from __future__ import annotations

from torch import nn

from ...heads.colbert import multivector_heads
from ...heads.common import linear, optional, tensor
from ...heads.context import HeadContext
from .model import ColPaliInputs

KIND = "colpali"


def page_retrieval_heads(ctx: HeadContext, kind: str, model: str) -> dict[str, nn.Module]:
    """The `multivector` and `score` heads of a ColVision retriever (`*ForRetrieval`: ColPali,
    ColQwen2) whose token vectors are `kind`: `embedding_proj_layer` over every position, normalised."""
    chosen = ctx.options("multivector").get("kind", kind)
    if chosen != kind:
        raise ValueError(f"card {ctx.card.id}: options.multivector.kind {chosen!r}: a {model} model's token "
                         f"vectors are kind {kind!r}")
    tensors = ctx.checkpoint
    proj = linear(tensor(tensors, "embedding_proj_layer.weight"), optional(tensors, "embedding_proj_layer.bias"),
                  ctx.device, ctx.dtype)
    return multivector_heads(ctx, proj, drop_first=False, default_score="sum", default_skiplist=None)


def build_colpali_multivector(ctx: HeadContext) -> dict[str, nn.Module]:
    """The `multivector` and `score` heads; the backbone gets the page prompt's tokens, which the
    input preparation read from the processor (a page is its image features, then that prompt)."""
    tokenizer = ctx.tokenizer
    if not isinstance(tokenizer, ColPaliInputs):  # the family's inputs; another tokenizer has no image prompt
        raise ValueError(f"card {ctx.card.id}: a ColPali head needs ColPali's input preparation (ColPaliInputs)")
    ctx.backbone.set_image_prompt(tokenizer.image_prompt_ids)
    return page_retrieval_heads(ctx, KIND, "ColPali")
