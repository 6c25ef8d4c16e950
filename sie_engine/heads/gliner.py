"""The `extract` task head: GLiNER span extraction on a packed batch of windows.

`build_extract_head` (registered as `HEAD_BUILDERS["extract"]`) loads the span head
from the checkpoint; the installed task head turns one backbone forward over a batch
of windows (from any number of requests, each with its own labels) into each
window's decoded spans.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Sequence

import numpy as np
import torch

from ..batch import PackedBatch
from .gliner_checkpoint import load_gliner_config
from .gliner_decode import DecodeSettings, Span, candidates, greedy
from .gliner_head import GlinerHead, backbone_root_prefix, span_grid
from .gliner_prompt import Window

# Spans whose first-layer activations are held at once (x 4 D float32 each, ~200 MB at D=768): bounds the
# head's memory on large batches without a kernel launch per window.
SPAN_CHUNK = 16384


@dataclass
class WindowWork:
    """`WorkItem.extra` of an extract work item."""

    window: Window
    settings: DecodeSettings


def build_extract_head(runner, tensors, backbone_prefix: str) -> None:
    config = load_gliner_config(runner.root)
    head = GlinerHead(config, runner.config.hidden_size)
    head.load(tensors, backbone_root_prefix(backbone_prefix))
    head = head.to(device=runner.device, dtype=torch.float32).eval()
    runner.task_heads["extract"] = partial(run_extract_head, head)
    runner.param_bytes += sum(p.numel() * p.element_size() for p in head.parameters())


@torch.inference_mode()
def run_extract_head(head: GlinerHead, runner, hidden: torch.Tensor, batch: PackedBatch,
                     items: Sequence) -> list[list[Span]]:
    """hidden `[T, H]` of the windows in `items` -> per window, its decoded spans (window word indices)."""
    windows: list[Window] = [it.extra.window for it in items]
    device = hidden.device
    K = head.config.max_width
    seq_starts = np.cumsum((0,) + tuple(batch.seq_lens[:-1]))
    word_counts = [w.num_words for w in windows]
    word_base = np.cumsum([0] + word_counts[:-1])
    label_counts = [len(w.label_positions) for w in windows]
    label_base = np.cumsum([0] + label_counts[:-1])

    # 1. the tokens that become word and label vectors, in one gather
    token_index = np.concatenate([s + w.word_tokens for s, w in zip(seq_starts, windows)])
    label_index = np.concatenate([s + w.label_positions for s, w in zip(seq_starts, windows)])
    slots = np.concatenate([b + w.word_slots for b, w in zip(word_base, windows)])
    grids = [span_grid(n, K) for n in word_counts]
    span_counts = [len(starts) for starts, _ in grids]
    span_start = np.concatenate([b + starts for b, (starts, _) in zip(word_base, grids)])
    span_end = span_start + np.concatenate([widths for _, widths in grids])
    host = np.concatenate([token_index, label_index, slots, span_start, span_end])
    index = torch.from_numpy(host).to(device, non_blocking=True)  # one host-to-device copy
    cut = np.cumsum([len(token_index), len(label_index), len(slots), len(span_start)])
    token_index_d, label_index_d, slots_d, start_d, end_d = index.tensor_split(cut.tolist())

    x = hidden.index_select(0, torch.cat([token_index_d, label_index_d])).float()
    if head.projection is not None:
        x = head.projection(x)
    token_vectors, label_vectors = x[: len(token_index)], x[len(token_index):]

    # 2. words, then the LSTM across each window's words
    words = head.word_vectors(token_vectors, slots_d, sum(word_counts))  # [W_total, D]
    if head.rnn is not None:
        longest = max(word_counts)
        keep = torch.from_numpy(np.arange(longest)[None, :] < np.asarray(word_counts)[:, None]).to(device)
        words = head.rnn(words, word_counts, keep)
    labels = head.prompt(label_vectors)  # [C_total, D]

    # 3. span vectors, chunked over whole windows, and 4. span-label probabilities
    start_terms, end_terms = head.span.word_terms(words)
    context = None
    if head.span.mode == "markerV1":
        window_of_word = torch.from_numpy(np.repeat(np.arange(len(windows)), word_counts)).to(device)
        sums = words.new_zeros(len(windows), words.shape[1]).index_add_(0, window_of_word, words)
        context = head.span.context_terms(sums / torch.tensor(word_counts, device=device, dtype=words.dtype)[:, None])
    probs = []
    span_base = np.cumsum([0] + span_counts)
    first = 0
    while first < len(windows):
        last = first + 1
        while last < len(windows) and span_base[last + 1] - span_base[first] <= SPAN_CHUNK:
            last += 1
        a, b = int(span_base[first]), int(span_base[last])
        pre = start_terms.index_select(0, start_d[a:b]) + end_terms.index_select(0, end_d[a:b])
        if context is not None:
            owner = torch.from_numpy(np.repeat(np.arange(first, last), span_counts[first:last])).to(device)
            pre = pre + context.index_select(0, owner)
        spans = head.span.finish(pre)  # [S_chunk, D]
        for i in range(first, last):
            rows = spans[int(span_base[i]) - a:int(span_base[i + 1]) - a]
            window_labels = labels[int(label_base[i]):int(label_base[i]) + label_counts[i]]
            probs.append(torch.sigmoid(rows @ window_labels.T).flatten())
        first = last
    probs_host = torch.cat(probs).cpu().numpy()  # the batch's one device-to-host copy

    results = []
    offset = 0
    for i, item in enumerate(items):
        size = span_counts[i] * label_counts[i]
        window_probs = probs_host[offset:offset + size].reshape(span_counts[i], label_counts[i])
        offset += size
        settings: DecodeSettings = item.extra.settings
        starts, widths = grids[i]
        found = candidates(window_probs, starts, widths, settings.threshold)
        results.append(greedy(found, settings.flat, settings.multi_label))
    return results


from ..runner import HEAD_BUILDERS  # noqa: E402  (runner imports the heads last; see runner.py)

HEAD_BUILDERS["extract"] = build_extract_head
