"""Multi-vector (late interaction) heads: one vector per token (ColBERT, BGE-M3's
colbert output), and the MaxSim scorer that ranks documents against a query's
vectors on the device.

Token vectors are `normalize(linear(hidden))`. Which tokens are kept:

- ColBERT (`kind: colbert`, colbert-ir / PyLate checkpoints): queries keep every token,
  including the [MASK] expansion; documents drop the punctuation skiplist. Queries and
  documents are told apart by their marker (the token after [CLS]), which the
  tokenizer's `encode_marked` inserts.
- BGE-M3 (`kind: bge-m3`): every token but the first ([CLS]); the projection is
  `colbert_linear.pt`.
- A family with token vectors of its own kind builds them with `multivector_heads` from its
  own builder (`Family.heads`; ColPali's `kind: colpali`, models/colpali/head.py).

MaxSim: score(q, d) = sum over query vectors of the best dot product with a document
vector (`score: mean` divides by the number of query vectors, as BGE-M3 does).

Card options (`options.multivector`): kind, query_marker, document_marker,
query_length, expand_queries, attend_to_expansion_tokens, skiplist (`punctuation`, a list
of tokens, or none), skiplist_lookup (`encoded`: colbert-ir's, the default; `vocabulary`:
PyLate's), normalize, score (sum | mean).

Query expansion: the [MASK] tokens are queries of attention (each gets a vector) but not
keys, as colbert-ir (`attend_to_mask_tokens=False`) and PyLate
(`attend_to_expansion_tokens=False`) run them by default; the attention backends limit
each query's keys to its real tokens (`key_lens`). `attend_to_expansion_tokens: true`
lets every token attend to them.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..batch import PackedBatch
from ..card import ModelCard
from ..work import WorkItem
from .base import Head
from .common import linear, load_torch_file, optional, tensor
from .context import HeadContext
from .st_dense import load_module_weights

KINDS = ("colbert", "bge-m3")
SCORES = ("sum", "mean")
SKIPLIST_LOOKUPS = ("encoded", "vocabulary")


def marked_encode_args(card: ModelCard, is_query: bool) -> dict[str, Any]:
    """Keyword arguments of `TextTokenizer.encode_marked` for a card's queries or documents."""
    options = (card.options or {}).get("multivector") or {}
    if is_query:
        return {
            "marker": options.get("query_marker"),
            "length": options.get("query_length"),
            "expand": bool(options.get("expand_queries", False)),
            "attend_to_expansion": bool(options.get("attend_to_expansion_tokens", False)),
        }
    return {"marker": options.get("document_marker")}


def uses_markers(card: ModelCard) -> bool:
    options = (card.options or {}).get("multivector") or {}
    return any(options.get(k) for k in ("query_marker", "document_marker", "query_length", "expand_queries"))


