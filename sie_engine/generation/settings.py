"""What one generation request asks of the decoder, parsed once from the checkpoint's
generation_config.json (transformers' `GenerationConfig`) plus the request's overrides.

Only the fields SIE implements are accepted; a checkpoint switching on another logits processor
(sampling, repetition penalty, ...) is refused at load with the field named, never silently run
otherwise than transformers would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

# generation_config.json fields that change tokens and that SIE does not implement, with the value
# that leaves them off (transformers' default).
_UNSUPPORTED_OFF: dict[str, Any] = {
    "do_sample": False, "repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0,
    "encoder_no_repeat_ngram_size": 0, "num_beam_groups": 1,
    "diversity_penalty": 0.0, "penalty_alpha": None, "suppress_tokens": None,
    "begin_suppress_tokens": None, "sequence_bias": None, "exponential_decay_length_penalty": None,
    "renormalize_logits": False, "constraints": None, "force_words_ids": None,
}


def _ids(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int):
        return (value,)
    return tuple(int(v) for v in value)


@dataclass(frozen=True)
class GenerationSettings:
    """One request's decoding. `max_new_tokens` bounds the generated tokens (the prompt not counted);
    `eos_token_ids` stop a sequence (the token itself is kept, as transformers returns it);
    beam search where `num_beams` > 1, ranked by score / generated_length ** `length_penalty`,
    stopping per `early_stopping` (True, False or "never", transformers' meanings)."""

    max_new_tokens: int = 20
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None
    # The token forced at the last position the length allows (ForcedEOSTokenLogitsProcessor).
    forced_eos_token_id: tuple[int, ...] = ()
    # The token forced as the first generated one (ForcedBOSTokenLogitsProcessor).
    forced_bos_token_id: int | None = None
    # EOS is suppressed until the sequence (prompt included) has `min_length` tokens, or
    # `min_new_tokens` generated ones.
    min_length: int = 0
    min_new_tokens: int = 0
    # Token sequences never produced (NoBadWordsLogitsProcessor): Donut's card bans `<unk>`.
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    # No n-gram of this size occurs twice in a sequence, its decoder prompt included
    # (NoRepeatNGramLogitsProcessor; Florence-2's generation config asks for 3); 0: off.
    no_repeat_ngram_size: int = 0

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.num_beams < 1:
            raise ValueError(f"num_beams must be >= 1, got {self.num_beams}")
        if self.no_repeat_ngram_size < 0:
            raise ValueError(f"no_repeat_ngram_size must be >= 0, got {self.no_repeat_ngram_size}")
        if self.early_stopping not in (True, False, "never"):
            raise ValueError(f"early_stopping must be true, false or \"never\", got {self.early_stopping!r}")

    @classmethod
    def from_generation_config(cls, config: Mapping[str, Any], **overrides: Any) -> GenerationSettings:
        """A checkpoint's generation_config.json (or the dict transformers derives from config.json),
        with `overrides` (a card's or a request's) laid over it."""
        merged = {**config, **overrides}
        for name, off in _UNSUPPORTED_OFF.items():
            value = merged.get(name, off)
            if value != off and value not in (None, [], {}):
                raise ValueError(f"generation config {name}={value!r} is not supported by SIE's decoder "
                                 f"(only greedy and beam search, with {off!r})")
        if merged.get("num_return_sequences", 1) not in (None, 1):
            raise ValueError(f"generation config num_return_sequences={merged['num_return_sequences']!r}: "
                             "SIE returns one sequence per request")
        max_new = merged.get("max_new_tokens")
        if max_new is None:
            raise ValueError("max_new_tokens is required (SIE bounds every request's generated tokens)")
        bad = tuple(_ids(words) for words in (merged.get("bad_words_ids") or ()))
        return cls(
            max_new_tokens=int(max_new),
            num_beams=int(merged.get("num_beams") or 1),
            length_penalty=float(merged.get("length_penalty", 1.0)),
            early_stopping=merged.get("early_stopping", False),
            eos_token_ids=_ids(merged.get("eos_token_id")),
            pad_token_id=merged.get("pad_token_id"),
            forced_eos_token_id=_ids(merged.get("forced_eos_token_id")),
            forced_bos_token_id=merged.get("forced_bos_token_id"),
            min_length=int(merged.get("min_length") or 0),
            min_new_tokens=int(merged.get("min_new_tokens") or 0),
            bad_words_ids=bad,
            no_repeat_ngram_size=int(merged.get("no_repeat_ngram_size") or 0),
        )

    def with_overrides(self, **overrides: Any) -> GenerationSettings:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})
