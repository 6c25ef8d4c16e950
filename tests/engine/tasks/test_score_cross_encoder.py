"""Cross-encoder reranking (`score`) against sentence-transformers' CrossEncoder on the
same weights: a random classification head on the real MiniLM backbone, and tiny random
XLM-R (bge-reranker layout) and BERT two-label classifiers."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import torch

from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.errors import InvalidRequest, UnsupportedTask
from tiny_models import MINILM_DIR, save_tiny, tiny_bert_config, tiny_xlmr_config

QUERY = "how do I install a python package on debian"
DOCS = [
    "python3-pip is the package installer for Python; install it with apt.",
    "A library for reading and writing PNG images.",
    "The Debian packaging tools: dpkg, apt and friends manage software packages.",
    "Football is a team sport played with a ball.",
    "pip installs Python packages from the Python Package Index. " * 40,  # truncated at the window
]


def _minilm_classifier(dest):
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(str(MINILM_DIR), num_labels=1).eval()
    return save_tiny(model, dest)


def _xlmr_classifier(dest):
    from transformers import XLMRobertaForSequenceClassification

    torch.manual_seed(1)
    return _no_segment_ids(save_tiny(XLMRobertaForSequenceClassification(tiny_xlmr_config(num_labels=1)).eval(), dest))


def _bert_two_labels(dest):
    from transformers import BertForSequenceClassification

    torch.manual_seed(2)
    root = save_tiny(BertForSequenceClassification(tiny_bert_config(num_labels=2)).eval(), dest)
    return root


def _identity_activation(dest):
    """A one-label model whose config names the Identity activation (as ms-marco MiniLM's does)."""
    from transformers import BertForSequenceClassification

    torch.manual_seed(3)
    root = save_tiny(BertForSequenceClassification(tiny_bert_config(num_labels=1)).eval(), dest)
    config = json.loads((root / "config.json").read_text())
    config["sentence_transformers"] = {"activation_fn": "torch.nn.modules.linear.Identity"}
    (root / "config.json").write_text(json.dumps(config))
    return root


def _no_segment_ids(root):
    """ModernBERT and XLM-R tokenizers feed no segment ids: say so as their tokenizer_config does."""
    config_path = root / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["model_input_names"] = ["input_ids", "attention_mask"]
    config_path.write_text(json.dumps(config))
    return root


def _modernbert_classifier(pooling):
    def make(dest):
        from transformers import ModernBertConfig, ModernBertForSequenceClassification

        torch.manual_seed(4)
        config = ModernBertConfig(
            vocab_size=30522, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
            max_position_embeddings=512, local_attention=8, global_attn_every_n_layers=3, pad_token_id=0,
            bos_token_id=101, cls_token_id=101, eos_token_id=102, sep_token_id=102, num_labels=1,
            classifier_pooling=pooling,
        )
        return _no_segment_ids(save_tiny(ModernBertForSequenceClassification(config).eval(), dest))

    return make


def _mpnet_classifier(dest):
    """MPNetForSequenceClassification: RoBERTa's classifier layout (`classifier.dense`, `out_proj`)."""
    from transformers import MPNetConfig, MPNetForSequenceClassification

    torch.manual_seed(5)
    config = MPNetConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=48, max_position_embeddings=514, num_labels=1)
    return _no_segment_ids(save_tiny(MPNetForSequenceClassification(config).eval(), dest))


def _nomic_classifier(dest):
    """transformers' NomicBertForSequenceClassification: BERT's layout (pooler, then `classifier`)."""
    from transformers import NomicBertConfig, NomicBertForSequenceClassification

    torch.manual_seed(6)
    config = NomicBertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=48, num_labels=1)
    return save_tiny(NomicBertForSequenceClassification(config).eval(), dest)


MODELS = {"minilm": _minilm_classifier, "xlmr": _xlmr_classifier, "bert2": _bert_two_labels,
          "identity": _identity_activation, "modernbert-cls": _modernbert_classifier("cls"),
          "modernbert-mean": _modernbert_classifier("mean"), "mpnet": _mpnet_classifier,
          "nomic": _nomic_classifier}


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("cross")
    return {name: make(base / name) for name, make in MODELS.items()}


@pytest.fixture(scope="module")
def engine(roots):
    cards = [ModelCard(id=f"ce/{name}", weights=WeightsSource(path=str(root)), outputs=("score",), max_seq_len=120,
                       max_batch_tokens=2048) for name, root in roots.items()]
    cards.append(ModelCard(id="ce/bert2-softmax", weights=WeightsSource(path=str(roots["bert2"])), outputs=("score",),
                           max_seq_len=120, max_batch_tokens=2048,
                           options={"score": {"activation": "softmax", "label": 1}}))
    with Engine(Catalog(cards), device="cpu") as engine:
        yield engine


def _reference(root, pairs):
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(root), device="cpu", max_length=120)
    scores = model.predict(pairs, batch_size=8, convert_to_numpy=True)
    return np.asarray(scores, dtype=np.float64), model


@pytest.mark.parametrize("name", ["minilm", "xlmr", "identity", "modernbert-cls", "modernbert-mean", "mpnet",
                                  "nomic"])
