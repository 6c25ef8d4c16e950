"""mxbai-rerank v2 (a Qwen2 causal LM: logit("1") minus logit("0") after its judging prompt) on a
tiny random Qwen2ForCausalLM, against mxbai-rerank 0.1.6's own MxbaiRerankV2.predict on the same
directory: same prompt parts, same truncation (the query to 3/4 of the window, then the document),
left-padded batches on its side, packed ones on SIE's.

The tokenizer is a byte-level BPE trained here with Qwen2's pre-tokenizer pattern, which keeps
punctuation and the newline after it together ("?\\n"): tokenising the prompt's parts jointly
would then give other ids than the reference, so the test sees whether SIE keeps them apart.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from sie_engine import Catalog, Engine, WeightsSource

CARD_IDS = ("mixedbread-ai/mxbai-rerank-base-v2", "mixedbread-ai/mxbai-rerank-large-v2")
WINDOW = 256  # the stand-in's max_position_embeddings: the reference cuts to it less its prompt, as SIE does
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QUERY = "what does apt do?"
DOCS = [
    "apt is the package manager of Debian: it installs, upgrades and removes software.",
    "A library for reading PNG images?",
    "Football is a sport played by two teams. " * 40,  # longer than the window: the document is cut
]


def _bpe_tokenizer(dest) -> int:
    """A Qwen2-style byte-level BPE over a small corpus, saved as a fast tokenizer; its vocabulary size."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    corpus = [QUERY + "\n", *DOCS, "query: what?\ndocument: why?\n", "instruction: rank code\nquery: ok?\n",
              "0 1 relevant. Relevance:", "You are a search relevance expert who evaluates documents.\n"] * 20
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|im_end|>",
                                   model_max_length=WINDOW)
    fast.save_pretrained(str(dest))
    return tok.get_vocab_size()


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    dest = tmp_path_factory.mktemp("mxbai-rerank-v2")
    vocab = _bpe_tokenizer(dest)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=vocab, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=96, max_position_embeddings=WINDOW,
                         tie_word_embeddings=True, pad_token_id=0, rms_norm_eps=1e-6)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():  # random heads at 0.02 give every pair nearly one score: widen them
        model.model.embed_tokens.weight.normal_(0.0, 0.5)
    model.save_pretrained(str(dest), safe_serialization=True)
    return dest


@pytest.fixture(scope="module")
def engine(root):
    builtin = Catalog.builtin()
    cards = [dataclasses.replace(builtin.get(card_id), weights=WeightsSource(path=str(root)), max_seq_len=WINDOW,
                                 dtype="float32") for card_id in CARD_IDS]
    with Engine(Catalog(cards), device="cpu") as engine:
        yield engine


def _prepare_for_model(ids, pair_ids, *, truncation, max_length, padding, return_attention_mask,
                       return_token_type_ids, add_special_tokens):
    """transformers 4's `prepare_for_model` for the one call mxbai-rerank makes (transformers 5 dropped
    the method): the pair joined without special tokens, `only_second` cutting the second's end."""
    assert truncation == "only_second" and not padding and not add_special_tokens
    assert not return_attention_mask and not return_token_type_ids and len(ids) <= max_length
    return {"input_ids": list(ids) + list(pair_ids)[:max_length - len(ids)]}


@pytest.fixture(scope="module")
def reference(root):
    from mxbai_rerank import MxbaiRerankV2

    model = MxbaiRerankV2(str(root), device="cpu", torch_dtype=torch.float32)
    model.tokenizer.prepare_for_model = _prepare_for_model
    return model


def _sie(engine, card_id, query, docs, **fields) -> np.ndarray:
    scores = {s.index: s.score for s in engine.score_sync(card_id, query, docs, **fields).scores}
    return np.asarray([scores[i] for i in range(len(docs))])


def test_the_cards_carry_the_reference_prompt(reference):
    from mxbai_rerank import MxbaiRerankV2

    for card_id in CARD_IDS:
        options = Catalog.builtin().get(card_id).options["score"]
        assert options["prefix"] == MxbaiRerankV2.chat_template["prefix"]
        suffix = [MxbaiRerankV2.sep, MxbaiRerankV2.task_prompt, MxbaiRerankV2.chat_template["suffix"]]
        assert options["suffix"] == suffix
        query, sep, document = options["template"]
        assert query.format(instruction="", query="q") == MxbaiRerankV2.query_prompt.format(query="q")
        with_instruction = options["instruction_format"].format(instruction="i") + query.format(instruction="",
                                                                                                 query="q")
        assert with_instruction == "".join([MxbaiRerankV2.instruction_prompt.format(instruction="i"),
                                            MxbaiRerankV2.sep, MxbaiRerankV2.query_prompt.format(query="q")])
        assert sep == MxbaiRerankV2.sep and document == MxbaiRerankV2.doc_prompt
        assert (options["yes_token"], options["no_token"]) == ("1", "0") and options["query_share"] == 0.75
    assert reference.max_length == WINDOW - reference.predefined_length  # the reference's budget is SIE's


def test_joint_tokenisation_would_differ_here(root):
    """The trained tokenizer merges "?\\n": a prompt tokenised as one string is not the reference's."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(root))
    joint = tokenizer("query: what?\ndocument: why?", add_special_tokens=False)["input_ids"]
    parts = sum((tokenizer(p, add_special_tokens=False)["input_ids"] for p in ("query: what?", "\n", "document: why?")),
                [])
    assert joint != parts


@pytest.mark.parametrize("card_id", CARD_IDS)
def test_scores_equal_mxbai_rerank_predict(engine, reference, card_id):
    got = _sie(engine, card_id, QUERY, DOCS)
    expected = reference.predict([QUERY] * len(DOCS), DOCS).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)
    assert np.ptp(expected) > 1e-3  # the scores tell the documents apart
    ranked = [s.index for s in engine.score_sync(card_id, QUERY, DOCS).scores]
    assert ranked == list(np.argsort(-expected, kind="stable"))


def test_instruction_adds_its_line(engine, reference):
    instruction = "Rank the passages that name a Debian tool first"
    got = _sie(engine, CARD_IDS[0], QUERY, DOCS[:2], instruction=instruction)
    expected = reference.predict([QUERY] * 2, DOCS[:2], instruction=instruction).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)
    assert not np.allclose(got, _sie(engine, CARD_IDS[0], QUERY, DOCS[:2]), atol=1e-4)


def test_a_long_query_is_cut_to_three_quarters_and_the_document_after_it(engine, reference):
    query = "which package manager installs software on Debian? " * 30  # past 3/4 of the window
    got = _sie(engine, CARD_IDS[0], query, DOCS)
    expected = reference.predict([query] * len(DOCS), DOCS).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)


def test_truncate_false_refuses_a_pair_longer_than_the_window(engine):
    from sie_engine.errors import InvalidRequest

    with pytest.raises(InvalidRequest) as info:
        engine.score_sync(CARD_IDS[0], QUERY, DOCS, truncate=False)
    assert info.value.field == "items[2].text"
    json.dumps(info.value.message)  # a plain message


def test_a_bad_query_share_fails_the_load_naming_it(root):
    card = Catalog.builtin().get(CARD_IDS[0])
    options = {"score": {**card.options["score"], "query_share": 2}}
    bad = dataclasses.replace(card, id="bad/mxbai", weights=WeightsSource(path=str(root)), max_seq_len=WINDOW,
                              dtype="float32", options=options)
    with Engine(Catalog([bad]), device="cpu") as engine, pytest.raises(Exception) as info:
        engine.score_sync(bad.id, QUERY, DOCS[:1])
    assert "query_share" in str(info.value)
