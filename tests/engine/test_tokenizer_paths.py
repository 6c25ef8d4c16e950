"""A lone short input is tokenised by `encode` (the GIL kept), others by `encode_batch`: the ids,
segment ids and truncation flags are the same either way, and the same as transformers' tokenizer."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from sie_engine.tokenizer import HELD_GIL_CHARS, TextTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))
from arch_fixtures import MINILM_DIR  # noqa: E402

WINDOW = 16
TEXTS = ["a short query", "what does a tokenizer do with a sentence that runs past the window of sixteen tokens?",
         "x" * HELD_GIL_CHARS]
PAIRS = [("what is sie", "an inference engine for small models"),
         ("a query that is long enough to share the window", "with a document that is longer still, so both sides "
                                                              "are cut, the longer first")]


@pytest.fixture(scope="module")
def tokenizer():
    return TextTokenizer(MINILM_DIR, WINDOW)


@pytest.fixture(scope="module")
def reference():
    return AutoTokenizer.from_pretrained(str(MINILM_DIR))


@pytest.fixture
def calls(tokenizer, monkeypatch):
    """Which of the Rust tokenizer's methods each call took."""
    taken: list[str] = []
    real = tokenizer._tok

    class Spy:
        def __getattr__(self, name):
            method = getattr(real, name)
            if name.startswith("encode"):
                taken.append(name)
            return method

    monkeypatch.setattr(tokenizer, "_tok", Spy())
    return taken


@pytest.mark.parametrize("text", TEXTS)
def test_a_lone_text_equals_the_reference_and_the_batch_path(tokenizer, reference, calls, text):
    alone = tokenizer.encode([text])
    assert calls == ["encode"]
    batched = tokenizer.encode([text, text])
    assert calls[1].startswith("encode_batch")
    expected = reference(text, truncation=True, max_length=WINDOW)["input_ids"]
    assert alone.ids[0].tolist() == expected == batched.ids[0].tolist()
    full = len(reference(text)["input_ids"])
    assert alone.truncated[0] == batched.truncated[0] == (full > WINDOW)


def test_a_lone_long_text_keeps_the_batch_path(tokenizer, reference, calls):
    text = "word " * (HELD_GIL_CHARS // 5 + 1)
    assert len(text) > HELD_GIL_CHARS
    assert tokenizer.encode([text]).ids[0].tolist() == reference(text, truncation=True, max_length=WINDOW)["input_ids"]
    assert calls[0].startswith("encode_batch")


@pytest.mark.parametrize("pair", PAIRS)
def test_a_lone_pair_equals_the_reference_and_the_batch_path(tokenizer, reference, calls, pair):
    alone = tokenizer.encode_pairs([pair[0]], [pair[1]])
    assert calls == ["encode"]
    batched = tokenizer.encode_pairs([pair[0]] * 2, [pair[1]] * 2)
    expected = reference(*pair, truncation=True, max_length=WINDOW)
    assert alone.ids[0].tolist() == expected["input_ids"] == batched.ids[0].tolist()
    assert alone.type_ids[0].tolist() == expected["token_type_ids"] == batched.type_ids[0].tolist()
    assert alone.truncated[0] == batched.truncated[0]


def test_offsets_are_the_same_on_both_paths(tokenizer):
    alone = tokenizer.encode([TEXTS[1]], with_offsets=True)
    batched = tokenizer.encode([TEXTS[1], TEXTS[0]], with_offsets=True)
    assert alone.offsets[0] == batched.offsets[0]