def test_scores_match_cross_encoder(engine, roots, name):
    result = engine.score_sync(f"ce/{name}", {"text": QUERY}, DOCS)
    expected, reference = _reference(roots[name], [(QUERY, d) for d in DOCS])
    got = np.zeros(len(DOCS))
    for item in result.scores:
        got[item.index] = item.score
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)
    # best first, ranks from 0, ids default to the index
    assert [s.rank for s in result.scores] == list(range(len(DOCS)))
    assert [s.index for s in result.scores] == list(np.argsort(-expected, kind="stable"))
    assert all(s.id == str(s.index) for s in result.scores)
    assert result.tokens > 0
    if name == "identity":  # raw logits: not squashed into (0, 1)
        assert type(reference.activation_fn).__name__ == "Identity"
    else:
        assert type(reference.activation_fn).__name__ == "Sigmoid"
        assert all(0.0 < s.score < 1.0 for s in result.scores)


def test_two_label_model_scores_the_last_label_raw(engine, roots):
    """num_labels=2: CrossEncoder applies no activation; SIE scores label 1 (relevant)."""
    result = engine.score_sync("ce/bert2", QUERY, DOCS[:3])
    expected, reference = _reference(roots["bert2"], [(QUERY, d) for d in DOCS[:3]])
    assert expected.shape == (3, 2)
    got = {s.index: s.score for s in result.scores}
    np.testing.assert_allclose([got[i] for i in range(3)], expected[:, 1], atol=1e-5)


def test_card_can_ask_for_softmax_over_labels(engine, roots):
    result = engine.score_sync("ce/bert2-softmax", QUERY, DOCS[:3])
    logits, _ = _reference(roots["bert2"], [(QUERY, d) for d in DOCS[:3]])
    expected = torch.softmax(torch.from_numpy(logits), dim=-1)[:, 1].numpy()
    got = {s.index: s.score for s in result.scores}
    np.testing.assert_allclose([got[i] for i in range(3)], expected, atol=1e-5)


def test_top_k_and_ids(engine):
    items = [{"id": f"doc-{i}", "text": t} for i, t in enumerate(DOCS)]
    full = engine.score_sync("ce/minilm", QUERY, items)
    top = engine.score_sync("ce/minilm", QUERY, items, top_k=2)
    assert [s.id for s in top.scores] == [s.id for s in full.scores[:2]]
    assert top.scores[0].id == f"doc-{top.scores[0].index}"


def test_concurrent_requests_share_batches_and_keep_their_answers(engine):
    """Pairs of many requests are packed together; each request still gets its own scores."""
    queries = ["debian packaging", "png images", "ball sports", "python installer"]
    alone = {q: [(s.index, s.score) for s in engine.score_sync("ce/minilm", q, DOCS).scores] for q in queries}
    results = {}

    def call(q):
        results[q] = [(s.index, s.score) for s in engine.score_sync("ce/minilm", q, DOCS).scores]

    threads = [threading.Thread(target=call, args=(q,)) for q in queries * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for q in queries:
        assert [i for i, _ in results[q]] == [i for i, _ in alone[q]]
        np.testing.assert_allclose([s for _, s in results[q]], [s for _, s in alone[q]], atol=1e-5)


def test_bad_input_is_refused_with_the_field(engine):
    with pytest.raises(InvalidRequest) as info:
        engine.score_sync("ce/minilm", {"text": 7}, DOCS)
    assert info.value.field == "query.text"
    with pytest.raises(InvalidRequest) as info:
        engine.score_sync("ce/minilm", QUERY, [])
    assert info.value.field == "items"
    with pytest.raises(InvalidRequest, match="ranks against text queries") as info:
        engine.score_sync("ce/minilm", {"image": b"\x89PNG"}, DOCS)
    assert info.value.field == "query.image"
    with pytest.raises(InvalidRequest) as info:
        engine.score_sync("ce/minilm", QUERY, DOCS, top_k=0)
    assert info.value.field == "top_k"
    with pytest.raises(InvalidRequest) as info:
        engine.score_sync("ce/minilm", QUERY, DOCS, truncate=False)  # DOCS[-1] is longer than the window
    assert "longer than the model's window" in info.value.message
    with pytest.raises(InvalidRequest):
        engine.score_sync("ce/minilm", QUERY, DOCS, colour="blue")
    with pytest.raises(InvalidRequest) as info:
        engine.score_sync("ce/minilm", QUERY, DOCS, instruction="rank by relevance")
    assert info.value.field == "instruction"
    with pytest.raises(UnsupportedTask):
        engine.encode_sync("ce/minilm", ["a text"])


def test_a_distilbert_cross_encoder_scores_as_transformers(tmp_path):
    """DistilBertForSequenceClassification's `pre_classifier` + ReLU head (its own layout, not BERT's
    pooler): one-label scores equal the sigmoid of transformers' logits on the same pairs."""
    from transformers import AutoTokenizer, DistilBertConfig, DistilBertForSequenceClassification

    torch.manual_seed(7)
    config = DistilBertConfig(vocab_size=30522, dim=32, n_layers=1, n_heads=4, hidden_dim=48, num_labels=1,
                              initializer_range=0.3)
    reference = DistilBertForSequenceClassification(config).eval()
    root = _no_segment_ids(save_tiny(reference, tmp_path / "distil"))
    card = ModelCard(id="ce/distil", weights=WeightsSource(path=str(root)), outputs=("score",), max_seq_len=120,
                     max_batch_tokens=2048)
    tokens = AutoTokenizer.from_pretrained(str(root))([QUERY] * len(DOCS), DOCS, padding=True, truncation=True,
                                                      max_length=120, return_tensors="pt")  # the card's window
    with torch.no_grad():
        expected = torch.sigmoid(reference(**tokens).logits[:, 0]).tolist()
    with Engine(Catalog([card]), device="cpu") as engine:
        scores = {s.index: s.score for s in engine.score_sync(card.id, QUERY, DOCS).scores}
    np.testing.assert_allclose([scores[i] for i in range(len(DOCS))], expected, atol=1e-5)
