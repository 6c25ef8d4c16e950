"""SIE's packed Mistral (the qwen family's forward, no biases, sliding window as a length cap)
against transformers' MistralModel on the same tiny random weights, and the e5-mistral recipe
(last-token pooling, Normalize, the "Instruct: ...\\nQuery: " prompt) against sentence-transformers.

Tolerances: float32 hidden states and pooled outputs within 1e-4 absolute; bfloat16 (SIE)
against float32 (transformers) a cosine of at least 0.999 on pooled outputs.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from arch_fixtures import (
    FP32_TOL,
    MINILM_VOCAB,
    TEXTS,
    check_batch_invariance,
    check_every_weight_loaded,
    cosine,
    make_norms_count,
    max_abs_diff,
    reference_hidden,
    reference_pooled,
    runner_for,
    save_tiny,
    sie_hidden,
    sie_pooled,
    tiny_card,
)
from sie_engine import Catalog, Engine
from sie_engine.models import family_for
from sie_engine.models.qwen.model import QwenConfig

INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
TEMPLATE = "Instruct: {instruction}\nQuery: {text}"
WINDOW = 32  # the tiny model's sliding window: longer than most TEXTS, shorter than the longest


def tiny_mistral(**overrides):
    from transformers import MistralConfig, MistralModel

    config = dict(vocab_size=MINILM_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=96, max_position_embeddings=512, rms_norm_eps=1e-5,
                  sliding_window=WINDOW, rope_parameters={"rope_type": "default", "rope_theta": 1e4})
    config.update(overrides)
    return make_norms_count(MistralModel(MistralConfig(**config)).eval())


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.manual_seed(0)
    model = tiny_mistral()
    return save_tiny(model, tmp_path_factory.mktemp("mistral")), model


@pytest.fixture(scope="module")
def runner(model_dir):
    return runner_for(model_dir[0], pooling="last")


@pytest.fixture(scope="module")
def token_ids(runner):
    ids = runner.tokenizer.encode(TEXTS).ids
    assert max(len(x) for x in ids) == WINDOW  # the longest text was cut at the sliding window
    return ids


def test_registry_and_config(runner, model_dir):
    config = model_dir[1].config.to_dict()
    assert family_for(config).name == "mistral"
    typed = runner.config
    assert (typed.qkv_bias, typed.o_bias, typed.qk_norm, typed.causal) == (False, False, False, True)
    assert typed.sliding_window == WINDOW and typed.max_seq_len == WINDOW
    assert typed.head_dim == 16
    # without a window, the positions are the limit
    assert QwenConfig.from_hf({**config, "sliding_window": None}).max_seq_len == 512


def test_every_weight_loaded_with_its_shape(runner, model_dir):
    check_every_weight_loaded(runner, model_dir[0])


def test_hidden_states_and_last_token_pooling_match_transformers(runner, model_dir, token_ids):
    expected = reference_hidden(model_dir[1], token_ids)
    assert max_abs_diff(sie_hidden(runner, token_ids), expected) < FP32_TOL
    np.testing.assert_allclose(sie_pooled(runner, token_ids), reference_pooled(expected, "last"),
                               atol=FP32_TOL, rtol=0)


def test_bfloat16_close_to_float32_reference(model_dir, token_ids):
    runner = runner_for(model_dir[0], pooling="last", dtype="bfloat16")
    expected = reference_pooled(reference_hidden(model_dir[1], token_ids), "last")
    assert cosine(sie_pooled(runner, token_ids), expected).min() > 0.999


def test_batch_invariance(runner, token_ids):
    check_batch_invariance(runner, token_ids)


def test_engine_equals_sentence_transformers_e5_mistral_recipe(model_dir):
    """e5-mistral-7b-instruct as sentence-transformers runs it (Transformer, last-token Pooling,
    Normalize, the instruct prompt on queries) against an e5-mistral-style card on the same
    checkpoint: equal within 1e-4, queries and documents."""
    from sentence_transformers import SentenceTransformer

    root, model = model_dir
    hidden = model.config.hidden_size
    (root / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]))
    (root / "1_Pooling").mkdir(exist_ok=True)
    (root / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": hidden, "pooling_mode_lasttoken": True, "pooling_mode_mean_tokens": False}))
    (root / "2_Normalize").mkdir(exist_ok=True)
    (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": WINDOW, "do_lower_case": False}))
    (root / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"web_search_query": f"Instruct: {INSTRUCTION}\nQuery: "}, "default_prompt_name": None}))
    st = SentenceTransformer(str(root), device="cpu")
    card = tiny_card(root, pooling="last", id="tiny/e5-mistral", normalize=True, family="mistral",
                     query_template=TEMPLATE, query_instruction=INSTRUCTION, max_seq_len=4096)
    with Engine(Catalog([card]), device="cpu") as engine:
        for is_query, expected in ((True, st.encode(TEXTS, prompt_name="web_search_query")),
                                   (False, st.encode(TEXTS))):
            got = np.stack([item.dense for item in engine.encode_sync(card.id, TEXTS, is_query=is_query).items])
            np.testing.assert_allclose(got, expected, atol=FP32_TOL, rtol=0)


def test_local_directory_without_sentence_transformers_files_pools_last_token(model_dir, token_ids, tmp_path):
    """`--model NAME=PATH` on a Mistral checkpoint with no sentence-transformers files: the family's
    declared last-token pooling (as e5-mistral embeds), normalised; equal to transformers' MistralModel
    last hidden state at each text's last token, normalised."""
    from sie_engine import card_from_local_dir

    root = save_tiny(model_dir[1], tmp_path / "bare-mistral")
    assert not (root / "modules.json").exists()
    card = card_from_local_dir("local/mistral", root)
    assert (card.pooling, card.normalize, card.family, card.max_seq_len) == ("last", True, None, WINDOW)
    expected = reference_pooled(reference_hidden(model_dir[1], token_ids), "last")
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    with Engine(Catalog([card]), device="cpu") as engine:
        got = np.stack([item.dense for item in engine.encode_sync(card.id, TEXTS).items])
        assert engine.model_info(card.id).family == "mistral"
    np.testing.assert_allclose(got, expected, atol=FP32_TOL, rtol=0)


