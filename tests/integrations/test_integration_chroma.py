"""Chroma with SIE's embedding functions: a persistent client and a `chroma run`
server, each with SIE over a loopback server and in embedded mode. Recall@10
through Chroma must equal brute force over the vectors Chroma stored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

chromadb = pytest.importorskip("chromadb")
from chromadb.config import Settings  # noqa: E402

from integration_recall import MODEL, assert_recall_matches, brute_force, chroma_server, recall, sample, sie_server  # noqa: E402
from sie_chroma import SIEEmbeddingFunction, SIESparseEmbeddingFunction  # noqa: E402


def settings() -> Settings:
    """Fresh settings per client: Chroma's client constructors write into the Settings they
    get (HttpClient sets its API implementation there), so one shared object would make a
    later PersistentClient talk to the test's Chroma server instead of its directory."""
    return Settings(anonymized_telemetry=False)


@pytest.fixture(scope="module")
def sie_url():
    with sie_server() as url:
        yield url


@pytest.fixture(scope="module", params=["embedded", "http"])
def mode_url(request):
    return "embedded" if request.param == "embedded" else request.getfixturevalue("sie_url")


@pytest.fixture(scope="module")
def encoded(mode_url):
    """The sample's document vectors (one SIE pass per mode) and query vectors, via the function itself."""
    docs, queries = sample()
    ef = SIEEmbeddingFunction(model=MODEL, url=mode_url)
    return ef, ef([d["text"] for d in docs]), ef.embed_query([q["query"] for q in queries])


@pytest.fixture(scope="module")
def chroma_http(tmp_path_factory):
    with chroma_server(tmp_path_factory.mktemp("chroma-server")) as (host, port):
        yield host, port


def check_collection_recall(collection, doc_vectors, query_vectors, label):
    docs, queries = sample()
    for start in range(0, len(docs), 500):
        part = docs[start:start + 500]
        collection.add(ids=[d["id"] for d in part], documents=[d["text"] for d in part],
                       embeddings=doc_vectors[start:start + 500])
    # query_texts goes through the collection's function: embed_query, i.e. SIE's query mode.
    found = collection.query(query_texts=[q["query"] for q in queries], n_results=10, include=[])
    through_chroma = recall(found["ids"], queries)
    stored = collection.get(ids=[d["id"] for d in docs], include=["embeddings"])
    order = {i: n for n, i in enumerate(stored["ids"])}
    stored_vectors = np.asarray(stored["embeddings"])[[order[d["id"]] for d in docs]]
    np.testing.assert_allclose(stored_vectors, np.asarray(doc_vectors), atol=1e-6)
    exact = recall(brute_force([d["id"] for d in docs], stored_vectors, np.asarray(query_vectors)), queries)
    assert_recall_matches(through_chroma, exact, label)
    return through_chroma


def test_persistent_client_recall_and_reopen(encoded, mode_url, tmp_path):
    ef, doc_vectors, query_vectors = encoded
    client = chromadb.PersistentClient(path=str(tmp_path), settings=settings())
    collection = client.create_collection("debian", embedding_function=ef, configuration={"hnsw": {"space": "cosine"}})
    first = check_collection_recall(collection, doc_vectors, query_vectors, f"chroma persistent ({mode_url})")

    # A new process-like client reopens the collection with no function passed: Chroma
    # rebuilds SIEEmbeddingFunction from the persisted config (name "sie" + get_config).
    reopened = chromadb.PersistentClient(path=str(tmp_path), settings=settings()).get_collection("debian")
    rebuilt = reopened.configuration["embedding_function"]
    assert isinstance(rebuilt, SIEEmbeddingFunction)
    assert rebuilt.get_config() == ef.get_config()
    _, queries = sample()
    again = recall(reopened.query(query_texts=[q["query"] for q in queries], n_results=10, include=[])["ids"], queries)
    assert again == pytest.approx(first, abs=0.5)


def test_chroma_server_recall(encoded, mode_url, chroma_http):
    ef, doc_vectors, query_vectors = encoded
    host, port = chroma_http
    client = chromadb.HttpClient(host=host, port=port, settings=settings())
    name = "debian-" + ("embedded" if mode_url == "embedded" else "http")
    collection = client.create_collection(name, embedding_function=ef, configuration={"hnsw": {"space": "cosine"}})
    check_collection_recall(collection, doc_vectors, query_vectors, f"chroma server ({mode_url})")


