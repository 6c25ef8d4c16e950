"""Continuous batching at step granularity: every running sequence of every request advances one
token per step in one batched decoder call; requests added between steps join at the next one
(their prompt is that step's input for their rows), and a request leaves the batch, its cache rows
freed, the step it finishes or when it is cancelled.

The model is one of two kinds, and one loop, search and cache serve both:

- an `EncoderDecoderLM` (Donut, Florence-2): the loop asks it for the cross-attention keys/values
  of a joining request's encoder states once, then for each step's last-position logits;
- a `DecoderOnlyLM` (a vision-language model: LightOnOCR, GLM-OCR): no encoder memory, no
  cross-attention; a request's prompt is token ids whose input embeddings the model made (image
  features spliced in where its image tokens are), prefilled in the request's first step, with the
  rotary position ids the model gave them (M-RoPE's 3D ones) and a position offset for the tokens
  it generates after them.

A step's rows run as one decoder call: each running row's one token and each joining row's whole
prompt, packed (generation/cache.py) with no row padded to another's length.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

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
        """One step: every row's new tokens packed, `tokens` `[1, T]` (after `cache.begin_step`; their
        positions `cache.step_positions` `[1, T]`) -> float32 logits `[rows, V]` of each row's last new
        token (`cache.last_index`)."""
        ...


@runtime_checkable
class DecoderOnlyLM(Protocol):
    """What the decode loop asks of a decoder-only (vision-language) model. It implements:

    - `decoder_layers`, `decoder_heads` (its KEY/VALUE heads: the cache holds those; under
      grouped-query attention the queries have more, each group reading one, `DecodeCache.attend_self`),
      `decoder_head_dim`, `decoder_positions` (the most prompt plus generated tokens a row holds),
      and `position_axes`: rotary position ids per token (1: RoPE; 3: M-RoPE's t, h, w);
    - `token_embeddings(tokens [1, T]) -> [1, T, H]`: its input embeddings of token ids (the
      loop calls it for generated tokens, and for a prompt that brings no embeddings of its own);
    - `decode_embedded(embeddings [1, T, H], positions [A, 1, T], cache) -> float32 logits
      [rows, V]` of each row's last new token (`cache.last_index`): one step over every row's new
      tokens packed (generation/cache.py), called after `cache.begin_step`; its layers attend with
      `cache.attend_self(layer, q, k, v)` (no `attend_cross`: its rows have no encoder memory).
      `positions` are the rotary position ids of each new token (A = `position_axes`).

    A request (`GenerationRequest` with `memory=None`) brings its prompt's token ids (what the
    search and the logits processors see, image placeholder ids included), optionally their
    embeddings `prompt_embeddings [P, H]` (the image features spliced in) and position ids
    `prompt_positions [A, P]` (None: 0..P-1 on every axis), and `position_offset`: the generated
    token at sequence index i (i >= P) gets position i + position_offset on every axis (M-RoPE's
    `rope_deltas`: max prompt position + 1 - P, so that generation continues at max position + 1).
    """

    decoder_layers: int
    decoder_heads: int
    decoder_head_dim: int
    decoder_positions: int
    position_axes: int

    def token_embeddings(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids `[1, T]` -> input embeddings `[1, T, H]` (in the model's dtype)."""
        ...

    def decode_embedded(self, embeddings: torch.Tensor, positions: torch.Tensor, cache: DecodeCache) -> torch.Tensor:
        """One step: the packed `embeddings` `[1, T, H]`, rotary `positions` `[A, 1, T]` (after
        `cache.begin_step`) -> float32 logits `[rows, V]` of each row's last new token."""
        ...


@dataclass
class GenerationRequest:
    """One sequence to generate and its decoding settings. An encoder-decoder model's: the encoder's
    states of its input `memory` `[S, H_enc]` and the decoder prompt (task start token and any
    question). A decoder-only model's (`memory` None): the prompt's token ids, and where the model
    made them, their input embeddings `[P, H]`, rotary position ids `[A, P]` and the position offset
    of the generated tokens (see `DecoderOnlyLM`)."""

    memory: torch.Tensor | None
    prompt: list[int]
    settings: GenerationSettings
    prompt_embeddings: torch.Tensor | None = None
    prompt_positions: torch.Tensor | None = None
    position_offset: int = 0


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
    prefill: bool = True  # its next step feeds the prompt (its first)


