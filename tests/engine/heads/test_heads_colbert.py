"""ColBERT multi-vector encoding and MaxSim scoring on a tiny random BERT in the
colbert-ir layout (`bert.*` + `linear.weight`), against a straightforward reference
written with transformers' BertModel on padded inputs."""

from __future__ import annotations

import string

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.errors import InvalidRequest
from tiny_models import save_tiny, tiny_bert_config

DIM = 16
QUERY_LENGTH = 12
OPTIONS = {"multivector": {"kind": "colbert", "query_marker": "[unused0]", "document_marker": "[unused1]",
                           "query_length": QUERY_LENGTH, "expand_queries": True, "skiplist": "punctuation"}}
QUERY = "python package installer"
DOCS = [
    "pip: the Python package installer, installs packages from PyPI.",
    "A library for PNG images (read, write, convert).",
    "Tools for Debian packages; dpkg, apt, and more!",
]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    from transformers import BertModel

    torch.manual_seed(0)
    dest = save_tiny(BertModel(tiny_bert_config(), add_pooling_layer=False).eval(), tmp_path_factory.mktemp("colbert"))
    weights = load_file(str(dest / "model.safetensors"))
    weights = {f"bert.{k}": v for k, v in weights.items()}
    weights["linear.weight"] = torch.randn(DIM, 32) * 0.2  # colbert-ir's projection, no bias
    save_file(weights, str(dest / "model.safetensors"))
    return dest


@pytest.fixture(scope="module")
def pylate_root(root, tmp_path_factory):
    """The same model in PyLate's layout: backbone alone at the root, projection in 1_Dense/."""
    dest = tmp_path_factory.mktemp("pylate")
    for f in root.iterdir():
        if f.is_file():
            (dest / f.name).write_bytes(f.read_bytes())
    weights = load_file(str(dest / "model.safetensors"))
    linear = weights.pop("linear.weight")
    save_file({k[len("bert."):]: v for k, v in weights.items()}, str(dest / "model.safetensors"))
    (dest / "1_Dense").mkdir()
    save_file({"linear.weight": linear}, str(dest / "1_Dense" / "model.safetensors"))
    return dest


@pytest.fixture(scope="module")
def engine(root, pylate_root):
    cards = [ModelCard(id=model_id, weights=WeightsSource(path=str(path)), outputs=("multivector",), max_seq_len=64,
                       max_batch_tokens=1024, options=OPTIONS)
             for model_id, path in (("colbert/tiny", root), ("colbert/pylate", pylate_root))]
    attending = {"multivector": {**OPTIONS["multivector"], "attend_to_expansion_tokens": True}}
    cards.append(ModelCard(id="colbert/attend-expansion", weights=WeightsSource(path=str(root)),
                           outputs=("multivector",), max_seq_len=64, max_batch_tokens=1024, options=attending))
    with Engine(Catalog(cards), device="cpu") as engine:
        yield engine


@pytest.fixture(scope="module")
def reference(root):
    """(encode(text, is_query) -> [n, DIM] vectors, maxsim(q, d))."""
    from transformers import AutoTokenizer, BertModel

    tokenizer = AutoTokenizer.from_pretrained(str(root))
    model = BertModel.from_pretrained(str(root), add_pooling_layer=False).eval()
    linear = load_file(str(root / "model.safetensors"))["linear.weight"]
    skip = {tokenizer.encode(c, add_special_tokens=False)[0] for c in string.punctuation}

    def encode(text: str, is_query: bool, attend_to_expansion: bool = False) -> np.ndarray:
        """colbert-ir's encoding: the [MASK] expansion is hidden from attention as keys
        (attention_mask 0, `attend_to_mask_tokens=False`) unless `attend_to_expansion`."""
        ids = tokenizer.encode(text)  # [CLS] ... [SEP]
        marker = tokenizer.convert_tokens_to_ids("[unused0]" if is_query else "[unused1]")
        ids = [ids[0], marker] + ids[1:]
        real = len(ids)
        if is_query:
            ids = ids[: QUERY_LENGTH - 1] + [ids[-1]] if len(ids) > QUERY_LENGTH else ids
            real = len(ids)
            ids = ids + [tokenizer.mask_token_id] * (QUERY_LENGTH - len(ids))
        mask = [1] * len(ids) if attend_to_expansion else [1] * real + [0] * (len(ids) - real)
        with torch.no_grad():
            hidden = model(input_ids=torch.tensor([ids]), attention_mask=torch.tensor([mask]),
                           token_type_ids=torch.zeros(1, len(ids), dtype=torch.long)).last_hidden_state[0]
        vectors = F.normalize(hidden @ linear.T, dim=-1).numpy()
        keep = [True] * len(ids) if is_query else [i not in skip for i in ids]
        return vectors[np.asarray(keep)]

    def maxsim(q: np.ndarray, d: np.ndarray) -> float:
        return float((q @ d.T).max(axis=1).sum())

    return encode, maxsim


