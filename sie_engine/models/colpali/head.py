"""ColPali's token vectors (`multivector`, `options.multivector.kind: colpali`) and MaxSim (`score`):
every token of a query and every position of a page (image features and prompt) is kept, projected
by `embedding_proj_layer` and normalised. The shared heads of heads/colbert.py do the rest; this
builder is the family's own (`Family.heads`), so the shared one names no family.
"""

from __future__ import annotations

from torch import nn

from ...heads.colbert import multivector_heads
from ...heads.common import linear, optional, tensor
from ...heads.context import HeadContext
from .model import ColPaliInputs

KIND = "colpali"


def build_colpali_multivector(ctx: HeadContext) -> dict[str, nn.Module]:
    """The `multivector` and `score` heads; the backbone gets the page prompt's tokens, which the
    input preparation read from the processor (a page is its image features, then that prompt)."""
    kind = ctx.options("multivector").get("kind", KIND)
    if kind != KIND:
        raise ValueError(f"card {ctx.card.id}: options.multivector.kind {kind!r}: a ColPali model's token "
                         f"vectors are kind {KIND!r}")
    tensors = ctx.checkpoint
    proj = linear(tensor(tensors, "embedding_proj_layer.weight"), optional(tensors, "embedding_proj_layer.bias"),
                  ctx.device, ctx.dtype)
    tokenizer = ctx.tokenizer
    if not isinstance(tokenizer, ColPaliInputs):  # the family's inputs; another tokenizer has no image prompt
        raise ValueError(f"card {ctx.card.id}: a ColPali head needs ColPali's input preparation (ColPaliInputs)")
    ctx.backbone.set_image_prompt(tokenizer.image_prompt_ids)
    return multivector_heads(ctx, proj, drop_first=False, default_score="sum", default_skiplist=None)
