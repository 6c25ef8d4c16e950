"""sie_langchain against a real SIE server on loopback, by LangChain's conventions: the
standard suites of `langchain-tests` for every LangChain class SIE ships that has one
(`SIEEmbeddings`: EmbeddingsUnitTests, with `init_from_env_params`, and
EmbeddingsIntegrationTests; langchain-tests has no suite for document compressors, document
transformers or langchain-qdrant's SparseEmbeddings), settings read from SIE_URL /
SIE_API_KEY, `show_progress` (and its deprecated alias `progress`), `dimensions` (and `dims`),
and timeout / max_retries reaching the client."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langchain_tests")
from langchain_core.documents import Document  # noqa: E402
from langchain_tests.integration_tests import EmbeddingsIntegrationTests  # noqa: E402
from langchain_tests.unit_tests import EmbeddingsUnitTests  # noqa: E402

from integration_recall import MODEL, RERANKER  # noqa: E402
from sie_client import SIEClient, SIEConnectionError  # noqa: E402
from sie_langchain import SIEEmbeddings, SIEReranker  # noqa: E402


class TestSIEEmbeddingsUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self) -> type[SIEEmbeddings]:
        return SIEEmbeddings

    @property
    def embedding_model_params(self) -> dict:
        return {"model": MODEL, "url": "http://127.0.0.1:9"}

    @property
    def init_from_env_params(self) -> tuple[dict, dict, dict]:
        return ({"SIE_URL": "http://127.0.0.1:9", "SIE_API_KEY": "k-env"}, {"model": MODEL},
                {"url": "http://127.0.0.1:9", "api_key": "k-env", "model": MODEL})


class TestSIEEmbeddingsIntegration(EmbeddingsIntegrationTests):
    """The standard suite, over HTTP to the session's server (its `model` fixture takes the URL)."""

    @property
    def embeddings_class(self) -> type[SIEEmbeddings]:
        return SIEEmbeddings

    @property
    def embedding_model_params(self) -> dict:
        return {"model": MODEL}

    @pytest.fixture
    def model(self, sie_url) -> SIEEmbeddings:
        return SIEEmbeddings(model=MODEL, url=sie_url)


def test_url_and_key_from_the_environment(sie_url, monkeypatch):
    """No url / api_key: SIE_URL and SIE_API_KEY, read when the object is made, reach the client."""
    monkeypatch.setenv("SIE_URL", sie_url)
    monkeypatch.setenv("SIE_API_KEY", "k-123")
    embeddings = SIEEmbeddings(model=MODEL)
    assert embeddings.url == sie_url and embeddings.api_key.get_secret_value() == "k-123"
    assert embeddings._clients.sync.url == sie_url and embeddings._clients.sync.api_key == "k-123"
    assert "k-123" not in repr(embeddings)
    reranker = SIEReranker(model=RERANKER)
    assert reranker.url == sie_url
    ranked = reranker.compress_documents([Document(page_content="udisks mounts disks"),
                                          Document(page_content="PNG images")], "mount a disk")
    assert len(ranked) == 2 and "relevance_score" in ranked[0].metadata


def test_show_progress_and_its_alias(sie_url, capfd):
    texts = [f"document number {i}" for i in range(12)]
    embeddings = SIEEmbeddings(model=MODEL, url=sie_url, show_progress=True, batch_size=4)
    capfd.readouterr()
    embeddings.embed_documents(texts)
    err = capfd.readouterr().err
    assert "encode:" in err and "/12 [" in err
    SIEEmbeddings(model=MODEL, url=sie_url, show_progress=False).embed_documents(texts)
    assert "encode:" not in capfd.readouterr().err
    with pytest.warns(DeprecationWarning, match="show_progress"):
        old = SIEEmbeddings(model=MODEL, url=sie_url, progress=True)
    assert old.show_progress is True and old.progress is True
    assert "progress" not in old.model_dump() and old.model_dump()["show_progress"] is True


async def test_dimensions_and_its_alias(sie_url):
    client = SIEClient(sie_url)
    embeddings = SIEEmbeddings(model=MODEL, url=sie_url, dimensions=128)
    vectors = embeddings.embed_documents(["udisks mounts disks"])
    assert len(vectors[0]) == 128
    np.testing.assert_allclose(vectors, client.encode(MODEL, ["udisks mounts disks"], dims=128).dense_matrix(),
                               atol=2e-5)
    assert len(await embeddings.aembed_query("mount a disk")) == 128
    with pytest.warns(DeprecationWarning, match="dimensions"):
        old = SIEEmbeddings(model=MODEL, url=sie_url, dims=64)
    assert old.dimensions == 64 and old.dims == 64 and len(old.embed_query("x")) == 64
    with pytest.raises(ValueError, match="disagree"):
        SIEEmbeddings(model=MODEL, url=sie_url, dims=64, dimensions=32)
    client.close()


async def test_timeout_and_max_retries_reach_the_client(sie_url):
    """max_retries counts retries after the first try: 0 fails an unreachable server at once,
    sync and async; the settings reach the clients made for the object."""
    embeddings = SIEEmbeddings(model=MODEL, url="http://127.0.0.1:9", timeout=3.0, max_retries=0)
    assert embeddings._clients.sync.timeout.read == 3.0 and embeddings._clients.sync.retry.max_attempts == 1
    start = time.monotonic()
    with pytest.raises(SIEConnectionError):
        embeddings.embed_query("x")
    with pytest.raises(SIEConnectionError):
        await embeddings.aembed_query("x")
    assert time.monotonic() - start < 3.0
    working = SIEEmbeddings(model=MODEL, url=sie_url, max_retries=2, timeout=30.0)
    assert working._clients.sync.retry.max_attempts == 3
    np.testing.assert_allclose(await working.aembed_query("mount a disk"), working.embed_query("mount a disk"),
                               atol=2e-5)
    with pytest.raises(ValueError, match="max_retries"):
        SIEEmbeddings(max_retries=-1)