def test_multivector_matches_reference(engine, reference):
    encode, _ = reference
    docs = engine.encode_sync("colbert/tiny", DOCS, output_types=["multivector"]).items
    query = engine.encode_sync("colbert/tiny", [QUERY], is_query=True).items[0]
    assert query.multivector.shape == (QUERY_LENGTH, DIM)  # expanded to the query length
    np.testing.assert_allclose(query.multivector, encode(QUERY, True), atol=1e-5)
    for text, item in zip(DOCS, docs):
        expected = encode(text, False)
        assert item.multivector.shape == expected.shape  # punctuation dropped
        np.testing.assert_allclose(item.multivector, expected, atol=1e-5)
    info = engine.model_info("colbert/tiny")
    assert info.dims["multivector"] == DIM and set(info.tasks) == {"encode", "score"}


def test_expansion_tokens_are_hidden_as_keys_unless_the_card_says(engine, reference):
    encode, _ = reference
    hidden = engine.encode_sync("colbert/tiny", [QUERY], is_query=True).items[0].multivector
    attending = engine.encode_sync("colbert/attend-expansion", [QUERY], is_query=True).items[0].multivector
    np.testing.assert_allclose(hidden, encode(QUERY, True), atol=1e-5)
    np.testing.assert_allclose(attending, encode(QUERY, True, attend_to_expansion=True), atol=1e-5)
    assert np.abs(hidden - attending).max() > 1e-3  # the two modes really differ


def test_score_by_maxsim(engine, reference):
    encode, maxsim = reference
    q = encode(QUERY, True)
    expected = [maxsim(q, encode(d, False)) for d in DOCS]
    result = engine.score_sync("colbert/tiny", QUERY, DOCS)
    got = {s.index: s.score for s in result.scores}
    np.testing.assert_allclose([got[i] for i in range(len(DOCS))], expected, atol=1e-4)
    assert [s.index for s in result.scores] == list(np.argsort(-np.asarray(expected), kind="stable"))


def test_concurrent_scores_with_different_queries_share_batches(engine, reference):
    """Documents of several queries in one batch are each scored against their own query."""
    import threading

    encode, maxsim = reference
    queries = ["png images", "debian tools", "python installer", "convert pictures"]
    results = {}

    def call(q):
        results[q] = {s.index: s.score for s in engine.score_sync("colbert/tiny", q, DOCS).scores}

    threads = [threading.Thread(target=call, args=(q,)) for q in queries]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for q in queries:
        expected = [maxsim(encode(q, True), encode(d, False)) for d in DOCS]
        np.testing.assert_allclose([results[q][i] for i in range(len(DOCS))], expected, atol=1e-4)


def test_long_query_is_cut_to_the_query_length(engine, reference):
    encode, _ = reference
    long_query = "python package installer for debian systems with many words " * 3
    item = engine.encode_sync("colbert/tiny", [long_query], is_query=True).items[0]
    np.testing.assert_allclose(item.multivector, encode(long_query, True), atol=1e-5)
    with pytest.raises(InvalidRequest):
        engine.encode_sync("colbert/tiny", [long_query], is_query=True, truncate=False)


