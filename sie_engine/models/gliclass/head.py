"""GLiClass zero-shot classification (the `gliclass` output, served by `extract`).

One packed sequence per item holds the item's labels and its text
(`<<LABEL>>a<<LABEL>>b<<SEP>>text`, or the text first, as the checkpoint's
`prompt_first` says; tasks/gliclass.py builds it). From the backbone's hidden states
the head computes, as gliclass' `GLiClassUniEncoder` does for one item:

  1. the text vector: the whole sequence's tokens (through the bidirectional LSTM when
     `use_lstm`) pooled by `pooling_strategy` (first, last, avg, sum, max, rms,
     abs_max, abs_avg), then `text_projector` (Linear, activation, Linear);
  2. a vector per label: its `<<LABEL>>` token's state (or the token after it, or the
     mean of its span up to the next label with `class_token_pooling: average`), then
     `classes_projector`;
  3. optionally both L2-normalised, then the scorer's logit per label (`simple`: dot
     product; `weighted-dot`, `mlp`: gliclass' small networks), times `logit_scale`
     when normalised.

It returns each item's logits; the task turns them into scores (sigmoid per label,
or softmax over the item's labels). Pooling runs over each sequence's own tokens: the
reference's avg / last pooling over a padded batch also counts the padding, so an
item's answer there depends on its batch (SIE gives the answer of a batch of one).

Module names mirror the checkpoint's under `model.` (`text_projector.linear_1`,
`scorer.mlp.0`, `lstm.lstm.weight_ih_l0`, ...), so loading is a strict
`load_state_dict` and every tensor of the checkpoint is used. The head runs in
float32 whatever the backbone's dtype: its scores are thresholded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ...batch import PackedBatch
from ...heads.base import Head
from ...heads.context import HeadContext
from ..gliner.layers import Lstm
from .checkpoint import BACKBONE_PREFIX, GliclassConfig, load_gliclass_config

GLICLASS = "gliclass"  # the card output, and the head extract work on GLiClass models runs
EPSILON = 1e-8  # gliclass' feature normalisation epsilon
MAX_LABELS = 50  # a card's default options.gliclass.max_labels


@dataclass(frozen=True)
class GliclassOptions:
    """A card's `options.gliclass`: the most labels one request may send (all share one sequence
    with the text) and the default of `multi_label`."""

    max_labels: int = MAX_LABELS
    multi_label: bool = True

    @staticmethod
    def of(card) -> GliclassOptions:
        raw = (card.options or {}).get(GLICLASS) or {}
        options = raw if isinstance(raw, Mapping) else {None: raw}
        max_labels, multi_label = options.get("max_labels", MAX_LABELS), options.get("multi_label", True)
        if (set(options) - {"max_labels", "multi_label"} or isinstance(max_labels, bool)
                or not isinstance(max_labels, int) or max_labels < 1 or not isinstance(multi_label, bool)):
            raise ValueError(f"card {card.id}: options.gliclass takes max_labels (a positive integer) and "
                             f"multi_label (true or false); got {raw!r}")
        return GliclassOptions(max_labels, multi_label)


@dataclass
class LabelSpans:
    """`WorkItem.extra` of a GLiClass item: each label's token span `[start, end)` in its sequence
    (one token, the label's `<<LABEL>>` or the one after it, unless `class_token_pooling: average`)."""

    starts: np.ndarray
    ends: np.ndarray


class Projector(nn.Module):
    """gliclass' FeaturesProjector at inference: Linear, activation, (dropout), Linear."""

    def __init__(self, weight_1: torch.Tensor, weight_2: torch.Tensor, activation: str):
        super().__init__()
        from transformers.activations import ACT2FN

        self.linear_1 = nn.Linear(weight_1.shape[1], weight_1.shape[0])
        self.act = ACT2FN[activation]
        self.linear_2 = nn.Linear(weight_2.shape[1], weight_2.shape[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(self.act(self.linear_1(x)))


class DotScorer(nn.Module):
    """`simple`: the dot product of each label's vector with its item's text vector."""

    def forward(self, text: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return (text * labels).sum(-1)


class WeightedDotScorer(nn.Module):
    """`weighted-dot`: [text_a, label_a, text_b * label_b] through an MLP, from two projections each."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]):
        super().__init__()
        hidden = tensors["scorer.proj_text.weight"].shape[1]
        self.proj_text = nn.Linear(hidden, 2 * hidden)
        self.proj_label = nn.Linear(hidden, 2 * hidden)
        inner = tensors["scorer.out_mlp.0.weight"].shape[0]
        # Linear, (dropout), ReLU, Linear: indices as in the checkpoint
        self.out_mlp = nn.Sequential(nn.Linear(3 * hidden, inner), nn.Identity(), nn.ReLU(), nn.Linear(inner, 1))
        self.hidden = hidden

    def forward(self, text: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        text_a, text_b = self.proj_text(text).view(-1, 2, self.hidden).unbind(1)
        label_a, label_b = self.proj_label(labels).view(-1, 2, self.hidden).unbind(1)
        return self.out_mlp(torch.cat([text_a, label_a, text_b * label_b], dim=-1)).squeeze(-1)


class MlpScorer(nn.Module):
    """`mlp`: [text, label] through Linear, ReLU, Linear, ReLU, Linear (sizes from the checkpoint)."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]):
        super().__init__()
        shapes = [tensors[f"scorer.mlp.{i}.weight"].shape for i in (0, 2, 4)]
        self.mlp = nn.Sequential(nn.Linear(shapes[0][1], shapes[0][0]), nn.ReLU(),
                                 nn.Linear(shapes[1][1], shapes[1][0]), nn.ReLU(),
                                 nn.Linear(shapes[2][1], shapes[2][0]))

    def forward(self, text: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.mlp(torch.cat([text, labels], dim=-1)).squeeze(-1)


# scorer_type -> the scorer built from the checkpoint's tensors ("simple" has none: DotScorer)
SCORERS: dict[str, Callable[[Mapping[str, torch.Tensor]], nn.Module]] = {"weighted-dot": WeightedDotScorer,
                                                                         "mlp": MlpScorer}


class GliclassHead(Head):
    """hidden `[T, H]` of packed (labels + text) sequences -> per item, its labels' logits."""

    def __init__(self, config: GliclassConfig, tensors: Mapping[str, torch.Tensor], device: torch.device):
        super().__init__()
        self.config = config
        self.text_projector = Projector(tensors["text_projector.linear_1.weight"],
                                        tensors["text_projector.linear_2.weight"], config.projector_hidden_act)
        self.classes_projector = Projector(tensors["classes_projector.linear_1.weight"],
                                           tensors["classes_projector.linear_2.weight"], config.projector_hidden_act)
        self.scorer: nn.Module = DotScorer() if config.scorer_type == "simple" else SCORERS[config.scorer_type](tensors)
        self.logit_scale = nn.Parameter(torch.zeros(()), requires_grad=False)
        if config.use_lstm:
            self.lstm = Lstm(tensors["lstm.lstm.weight_ih_l0"].shape[1], 1, stepwise=device.type == "cpu")
        self.load_state_dict(dict(tensors), strict=True)

    def forward(self, hidden: torch.Tensor, batch: PackedBatch, items: Sequence) -> list[list[float]]:
        return run_gliclass_head(self, hidden, batch, items)


def head_tensors(checkpoint: Mapping[str, torch.Tensor], backbone_prefix: str) -> dict[str, torch.Tensor]:
    """The head's tensors by module name: every tensor under the checkpoint's root `model.` that is not
    the backbone's."""
    if not backbone_prefix.endswith(BACKBONE_PREFIX):
        raise ValueError(f"backbone tensors sit under {backbone_prefix!r}, not '*{BACKBONE_PREFIX}': "
                         "not a GLiClass checkpoint")
    root = backbone_prefix[: -len(BACKBONE_PREFIX)] + "model."
    return {name[len(root):]: checkpoint[name] for name in checkpoint.keys()
            if name.startswith(root) and not name.startswith(backbone_prefix)}


def build_gliclass_head(ctx: HeadContext) -> dict[str, nn.Module]:
    GliclassOptions.of(ctx.card)  # a card's bad options fail its load, not its requests
    config = load_gliclass_config(ctx.root)
    try:
        with torch.device(ctx.device):
            head = GliclassHead(config, head_tensors(ctx.checkpoint, ctx.prefix), ctx.device)
    except (KeyError, RuntimeError, ValueError) as exc:  # a missing, unexpected or misshapen head tensor
        raise ValueError(f"card {ctx.card.id}: the GLiClass head (scorer {config.scorer_type}, "
                         f"use_lstm {config.use_lstm}) does not match its checkpoint: {exc}") from None
    # the head runs in float32 whatever the backbone's dtype (its scores are thresholded)
    return {GLICLASS: head.to(device=ctx.device, dtype=torch.float32).eval()}


def pool(x: torch.Tensor, seq: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor, how: str) -> torch.Tensor:
    """Each sequence's tokens `x[T, H]` (`seq[T]`: their sequence) -> `[B, H]`, as gliclass' poolings."""
    if how == "first":
        return x.index_select(0, starts)
    if how == "last":
        return x.index_select(0, starts + lengths - 1)
    if how in ("max", "abs_max"):
        values = x.abs() if how == "abs_max" else x
        out = x.new_empty(len(lengths), x.shape[1])
        return out.scatter_reduce_(0, seq[:, None].expand_as(values), values, reduce="amax", include_self=False)
    values = {"avg": x, "sum": x, "rms": x * x, "abs_avg": x.abs()}[how]
    sums = x.new_zeros(len(lengths), x.shape[1]).index_add_(0, seq, values)
    if how == "sum":
        return sums
    means = sums / lengths[:, None].to(x.dtype)
    return means.sqrt() if how == "rms" else means


@torch.inference_mode()
def run_gliclass_head(head: GliclassHead, hidden: torch.Tensor, batch: PackedBatch,
                      items: Sequence) -> list[list[float]]:
    config = head.config
    device = hidden.device
    seq_lens = np.asarray(batch.seq_lens)
    seq_starts = np.concatenate([[0], np.cumsum(seq_lens)[:-1]])
    spans: list[LabelSpans] = [it.extra for it in items]
    counts = [len(s.starts) for s in spans]
    # every label's span as packed token rows, and the span each row belongs to: one host-to-device copy
    span_lens = np.concatenate([s.ends - s.starts for s in spans])
    rows = np.concatenate([np.arange(a, b) + base for s, base in zip(spans, seq_starts)
                           for a, b in zip(s.starts, s.ends)])
    span_of_rows: np.ndarray = np.repeat(np.arange(len(span_lens)), span_lens)
    owners: np.ndarray = np.repeat(np.arange(len(counts)), counts)
    index = torch.from_numpy(np.concatenate([rows, span_of_rows, owners, seq_starts, seq_lens])).to(device)
    n_rows, n_labels = len(rows), len(span_lens)
    rows_d, span_of_row, owner, starts_d, lens_d = index.split([n_rows, n_rows, n_labels, len(items), len(items)])

    x = hidden.float()
    if (span_lens == 1).all():
        labels = x.index_select(0, rows_d)
    else:  # class_token_pooling "average": the mean of each label's span
        labels = pool(x.index_select(0, rows_d), span_of_row, None, torch.from_numpy(span_lens).to(device), "avg")
    text_states = x
    if config.use_lstm:
        text_states = head.lstm(x, batch.seq_lens, _keep(seq_lens, device))
    text = pool(text_states, batch.seq_index(), starts_d, lens_d, config.pooling_strategy)

    text = head.text_projector(text)
    labels = head.classes_projector(labels)
    if config.normalize_features:
        text = text / (text.norm(p=2, dim=-1, keepdim=True) + EPSILON)
        labels = labels / (labels.norm(p=2, dim=-1, keepdim=True) + EPSILON)
    logits = head.scorer(text.index_select(0, owner), labels)
    if config.normalize_features:
        logits = logits * head.logit_scale
    flat = logits.cpu().tolist()  # the batch's one device-to-host copy
    out, offset = [], 0
    for count in counts:
        out.append(flat[offset:offset + count])
        offset += count
    return out


def _keep(seq_lens: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.arange(seq_lens.max())[None, :] < seq_lens[:, None]).to(device)
