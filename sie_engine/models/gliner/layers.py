"""GLiNER's span head over SIE's packed backbone output.

From the backbone's hidden states `[T, H]` of a packed batch of windows:
  1. gather the sub-tokens that make word vectors and the label markers' tokens,
     through GLiNER's projection to its own width D (when the widths differ);
  2. pool sub-tokens into words (first / last / mean / max), run the bidirectional
     LSTM over each window's words;
  3. span vectors from each span's first and last word (markerV0 / marker /
     markerV1), label vectors through the prompt MLP;
  4. span-label logits = span vector . label vector, probabilities by sigmoid.
A bi-encoder's label vectors come from its own labels encoder instead (labels.py), and it
has no LSTM step. Token models (span_mode token_level, NuNER Zero's kind) replace 3-4 with GLiNER's
Scorer: start / end / inside logits per (word, label), decoded in models/gliner/decode.py.

Module names mirror GLiNER's checkpoint (`span_rep_layer.span_rep_layer.*`,
`prompt_rep_layer.*`, `scorer.*`, `rnn.lstm.*`, `token_rep_layer.projection.*`), so loading
is a rename of prefixes and a strict `load_state_dict`.

The head runs in float32 whatever the backbone's dtype: its probabilities are
thresholded, and half precision would move entities across the threshold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_sequence, pad_packed_sequence

from ...heads.common import load_renamed
from .checkpoint import BACKBONE_PREFIX, GlinerConfig


def projection_mlp(in_dim: int, out_dim: int, hidden: int | None = None) -> nn.Sequential:
    """GLiNER's `create_projection_layer` at inference: Linear, ReLU, (dropout), Linear.
    Index 2 is the dropout's slot, so parameter names match the checkpoint (`0.*`, `3.*`)."""
    hidden = hidden if hidden is not None else 4 * out_dim
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Identity(), nn.Linear(hidden, out_dim))


