"""Qwen3-VL-Embedding's `dense` head: the shared one (last-token pooling, L2 normalisation: the
card's), once the backbone has the chat prompt an image item's features sit in (Family.heads)."""

from __future__ import annotations

from ...heads.context import HeadContext
from ...heads.dense import build_dense
from .inputs import Qwen3VLInputs


def build_qwen3_vl_dense(ctx: HeadContext):
    tokenizer = ctx.tokenizer
    if not isinstance(tokenizer, Qwen3VLInputs):  # the family's inputs; another tokenizer has no image prompt
        raise ValueError(f"card {ctx.card.id}: a Qwen3-VL dense head needs Qwen3-VL's input preparation "
                         "(Qwen3VLInputs)")
    ctx.backbone.set_image_prompt(*tokenizer.image_prompt)
    return build_dense(ctx)
