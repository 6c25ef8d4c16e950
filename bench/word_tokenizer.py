"""A word-level fast tokenizer over a test vocabulary, for the GPU checks that build runners
from random models and feed token ids directly (so the vocabulary's words do not matter)."""

from __future__ import annotations

from pathlib import Path

from sie_engine.checkpoints import CheckpointLayout
from sie_engine.tokenizer import TextTokenizer


def word_level_tokenizer(directory: Path, vocab: dict[str, int], max_length: int, **special: str) -> TextTokenizer:
    """Saves the tokenizer to `directory` and loads it as SIE does; `special`: its special tokens
    by role (`pad_token="[PAD]"`, ...)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", **special).save_pretrained(directory)
    # a tokenizer folder, not a checkpoint: TextTokenizer takes its layout as given
    layout = CheckpointLayout(kind="tokenizer only", root=directory, config={}, tokenizer_source=directory)
    return TextTokenizer(layout, max_length=max_length)