class DecodeLoop:
    """The running batch of one model. Not thread-safe: one thread adds, cancels and steps."""

    def __init__(self, model: EncoderDecoderLM | DecoderOnlyLM, device: torch.device, dtype: torch.dtype,
                 max_rows: int = 64):
        self.model = model
        self.decoder_only = isinstance(model, DecoderOnlyLM)
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
        if self.decoder_only:
            self._check_decoder_only(request)
        elif request.memory is None or request.prompt_embeddings is not None or request.prompt_positions is not None:
            raise ValueError("an encoder-decoder model's requests carry encoder memory and decoder token ids only")
        needed = len(request.prompt) + request.settings.max_new_tokens
        if needed > self.model.decoder_positions:
            raise ValueError(f"prompt ({len(request.prompt)} tokens) plus max_new_tokens "
                             f"({request.settings.max_new_tokens}) exceeds the decoder's "
                             f"{self.model.decoder_positions} positions")
        handle = next(self._ids)
        self._pending[handle] = request
        return handle

    def _check_decoder_only(self, request: GenerationRequest) -> None:
        model: DecoderOnlyLM = self.model  # type: ignore[assignment]
        p = len(request.prompt)
        if request.memory is not None:
            raise ValueError("a decoder-only model's requests carry no encoder memory")
        if request.prompt_embeddings is not None and request.prompt_embeddings.shape[0] != p:
            raise ValueError(f"prompt_embeddings has {request.prompt_embeddings.shape[0]} rows for {p} prompt tokens")
        axes = model.position_axes
        if request.prompt_positions is not None and tuple(request.prompt_positions.shape) != (axes, p):
            raise ValueError(f"prompt_positions is {tuple(request.prompt_positions.shape)}, not [{axes}, {p}] "
                             "(position_axes, prompt tokens)")

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

    def _admit(self) -> None:
        """Move pending requests into the batch while rows allow, first come first served; the
        cross-attention keys/values of those joining together are projected in one call per
        memory length."""
        joining: list[tuple[int, GenerationRequest]] = []
        rows = self.cache.rows
        for handle, request in list(self._pending.items()):
            if rows + request.settings.num_beams > self.max_rows:
                break
            rows += request.settings.num_beams
            joining.append((handle, request))
            del self._pending[handle]
        # joining rows are grouped by prompt length (in their first step each group attends as one
        # part of the packed step, generation/cache.py) and, for an encoder-decoder, by memory
        # length (their keys/values projected together)
        by_length: dict[tuple[int, int], list[tuple[int, GenerationRequest]]] = {}
        for handle, request in joining:
            memory = 0 if request.memory is None else int(request.memory.shape[0])
            by_length.setdefault((len(request.prompt), memory), []).append((handle, request))
        for group in sorted(by_length.values(), key=lambda g: len(g[0][1].prompt)):
            positions = max(len(r.prompt) + r.settings.max_new_tokens for _, r in group)
            new_rows = iter(self.cache.add_rows(self._cross_kv(group), positions,
                                                sum(r.settings.num_beams for _, r in group)))
            for handle, request in group:
                search = new_search(request.prompt, request.settings)
                running = _Running(request, search)
                running.rows = [next(new_rows) for _ in range(search.rows)]
                running.feed = [list(request.prompt) for _ in range(search.rows)]
                self._running[handle] = running

    def _cross_kv(self, group: list[tuple[int, GenerationRequest]]) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """The group's cross-attention keys/values, a row per beam (None: a decoder-only model's)."""
        if self.decoder_only:
            return None
        model: EncoderDecoderLM = self.model  # type: ignore[assignment]
        memory = torch.stack([r.memory for _, r in group if r.memory is not None]).to(self.device, self.dtype)
        kv = model.cross_attention_kv(memory)
        beams = torch.tensor([r.settings.num_beams for _, r in group], device=self.device)
        return [(k.repeat_interleave(beams, dim=0), v.repeat_interleave(beams, dim=0)) for k, v in kv]

    def step(self) -> dict[int, GenerationResult]:
        """Admit what fits, run one decoder step over every row, advance each request's search.
        Returns the requests that finished in this step, by handle."""
        self._admit()
        if not self._running:
            return {}
        n = self.cache.rows
        feeds: list[list[int]] = [[] for _ in range(n)]
        owners: list[_Running] = [None] * n  # type: ignore[list-item]
        for running in self._running.values():
            for row, tokens in zip(running.rows, running.feed, strict=True):
                feeds[row], owners[row] = tokens, running
        logits = self._decode(feeds, owners)
        for running in self._running.values():
            running.prefill = False
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

    def _decode(self, feeds: list[list[int]], owners: list[_Running]) -> torch.Tensor:
        """One decoder call over every row, its new tokens packed -> float32 logits on the CPU `[rows, V]`."""
        tokens = torch.tensor([t for f in feeds for t in f], dtype=torch.long)[None]  # [1, T]
        positions = self.cache.begin_step([len(f) for f in feeds])
        with torch.inference_mode():
            if self.decoder_only:
                logits = self._decode_embedded(tokens.to(self.device), positions, feeds, owners)
            else:
                model: EncoderDecoderLM = self.model  # type: ignore[assignment]
                logits = model.decode(tokens.to(self.device), self.cache)
        self.cache.end_step()
        return logits.float().cpu()

    def _decode_embedded(self, tokens: torch.Tensor, positions: torch.Tensor, feeds: list[list[int]],
                         owners: list[_Running]) -> torch.Tensor:
        """A decoder-only model's step over the packed new tokens `tokens` `[1, T]` at cache
        positions `positions` `[1, T]`: a prefilling row's embeddings and positions are its request's
        (where it brought them), a generating row's are its token's at position + position offset."""
        model: DecoderOnlyLM = self.model  # type: ignore[assignment]
        x = model.token_embeddings(tokens)
        offsets = torch.tensor([0 if o.prefill else o.request.position_offset for o in owners], device=self.device)
        counts = torch.tensor([len(f) for f in feeds], device=self.device)
        rotary = (positions + offsets.repeat_interleave(counts)[None])[None]
        rotary = rotary.repeat(model.position_axes, 1, 1)  # [A, 1, T]
        start = 0
        for owner, feed in zip(owners, feeds, strict=True):
            if owner.prefill:
                request = owner.request
                p = len(request.prompt)
                if request.prompt_embeddings is not None:
                    x[0, start:start + p] = request.prompt_embeddings.to(x.device, x.dtype)
                if request.prompt_positions is not None:
                    rotary[:, 0, start:start + p] = request.prompt_positions.to(self.device)
            start += len(feed)
        return model.decode_embedded(x, rotary, self.cache)

    def run(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        """Generate for `requests` together (all join, each leaves when done); results in order."""
        handles = [self.add(r) for r in requests]
        results: dict[int, GenerationResult] = {}
        while len(results) < len(handles):
            results.update(self.step())
        return [results[h] for h in handles]
