"""The `extract` task head: GLiNER span extraction on a packed batch of windows.

`build_extract_head` loads the span head from the checkpoint; `ExtractHead` turns one
backbone forward over a batch of windows (from any number of requests, each with its
own labels) into each window's decoded spans.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ...batch import PackedBatch
from ...heads.base import Head
from ...heads.context import HeadContext
from .checkpoint import load_gliner_config
from .decode import DecodeSettings, Span, candidates, greedy, token_candidates
from .labels import LabelEncoder, build_label_encoder
from .layers import GlinerHead, SpanMarker, backbone_root_prefix, span_grid
from .prompt import Window

# Spans whose first-layer activations are held at once (x 4 D float32 each, ~200 MB at D=768): bounds the
# head's memory on large batches without a kernel launch per window.
SPAN_CHUNK = 16384


@dataclass
class WindowWork:
    """`WorkItem.extra` of an extract work item. `alone`: the window is its text's only one and
    is decoded here; otherwise the head returns the candidates whose start lies in the
    window's core, and the text is decoded once over all its windows' candidates. `labels`: the
    request's labels, which a bi-encoder encodes apart from the text (a uni-encoder's are in its ids)."""

    window: Window
    settings: DecodeSettings
    alone: bool = True
    labels: tuple[str, ...] = ()


class ExtractHead(Head):
    """The `extract` head: per window work item, its decoded spans (or its candidates)."""

    def __init__(self, gliner: GlinerHead, labels: LabelEncoder | None = None):
        super().__init__()
        self.gliner = gliner
        self.labels = labels

    def forward(self, hidden: torch.Tensor, batch: PackedBatch, items: Sequence) -> list[list[Span]]:
        return run_extract_head(self.gliner, hidden, batch, items, self.labels)


def build_extract_head(ctx: HeadContext) -> dict[str, nn.Module]:
    config = load_gliner_config(ctx.root)
    head = GlinerHead(config, ctx.config.hidden_size, ctx.device)
    root_prefix = backbone_root_prefix(ctx.prefix)
    head.load(ctx.checkpoint, root_prefix)
    # the span head (and a bi-encoder's labels encoder, whose vectors are cached) runs in float32
    # whatever the backbone's dtype: its scores are thresholded
    labels = None
    if config.bi_encoder:
        labels = build_label_encoder(config, ctx.root, ctx.checkpoint, root_prefix, config.hidden_size, ctx.device,
                                     torch.float32)
    return {"extract": ExtractHead(head.to(device=ctx.device, dtype=torch.float32), labels).eval()}


@dataclass
class BatchLayout:
    """Where each window's pieces sit in the batch, computed on the host (no device syncs).

    word_counts, label_counts, span_counts: per window; *_base: their running offsets.
    grids: per window, its spans' start words and widths (GLiNER's enumeration order).
    """

    word_counts: list[int]
    word_base: np.ndarray
    label_counts: list[int]
    label_base: np.ndarray
    grids: list[tuple[np.ndarray, np.ndarray]]
    span_counts: list[int]
    span_base: np.ndarray


def layout(windows: Sequence[Window], max_width: int, label_counts: list[int] | None = None) -> BatchLayout:
    """`label_counts`: per window, when its labels are not in its prompt (bi-encoders)."""
    word_counts = [w.num_words for w in windows]
    if label_counts is None:
        label_counts = [len(w.label_positions) for w in windows]
    grids = [span_grid(n, max_width) for n in word_counts]
    span_counts = [len(starts) for starts, _ in grids]
    return BatchLayout(
        word_counts, np.cumsum([0] + word_counts[:-1]), label_counts, np.cumsum([0] + label_counts[:-1]),
        grids, span_counts, np.cumsum([0] + span_counts),
    )


@torch.inference_mode()
def run_extract_head(head: GlinerHead, hidden: torch.Tensor, batch: PackedBatch,
                     items: Sequence, label_encoder: LabelEncoder | None = None) -> list[list[Span]]:
    """hidden `[T, H]` of the windows in `items` -> per window, its decoded spans, or for a window of a
    longer text its candidate spans (window word indices)."""
    windows: list[Window] = [it.extra.window for it in items]
    token_level = head.config.token_level
    # a bi-encoder's windows hold no labels: each window's labels come from the labels encoder (cached)
    label_counts = [len(it.extra.labels) for it in items] if label_encoder is not None else None
    plan = layout(windows, 0 if token_level else head.config.max_width, label_counts)
    words, labels, start_d, end_d = word_and_label_vectors(head, hidden, batch, windows, plan, label_encoder is None)
    if label_encoder is not None:
        labels = label_encoder.vectors([label for it in items for label in it.extra.labels], hidden.device)
    if token_level:
        probs = token_probabilities(head, words, labels, plan)
    else:
        probs = span_probabilities(head, words, labels, start_d, end_d, plan)
    results = []
    offset = 0
    for i, item in enumerate(items):
        work: WindowWork = item.extra
        threshold = work.settings.threshold
        if token_level:
            shape: tuple[int, ...] = (plan.word_counts[i], plan.label_counts[i], 3)
            found = token_candidates(probs[offset:offset + int(np.prod(shape))].reshape(shape), threshold)
        else:
            shape = (plan.span_counts[i], plan.label_counts[i])
            starts, widths = plan.grids[i]
            found = candidates(probs[offset:offset + int(np.prod(shape))].reshape(shape), starts, widths, threshold)
        offset += int(np.prod(shape))
        if work.alone:
            results.append(greedy(found, work.settings.flat, work.settings.multi_label))
        else:
            core_start, core_end = (c - work.window.first_word for c in work.window.core)
            results.append([span for span in found if core_start <= span.start < core_end])
    return results


def word_and_label_vectors(head: GlinerHead, hidden: torch.Tensor, batch: PackedBatch, windows: Sequence[Window],
                           plan: BatchLayout, labels_in_prompt: bool = True) -> tuple[torch.Tensor, ...]:
    """Word vectors `[W_total, D]` (pooled sub-tokens, then the LSTM), label vectors `[C_total, D]`
    (before any prompt MLP), and the spans' first and last words `[S_total]` on the device."""
    device = hidden.device
    seq_starts = np.cumsum((0,) + tuple(batch.seq_lens[:-1]))
    token_index = np.concatenate([s + w.word_tokens for s, w in zip(seq_starts, windows)])
    label_index = np.concatenate([s + w.label_positions for s, w in zip(seq_starts, windows)]
                                 if labels_in_prompt else [np.zeros(0, dtype=np.int64)])
    slots = np.concatenate([b + w.word_slots for b, w in zip(plan.word_base, windows)])
    span_start = np.concatenate([b + starts for b, (starts, _) in zip(plan.word_base, plan.grids)])
    span_end = span_start + np.concatenate([widths for _, widths in plan.grids])
    # every index in one host-to-device copy
    index = torch.from_numpy(np.concatenate([token_index, label_index, slots, span_start, span_end])).to(device)
    n_tokens, n_labels = len(token_index), len(label_index)
    slots_d, start_d, end_d = index[n_tokens + n_labels:].tensor_split([len(slots), len(slots) + len(span_start)])

    x = hidden.index_select(0, index[: n_tokens + n_labels]).float()
    if head.projection is not None:
        x = head.projection(x)
    words = head.word_vectors(x[:n_tokens], slots_d, sum(plan.word_counts))  # [W_total, D]
    if head.rnn is not None:
        keep = np.arange(max(plan.word_counts))[None, :] < np.asarray(plan.word_counts)[:, None]
        words = head.rnn(words, plan.word_counts, torch.from_numpy(keep).to(device))
    return words, x[n_tokens:], start_d, end_d


