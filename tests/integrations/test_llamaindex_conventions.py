"""sie_llamaindex against a real SIE server on loopback, by LlamaIndex's conventions: url and
api_key from the arguments or SIE_URL / SIE_API_KEY (`get_from_param_or_env`), `dimensions`
(with `dims` as its deprecated alias), timeout / max_retries reaching the client, and the
extractor keeping BaseExtractor's own `max_retries`."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("llama_index.core")
from llama_index.core.schema import NodeWithScore, TextNode  # noqa: E402

from integration_recall import MODEL, RERANKER  # noqa: E402
from sie_client import SIEClient, SIEConnectionError  # noqa: E402
from sie_llamaindex import SIEEmbedding, SIEEntityExtractor, SIERerank  # noqa: E402


def test_url_and_key_from_the_environment(sie_url, monkeypatch):
    monkeypatch.setenv("SIE_URL", sie_url)
    monkeypatch.setenv("SIE_API_KEY", "k-123")
    embedding = SIEEmbedding(model=MODEL)
    assert embedding.url == sie_url and embedding.api_key == "k-123"
    assert embedding._clients.sync.url == sie_url and embedding._clients.sync.api_key == "k-123"
    saved = embedding.to_dict()
    assert saved["url"] == sie_url and "k-123" not in str(saved)
    expected = SIEClient(sie_url).encode(MODEL, ["mount a disk"], is_query=True).dense_matrix()[0]
    np.testing.assert_allclose(embedding.get_query_embedding("mount a disk"), expected, atol=2e-5)
    # An argument wins over the variable.
    assert SIEEmbedding(model=MODEL, url="http://127.0.0.1:9", api_key="k-arg").api_key == "k-arg"
    rerank = SIERerank(model=RERANKER, top_n=1)
    nodes = [NodeWithScore(node=TextNode(text=t), score=0.5) for t in ("udisks mounts disks", "PNG images")]
    assert rerank.url == sie_url and len(rerank.postprocess_nodes(nodes, query_str="mount a disk")) == 1
    monkeypatch.delenv("SIE_URL")
    assert SIEEmbedding(model=MODEL).url is None  # neither: embedded mode, as before


async def test_dimensions_and_its_alias(sie_url):
    embedding = SIEEmbedding(model=MODEL, url=sie_url, dimensions=128)
    assert len(embedding.get_text_embedding("udisks mounts disks")) == 128
    assert len(await embedding.aget_query_embedding("mount a disk")) == 128
    with pytest.warns(DeprecationWarning, match="dimensions"):
        old = SIEEmbedding(model=MODEL, url=sie_url, dims=64)
    assert old.dimensions == 64 and old.dims == 64 and len(old.get_query_embedding("x")) == 64
    saved = old.to_dict()
    assert saved["dimensions"] == 64 and "dims" not in saved
    assert SIEEmbedding.from_dict(saved).dimensions == 64


async def test_timeout_and_max_retries_reach_the_client(sie_url):
    embedding = SIEEmbedding(model=MODEL, url="http://127.0.0.1:9", timeout=3.0, max_retries=0)
    assert embedding._clients.sync.timeout.read == 3.0 and embedding._clients.sync.retry.max_attempts == 1
    start = time.monotonic()
    with pytest.raises(SIEConnectionError):
        embedding.get_query_embedding("x")
    with pytest.raises(SIEConnectionError):
        await embedding.aget_query_embedding("x")
    assert time.monotonic() - start < 3.0
    working = SIEEmbedding(model=MODEL, url=sie_url, max_retries=2)
    assert working._clients.sync.retry.max_attempts == 3 and working.to_dict()["max_retries"] == 2
    np.testing.assert_allclose(await working.aget_query_embedding("x"), working.get_query_embedding("x"), atol=2e-5)


def test_extractor_keeps_llamaindex_max_retries(sie_url):
    """BaseExtractor's max_retries is LlamaIndex's loop around aextract (default 0); the
    extractor's client keeps the client's own policy whatever it says."""
    extractor = SIEEntityExtractor(labels=["person"], model="test/no-such-model", url=sie_url, max_retries=1,
                                   retry_backoff=0.0)
    assert extractor.max_retries == 1 and extractor._clients.sync.retry.max_attempts == 6
    with pytest.raises(Exception, match="404"):
        extractor.extract([TextNode(text="Ada Lovelace")])