def _bos_only_tokenizer(root) -> None:
    """The stand-in's tokenizer ends no text with a special token, as GritLM's Llama tokenizer (a BOS,
    no EOS): the MiniLM vocabulary with [CLS] as the BOS."""
    path = root / "tokenizer.json"
    state = json.loads(path.read_text())
    cls = {"SpecialToken": {"id": "[CLS]", "type_id": 0}}
    state["post_processor"] = {
        "type": "TemplateProcessing", "single": [cls, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [cls, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [101], "tokens": ["[CLS]"]}}}
    path.write_text(json.dumps(state))


def _gritlm_recipe(model, root, texts, instruction: str) -> np.ndarray:
    """ContextualAI/gritlm's GritLM.encode (mode embedding, attn "bb", mean pooling, normalized): the
    instruction before each text, bidirectional attention over the padded batch, the instruction's
    tokens (the instruction tokenised alone, with its BOS) masked out of the mean."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(root), padding_side="right")
    inputs = tokenizer([instruction + text for text in texts], padding=True, truncation=True, max_length=512,
                       return_tensors="pt", return_token_type_ids=False)
    keys = inputs["attention_mask"].bool()
    bidirectional = torch.zeros(keys.shape[0], 1, keys.shape[1], keys.shape[1])
    bidirectional.masked_fill_(~keys[:, None, None, :], torch.finfo(torch.float32).min)
    with torch.no_grad():
        hidden = model(input_ids=inputs["input_ids"], attention_mask=bidirectional).last_hidden_state
    mask = inputs["attention_mask"].clone()
    if instruction:
        mask[:, :len(tokenizer(instruction)["input_ids"])] = 0
    pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


def test_gritlm_card_equals_the_gritlm_librarys_encode(tmp_path):
    """The GritLM-7B card on a tiny Mistral: queries with the request's instruction in gritlm's format,
    documents "<|embed|>\\n" alone, each equal to the library's recipe (float32, 1e-4)."""
    import dataclasses

    from sie_engine import WeightsSource

    torch.manual_seed(3)
    model = tiny_mistral(sliding_window=4096)
    root = save_tiny(model, tmp_path / "gritlm")
    _bos_only_tokenizer(root)
    card = dataclasses.replace(Catalog.builtin().get("GritLM/GritLM-7B"), weights=WeightsSource(path=str(root)),
                               dtype="float32")
    instruction = "Given a scientific paper title, retrieve the paper's abstract"
    with Engine(Catalog([card]), device="cpu") as engine:
        queries = engine.encode_sync(card.id, TEXTS, is_query=True, instruction=instruction).items
        documents = engine.encode_sync(card.id, TEXTS).items
    np.testing.assert_allclose(np.stack([q.dense for q in queries]),
                               _gritlm_recipe(model, root, TEXTS, f"<|user|>\n{instruction}\n<|embed|>\n"),
                               atol=FP32_TOL, rtol=0)
    np.testing.assert_allclose(np.stack([d.dense for d in documents]),
                               _gritlm_recipe(model, root, TEXTS, "<|embed|>\n"), atol=FP32_TOL, rtol=0)
