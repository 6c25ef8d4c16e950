"""LanceDB (embedded) with SIE's registry functions and SIEReranker, with SIE over a
loopback server and in embedded mode. Recall@10 of LanceDB's vector search must
equal brute force over the vectors LanceDB stored; reranked vector, FTS and hybrid
results must come back in the order of SIE's own scores."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import numpy as np
import pytest

lancedb = pytest.importorskip("lancedb")
from lancedb.embeddings import get_registry  # noqa: E402
from lancedb.index import FTS  # noqa: E402
from lancedb.pydantic import LanceModel, MultiVector, Vector  # noqa: E402

from integration_recall import (  # noqa: E402
    COLBERT,
    MODEL,
    RERANKER,
    SMALL_SAMPLE_DOCS,
    assert_recall_matches,
    brute_force,
    brute_force_maxsim,
    recall,
    sample,
)
from sie_client import SIEClient, SIEError  # noqa: E402
from sie_lancedb import SIEEmbeddings, SIEReranker  # noqa: E402

RERANK_QUERIES = 12


@pytest.fixture(scope="module", params=["embedded", "http"])
def mode(request, reranker_dir):
    """(url for the registry function, a client that also serves the tiny reranker)."""
    if request.param == "embedded":
        return "embedded", SIEClient("embedded", local_models={RERANKER: str(reranker_dir)})
    url = request.getfixturevalue("sie_url")
    return url, SIEClient(url)


@pytest.fixture(scope="module")
def table(mode, tmp_path_factory):
    """The sample in a LanceDB table whose schema carries the "sie" function; LanceDB
    embeds the text column itself on add (one SIE pass per mode)."""
    url, _ = mode
    func = get_registry().get("sie").create(model=MODEL, url=url)

    class Doc(LanceModel):
        doc_id: str
        text: str = func.SourceField()
        vector: Vector(func.ndims()) = func.VectorField()

    docs, _ = sample()
    db = lancedb.connect(tmp_path_factory.mktemp("lancedb"))
    table = db.create_table("debian", schema=Doc)
    table.add([{"doc_id": d["id"], "text": d["text"]} for d in docs])
    create_fts_index(table, "text")
    return db, table, func


def create_fts_index(table, column: str) -> None:
    # lancedb 0.40 takes an index config (create_fts_index is deprecated there); the floor,
    # 0.24.2, has create_fts_index only.
    if "config" in inspect.signature(table.create_index).parameters:
        table.create_index(column, config=FTS())
    else:
        table.create_fts_index(column)


def test_ndims_from_models_and_schema_roundtrip(table, mode):
    db, t, func = table
    assert func.ndims() == 384
    reopened = db.open_table("debian")
    config = reopened.embedding_functions["vector"]
    assert isinstance(config.function, SIEEmbeddings) and config.source_column == "text"
    assert config.function.model == MODEL and config.function.url == mode[0]


def test_vector_search_recall(table, mode):
    db, t, func = table
    docs, queries = sample()
    texts = [q["query"] for q in queries]
    # The function's query vectors for every query in one SIE call; LanceDB searches with them.
    query_vectors = np.array(func.compute_query_embeddings(texts), dtype=np.float32)
    found = [[r["doc_id"] for r in t.search(v).distance_type("cosine").limit(10).select(["doc_id"]).to_list()]
             for v in query_vectors]
    through_lancedb = recall(found, queries)
    # A search by text embeds the string through the same function (SIE's query mode):
    # same answers as searching with its vector.
    for text, found_ids in list(zip(texts, found))[:20]:
        by_text = t.search(text).distance_type("cosine").limit(10).select(["doc_id"]).to_list()
        assert [r["doc_id"] for r in by_text] == found_ids
    stored = t.to_arrow().select(["doc_id", "vector"]).to_pylist()
    by_id = {row["doc_id"]: row["vector"] for row in stored}
    doc_vectors = np.array([by_id[d["id"]] for d in docs], dtype=np.float32)
    exact = recall(brute_force([d["id"] for d in docs], doc_vectors, query_vectors), queries)
    assert_recall_matches(through_lancedb, exact, f"lancedb vector ({mode[0]})")


def multivector_function(mode, colbert_cards):
    url, _ = mode
    return get_registry().get("sie-multivector").create(
        model=COLBERT, url=url, model_dirs=[str(colbert_cards)] if url == "embedded" else None)


# over HTTP only: the function's code is the same in both modes, and embedded mode equals HTTP item
# for item (test_client.py); the README recipe and blank texts below run in both
@pytest.mark.parametrize("mode", ["http"], indirect=True)
def test_multivector_function_maxsim_recall(mode, colbert_cards, tmp_path):
    """"sie-multivector" in a MultiVector column: `table.add` of text rows embeds and stores every
    row's token vectors (lancedb 0.40 stored NULL, silently), and LanceDB's multivector search ranks
    as brute-force MaxSim over them (tiny random ColBERT: compared, not judged)."""
    func = multivector_function(mode, colbert_cards)
    assert func.ndims() == 16

    class TokenDoc(LanceModel):
        doc_id: str
        text: str = func.SourceField()
        vector: MultiVector(func.ndims()) = func.VectorField()

    docs, queries = sample(SMALL_SAMPLE_DOCS)
    table = lancedb.connect(tmp_path).create_table("tokens", schema=TokenDoc)
    table.add([{"doc_id": d["id"], "text": d["text"]} for d in docs])  # LanceDB calls the function
    stored = {row["doc_id"]: row["vector"] for row in table.to_arrow().to_pylist()}
    assert all(stored[d["id"]] is not None for d in docs)
    expected = func.generate_embeddings([d["text"] for d in docs])
    for d, rows in zip(docs, expected):
        got = np.asarray(stored[d["id"]], dtype=np.float32)
        assert got.shape == (len(rows), 16) and got.shape[0] > 1  # every token of the document
        np.testing.assert_allclose(got, np.asarray(rows), atol=1e-6)
    texts = [q["query"] for q in queries]
    query_vectors = func.compute_query_embeddings(texts)
    found = [[r["doc_id"] for r in table.search(v, vector_column_name="vector").distance_type("cosine")
              .limit(10).select(["doc_id"]).to_list()] for v in query_vectors]
    for text, ids in list(zip(texts, found))[:5]:  # a text query goes through the function's query mode
        assert [r["doc_id"] for r in table.search(text).distance_type("cosine").limit(10).to_list()] == ids
    exact = brute_force_maxsim([d["id"] for d in docs], [stored[d["id"]] for d in docs], query_vectors)
    assert abs(recall(found, queries) - recall(exact, queries)) <= 0.5


def test_multivector_readme_recipe(mode, colbert_cards, tmp_path):
    """The README's recipe as written: vectors from `generate_embeddings` passed in the rows
    (it raised ArrowInvalid: pyarrow converts no 2-D array into a list column)."""
    func = multivector_function(mode, colbert_cards)

    class TokenDoc(LanceModel):
        text: str = func.SourceField()
        vector: MultiVector(func.ndims()) = func.VectorField()

    texts = ["Mounting disks with udisks", "A library for PNG images"]
    table = lancedb.connect(tmp_path).create_table("recipe", schema=TokenDoc)
    table.add([{"text": t, "vector": v} for t, v in zip(texts, func.generate_embeddings(texts))])
    rows = table.to_arrow().to_pylist()
    assert [r["text"] for r in rows] == texts
    for row, vectors in zip(rows, func.generate_embeddings(texts)):
        np.testing.assert_allclose(np.asarray(row["vector"]), np.asarray(vectors), atol=1e-6)
    assert table.search("mount a disk").limit(1).to_list()[0]["text"] in texts


def test_multivector_blank_text_gets_no_vector(mode, colbert_cards, tmp_path):
    """A blank text's row gets NULL (the on_bad_vectors policy decides), the others their tokens."""
    func = multivector_function(mode, colbert_cards)

    class TokenDoc(LanceModel):
        text: str = func.SourceField()
        vector: MultiVector(func.ndims()) = func.VectorField()

    table = lancedb.connect(tmp_path).create_table("blank", schema=TokenDoc)
    table.add([{"text": "apt installs Debian packages"}, {"text": "  "}], on_bad_vectors="null")
    rows = table.to_arrow().to_pylist()
    assert rows[1]["vector"] is None
    assert np.asarray(rows[0]["vector"]).shape[1] == 16


