"""The logits processors GenerationSettings switches on, each equal to its transformers namesake
and applied in transformers' order (`GenerationMixin._get_logits_processor`): no repeated n-grams,
bad words, min length, min new tokens, forced BOS, forced EOS.

`apply(settings, sequences, scores, prompt_len, max_length)`: sequences `[R, cur_len]` (the rows
of one request, prompt included), scores `[R, V]` float32 -> processed scores `[R, V]`.
"""

from __future__ import annotations

import math

import torch

from .settings import GenerationSettings


def _ban_bad_words(settings: GenerationSettings, sequences: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """NoBadWordsLogitsProcessor: a banned sequence's last token gets -inf where the row ends with
    the rest of it (a single-token one always; a longer one only once the row is at least as long as
    the whole sequence, as transformers' SequenceBiasLogitsProcessor); a ban equal to an EOS token is
    dropped."""
    eos = set(settings.eos_token_ids)
    out = scores
    for words in settings.bad_words_ids:
        if len(words) == 1 and words[0] in eos:
            continue
        prefix = words[:-1]
        if prefix:
            if sequences.shape[1] < len(words):  # transformers: a sequence longer than the context is ignored
                continue
            tail = sequences[:, -len(prefix):]
            rows = (tail == torch.tensor(prefix, dtype=tail.dtype)).all(dim=1)
        else:
            rows = torch.ones(scores.shape[0], dtype=torch.bool)
        if bool(rows.any()):
            out = out.clone() if out is scores else out
            out[rows, words[-1]] = -math.inf
    return out


def _ban_repeated_ngrams(size: int, sequences: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """NoRepeatNGramLogitsProcessor: a row's next token gets -inf where it would complete an n-gram the
    row already holds (its last size - 1 tokens match the start of an earlier n-gram)."""
    cur_len = sequences.shape[1]
    if cur_len < size:
        return scores
    prefix = sequences[:, cur_len + 1 - size:]  # [R, size - 1]
    windows = sequences.unfold(1, size, 1)  # [R, cur_len - size + 1, size]
    matches = (windows[..., :-1] == prefix[:, None]).all(dim=-1)
    vocab = scores.shape[-1]
    # a window that does not match bans the spare column past the vocabulary
    banned = torch.zeros((scores.shape[0], vocab + 1), dtype=torch.bool, device=scores.device)
    banned.scatter_(1, torch.where(matches, windows[..., -1], vocab), True)
    return scores.masked_fill(banned[:, :vocab], -math.inf)


def apply(settings: GenerationSettings, sequences: torch.Tensor, scores: torch.Tensor, prompt_len: int,
          max_length: int) -> torch.Tensor:
    cur_len = sequences.shape[1]
    if settings.no_repeat_ngram_size:
        scores = _ban_repeated_ngrams(settings.no_repeat_ngram_size, sequences, scores)
    if settings.bad_words_ids:
        scores = _ban_bad_words(settings, sequences, scores)
    eos = list(settings.eos_token_ids)
    short = cur_len < settings.min_length or (settings.min_new_tokens > 0
                                              and cur_len - prompt_len < settings.min_new_tokens)
    if eos and short:
        scores = scores.clone()
        scores[:, eos] = -math.inf
    if settings.forced_bos_token_id is not None and cur_len == 1:
        scores = torch.full_like(scores, -math.inf)
        scores[:, settings.forced_bos_token_id] = 0
    if settings.forced_eos_token_id and cur_len == max_length - 1:
        scores = torch.full_like(scores, -math.inf)
        scores[:, list(settings.forced_eos_token_id)] = 0
    return scores