def test_multivector_output_dtypes(engine):
    full = engine.encode_sync("colbert/tiny", DOCS[:1]).items[0].multivector
    half = engine.encode_sync("colbert/tiny", DOCS[:1], output_dtype="float16").items[0].multivector
    assert half.dtype == np.float16 and np.abs(half.astype(np.float32) - full).max() < 1e-3
    q8 = engine.encode_sync("colbert/tiny", DOCS[:1], output_dtype="int8").items[0].multivector
    assert q8.data.dtype == np.int8 and np.abs(q8.data * q8.scale - full).max() <= q8.scale / 2 + 1e-6
    bits = engine.encode_sync("colbert/tiny", DOCS[:1], output_dtype="binary").items[0].multivector
    np.testing.assert_array_equal(bits, np.packbits(full > 0, axis=-1))
    u8 = engine.encode_sync("colbert/tiny", DOCS[:1], output_dtype="uint8").items[0].multivector
    from sentence_transformers.util import quantize_embeddings

    for row, vector in zip(u8, full):  # one range per token vector
        ranges = np.stack([np.full(DIM, vector.min()), np.full(DIM, vector.max())])
        np.testing.assert_array_equal(row, quantize_embeddings(vector[None], precision="uint8", ranges=ranges)[0])


@pytest.mark.parametrize("params", [{}, {"k_sim": 3, "dim_proj": 8, "r_reps": 4, "random_seed": 7}])
def test_muvera_equals_fastembed_on_the_multivectors(engine, params):
    """The muvera output is FastEmbed's `Muvera` over the same request's multivector output:
    documents with process_document, queries (is_query) with process_query."""
    pytest.importorskip("fastembed")
    from fastembed.postprocess.muvera import Muvera

    reference = Muvera(DIM, **params)
    cases = ((False, DOCS, reference.process_document), (True, [QUERY], reference.process_query))
    for is_query, texts, encode in cases:
        items = engine.encode_sync("colbert/tiny", texts, output_types=["multivector", "muvera"], is_query=is_query,
                                   muvera=params or None).items
        for item in items:
            assert item.muvera.dtype == np.float32 and item.muvera.shape == (reference.embedding_size,)
            np.testing.assert_allclose(item.muvera, encode(item.multivector), rtol=1e-6, atol=1e-6)
    alone = engine.encode_sync("colbert/tiny", DOCS, output_types=["muvera"], muvera=params or None).items
    assert all(item.multivector is None for item in alone)
    np.testing.assert_array_equal(alone[0].muvera, engine.encode_sync(
        "colbert/tiny", DOCS, output_types=["muvera"], muvera=params or None).items[0].muvera)


def test_muvera_takes_the_output_dtype_and_refuses_bad_parameters(engine):
    floats = engine.encode_sync("colbert/tiny", DOCS[:1], output_types=["muvera"]).items[0].muvera
    half = engine.encode_sync("colbert/tiny", DOCS[:1], output_types=["muvera"], output_dtype="float16").items[0]
    np.testing.assert_array_equal(half.muvera, floats.astype(np.float16))
    for fields, field, message in [
        ({"muvera": {"dim_proj": 32}, "output_types": ["muvera"]}, "muvera.dim_proj", "wider than"),
        ({"muvera": {}}, "muvera", "output_types"),
        ({"muvera": {"k_sim": 11}, "output_types": ["muvera"]}, "muvera.k_sim", "between 1 and 10"),
        ({"muvera": {"r_reps": 64, "k_sim": 10, "dim_proj": 1}, "output_types": ["muvera"]}, "muvera", "partitions"),
        ({"muvera": {"r_reps": 64, "k_sim": 7, "dim_proj": 16}, "output_types": ["muvera"]}, "muvera", "dimensions"),
        ({"muvera": {"seed": 1}, "output_types": ["muvera"]}, "muvera", r"unknown fields \[.seed.\]"),
    ]:
        with pytest.raises(InvalidRequest, match=message) as refused:
            engine.encode_sync("colbert/tiny", DOCS[:1], **fields)
        assert refused.value.field == field


def test_score_refuses_a_long_query_without_truncation(engine):
    long_query = "python package installer for debian systems with many words " * 3
    with pytest.raises(InvalidRequest) as info:
        engine.score_sync("colbert/tiny", long_query, DOCS, truncate=False)
    assert info.value.field == "query.text"
    assert engine.score_sync("colbert/tiny", long_query, DOCS).scores  # cut to the query length by default


def test_pylate_layout_loads_the_projection_from_1_dense(engine):
    colbert_ir = engine.encode_sync("colbert/tiny", DOCS).items
    pylate = engine.encode_sync("colbert/pylate", DOCS).items
    for a, b in zip(colbert_ir, pylate):
        np.testing.assert_allclose(a.multivector, b.multivector, atol=1e-6)