def sie_order(client, query: str, rows: list[dict]) -> list[str]:
    scored = client.score(RERANKER, query, [r["text"] for r in rows])
    return [rows[s.index]["doc_id"] for s in scored.scores]


def test_rerank_vector_fts_hybrid(table, mode):
    db, t, func = table
    url, client = mode
    reranker = SIEReranker(model=RERANKER, column="text", client=client)
    _, queries = sample()
    for q in queries[:RERANK_QUERIES]:
        text = q["query"]
        vector_rows = t.search(text).limit(10).select(["doc_id", "text"]).to_list()
        reranked = t.search(text).limit(10).select(["doc_id", "text"]).rerank(reranker).to_list()
        assert [r["doc_id"] for r in reranked] == sie_order(client, text, vector_rows)
        assert all("_relevance_score" in r for r in reranked)

        fts_rows = t.search(text, query_type="fts").limit(10).select(["doc_id", "text"]).to_list()
        fts_reranked = t.search(text, query_type="fts").limit(10).select(["doc_id", "text"]).rerank(reranker).to_list()
        assert [r["doc_id"] for r in fts_reranked] == sie_order(client, text, fts_rows)

        hybrid = t.search(text, query_type="hybrid").limit(10).select(["doc_id", "text"]).rerank(reranker).to_list()
        # Hybrid reranks the union of the vector and FTS candidates, then keeps the best 10.
        union = {r["doc_id"]: r for r in vector_rows + fts_rows}
        assert [r["doc_id"] for r in hybrid] == sie_order(client, text, list(union.values()))[:10]