class SpanMarker(nn.Module):
    """Span vector from its first word's and last word's projections (and, for markerV1,
    the window's mean word vector), concatenated, ReLU, then `out_project`.

    The first linear layer of `out_project` acts on a concatenation after a ReLU, so it
    splits into one product per part: computed once per *word* rather than once per
    span (a span set is max_width times larger than the word set), then summed per span.
    """

    def __init__(self, mode: str, hidden: int):
        super().__init__()
        self.mode = mode
        if mode == "marker":  # GLiNER's SpanMarker: 2x MLPs, single linear out_project
            self.project_start = projection_mlp(hidden, hidden, 2 * hidden)
            self.project_end = projection_mlp(hidden, hidden, 2 * hidden)
            self.out_project = nn.Linear(2 * hidden, hidden)
        else:
            self.project_start = projection_mlp(hidden, hidden)
            self.project_end = projection_mlp(hidden, hidden)
            parts = 3 if mode == "markerV1" else 2
            if mode == "markerV1":
                # In GLiNER's checkpoint but unused by its forward (the mean word vector is
                # concatenated unprojected); kept so loading stays strict.
                self.project_first = projection_mlp(hidden, hidden)
            self.out_project = projection_mlp(parts * hidden, hidden)
        self.hidden = hidden

    def _first_layer(self) -> nn.Linear:
        return self.out_project if self.mode == "marker" else self.out_project[0]

    def word_terms(self, words: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """words `[W, D]` -> the start and end parts of out_project's first layer, `[W, H1]` each."""
        weight = self._first_layer().weight  # [H1, parts * D]
        D = self.hidden
        start = self.project_start(words).relu() @ weight[:, :D].T
        end = self.project_end(words).relu() @ weight[:, D:2 * D].T
        return start, end

    def context_terms(self, mean_words: torch.Tensor) -> torch.Tensor | None:
        """markerV1's window-wide part: each window's mean word vector `[B, D]` -> `[B, H1]`."""
        if self.mode != "markerV1":
            return None
        return mean_words.relu() @ self._first_layer().weight[:, 2 * self.hidden:].T

    def finish(self, pre: torch.Tensor) -> torch.Tensor:
        """`[S, H1]` summed first-layer parts (without bias) -> span vectors `[S, D]`."""
        pre = pre + self._first_layer().bias
        if self.mode == "marker":
            return pre
        return self.out_project[3](pre.relu())


class Lstm(nn.Module):
    """GLiNER's LstmSeq2SeqEncoder: a bidirectional LSTM over each window's words.

    On CUDA it runs cuDNN on the packed windows. On the CPU it runs `stepwise`: each
    direction's input projection for every word in one matrix product, then the recurrence
    one time step at a time over the windows still running (longest first). Torch's CPU
    LSTM on packed input does the input product per step in small pieces; measured
    2026-11 on 64 windows of 20-300 words, the stepwise form took a quarter of the time,
    equal to 3e-7.
    """

    def __init__(self, hidden: int, layers: int, stepwise: bool = False):
        super().__init__()
        self.lstm = nn.LSTM(hidden, hidden // 2, num_layers=layers, bidirectional=True, batch_first=True)
        self.stepwise = stepwise

    def forward(self, words: torch.Tensor, lengths: Sequence[int], keep: torch.Tensor) -> torch.Tensor:
        """words `[W_total, D]` packed window after window; lengths: host word counts;
        keep: `[B, max(lengths)]` bool, True at real words -> `[W_total, D]`."""
        if self.stepwise:
            return self._stepwise(words, lengths)
        sequences = list(words.split(list(lengths)))
        packed = pack_sequence(sequences, enforce_sorted=False)
        out, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True)  # [B, max_len, D]
        return out[keep]

    def _stepwise(self, x: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
        steps = _time_steps(lengths)
        for layer in range(self.lstm.num_layers):
            outputs = []
            for direction, suffix in enumerate(("", "_reverse")):
                # torch names an LSTM's weights by layer and direction: read them by that name
                weight_ih = getattr(self.lstm, f"weight_ih_l{layer}{suffix}")
                weight_hh = getattr(self.lstm, f"weight_hh_l{layer}{suffix}")
                bias = getattr(self.lstm, f"bias_ih_l{layer}{suffix}") + getattr(self.lstm, f"bias_hh_l{layer}{suffix}")
                gates_x = torch.addmm(bias, x, weight_ih.T)  # [W_total, 4 * H]: every word at once
                outputs.append(_recur(gates_x, weight_hh, steps, direction, len(lengths)))
            x = torch.cat(outputs, dim=1)
        return x


def _time_steps(lengths: Sequence[int]) -> list[tuple[int, torch.Tensor, torch.Tensor]]:
    """Per time step t: how many windows are still running (windows sorted longest first) and
    the packed rows of their word t counted forwards and backwards."""
    lengths_arr = np.asarray(lengths)
    base = np.concatenate([[0], np.cumsum(lengths_arr)[:-1]])
    order = np.argsort(-lengths_arr, kind="stable")
    sorted_lengths, sorted_base = lengths_arr[order], base[order]
    steps = []
    for t in range(int(sorted_lengths[0])):
        n = int((sorted_lengths > t).sum())
        steps.append((n, torch.from_numpy(sorted_base[:n] + t),
                      torch.from_numpy(sorted_base[:n] + sorted_lengths[:n] - 1 - t)))
    return steps


def _recur(gates_x: torch.Tensor, weight_hh: torch.Tensor, steps, direction: int, batch: int) -> torch.Tensor:
    """One direction of an LSTM layer from precomputed input gates `[W_total, 4H]` -> `[W_total, H]`."""
    hidden = weight_hh.shape[1]
    out = gates_x.new_empty(gates_x.shape[0], hidden)
    h = gates_x.new_zeros(batch, hidden)
    c = gates_x.new_zeros(batch, hidden)
    for n, forward_rows, backward_rows in steps:
        rows = forward_rows if direction == 0 else backward_rows
        gates = torch.addmm(gates_x.index_select(0, rows), h[:n], weight_hh.T)
        i, f, g, o = gates.chunk(4, dim=1)  # PyTorch's gate order
        c = torch.sigmoid(f) * c[:n] + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        out.index_copy_(0, rows, h)
    return out


class TokenScorer(nn.Module):
    """GLiNER's token-model Scorer: for each (word, label), from the word's and the label's
    two projections, [word_a, label_a, word_b * label_b] through an MLP -> start, end and
    inside logits."""

    def __init__(self, hidden: int):
        super().__init__()
        self.proj_token = nn.Linear(hidden, 2 * hidden)
        self.proj_label = nn.Linear(hidden, 2 * hidden)
        # Linear, (dropout), ReLU, Linear: indices as in the checkpoint
        self.out_mlp = nn.Sequential(nn.Linear(3 * hidden, 4 * hidden), nn.Identity(), nn.ReLU(),
                                     nn.Linear(4 * hidden, 3))
        self.hidden = hidden

    def forward(self, words: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """words `[W, D]`, labels `[C, D]` of one window -> logits `[W, C, 3]` (start, end, inside)."""
        W, C, D = words.shape[0], labels.shape[0], self.hidden
        word_a, word_b = self.proj_token(words).view(W, 2, D).unbind(1)
        label_a, label_b = self.proj_label(labels).view(C, 2, D).unbind(1)
        pairs = torch.cat([word_a[:, None].expand(W, C, D), label_a[None].expand(W, C, D),
                           word_b[:, None] * label_b[None]], dim=-1)  # [W, C, 3D]
        return self.out_mlp(pairs)


class GlinerHead(nn.Module):
    def __init__(self, config: GlinerConfig, backbone_hidden: int, device: torch.device):
        super().__init__()
        D = config.hidden_size
        self.config = config
        self.projection = nn.Linear(backbone_hidden, D) if backbone_hidden != D else None
        stepwise = device.type == "cpu"  # decided once: see Lstm
        # gliner's bi-encoders build an LSTM but never run it (BaseBiEncoderModel.get_representations
        # has no rnn step, gliner 0.2.29): SIE leaves it out and does not load its saved tensors
        with_rnn = config.num_rnn_layers > 0 and not config.bi_encoder
        self.rnn = Lstm(D, config.num_rnn_layers, stepwise) if with_rnn else None
        # span models: a span marker and a label projection; token models: a (word, label) scorer
        self.span: SpanMarker | None
        self.prompt: nn.Sequential | None
        self.scorer: TokenScorer | None
        if config.token_level:  # label vectors used as they come; one scorer per (word, label)
            self.span = self.prompt = None
            self.scorer = TokenScorer(D)
        else:
            self.span = SpanMarker(config.span_mode, D)
            self.prompt = projection_mlp(D, D)
            self.scorer = None

    # checkpoint prefix -> module prefix
    RENAMES = (
        ("token_rep_layer.projection.", "projection."),
        ("rnn.", "rnn."),
        ("span_rep_layer.span_rep_layer.", "span."),
        ("prompt_rep_layer.", "prompt."),
        ("scorer.", "scorer."),
    )

    def load(self, tensors: Mapping[str, torch.Tensor], root_prefix: str) -> None:
        """Copy the head's tensors from a GLiNER checkpoint; fails listing what is missing."""
        renames = self.RENAMES if self.rnn is not None else tuple(r for r in self.RENAMES if r[0] != "rnn.")
        missing, unexpected = load_renamed(self, tensors, root_prefix, renames)
        if missing or unexpected:
            raise ValueError(
                f"GLiNER head ({self.config.span_mode}, {self.config.num_rnn_layers} LSTM layers) does not match the "
                f"checkpoint: missing {missing}, unexpected {unexpected}"
            )

    def word_vectors(self, token_vectors: torch.Tensor, slots: torch.Tensor, num_words: int) -> torch.Tensor:
        """Sub-token vectors `[M, D]` and the word slot of each `[M]` -> word vectors `[W, D]`
        (zeros for a word without sub-token, as in GLiNER)."""
        words = token_vectors.new_zeros(num_words, token_vectors.shape[1])
        pooling = self.config.subtoken_pooling
        if pooling in ("first", "last"):
            return words.index_copy_(0, slots, token_vectors)
        index = slots[:, None].expand_as(token_vectors)
        return words.scatter_reduce_(0, index, token_vectors, reduce="mean" if pooling == "mean" else "amax",
                                     include_self=False)


@lru_cache(maxsize=1024)
def span_grid(num_words: int, max_width: int) -> tuple[np.ndarray, np.ndarray]:
    """Every span of a window, start-major then width (GLiNER's order): `[S]` starts, `[S]` widths."""
    starts: np.ndarray = np.repeat(np.arange(num_words), max_width)
    widths = np.tile(np.arange(max_width), num_words)
    valid = starts + widths < num_words
    return starts[valid], widths[valid]


def backbone_root_prefix(backbone_prefix: str) -> str:
    """The checkpoint's root prefix (usually empty), from where the backbone's tensors start."""
    if backbone_prefix.endswith(BACKBONE_PREFIX):
        return backbone_prefix[: -len(BACKBONE_PREFIX)]
    raise ValueError(
        f"backbone tensors sit under {backbone_prefix!r}, not '*{BACKBONE_PREFIX}': not a GLiNER checkpoint"
    )
