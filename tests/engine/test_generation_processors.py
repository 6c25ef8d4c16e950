"""generation/processors.py against transformers' logits processors, chained in transformers'
order, on random scores: bad words (single tokens, sequences, an EOS ban dropped), min length,
min new tokens, forced BOS and forced EOS, no repeated n-grams, at the lengths where each switches on
and off."""

from __future__ import annotations

import pytest
import torch

from sie_engine.generation import GenerationSettings, processors

VOCAB = 30
EOS = [2, 5]


def transformers_chain(settings: GenerationSettings, prompt_len: int, max_length: int):
    from transformers.generation import logits_process as lp

    chain = []
    if settings.no_repeat_ngram_size:
        chain.append(lp.NoRepeatNGramLogitsProcessor(settings.no_repeat_ngram_size))
    if settings.bad_words_ids:
        chain.append(lp.NoBadWordsLogitsProcessor([list(w) for w in settings.bad_words_ids], EOS))
    if settings.min_length:
        chain.append(lp.MinLengthLogitsProcessor(settings.min_length, EOS))
    if settings.min_new_tokens:
        chain.append(lp.MinNewTokensLengthLogitsProcessor(prompt_len, settings.min_new_tokens, EOS))
    if settings.forced_bos_token_id is not None:
        chain.append(lp.ForcedBOSTokenLogitsProcessor(settings.forced_bos_token_id))
    if settings.forced_eos_token_id:
        chain.append(lp.ForcedEOSTokenLogitsProcessor(max_length, list(settings.forced_eos_token_id)))
    return lp.LogitsProcessorList(chain)


@pytest.mark.parametrize("fields", [
    dict(bad_words_ids=((7,), (3, 4), (2,))),
    dict(min_length=5),
    dict(min_new_tokens=3),
    dict(forced_bos_token_id=9),
    dict(forced_eos_token_id=(2,)),
    dict(bad_words_ids=((3, 4, 8),), min_new_tokens=2, forced_eos_token_id=(2, 5)),
    dict(no_repeat_ngram_size=1),
    dict(no_repeat_ngram_size=3, bad_words_ids=((7,),), forced_eos_token_id=(2,)),
])
def test_processors_equal_transformers(fields):
    settings = GenerationSettings(max_new_tokens=6, eos_token_ids=tuple(EOS), **fields)
    generator = torch.Generator().manual_seed(0)
    prompt_len = 2
    max_length = prompt_len + settings.max_new_tokens
    for cur_len in range(1, max_length):
        ids = torch.randint(0, VOCAB, (3, cur_len), generator=generator)
        ids[0, -2:] = torch.tensor([3, 4])[-cur_len:]  # row 0 ends with a banned sequence's prefix
        if cur_len >= 5:  # row 1 ends with the start of an earlier trigram: its third token is banned
            ids[1, :2] = ids[1, -2:]
        scores = torch.randn(3, VOCAB, generator=generator)
        expected = transformers_chain(settings, prompt_len, max_length)(ids, scores.clone())
        got = processors.apply(settings, ids, scores.clone(), prompt_len, max_length)
        assert torch.equal(got, expected), (fields, cur_len)
