"""LLM rerankers of the Qwen3-Reranker kind (P("yes") at the last token of a judging
prompt) on tiny random Qwen3 / Qwen2 causal LMs, against the model card's computation
written out with transformers' *ForCausalLM (same prompt, same truncation)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.heads.classifier import YES_NO_DEFAULTS
from tiny_models import MINILM_VOCAB, save_tiny

WINDOW = 320
QUERY = "what does apt do"
DOCS = [
    "apt is the package manager of Debian: it installs, upgrades and removes software.",
    "A library for reading PNG images.",
    "Football is a sport. " * 80,  # longer than the window: the document is cut, the prompt's suffix kept
]


def _tiny_causal_lm(kind: str, dest):
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0 if kind == "qwen3" else 1)
    common = dict(vocab_size=MINILM_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=96, max_position_embeddings=512, rms_norm_eps=1e-6,
                  rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    if kind == "qwen3":  # its own lm_head
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=16, tie_word_embeddings=False, **common))
    else:  # LM head tied to the input embeddings
        model = Qwen2ForCausalLM(Qwen2Config(tie_word_embeddings=True, **common))
    return save_tiny(model.eval(), dest)


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("llm-rerankers")
    return {kind: _tiny_causal_lm(kind, base / kind) for kind in ("qwen3", "qwen2")}


@pytest.fixture(scope="module")
def engine(roots):
    cards = [ModelCard(id=f"llm/{kind}", weights=WeightsSource(path=str(root)), outputs=("score",), family=kind,
                       max_seq_len=WINDOW, max_batch_tokens=2048, dtype="float32",
                       options={"score": {"kind": "yes-no"}})
             for kind, root in roots.items()]
    with Engine(Catalog(cards), device="cpu") as engine:
        yield engine


def _reference(root, query: str, docs: list[str], instruction: str) -> np.ndarray:
    """Qwen3-Reranker's model-card recipe on transformers' model, one pair at a time (no padding)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(root))
    model = AutoModelForCausalLM.from_pretrained(str(root)).eval()
    prefix = tokenizer.encode(YES_NO_DEFAULTS["prefix"], add_special_tokens=False)
    suffix = tokenizer.encode(YES_NO_DEFAULTS["suffix"], add_special_tokens=False)
    yes, no = tokenizer.convert_tokens_to_ids("yes"), tokenizer.convert_tokens_to_ids("no")
    scores = []
    for doc in docs:
        text = f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}"
        body = tokenizer(text, add_special_tokens=False, truncation=True,
                         max_length=WINDOW - len(prefix) - len(suffix))["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prefix + body + suffix])).logits[0, -1]
        scores.append(torch.softmax(torch.stack([logits[no], logits[yes]]), dim=0)[1].item())
    return np.asarray(scores)


@pytest.mark.parametrize("kind", ["qwen3", "qwen2"])
def test_yes_probability_matches_the_model_card_recipe(engine, roots, kind):
    result = engine.score_sync(f"llm/{kind}", QUERY, DOCS)
    expected = _reference(roots[kind], QUERY, DOCS, YES_NO_DEFAULTS["instruction"])
    got = {s.index: s.score for s in result.scores}
    np.testing.assert_allclose([got[i] for i in range(len(DOCS))], expected, atol=1e-5)
    assert [s.index for s in result.scores] == list(np.argsort(-expected, kind="stable"))
    assert all(0.0 < s.score < 1.0 for s in result.scores)


def test_request_instruction_replaces_the_default(engine, roots):
    instruction = "Judge whether the passage names a Debian tool"
    result = engine.score_sync("llm/qwen3", QUERY, DOCS[:2], instruction=instruction)
    expected = _reference(roots["qwen3"], QUERY, DOCS[:2], instruction)
    got = {s.index: s.score for s in result.scores}
    np.testing.assert_allclose([got[0], got[1]], expected, atol=1e-5)


def test_truncate_false_refuses_a_document_longer_than_the_window(engine):
    from sie_engine.errors import InvalidRequest

    with pytest.raises(InvalidRequest) as info:
        engine.score_sync("llm/qwen3", QUERY, DOCS, truncate=False)
    assert info.value.field == "items[2].text"
