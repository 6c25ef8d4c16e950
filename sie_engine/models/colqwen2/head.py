"""ColQwen2's token vectors (`multivector`, `options.multivector.kind: colqwen2`) and MaxSim (`score`):
every token of a query (its 10 augmentation pads included) and every position of a page (the
prompt and the image features) is kept, projected by `embedding_proj_layer` and L2-normalised, as
`ColQwen2ForRetrieval` returns them under the processor's attention mask. ColPali's heads
(models/colpali/head.py's `page_retrieval_heads`) do the rest; this builder is the family's own
(`Family.heads`).
"""

from __future__ import annotations

from torch import nn

from ...heads.context import HeadContext
from ..colpali.head import page_retrieval_heads
from .inputs import ColQwen2Inputs

KIND = "colqwen2"


def build_colqwen2_multivector(ctx: HeadContext) -> dict[str, nn.Module]:
    """The `multivector` and `score` heads; the backbone gets the page prompt's tokens, which the
    input preparation read from the processor (a page is that prompt with its image features inside)."""
    tokenizer = ctx.tokenizer
    if not isinstance(tokenizer, ColQwen2Inputs):  # the family's inputs; another tokenizer has no page prompt
        raise ValueError(f"card {ctx.card.id}: a ColQwen2 head needs ColQwen2's input preparation (ColQwen2Inputs)")
    ctx.backbone.set_image_prompt(*tokenizer.image_prompt)
    return page_retrieval_heads(ctx, KIND, "ColQwen2")