class MultiVectorHead(Head):
    """hidden `[T, H]` -> per sequence, its kept token vectors `[kept, D]` float32."""

    def __init__(self, proj: nn.Linear, normalize: bool, drop_first: bool, skip_ids: torch.Tensor | None,
                 document_marker: int | None):
        super().__init__()
        self.proj = proj
        self.normalize = normalize
        self.drop_first = drop_first
        self.register_buffer("skip_ids", skip_ids, persistent=False)
        self.document_marker = document_marker
        self.dim = proj.out_features

    def forward(self, hidden: torch.Tensor, batch: PackedBatch, items: Sequence = ()) -> list[np.ndarray]:
        return self.per_sequence(hidden, batch, items)

    def token_vectors(self, hidden: torch.Tensor, batch: PackedBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Vectors `[T, D]` float32 and the tokens kept `[T]` bool."""
        vectors = self.proj(hidden).float()
        if self.normalize:
            vectors = F.normalize(vectors, p=2, dim=-1)
        keep = torch.ones(hidden.shape[0], dtype=torch.bool, device=hidden.device)
        if self.drop_first:
            keep &= batch.positions != 0
        if self.skip_ids is not None:
            # a document carries its marker right after [CLS]; queries keep punctuation
            second = (batch.cu_seqlens[:-1].long() + 1).clamp(max=hidden.shape[0] - 1)
            is_document = batch.input_ids.index_select(0, second) == self.document_marker  # [B]
            keep &= ~(torch.isin(batch.input_ids, self.skip_ids) & is_document[batch.seq_index()])
        return vectors, keep

    def per_sequence(self, hidden: torch.Tensor, batch: PackedBatch, items: Sequence = ()) -> list[np.ndarray]:
        """One `[kept tokens, D]` float32 array per sequence (a single device -> host copy)."""
        vectors, keep = self.token_vectors(hidden, batch)
        vectors, keep = vectors.cpu().numpy(), keep.cpu().numpy()
        bounds = np.cumsum((0,) + batch.seq_lens)
        return [vectors[a:b][keep[a:b]] for a, b in zip(bounds[:-1], bounds[1:])]


def maxsim_scores(vectors: torch.Tensor, keep: torch.Tensor, batch: PackedBatch, queries: Sequence[torch.Tensor],
                  query_of_seq: Sequence[int], mean: bool) -> torch.Tensor:
    """MaxSim of each packed document against its own query.

    vectors `[T, D]` and keep `[T]` of the documents; queries: the distinct query matrices
    `[Lq_j, D]` in the batch; query_of_seq: for each of the B sequences, its query's index.
    Returns `[B]` float32. Every document token is compared with the concatenated queries
    at once (`[T, sum Lq]`), then each sequence reads only its own query's columns.
    """
    device = vectors.device
    q_all = torch.cat(list(queries), dim=0)  # [sum Lq, D]
    sim = vectors @ q_all.T  # [T, sum Lq]
    sim = sim.masked_fill(~keep[:, None], float("-inf"))
    B, L = len(batch.seq_lens), q_all.shape[0]
    best = torch.full((B, L), float("-inf"), device=device, dtype=sim.dtype)
    best.scatter_reduce_(0, batch.seq_index()[:, None].expand(-1, L), sim, reduce="amax", include_self=True)
    # columns of each sequence's own query
    starts = np.cumsum([0] + [q.shape[0] for q in queries])
    own = np.zeros((B, L), dtype=bool)
    for b, j in enumerate(query_of_seq):
        own[b, starts[j]:starts[j + 1]] = True
    own_t = torch.from_numpy(own).to(device)
    best = torch.where(own_t & torch.isfinite(best), best, torch.zeros((), device=device))
    scores = best.sum(dim=1)
    if mean:
        scores = scores / own_t.sum(dim=1).clamp(min=1)
    return scores


class MaxSimHead(Head):
    """The `score` head of a late-interaction model: each item's MaxSim against its request's
    query vectors (`WorkItem.extra`, `[Lq, D]`), computed on the device."""

    def __init__(self, vectors: MultiVectorHead, mean: bool):
        super().__init__()
        self.vectors = vectors
        self.mean = mean

    def forward(self, hidden: torch.Tensor, batch: PackedBatch, items: Sequence[WorkItem]) -> list[float]:
        queries: list[torch.Tensor] = []
        index: dict[int, int] = {}  # id of a request's query array -> its place in queries
        of_seq: list[int] = []
        for item in items:  # items of one request share one query array
            key = id(item.extra)
            if key not in index:
                index[key] = len(queries)
                queries.append(torch.as_tensor(item.extra, dtype=torch.float32, device=hidden.device))
            of_seq.append(index[key])
        vectors, keep = self.vectors.token_vectors(hidden, batch)
        return maxsim_scores(vectors, keep, batch, queries, of_seq, self.mean).cpu().tolist()


def _projection(ctx: HeadContext, kind: str) -> nn.Linear:
    device, dtype, tensors = ctx.device, ctx.dtype, ctx.checkpoint
    if kind == "bge-m3":
        state = load_torch_file(ctx.root / "colbert_linear.pt")
        return linear(state["weight"], state.get("bias"), device, dtype)
    weight = optional(tensors, "linear.weight")
    if weight is not None:  # colbert-ir layout: the projection sits beside the backbone
        return linear(weight, optional(tensors, "linear.bias"), device, dtype)
    dense = _st_dense(ctx.root)  # PyLate / sentence-transformers layout: 1_Dense/
    if dense is None:
        raise ValueError(
            f"card {ctx.card.id}: no ColBERT projection found (`linear.weight` in the checkpoint or a 1_Dense/ module)"
        )
    return linear(tensor(dense, "linear.weight"), optional(dense, "linear.bias"), device, dtype)


def _st_dense(root: Path) -> dict[str, torch.Tensor] | None:
    for folder in sorted(root.glob("1_Dense*")):
        if (folder / "model.safetensors").is_file() or (folder / "pytorch_model.bin").is_file():
            return load_module_weights(folder)
    return None


def skiplist_ids(ctx: HeadContext, skiplist: Any, lookup: str = "encoded") -> list[int]:
    """Token ids of the document skiplist (`punctuation`: ColBERT's string.punctuation).

    lookup `encoded`: each symbol's first id when encoded alone (colbert-ir's); `vocabulary`: the
    symbol as one vocabulary entry, the unknown token's id where there is none (PyLate's
    `convert_tokens_to_ids`). The two agree on WordPiece and byte-level BPE vocabularies; on a
    SentencePiece one (XLM-R's) a symbol encoded alone takes the word-start piece first."""
    if skiplist in (None, "none", False):
        return []
    if lookup not in SKIPLIST_LOOKUPS:
        raise ValueError(f"card {ctx.card.id}: options.multivector.skiplist_lookup {lookup!r} not one of "
                         f"{SKIPLIST_LOOKUPS}")
    symbols = list(string.punctuation) if skiplist == "punctuation" else list(skiplist)
    ids = set()
    for symbol in symbols:
        if lookup == "vocabulary":
            found = ctx.tokenizer.vocabulary_id(symbol)
        else:
            encoded = ctx.tokenizer.plain_ids(symbol)
            found = int(encoded[0]) if len(encoded) else None
        if found is not None:
            ids.add(int(found))
    return sorted(ids)


def build_multivector(ctx: HeadContext) -> dict[str, nn.Module]:
    """The token-vector head (encode's `multivector`) and the MaxSim head over it (`score`)."""
    options = ctx.options("multivector")
    kind = options.get("kind", "colbert")
    if kind not in KINDS:
        raise ValueError(f"card {ctx.card.id}: options.multivector.kind {kind!r} not one of {KINDS}")
    return multivector_heads(ctx, _projection(ctx, kind), drop_first=kind == "bge-m3",
                             default_score="mean" if kind == "bge-m3" else "sum",
                             default_skiplist="punctuation" if kind == "colbert" else None)


def multivector_heads(ctx: HeadContext, proj: nn.Linear, *, drop_first: bool, default_score: str,
                      default_skiplist: Any) -> dict[str, nn.Module]:
    """The `multivector` and `score` heads over a projection `[D, H]`, with the card's
    `options.multivector` (normalize, score, skiplist, markers) over the kind's defaults."""
    options = ctx.options("multivector")
    score_mode = options.get("score", default_score)
    if score_mode not in SCORES:
        raise ValueError(f"card {ctx.card.id}: options.multivector.score {score_mode!r} not one of {SCORES}")
    skip = skiplist_ids(ctx, options.get("skiplist", default_skiplist), options.get("skiplist_lookup", "encoded"))
    marker = options.get("document_marker")
    if skip and marker is None:
        raise ValueError(f"card {ctx.card.id}: a document skiplist needs options.multivector.document_marker")
    for token in (options.get("query_marker"), marker):
        if token is not None:
            ctx.tokenizer.token_id(token)  # fail at load, naming the token, if the vocabulary lacks it
    head = MultiVectorHead(
        proj,
        normalize=bool(options.get("normalize", True)),
        drop_first=drop_first,
        skip_ids=torch.tensor(skip, dtype=torch.long, device=ctx.device) if skip else None,
        document_marker=ctx.tokenizer.token_id(marker) if marker is not None else None,
    ).eval()
    return {"multivector": head, "score": MaxSimHead(head, score_mode == "mean").eval()}
