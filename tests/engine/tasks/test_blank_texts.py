"""Empty and whitespace-only texts (#29.2) are texts like any other, answered as the reference
libraries answer them on the same weights: sentence-transformers embeds `''`, `'   '` and `'\\n'`
as the tokenizer's special tokens only ([CLS] [SEP]); its SparseEncoder and CrossEncoder do the
same for sparse vectors and scores; GLiNER finds no entity in a blank text; the NLI pipeline and
gliclass classify it (their scores, as for any text). One blank item never fails its request."""

from __future__ import annotations

import numpy as np
import pytest
from test_gliner_extract import build_reference
from test_zeroshot_nli import _bert_nli, _expected

from gliclass_models import gliclass_pipeline, make_gliclass, reference_scores
from integration_recall import splade_dir, tiny_colbert_cards, tiny_cross_encoder
from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from tiny_models import MINILM_DIR, make_tiny_bert

BLANKS = ["", "   ", "\n"]
TEXTS = [*BLANKS, "Paris is the capital of France."]
LABELS = ["person", "location"]


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("blank")
    gliner = base / "gliner"
    build_reference(gliner, make_tiny_bert(base / "backbone", seed=5), seed=11, hidden_size=32, max_width=6)
    return {"cross": tiny_cross_encoder(base / "cross"), "gliner": gliner, "nli": _bert_nli(base / "nli"),
            "gliclass": make_gliclass(base / "gliclass"), "colbert": tiny_colbert_cards(base / "colbert")}


@pytest.fixture(scope="module")
def engine(roots):
    def card(name, path, outputs, **fields):
        return ModelCard(id=name, weights=WeightsSource(path=str(path)), outputs=outputs, max_seq_len=128,
                         max_batch_tokens=4096, **fields)

    catalog = Catalog([
        card("minilm", MINILM_DIR, ("dense",), pooling="mean", normalize=True),
        card("splade", splade_dir(), ("sparse",)),
        card("cross", roots["cross"], ("score",)),
        card("gliner", roots["gliner"], ("extract",)),
        card("nli", roots["nli"], ("zeroshot",)),
        card("gliclass", roots["gliclass"], ("gliclass",)),
    ])
    catalog.add_directory(roots["colbert"])
    with Engine(catalog, device="cpu") as engine:
        yield engine


def test_dense_embeds_a_blank_text_as_sentence_transformers_does(engine):
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(MINILM_DIR), device="cpu")
    assert [reference.tokenizer(t)["input_ids"] for t in BLANKS] == [[101, 102]] * 3  # [CLS] [SEP] only
    result = engine.encode_sync("minilm", TEXTS)
    expected = reference.encode(TEXTS, normalize_embeddings=True)
    np.testing.assert_allclose(np.stack([item.dense for item in result.items]), expected, atol=1e-5)
    alone = engine.encode_sync("minilm", [""])
    assert alone.tokens == 2  # the special tokens, nothing else


def test_sparse_embeds_a_blank_text_as_the_sparse_encoder_does(engine):
    from sentence_transformers import SparseEncoder

    reference = SparseEncoder(splade_dir(), device="cpu")
    weights = reference.encode(TEXTS, convert_to_tensor=True, convert_to_sparse_tensor=False).to_dense().numpy()
    weights[:, sorted(reference.tokenizer.all_special_ids)] = 0.0  # SIE leaves the special tokens out
    result = engine.encode_sync("splade", TEXTS)
    for item, row in zip(result.items, weights):
        np.testing.assert_array_equal(item.sparse.indices, np.nonzero(row > 0)[0])
        np.testing.assert_allclose(item.sparse.values, row[row > 0], atol=1e-4)


def test_multivector_of_a_blank_text_is_its_special_tokens(engine):
    """ColBERT: a blank document is [CLS] [D] [SEP] (three vectors); a blank query is expanded with
    [MASK] to the query length, as any query is."""
    documents = engine.encode_sync("test/tiny-colbert", TEXTS, output_types=["multivector"])
    assert [item.multivector.shape for item in documents.items[:3]] == [(3, 16)] * 3
    queries = engine.encode_sync("test/tiny-colbert", BLANKS, output_types=["multivector"], is_query=True)
    assert [item.multivector.shape for item in queries.items] == [(16, 16)] * 3
    assert np.isfinite(np.concatenate([item.multivector for item in documents.items])).all()


def test_score_scores_blank_queries_and_documents_as_the_cross_encoder_does(engine, roots):
    from sentence_transformers import CrossEncoder

    reference = CrossEncoder(str(roots["cross"]), device="cpu")
    for query in ["", "capital of france"]:
        result = engine.score_sync("cross", query, TEXTS)
        got = {s.index: s.score for s in result.scores}
        expected = reference.predict([(query, text) for text in TEXTS])
        np.testing.assert_allclose([got[i] for i in range(len(TEXTS))], expected, atol=1e-5)


def test_gliner_finds_no_entity_in_a_blank_text(engine, roots):
    from gliner import GLiNER

    reference = GLiNER.from_pretrained(str(roots["gliner"]), local_files_only=True)
    assert [reference.predict_entities(t, LABELS, threshold=0.0) for t in BLANKS] == [[], [], []]
    mixed = engine.extract_sync("gliner", TEXTS, LABELS, threshold=0.0)
    assert [item.entities for item in mixed.items[:3]] == [[], [], []]
    assert mixed.items[3].entities  # threshold 0: the real text still gets its spans
    only_blank = engine.extract_sync("gliner", BLANKS, LABELS, threshold=0.0)  # nothing to queue
    assert [item.entities for item in only_blank.items] == [[], [], []] and only_blank.tokens == 0


def test_nli_classifies_a_blank_text_as_the_pipeline_does(engine, roots):
    """transformers' zero-shot pipeline classifies '   ' and '\n'; a lone '' it refuses with "at least
    one sequence" (its argument check takes `len('') == 0` for no input), though '' tokenises exactly as
    '   ' does: SIE classifies '' as the pipeline classifies '   '."""
    classes = ["software", "sports"]
    result = engine.extract_sync("nli", TEXTS, classes)
    with pytest.raises(ValueError, match="at least one sequence"):
        _expected(roots["nli"], [""], classes)
    expected = _expected(roots["nli"], ["   ", *TEXTS[1:]], classes)
    for item, want in zip(result.items, expected):
        np.testing.assert_allclose([c.score for c in item.classifications],
                                   [want[c.label] for c in item.classifications], atol=1e-5)


def test_gliclass_classifies_a_blank_text_as_gliclass_does(engine, roots):
    classes = ["software", "sports"]
    result = engine.extract_sync("gliclass", TEXTS, classes)
    expected = reference_scores(gliclass_pipeline(roots["gliclass"]), TEXTS, classes, True)
    for item, want in zip(result.items, expected):
        np.testing.assert_allclose([c.score for c in item.classifications],
                                   [want[c.label] for c in item.classifications], atol=1e-4)