def test_reranker_names_a_missing_column(table, mode):
    db, t, func = table
    reranker = SIEReranker(model=RERANKER, column="body", client=mode[1])
    with pytest.raises(ValueError, match="body"):
        t.search("editor").limit(5).rerank(reranker).to_list()


def test_api_key_is_a_sensitive_key():
    with pytest.raises(ValueError, match="Sensitive key"):
        get_registry().get("sie").create(model=MODEL, url="http://127.0.0.1:9", api_key="plain-text-key")
    registry = get_registry()
    registry.set_var("sie_key", "k-123")
    func = registry.get("sie").create(model=MODEL, url="http://127.0.0.1:9", api_key="$var:sie_key")
    assert func.client.api_key == "k-123"
    assert func.safe_model_dump()["api_key"] == "$var:sie_key"  # the key itself never reaches the schema


@pytest.fixture
def lancedb_sleeps(monkeypatch):
    """The sleeps of LanceDB's own retry loop, recorded instead of slept (its module's
    `time` only: SIE's client and engine keep the real one)."""
    import lancedb.embeddings.utils as lance_utils

    sleeps: list[float] = []
    monkeypatch.setattr(lance_utils, "time", SimpleNamespace(sleep=sleeps.append))
    return sleeps


def test_sie_errors_raise_at_once(mode, lancedb_sleeps, tmp_path):
    """An SIE error (an unknown model here) comes out of `search` as the SIEError itself and
    out of `table.add` with SIE's message (LanceDB's Rust writer wraps what its row reader
    raises in a RuntimeError; embedding first gives the SIEError), with no LanceDB retry: its
    loop would sleep 2 s, 4 s, ... 7 times around SIE's own retries (minutes). With its loop
    turned on, the SIEError still comes out (LanceDB's loop raised Exception("Maximum number of
    retries ...") instead)."""
    url, _ = mode
    func = get_registry().get("sie").create(model="test/no-such-model", url=url, dims=384)  # dims: no /v1/models probe

    class Doc(LanceModel):
        text: str = func.SourceField()
        vector: Vector(func.ndims()) = func.VectorField()

    table = lancedb.connect(tmp_path).create_table("unknown-model", schema=Doc)
    with pytest.raises(Exception, match="404 model_not_found: model 'test/no-such-model'"):
        table.add([{"text": "apt installs Debian packages"}])
    # the README's way to the SIEError itself: embed first, then add rows whose vectors are there
    # (LanceDB embeds only a missing or all-null vector column, so that add calls no function)
    with pytest.raises(SIEError) as raised:
        func.compute_source_embeddings(["apt installs Debian packages"])
    assert raised.value.status == 404
    table.add([{"text": "apt installs Debian packages", "vector": [0.5] * func.ndims()}])
    assert table.count_rows() == 1
    with pytest.raises(SIEError) as raised:
        table.search("install a package").limit(1).to_list()
    assert raised.value.status == 404
    assert lancedb_sleeps == []
    # Retrying stays available on request, around SIE's own retries.
    retrying = get_registry().get("sie").create(model="test/no-such-model", url=url, dims=384, max_retries=2)
    with pytest.raises(SIEError) as raised:
        retrying.compute_source_embeddings_with_retry(["x"])
    assert raised.value.status == 404 and "Maximum number of retries" in str(raised.value.__cause__)
    assert len(lancedb_sleeps) == 2
    with pytest.raises(SIEError):
        retrying.compute_query_embeddings_with_retry("x")
    assert len(lancedb_sleeps) == 4