def token_probabilities(head: GlinerHead, words: torch.Tensor, labels: torch.Tensor, plan: BatchLayout) -> np.ndarray:
    """Token models: every window's `[words, labels, 3]` start / end / inside probabilities, flattened."""
    scorer = head.scorer
    if scorer is None:
        raise ValueError("token_probabilities is for token-level heads (a span head has no token scorer)")
    probs = []
    for i in range(len(plan.word_counts)):
        w0, c0 = int(plan.word_base[i]), int(plan.label_base[i])
        scores = scorer(words[w0:w0 + plan.word_counts[i]], labels[c0:c0 + plan.label_counts[i]])
        probs.append(torch.sigmoid(scores).flatten())
    return torch.cat(probs).cpu().numpy()  # the batch's one device-to-host copy


def span_probabilities(head: GlinerHead, words: torch.Tensor, label_vectors: torch.Tensor, start_d: torch.Tensor,
                       end_d: torch.Tensor, plan: BatchLayout) -> np.ndarray:
    """Span models: every window's `[spans, labels]` probabilities, flattened window after window."""
    span, prompt = head.span, head.prompt
    if span is None or prompt is None:
        raise ValueError("span_probabilities is for span heads (a token-level head has no span marker)")
    labels = prompt(label_vectors)  # [C_total, D]
    start_terms, end_terms = span.word_terms(words)
    context = window_context(span, words, plan) if span.mode == "markerV1" else None
    probs = []
    span_base = plan.span_base
    n_windows = len(plan.word_counts)
    first = 0
    while first < n_windows:  # chunks of whole windows
        last = first + 1
        while last < n_windows and span_base[last + 1] - span_base[first] <= SPAN_CHUNK:
            last += 1
        a, b = int(span_base[first]), int(span_base[last])
        pre = start_terms.index_select(0, start_d[a:b]) + end_terms.index_select(0, end_d[a:b])
        if context is not None:
            owner: np.ndarray = np.repeat(np.arange(first, last), plan.span_counts[first:last])
            pre = pre + context.index_select(0, torch.from_numpy(owner).to(words.device))
        spans = span.finish(pre)  # [S_chunk, D]
        for i in range(first, last):
            rows = spans[int(span_base[i]) - a:int(span_base[i + 1]) - a]
            window_labels = labels[int(plan.label_base[i]):int(plan.label_base[i]) + plan.label_counts[i]]
            probs.append(torch.sigmoid(rows @ window_labels.T).flatten())
        first = last
    return torch.cat(probs).cpu().numpy()  # the batch's one device-to-host copy


def window_context(span: SpanMarker, words: torch.Tensor, plan: BatchLayout) -> torch.Tensor:
    """markerV1: each window's mean word vector through its part of out_project -> `[B, H1]`."""
    counts = plan.word_counts
    window_of_word = torch.from_numpy(np.repeat(np.arange(len(counts)), counts)).to(words.device)
    sums = words.new_zeros(len(counts), words.shape[1]).index_add_(0, window_of_word, words)
    return span.context_terms(sums / torch.tensor(counts, device=words.device, dtype=words.dtype)[:, None])
