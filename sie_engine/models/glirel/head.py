"""GLiREL's relation head over SIE's packed backbone output (the `relations` output).

From the backbone's hidden states `[T, H]` of a packed batch of windows (glirel 1.2.1's
`GLiREL.compute_score` with rel_mode marker, span_marker_mode markerv1, scorer dot):
  1. one vector per word of each sequence (the prompt's and the text's) from its first or
     last sub-token, then GLiREL's projection to its width D (when widths differ);
  2. relation label vectors from the prompt's words (`[REL]`, the label, or their mean),
     through the prompt MLP;
  3. a bidirectional LSTM over each window's text words;
  4. an entity's vector: its first word through `project_start`, its last through
     `project_end`, concatenated, ReLU, `out_project`; a pair's: head and tail vectors
     concatenated through the pair `out_project`;
  5. pair-label logits = pair vector . label vector, probabilities by sigmoid.

Module names mirror the checkpoint (`span_rep_layer.rel_rep_layer.*`, `prompt_rep_layer.*`,
`rnn.lstm.*`, `token_rep_layer.projection.*`), so loading is a rename of prefixes and a
strict `load_state_dict`. The head runs in float32 whatever the backbone's dtype (its
probabilities are thresholded).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ...batch import PackedBatch
from ...heads.base import Head
from ...heads.common import load_renamed
from ...heads.context import HeadContext
from ..gliner.layers import Lstm, backbone_root_prefix, projection_mlp
from .checkpoint import GlirelConfig, load_glirel_config
from .prompt import RelationWindow

RELATIONS = "relations"  # the card output, and the head relation work runs
# Entity pairs whose pair-MLP activations are held at once (x 6 D float32 each, ~300 MB at D=768): a window
# with many entities has their square of pairs.
PAIR_CHUNK = 16384


@dataclass
class RelationWork:
    """`WorkItem.extra` of a relation work item."""

    window: RelationWindow


class EntityMarker(nn.Module):
    """glirel's SpanMarkerV1: `[project_start(first word), project_end(last word)]`, ReLU, `out_project`."""

    def __init__(self, hidden: int):
        super().__init__()
        self.project_start = projection_mlp(hidden, hidden)
        self.project_end = projection_mlp(hidden, hidden)
        self.out_project = projection_mlp(2 * hidden, hidden)

    def forward(self, words: torch.Tensor, first: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """words `[W, D]`, the entities' first and last word rows `[K]` -> entity vectors `[K, D]`."""
        start = self.project_start(words.index_select(0, first))
        end = self.project_end(words.index_select(0, last))
        return self.out_project(torch.cat([start, end], dim=-1).relu())


class GlirelHead(Head):
    # checkpoint prefix -> module prefix (the coreference classifier some saves carry is not used to predict)
    RENAMES = (
        ("token_rep_layer.projection.", "projection."),
        ("rnn.", "rnn."),
        ("span_rep_layer.rel_rep_layer.span_marker.", "entity."),
        ("span_rep_layer.rel_rep_layer.out_project.", "pair."),
        ("prompt_rep_layer.", "prompt."),
    )

    def __init__(self, config: GlirelConfig, backbone_hidden: int, device: torch.device):
        super().__init__()
        D = config.hidden_size
        self.config = config
        self.projection = nn.Linear(backbone_hidden, D) if backbone_hidden != D else None
        self.rnn = Lstm(D, 1, stepwise=device.type == "cpu")  # glirel: one bidirectional layer
        self.entity = EntityMarker(D)
        self.pair = projection_mlp(2 * D, D)
        self.prompt = projection_mlp(D, D)

    def load(self, tensors: Mapping[str, torch.Tensor], root_prefix: str) -> None:
        """Copy the head's tensors from a GLiREL checkpoint; fails listing what is missing."""
        missing, unexpected = load_renamed(self, tensors, root_prefix, self.RENAMES)
        if missing or unexpected:
            raise ValueError(f"GLiREL head does not match the checkpoint: missing {missing}, unexpected {unexpected}")

    @torch.inference_mode()
    def forward(self, hidden: torch.Tensor, batch: PackedBatch, items: Sequence) -> list[np.ndarray]:
        """hidden `[T, H]` of the windows in `items` -> per window its `[P, C]` pair-label probabilities."""
        windows: list[RelationWindow] = [it.extra.window for it in items]
        device = hidden.device
        elements = self.element_vectors(hidden, batch, windows)  # [E_total, D]
        counts = [w.num_elements for w in windows]
        element_base = np.cumsum([0] + counts[:-1])
        labels = self.prompt(self.label_vectors(elements, windows, element_base))  # [C_total, D]

        text_rows = np.concatenate([b + 2 * w.num_labels + 1 + np.arange(w.num_words)
                                    for b, w in zip(element_base, windows)])
        lengths = [w.num_words for w in windows]
        words = elements.index_select(0, torch.from_numpy(text_rows).to(device))
        keep = np.arange(max(lengths))[None, :] < np.asarray(lengths)[:, None]
        words = self.rnn(words, lengths, torch.from_numpy(keep).to(device))  # [W_total, D]

        word_base = np.cumsum([0] + lengths[:-1])
        spans = np.concatenate([b + w.entities for b, w in zip(word_base, windows)])  # [K_total, 2]
        entity_base = np.cumsum([0] + [len(w.entities) for w in windows[:-1]])
        pairs = np.concatenate([b + w.pairs for b, w in zip(entity_base, windows)])  # [P_total, 2]
        index = torch.from_numpy(np.concatenate([spans[:, 0], spans[:, 1], pairs[:, 0], pairs[:, 1]])).to(device)
        K, P = len(spans), len(pairs)
        first, last, heads, tails = index.tensor_split([K, 2 * K, 2 * K + P])
        entities = self.entity(words, first, last)  # [K_total, D]

        probs, p0, c0 = [], 0, 0
        for w in windows:
            c = w.num_labels
            window_labels = labels[c0:c0 + c]
            for a in range(p0, p0 + len(w.pairs), PAIR_CHUNK):  # bounds the pair MLP's activations
                b = min(a + PAIR_CHUNK, p0 + len(w.pairs))
                pair = self.pair(torch.cat([entities.index_select(0, heads[a:b]),
                                            entities.index_select(0, tails[a:b])], -1))  # [chunk, D]
                probs.append(torch.sigmoid(pair @ window_labels.T).flatten())
            p0, c0 = p0 + len(w.pairs), c0 + c
        flat = torch.cat(probs).cpu().numpy()  # the batch's one device-to-host copy
        out, offset = [], 0
        for w in windows:
            size = len(w.pairs) * w.num_labels
            out.append(flat[offset:offset + size].reshape(len(w.pairs), w.num_labels))
            offset += size
        return out

    def element_vectors(self, hidden: torch.Tensor, batch: PackedBatch,
                        windows: Sequence[RelationWindow]) -> torch.Tensor:
        """Each element's first / last sub-token -> one vector per element of every window `[E_total, D]`
        (zeros before the projection for an element without a sub-token, as glirel fills them)."""
        seq_starts = np.cumsum((0,) + tuple(batch.seq_lens[:-1]))
        counts = [w.num_elements for w in windows]
        element_base = np.cumsum([0] + counts[:-1])
        tokens = np.concatenate([s + w.element_tokens for s, w in zip(seq_starts, windows)])
        slots = np.concatenate([b + w.element_slots for b, w in zip(element_base, windows)])
        index = torch.from_numpy(np.concatenate([tokens, slots])).to(hidden.device)
        tokens_d, slots_d = index.tensor_split([len(tokens)])
        x = hidden.index_select(0, tokens_d).float()
        elements = x.new_zeros(sum(counts), x.shape[1]).index_copy_(0, slots_d, x)
        return self.projection(elements) if self.projection is not None else elements

    def label_vectors(self, elements: torch.Tensor, windows: Sequence[RelationWindow],
                      element_base: np.ndarray) -> torch.Tensor:
        """Each label's vector before the prompt MLP, `[C_total, D]`, by the label_embed_strategy."""
        marker = np.concatenate([b + 2 * np.arange(w.num_labels) for b, w in zip(element_base, windows)])
        index = torch.from_numpy(np.concatenate([marker, marker + 1])).to(elements.device)
        rel, label = elements.index_select(0, index).tensor_split(2)
        strategy = self.config.label_embed_strategy
        if strategy == "ent_token":
            return rel
        if strategy == "label":
            return label
        return (rel + label) / 2  # glirel: the mean of each [REL] and label pair


def build_relations_head(ctx: HeadContext) -> dict[str, nn.Module]:
    config = load_glirel_config(ctx.root)
    head = GlirelHead(config, ctx.config.hidden_size, ctx.device)
    head.load(ctx.checkpoint, backbone_root_prefix(ctx.prefix))
    return {RELATIONS: head.to(device=ctx.device, dtype=torch.float32).eval()}
