"""Greedy and beam search for one request, step by step, so that requests can share a batch.

Each search owns `rows` rows of the running batch (1 for greedy, `num_beams` for beam search).
`advance(logits [rows, V])` consumes the step's last-position logits of its rows and says what each
row feeds next (`tokens`) and which of its rows each one continues (`sources`: a beam may take over
another beam's cache), or that the request is done (`result`).

The math is transformers' (generation/utils.py, 5.x): `_sample` without sampling for greedy, the
vectorised `_beam_search` (its `_get_top_k_continuations`, `_get_running_beams_for_next_iteration`,
`_update_finished_beams`, `_check_early_stop_heuristic`) with a batch of one for beams, so that the
tokens equal `generate`'s for the same logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import processors
from .settings import GenerationSettings


@dataclass
class Advance:
    """One step's decision for a request's rows: the token each row feeds next and the row (of the
    request's own, 0-based) whose cache it continues; `done`: the request has its result."""

    tokens: list[int]
    sources: list[int]
    done: bool


class GreedySearch:
    """One row; the best processed token each step, until an EOS token or the length limit."""

    def __init__(self, prompt: list[int], settings: GenerationSettings):
        self.settings = settings
        self.prompt_len = len(prompt)
        self.max_length = self.prompt_len + settings.max_new_tokens
        self.sequence = list(prompt)
        self.rows = 1
        self.finish_reason = "length"

    def advance(self, logits: torch.Tensor) -> Advance:
        """logits `[1, V]` float32."""
        ids = torch.tensor([self.sequence], dtype=torch.long)
        scores = processors.apply(self.settings, ids, logits, self.prompt_len, self.max_length)
        token = int(torch.argmax(scores, dim=-1)[0])
        self.sequence.append(token)
        if token in self.settings.eos_token_ids:
            self.finish_reason = "stop"
            return Advance([token], [0], True)
        return Advance([token], [0], len(self.sequence) >= self.max_length)

    def generated(self) -> list[int]:
        return self.sequence[self.prompt_len:]


def _gather(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """transformers' `_gather_beams`: tensor `[1, beams, ...]`, index `[1, k]` -> `[1, k, ...]`."""
    while index.dim() < tensor.dim():
        index = index.unsqueeze(-1)
    return torch.take_along_dim(tensor, index, dim=1)


class BeamSearch:
    """`num_beams` rows; transformers' beam search over a batch of one request."""

    def __init__(self, prompt: list[int], settings: GenerationSettings):
        s = self.settings = settings
        self.rows = k = s.num_beams
        self.prompt_len = cur = len(prompt)
        self.cur_len = cur
        self.max_length = cur + s.max_new_tokens
        self.eos = torch.tensor(s.eos_token_ids, dtype=torch.long)
        self.beams_to_keep = max(2, 1 + len(s.eos_token_ids)) * k
        self.top_num_beam_mask = torch.cat((torch.ones(k, dtype=torch.bool),
                                            torch.zeros(self.beams_to_keep - k, dtype=torch.bool)))
        pad = s.pad_token_id
        fill = pad or s.eos_token_ids[0] if s.eos_token_ids else -1  # transformers' precedence, kept
        self.running_sequences = torch.full((1, k, self.max_length), fill, dtype=torch.long)
        self.running_sequences[:, :, :cur] = torch.tensor(prompt, dtype=torch.long)
        self.sequences = self.running_sequences.clone()
        self.running_beam_scores = torch.zeros((1, k))
        self.running_beam_scores[:, 1:] = -1e9
        self.beam_scores = torch.full((1, k), -1e9)
        self.is_sent_finished = torch.zeros((1, k), dtype=torch.bool)
        self.heuristic_unsatisfied = torch.ones((1, 1), dtype=torch.bool)
        self.running_beam_indices = torch.full((1, k, self.max_length - cur), -1, dtype=torch.int32)
        self.beam_indices = self.running_beam_indices.clone()
        self.finish_reason = "length"

    def advance(self, logits: torch.Tensor) -> Advance:
        """logits `[num_beams, V]` float32, row j for beam j."""
        s, k, cur = self.settings, self.rows, self.cur_len
        vocab = logits.shape[-1]
        log_probs = F.log_softmax(logits, dim=-1)
        log_probs = processors.apply(s, self.running_sequences[0, :, :cur], log_probs, self.prompt_len,
                                     self.max_length)
        log_probs = (log_probs[None] + self.running_beam_scores[:, :, None]).reshape(1, k * vocab)

        topk_log_probs, topk_indices = torch.topk(log_probs, k=self.beams_to_keep)
        topk_beam = topk_indices // vocab
        topk_beam_indices = _gather(self.running_beam_indices, topk_beam)
        topk_sequences = _gather(self.running_sequences, topk_beam)
        topk_ids = topk_indices % vocab
        topk_sequences[:, :, cur] = topk_ids
        topk_beam_indices[:, :, cur - self.prompt_len] = topk_beam.to(torch.int32)

        hits = torch.isin(topk_ids, self.eos) if len(self.eos) else torch.zeros_like(topk_ids, dtype=torch.bool)
        if cur + 1 >= self.max_length:
            hits = torch.ones_like(hits)

        # the best num_beams continuations that do not stop keep running
        running_log_probs = topk_log_probs + hits.to(torch.float32) * -1.0e9
        keep = torch.topk(running_log_probs, k=k)[1]
        self.running_sequences = _gather(topk_sequences, keep)
        self.running_beam_scores = _gather(running_log_probs, keep)
        self.running_beam_indices = _gather(topk_beam_indices, keep)

        # the stopping ones among the top num_beams join the finished hypotheses if they score higher
        just_finished = hits & self.top_num_beam_mask[None, :]
        scored = topk_log_probs / ((cur + 1 - self.prompt_len) ** s.length_penalty)
        full = torch.all(self.is_sent_finished, dim=-1, keepdim=True) & (s.early_stopping is True)
        scored = scored + full.to(torch.float32) * -1.0e9
        scored = scored + (~self.heuristic_unsatisfied).to(torch.float32) * -1.0e9
        scored = scored + (~just_finished) * -1.0e9
        merged_sequences = torch.cat((self.sequences, topk_sequences), dim=1)
        merged_scores = torch.cat((self.beam_scores, scored), dim=1)
        merged_indices = torch.cat((self.beam_indices, topk_beam_indices), dim=1)
        merged_finished = torch.cat((self.is_sent_finished, just_finished), dim=1)
        best = torch.topk(merged_scores, k=k)[1]
        self.sequences = _gather(merged_sequences, best)
        self.beam_scores = _gather(merged_scores, best)
        self.beam_indices = _gather(merged_indices, best)
        self.is_sent_finished = _gather(merged_finished, best)

        sources = self.running_beam_indices[0, :, cur - self.prompt_len].tolist()
        self.cur_len = cur = cur + 1
        tokens = self.running_sequences[0, :, cur - 1].tolist()

        if s.early_stopping == "never" and s.length_penalty > 0.0:
            hypothetical = self.max_length - self.prompt_len
        else:
            hypothetical = cur - self.prompt_len
        best_running = self.running_beam_scores[:, :1] / (hypothetical ** s.length_penalty)
        worst_finished = torch.where(self.is_sent_finished, torch.min(self.beam_scores, dim=1, keepdim=True)[0],
                                     -1.0e9)
        self.heuristic_unsatisfied = self.heuristic_unsatisfied & torch.any(best_running > worst_finished, dim=-1,
                                                                            keepdim=True)
        improvement_possible = bool(torch.any(self.heuristic_unsatisfied))
        open_beam = not (bool(torch.all(self.is_sent_finished)) and s.early_stopping is True)
        valid_continuations = not bool(torch.all(hits))
        done = not (improvement_possible and open_beam and valid_continuations)
        return Advance(tokens, sources, done)

    def generated(self) -> list[int]:
        length = int((self.beam_indices[0, 0] + 1).bool().sum())
        tokens = self.sequences[0, 0, self.prompt_len:self.prompt_len + length].tolist()
        if tokens and tokens[-1] in self.settings.eos_token_ids:
            self.finish_reason = "stop"
        return tokens


def new_search(prompt: list[int], settings: GenerationSettings) -> GreedySearch | BeamSearch:
    return BeamSearch(prompt, settings) if settings.num_beams > 1 else GreedySearch(prompt, settings)
