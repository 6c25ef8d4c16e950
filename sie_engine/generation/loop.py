"""Continuous batching at step granularity: every running sequence of every request advances one
token per step in one batched decoder call; requests added between steps join at the next one
(their prompt is that step's input for their rows), and a request leaves the batch, its cache rows
freed, the step it finishes or when it is cancelled.

The model is an `EncoderDecoderLM`: the loop asks it for the cross-attention keys/values of a
joining request's encoder states once, then for each step's last-position logits.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Protocol

import torch

from .cache import DecodeCache
from .search import BeamSearch, GreedySearch, new_search
from .settings import GenerationSettings


class EncoderDecoderLM(Protocol):
    """What the decode loop asks of an encoder-decoder model's decoder."""

    decoder_layers: int
    decoder_heads: int
    decoder_head_dim: int
    decoder_positions: int  # positions the decoder has: prompt plus generated tokens fit in them

    def cross_attention_kv(self, memory: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Encoder states `[B, S, H_enc]` -> per decoder layer, cross-attention (keys, values) `[B, heads, S, d]`."""
        ...

    def decode(self, tokens: torch.Tensor, cache: DecodeCache) -> torch.Tensor:
        """One step: `tokens` `[rows, Q]` (after `cache.begin_step`) -> float32 logits `[rows, V]` of each
        row's last new token (`cache.last_index`)."""
        ...


@dataclass
class GenerationRequest:
    """One sequence to generate: the encoder's states of its input `[S, H_enc]`, the decoder prompt
    (task start token and any question), and its decoding settings."""

    memory: torch.Tensor
    prompt: list[int]
    settings: GenerationSettings


@dataclass
class GenerationResult:
    tokens: list[int]  # generated ones, the prompt not included, a final EOS kept
    finish_reason: str  # "stop" (an EOS token) or "length"
    prompt_tokens: int


@dataclass
class _Running:
    request: GenerationRequest
    search: GreedySearch | BeamSearch
    rows: list[int] = field(default_factory=list)
    feed: list[list[int]] = field(default_factory=list)  # next step's new tokens, per row


class DecodeLoop:
    """The running batch of one model. Not thread-safe: one thread adds, cancels and steps."""

    def __init__(self, model: EncoderDecoderLM, device: torch.device, dtype: torch.dtype, max_rows: int = 64):
        self.model = model
        self.max_rows = max_rows
        self.cache = DecodeCache(model.decoder_layers, model.decoder_heads, model.decoder_head_dim, device, dtype)
        self.device, self.dtype = device, dtype
        self._ids = itertools.count()
        self._pending: dict[int, GenerationRequest] = {}
        self._running: dict[int, _Running] = {}

    @property
    def idle(self) -> bool:
        return not self._pending and not self._running

    def add(self, request: GenerationRequest) -> int:
        """Queue a request; it joins the batch at the next step with room for it. Returns its handle."""
        if request.settings.num_beams > self.max_rows:
            raise ValueError(f"num_beams {request.settings.num_beams} exceeds the decode batch's {self.max_rows} rows")
        if not request.prompt:
            raise ValueError("a generation request needs a decoder prompt of at least one token")
        needed = len(request.prompt) + request.settings.max_new_tokens
        if needed > self.model.decoder_positions:
            raise ValueError(f"prompt ({len(request.prompt)} tokens) plus max_new_tokens "
                             f"({request.settings.max_new_tokens}) exceeds the decoder's "
                             f"{self.model.decoder_positions} positions")
        handle = next(self._ids)
        self._pending[handle] = request
        return handle

    def cancel(self, handle: int) -> None:
        """Drop a request now (between steps): its cache rows are freed at once."""
        self._pending.pop(handle, None)
        running = self._running.pop(handle, None)
        if running is not None:
            self._free(set(running.rows))

    def _free(self, rows: set[int]) -> None:
        moves = self.cache.remove_rows(rows)
        if self.cache.rows == 0:
            self.cache.reset()
        if moves:
            for running in self._running.values():
                running.rows = [moves.get(r, r) for r in running.rows]

    def _admit(self) -> int:
        """Move pending requests into the batch while rows allow, first come first served; the
        cross-attention keys/values of those joining together are projected in one call per
        memory length. Returns the first joined row (the batch's row count before they joined)."""
        first_joined = self.cache.rows
        joining: list[tuple[int, GenerationRequest]] = []
        rows = self.cache.rows
        for handle, request in list(self._pending.items()):
            if rows + request.settings.num_beams > self.max_rows:
                break
            rows += request.settings.num_beams
            joining.append((handle, request))
            del self._pending[handle]
        by_length: dict[int, list[tuple[int, GenerationRequest]]] = {}
        for handle, request in joining:
            by_length.setdefault(int(request.memory.shape[0]), []).append((handle, request))
        for group in by_length.values():
            memory = torch.stack([r.memory for _, r in group]).to(self.device, self.dtype)
            kv = self.model.cross_attention_kv(memory)
            beams = torch.tensor([r.settings.num_beams for _, r in group], device=self.device)
            kv = [(k.repeat_interleave(beams, dim=0), v.repeat_interleave(beams, dim=0)) for k, v in kv]
            positions = max(len(r.prompt) + r.settings.max_new_tokens for _, r in group)
            new_rows = iter(self.cache.add_rows(kv, positions))
            for handle, request in group:
                search = new_search(request.prompt, request.settings)
                running = _Running(request, search)
                running.rows = [next(new_rows) for _ in range(search.rows)]
                running.feed = [list(request.prompt) for _ in range(search.rows)]
                self._running[handle] = running
        return first_joined

    def step(self) -> dict[int, GenerationResult]:
        """Admit what fits, run one decoder step over every row, advance each request's search.
        Returns the requests that finished in this step, by handle."""
        first_joined = self._admit()
        if not self._running:
            return {}
        n = self.cache.rows
        feeds: list[list[int]] = [[] for _ in range(n)]
        for running in self._running.values():
            for row, tokens in zip(running.rows, running.feed, strict=True):
                feeds[row] = tokens
        # Rows that joined this step (their prompts) sit after the running ones (add_rows appends):
        # the two groups run as separate calls, so that no running row is padded to a prompt's length.
        parts = [(lo, hi) for lo, hi in ((0, first_joined), (first_joined, n)) if hi > lo]
        logits = torch.cat([self._decode(feeds, lo, hi) for lo, hi in parts])
        finished: dict[int, GenerationResult] = {}
        dst: list[int] = []
        src: list[int] = []
        for handle, running in list(self._running.items()):
            advance = running.search.advance(logits[running.rows])
            if advance.done:
                tokens_out = running.search.generated()
                finished[handle] = GenerationResult(tokens_out, running.search.finish_reason,
                                                    len(running.request.prompt))
                continue
            running.feed = [[t] for t in advance.tokens]
            for j, s in enumerate(advance.sources):
                if s != j:
                    dst.append(running.rows[j])
                    src.append(running.rows[s])
        self.cache.copy_history(dst, src)
        if finished:
            freed = set()
            for handle in finished:
                freed.update(self._running.pop(handle).rows)
            self._free(freed)
        return finished

    def _decode(self, feeds: list[list[int]], lo: int, hi: int) -> torch.Tensor:
        """One decoder call over rows lo..hi -> their float32 logits on the CPU `[hi - lo, V]`."""
        q_lens = [len(f) for f in feeds[lo:hi]]
        tokens = torch.zeros((hi - lo, max(q_lens)), dtype=torch.long)
        for i, f in enumerate(feeds[lo:hi]):
            tokens[i, :len(f)] = torch.tensor(f, dtype=torch.long)
        self.cache.begin_step(q_lens, first_row=lo)
        with torch.inference_mode():
            logits = self.model.decode(tokens.to(self.device), self.cache).float().cpu()
        self.cache.end_step()
        return logits

    def run(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        """Generate for `requests` together (all join, each leaves when done); results in order."""
        handles = [self.add(r) for r in requests]
        results: dict[int, GenerationResult] = {}
        while len(results) < len(handles):
            results.update(self.step())
        return [results[h] for h in handles]