def test_chroma_calls_the_function_on_add(encoded, mode_url, tmp_path):
    """Documents added without embeddings are embedded by Chroma through SIE (document mode)."""
    ef, doc_vectors, _ = encoded
    docs, _ = sample()
    collection = chromadb.EphemeralClient(settings=settings()).get_or_create_collection(
        "ef-on-add", embedding_function=ef, configuration={"hnsw": {"space": "cosine"}})
    collection.add(ids=[d["id"] for d in docs[:16]], documents=[d["text"] for d in docs[:16]])
    stored = collection.get(ids=[d["id"] for d in docs[:16]], include=["embeddings"])
    order = {i: n for n, i in enumerate(stored["ids"])}
    got = np.asarray(stored["embeddings"])[[order[d["id"]] for d in docs[:16]]]
    # Same texts, another batch composition: equal up to float noise.
    np.testing.assert_allclose(got, np.asarray(doc_vectors[:16]), atol=2e-5)


def test_config_protocol():
    ef = SIEEmbeddingFunction(model=MODEL, url="embedded", dims=128, instruction="Represent the query")
    config = ef.get_config()
    assert config["model"] == MODEL and config["dims"] == 128 and "api_key" not in config
    from chromadb.utils.embedding_functions import config_to_embedding_function, known_embedding_functions

    assert known_embedding_functions["sie_chroma.SIEEmbeddingFunction"] is SIEEmbeddingFunction
    assert known_embedding_functions["sie"] is SIEEmbeddingFunction  # the name sie_chroma 0.1.0 wrote
    rebuilt = config_to_embedding_function({"name": ef.name(), "config": config})
    assert isinstance(rebuilt, SIEEmbeddingFunction) and rebuilt.get_config() == config
    assert not ef.is_legacy()
    with pytest.raises(ValueError, match="cannot change model"):
        ef.validate_config_update(config, {**config, "model": "other/model"})
    with pytest.raises(ValueError, match="model id"):
        SIEEmbeddingFunction.build_from_config({**config, "model": None})
    # Matryoshka dims reach SIE: 128-d vectors.
    assert len(ef(["hello"])[0]) == 128


def test_api_key_read_from_named_variable(monkeypatch):
    monkeypatch.setenv("MY_SIE_KEY", "k-123")
    ef = SIEEmbeddingFunction(model=MODEL, url="http://127.0.0.1:9", api_key_env_var="MY_SIE_KEY")
    assert ef._client.api_key == "k-123"
    assert ef.get_config()["api_key_env_var"] == "MY_SIE_KEY"


def test_sparse_function_protocol_and_schema_roundtrip():
    """The sparse function on chromadb's protocol: registered, config round trip, and a
    collection Schema carrying it serialises and deserialises back to it. (Chroma 1.5
    refuses sparse indexes on local and self-hosted servers: "Sparse vector indexing is
    not enabled in local", so search over them can only run on Chroma Cloud.)"""
    from chromadb import Schema, SparseVectorIndexConfig
    from chromadb.api.types import validate_sparse_embedding_function
    from chromadb.utils.embedding_functions import sparse_known_embedding_functions

    sparse = SIESparseEmbeddingFunction(model="naver/splade-tiny", url="http://127.0.0.1:9")
    validate_sparse_embedding_function(sparse)
    assert sparse_known_embedding_functions["sie_chroma.SIESparseEmbeddingFunction"] is SIESparseEmbeddingFunction
    assert sparse_known_embedding_functions["sie-sparse"] is SIESparseEmbeddingFunction  # 0.1.0's name
    config = sparse.get_config()
    with pytest.raises(ValueError, match="cannot change model"):
        sparse.validate_config_update(config, {**config, "model": "other/splade"})
    sparse.validate_config_update(config, {**config, "batch_size": 64})
    schema = Schema()
    # "#document" (K.DOCUMENT's key): chromadb 1.2.1 takes only the string, later releases either.
    schema.create_index(config=SparseVectorIndexConfig(source_key="#document", embedding_function=sparse),
                        key="sparse")
    restored = Schema.deserialize_from_json(schema.serialize_to_json())
    config = restored.keys["sparse"].sparse_vector.sparse_vector_index.config
    assert isinstance(config.embedding_function, SIESparseEmbeddingFunction)
    assert config.embedding_function.get_config() == sparse.get_config()


def test_sparse_function_with_real_splade(mode_url):
    """The sparse function on the real SPLADE-tiny: Chroma-valid sparse vectors (ascending
    indices) carrying exactly SIE's weights, in document and query mode."""
    from transformers import AutoTokenizer

    from integration_recall import SPLADE, splade_dir
    from sie_client import SIEClient

    splade_tokenizer = AutoTokenizer.from_pretrained(str(splade_dir()))
    texts = ["the capital of France", "apt installs Debian packages"]
    sparse = SIESparseEmbeddingFunction(model=SPLADE, url=mode_url)
    client = SIEClient(mode_url)
    for got, expected in ((sparse(texts), client.encode(SPLADE, texts, output_types=["sparse"])),
                          (sparse.embed_query(texts),
                           client.encode(SPLADE, texts, output_types=["sparse"], is_query=True))):
        for vector, item in zip(got, expected.items):
            assert vector.indices == sorted(vector.indices) and len(vector.indices) > 0
            assert dict(zip(vector.indices, vector.values)) == pytest.approx(item.sparse.to_dict(), abs=1e-6)
            # labels: each index's vocabulary token, as SPLADE-tiny's own tokenizer names it
            assert vector.labels == splade_tokenizer.convert_ids_to_tokens(vector.indices)
    assert "france" in sparse(texts)[0].labels