def test_empty_and_none_texts_get_no_vector(mode, lancedb_sleeps, tmp_path):
    """Empty, blank and None texts get None (as LanceDB's built-in functions give), so the
    table's on_bad_vectors policy applies (lancedb 0.40's default refuses such rows, naming
    the choices; older releases store them); the other rows are embedded in the same call."""
    url, client = mode
    func = get_registry().get("sie").create(model=MODEL, url=url)

    class Doc(LanceModel):
        text: str | None = func.SourceField()
        vector: Vector(func.ndims()) = func.VectorField()

    texts = ["apt installs Debian packages", "", None, "   ", "a PNG image library"]
    assert [v is None for v in func.generate_embeddings(texts)] == [False, True, True, True, False]
    table = lancedb.connect(tmp_path).create_table("blanks", schema=Doc)
    table.add([{"text": t} for t in texts], on_bad_vectors="null")
    rows = table.to_arrow().to_pylist()
    assert [r["text"] for r in rows] == texts
    assert [r["vector"] is None for r in rows] == [False, True, True, True, False]
    expected = client.encode(MODEL, [texts[0], texts[4]]).dense_matrix()
    np.testing.assert_allclose([rows[0]["vector"], rows[4]["vector"]], expected, atol=2e-5)
    assert lancedb_sleeps == []


def test_progress_bar_on_bulk_add(mode, tmp_path, capfd):
    """progress=True shows the client's bar while LanceDB embeds the rows of an add."""
    url, _ = mode
    func = get_registry().get("sie").create(model=MODEL, url=url, progress=True, batch_size=8)

    class Doc(LanceModel):
        text: str = func.SourceField()
        vector: Vector(func.ndims()) = func.VectorField()

    docs, _ = sample()
    table = lancedb.connect(tmp_path).create_table("progress", schema=Doc)
    capfd.readouterr()
    table.add([{"text": d["text"]} for d in docs[:40]])
    err = capfd.readouterr().err
    assert "encode:" in err and "/40 [" in err  # the client's bar, over the 40 rows
    assert table.count_rows() == 40
