"""Inference-free sparse encoders (opensearch-neural-sparse-encoding-doc-*): documents through the
masked-LM head as SPLADE, queries by the IDF of their distinct tokens from the checkpoint's
idf.json. The reference is the recipe the models' READMEs publish, run with transformers on the
same tiny random weights (BERT and DistilBERT masked-LM checkpoints); special tokens' entries
are dropped on both sides, as SIE's sparse heads do. The v3 models' README (doc-v3-distill,
doc-v3-gte) saturates document weights once more: log(1 + log(1 + relu)). Tolerance 1e-4."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from arch_fixtures import MINILM_VOCAB, save_tiny
from sie_engine import Catalog, Engine, ModelCard, WeightsSource

DOCS = ["Debian packages Python libraries with dh-python.", "A small PNG library", "x"]
QUERIES = ["python packaging python", "png", "how do I build a debian package from source"]


def _checkpoint(kind: str, dest):
    from transformers import BertForMaskedLM, DistilBertConfig, DistilBertForMaskedLM

    from tiny_models import tiny_bert_config

    torch.manual_seed(0)
    if kind == "bert":
        model = BertForMaskedLM(tiny_bert_config(initializer_range=0.1))
    else:
        model = DistilBertForMaskedLM(DistilBertConfig(vocab_size=MINILM_VOCAB, dim=32, n_layers=2, n_heads=4,
                                                       hidden_dim=64, initializer_range=0.1))
    root = save_tiny(model.eval(), dest)
    vocab = json.loads((root / "tokenizer.json").read_text())["model"]["vocab"]  # token -> id
    generator = np.random.default_rng(0)
    idf = {token: float(generator.uniform(0.5, 8.0)) for token in list(vocab)[999:]}  # [unused*] and specials: none
    (root / "idf.json").write_text(json.dumps(idf))
    return root, model


# (checkpoint, the card's options.sparse.activation): the v2 recipe, and the v3 one on DistilBERT as
# doc-v3-distill publishes it
RECIPES = {"bert": ("bert", None), "distilbert": ("distilbert", None),
           "distilbert-v3": ("distilbert", "log1p_log1p_relu")}


@pytest.fixture(scope="module", params=list(RECIPES))
def checkpoint(request, tmp_path_factory):
    kind, activation = RECIPES[request.param]
    root, model = _checkpoint(kind, tmp_path_factory.mktemp(f"doc-{request.param}"))
    return root, model, activation


def _reference(root, model, activation, texts, is_query: bool) -> np.ndarray:
    """The opensearch README's get_sparse_vector (documents) and idf lookup (queries)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(root))
    features = tokenizer(texts, padding=True, truncation=True, return_tensors="pt", return_token_type_ids=False)
    vocab = model.config.vocab_size
    if is_query:
        idf = torch.zeros(vocab)
        for token, weight in json.loads((root / "idf.json").read_text()).items():
            idf[tokenizer.convert_tokens_to_ids(token)] = weight
        present = torch.zeros(len(texts), vocab)
        present[torch.arange(len(texts)).unsqueeze(-1), features["input_ids"]] = 1
        values = present * idf
    else:
        with torch.no_grad():
            logits = model(**features).logits
        values, _ = torch.max(logits * features["attention_mask"].unsqueeze(-1), dim=1)
        values = torch.log(1 + torch.relu(values))
        if activation == "log1p_log1p_relu":  # the v3 README's torch.log(1 + torch.log(1 + torch.relu(values)))
            values = torch.log(1 + values)
    values[:, tokenizer.all_special_ids] = 0
    return values.numpy()


@pytest.fixture(scope="module")
def engine(checkpoint):
    root, _, activation = checkpoint
    sparse = {"kind": "inference-free", **({"activation": activation} if activation else {})}
    card = ModelCard(id="tiny/doc", weights=WeightsSource(path=str(root)), outputs=("sparse",),
                     max_seq_len=512, max_batch_tokens=4096, options={"sparse": sparse})
    with Engine(Catalog([card]), device="cpu") as engine:
        yield engine


@pytest.mark.parametrize("is_query", [False, True], ids=["documents", "queries"])
def test_matches_the_published_recipe(engine, checkpoint, is_query):
    texts = QUERIES if is_query else DOCS
    expected = _reference(*checkpoint, texts, is_query)
    items = engine.encode_sync("tiny/doc", texts, is_query=is_query).items
    for item, row in zip(items, expected):
        keep = np.nonzero(row > 0)[0]
        assert len(keep) > 0
        np.testing.assert_array_equal(item.sparse.indices, keep)
        np.testing.assert_allclose(item.sparse.values, row[keep], atol=1e-4)


def test_queries_and_documents_batched_together(engine, checkpoint):
    """Concurrent query and document requests share batches; each row keeps its own recipe."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        queries = pool.submit(engine.encode_sync, "tiny/doc", QUERIES * 4, is_query=True)
        documents = pool.submit(engine.encode_sync, "tiny/doc", DOCS * 4)
        got = {True: queries.result().items, False: documents.result().items}
    for is_query, texts in ((True, QUERIES), (False, DOCS)):
        expected = _reference(*checkpoint, texts, is_query)
        for i, item in enumerate(got[is_query]):
            row = expected[i % len(texts)]
            np.testing.assert_allclose(item.sparse.values, row[row > 0], atol=1e-4)


def test_a_checkpoint_without_idf_json_is_refused_at_load(tmp_path):
    root, _ = _checkpoint("bert", tmp_path / "no-idf")
    (root / "idf.json").unlink()
    card = ModelCard(id="tiny/no-idf", weights=WeightsSource(path=str(root)), outputs=("sparse",), max_seq_len=512,
                     max_batch_tokens=4096, options={"sparse": {"kind": "inference-free"}})
    with Engine(Catalog([card]), device="cpu") as engine:
        with pytest.raises(Exception, match="idf.json"):
            engine.encode_sync("tiny/no-idf", ["x"])


def test_an_unknown_activation_is_refused_at_load(tmp_path):
    root, _ = _checkpoint("bert", tmp_path / "bad-activation")
    card = ModelCard(id="tiny/bad", weights=WeightsSource(path=str(root)), outputs=("sparse",), max_seq_len=512,
                     max_batch_tokens=4096, options={"sparse": {"kind": "inference-free", "activation": "l2_relu"}})
    with Engine(Catalog([card]), device="cpu") as engine:
        with pytest.raises(Exception, match="log1p_log1p_relu"):
            engine.encode_sync("tiny/bad", ["x"])
