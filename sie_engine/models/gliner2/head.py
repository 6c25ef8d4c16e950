"""GLiNER2's span-architecture heads over SIE's packed backbone output (the `gliner2` output).

Per item (gliner2 2.1.0's SpanExtractor at inference: entities, relation types, one classification task):
  - entities: `count_pred` on the entities schema's [P] vector picks how many instances the
    schema has (argmax over 0..19); with none the item has no entities. Otherwise each entity
    label's query is CountLSTM's first step (one GRU step from the learned count embedding 0,
    the label's [E] vector as the state, then the projector on [step, label vector]); every
    span of up to `max_width` words gets GLiNER's markerV0 vector from the text words' first
    sub-tokens, and its probability per label is the sigmoid of span . query;
  - relations: one schema per relation type, fields head and tail ([R] vectors); `count_pred` on its
    [P] says how many instances (triples) it has, CountLSTM runs that many steps, and instance i's
    head and tail queries score every span the same way;
  - classification: `classifier` on each [L] vector gives the label's logit.

Module names mirror the checkpoint (`span_rep.span_rep_layer.*`, `classifier.*`, `count_pred.*`,
`count_embed.*`), so loading is a strict `load_state_dict` after one prefix rename. The heads
run in float32 (probabilities are thresholded).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from ...batch import PackedBatch
from ...heads.base import Head
from ...heads.common import load_renamed
from ...heads.context import HeadContext
from ..gliner.layers import SpanMarker, span_grid
from .checkpoint import BACKBONE_PREFIX, MAX_COUNT, Gliner2Config, load_gliner2_config
from .prompt import CLASSIFICATION, ENTITIES, Gliner2Input

GLINER2 = "gliner2"  # the card output, and the head its extract work runs


def mlp(in_dim: int, hidden: int, out_dim: int) -> nn.Sequential:
    """gliner2's create_mlp without dropout: Linear, ReLU, Linear (checkpoint indices 0 and 2)."""
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))


class CountSteps(nn.Module):
    """CountLSTM: one query set per predicted instance. A GRU (PyTorch's r, z, n gates) runs over the
    learned count embeddings 0..count-1 from the field vectors as its state; each step's state,
    beside the field vectors, goes through the projector. Entities read instance 0 only; a
    relation reads one (head, tail) query pair per instance."""

    def __init__(self, hidden: int):
        super().__init__()
        self.pos_embedding = nn.Embedding(MAX_COUNT, hidden)
        self.gru = nn.ParameterDict({name: nn.Parameter(torch.empty(shape)) for name, shape in (
            ("weight_ih_l0", (3 * hidden, hidden)), ("weight_hh_l0", (3 * hidden, hidden)),
            ("bias_ih_l0", (3 * hidden,)), ("bias_hh_l0", (3 * hidden,)))})
        self.projector = mlp(2 * hidden, 4 * hidden, hidden)

    def forward(self, fields: torch.Tensor, count: int = 1) -> torch.Tensor:
        """fields `[M, D]` -> queries `[count, M, D]` (count at most MAX_COUNT)."""
        g = self.gru
        inputs = torch.nn.functional.linear(self.pos_embedding.weight[:min(count, MAX_COUNT)], g["weight_ih_l0"],
                                            g["bias_ih_l0"])  # [count, 3D]: no dependence on the state
        state, steps = fields, []
        for gi in inputs:
            gh = torch.nn.functional.linear(state, g["weight_hh_l0"], g["bias_hh_l0"])
            i_r, i_z, i_n = gi.chunk(3, dim=-1)
            h_r, h_z, h_n = gh.chunk(3, dim=-1)
            r = torch.sigmoid(i_r + h_r)
            z = torch.sigmoid(i_z + h_z)
            n = torch.tanh(i_n + r * h_n)
            state = (1 - z) * n + z * state
            steps.append(state)
        out = torch.stack(steps)  # [count, M, D]
        return self.projector(torch.cat([out, fields.expand_as(out)], dim=-1))


@dataclass
class Gliner2Work:
    """`WorkItem.extra` of a GLiNER2 work item."""

    input: Gliner2Input