def test_config_written_by_a_newer_version_opens():
    """Chroma's own loader on a stored config with a key this version does not know: the
    function is rebuilt (with a warning naming the key) instead of the collection failing."""
    from chromadb.api.collection_configuration import load_collection_configuration_from_json

    config = {**SIEEmbeddingFunction(model=MODEL, url="http://127.0.0.1:9").get_config(), "pooling_v2": "mean"}
    stored = {"hnsw": {"space": "cosine"},
              "embedding_function": {"type": "known", "name": SIEEmbeddingFunction.name(), "config": config}}
    with pytest.warns(UserWarning, match="pooling_v2"):
        rebuilt = load_collection_configuration_from_json(stored)["embedding_function"]
    assert isinstance(rebuilt, SIEEmbeddingFunction) and rebuilt.url == "http://127.0.0.1:9"
    # Chroma rebuilds the function on every add and query: the rebuilt ones share one client.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = load_collection_configuration_from_json(stored)["embedding_function"]
    assert again._client is rebuilt._client


REOPEN = """
import json, sys
import chromadb
from chromadb.config import Settings
if sys.argv[2] == "import":
    import sie_chroma  # noqa: F401
client = chromadb.PersistentClient(path=sys.argv[1], settings=Settings(anonymized_telemetry=False))
out = {}
for name in ("from-client", "from-env"):
    collection = client.get_collection(name)
    try:
        ids = collection.query(query_texts=["apt installs Debian packages"], n_results=1, include=[])["ids"]
        out[name] = {"url": collection.configuration["embedding_function"].url, "ids": ids}
    except Exception as exc:
        out[name] = {"error": str(exc)}
print(json.dumps(out))
"""


def reopen_in_new_process(path, import_sie_chroma: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SIE_URL"}  # the new process has no SIE_URL
    done = subprocess.run([sys.executable, "-c", REOPEN, str(path), "import" if import_sie_chroma else "no-import"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_reopened_in_a_new_process_keeps_the_url(sie_url, tmp_path, monkeypatch):
    """A function made with client=SIEClient(url), or with the URL from SIE_URL, persists
    that URL: reopened by another process (without SIE_URL) it talks to the same server
    rather than switching to the in-process engine. Without `import sie_chroma` the
    reopened collection fails with Chroma's message, which names the import."""
    from sie_client import SIEClient

    docs, _ = sample()
    client = chromadb.PersistentClient(path=str(tmp_path), settings=settings())
    monkeypatch.setenv("SIE_URL", sie_url)
    for name, ef in (("from-client", SIEEmbeddingFunction(model=MODEL, client=SIEClient(sie_url))),
                     ("from-env", SIEEmbeddingFunction(model=MODEL))):
        assert ef.get_config()["url"] == sie_url
        collection = client.create_collection(name, embedding_function=ef, configuration={"hnsw": {"space": "cosine"}})
        collection.add(ids=[d["id"] for d in docs[:20]], documents=[d["text"] for d in docs[:20]])
    del client
    reopened = reopen_in_new_process(tmp_path, import_sie_chroma=True)
    for name in ("from-client", "from-env"):
        assert reopened[name]["url"] == sie_url
        assert len(reopened[name]["ids"][0]) == 1
    unimported = reopen_in_new_process(tmp_path, import_sie_chroma=False)
    for name in ("from-client", "from-env"):
        assert "sie_chroma.SIEEmbeddingFunction not found" in unimported[name]["error"]


def test_progress_bar_on_add(sie_url, capfd):
    ef = SIEEmbeddingFunction(model=MODEL, url=sie_url, progress=True, batch_size=8)
    docs, _ = sample()
    collection = chromadb.EphemeralClient(settings=settings()).get_or_create_collection(
        "progress", embedding_function=ef, configuration={"hnsw": {"space": "cosine"}})
    capfd.readouterr()
    collection.add(ids=[d["id"] for d in docs[:40]], documents=[d["text"] for d in docs[:40]])
    err = capfd.readouterr().err
    assert "encode:" in err and "/40 [" in err  # the client's bar, over the 40 documents
    collection.query(query_texts=["a query"], n_results=1)
    assert "encode" not in capfd.readouterr().err  # queries are single texts: no bar