@dataclass
class Gliner2Scores:
    """One item's scores over its spans (`starts` first words, `widths`; None when no schema needs them):
    entity probabilities `[spans, labels]` (None: the count head said none), per relation type its
    probabilities `[instances, 2 (head, tail), spans]` (None: no instance), and the classification
    logits `[labels]` (None: no task)."""

    entity_probs: np.ndarray | None
    starts: np.ndarray | None
    widths: np.ndarray | None
    class_logits: np.ndarray | None
    relation_probs: list[np.ndarray | None] = field(default_factory=list)


class Gliner2Head(Head):
    RENAMES = (("span_rep.span_rep_layer.", "span."), ("classifier.", "classifier."), ("count_pred.", "count_pred."),
               ("count_embed.", "count_embed."))

    def __init__(self, config: Gliner2Config, hidden: int):
        super().__init__()
        self.config = config
        self.span = SpanMarker("markerV0", hidden)
        self.classifier = mlp(hidden, 2 * hidden, 1)
        self.count_pred = mlp(hidden, 2 * hidden, MAX_COUNT)
        self.count_embed = CountSteps(hidden)

    def load(self, tensors: Mapping[str, torch.Tensor], root_prefix: str) -> None:
        missing, unexpected = load_renamed(self, tensors, root_prefix, self.RENAMES)
        if missing or unexpected:
            raise ValueError(f"GLiNER2 heads do not match the checkpoint: missing {missing}, unexpected {unexpected}")

    @torch.inference_mode()
    def forward(self, hidden: torch.Tensor, batch: PackedBatch, items: Sequence) -> list[Gliner2Scores]:
        seq_starts = np.cumsum((0,) + tuple(batch.seq_lens[:-1]))
        results = []
        for start, item in zip(seq_starts, items):  # items are few per batch; each has its own schemas
            one: Gliner2Input = item.extra.input
            x = hidden[int(start):int(start) + len(one.ids)].float()
            scores = Gliner2Scores(None, None, None, None)
            spans: torch.Tensor | None = None
            for kind, positions in zip(one.kinds, one.schema_positions):
                schema = x[torch.from_numpy(positions).to(x.device)]  # [1 + fields, D]
                if kind == CLASSIFICATION:
                    scores.class_logits = self.classifier(schema[1:]).squeeze(-1).cpu().numpy()
                    continue
                count = int(self.count_pred(schema[0]).argmax())
                probs = None
                if count > 0 and len(one.word_positions):
                    if spans is None:  # every span schema of the item scores the same span vectors
                        scores.starts, scores.widths, spans = self._spans(x, one.word_positions)
                    queries = self.count_embed(schema[1:], 1 if kind == ENTITIES else count)  # [count, M, D]
                    probs = torch.sigmoid(queries @ spans.T).cpu().numpy()  # [count, M, S]
                if kind == ENTITIES:
                    scores.entity_probs = None if probs is None else probs[0].T  # [S, labels]
                else:
                    scores.relation_probs.append(probs)
            results.append(scores)
        return results

    def _spans(self, x: torch.Tensor, word_positions: np.ndarray) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
        """Every span of up to `max_width` words: starts, widths and its markerV0 vector `[S, D]`."""
        words = x[torch.from_numpy(word_positions).to(x.device)]  # [W, D]
        starts, widths = span_grid(len(words), self.config.max_width)
        start_terms, end_terms = self.span.word_terms(words)
        index = torch.from_numpy(np.concatenate([starts, starts + widths])).to(x.device)
        first, last = index.tensor_split([len(starts)])
        return starts, widths, self.span.finish(start_terms.index_select(0, first) + end_terms.index_select(0, last))


def build_gliner2_head(ctx: HeadContext) -> dict[str, nn.Module]:
    config = load_gliner2_config(ctx.root)
    head = Gliner2Head(config, ctx.config.hidden_size)
    if not ctx.prefix.endswith(BACKBONE_PREFIX):
        raise ValueError(f"backbone tensors sit under {ctx.prefix!r}, not '*{BACKBONE_PREFIX}': not a GLiNER2 save")
    head.load(ctx.checkpoint, ctx.prefix[: -len(BACKBONE_PREFIX)])
    return {GLINER2: head.to(device=ctx.device, dtype=torch.float32).eval()}
