"""AsyncSIEQdrant has its sync twin's bulk and multi-stage calls (`upload`, `iter_points`,
`multistage_search_batch`), on AsyncQdrantClient (local mode) with AsyncSIEClient over HTTP to
a loopback server; each answer equals SIEQdrant's on QdrantClient for the same data."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("qdrant_client")
from qdrant_client import AsyncQdrantClient, QdrantClient  # noqa: E402

from integration_recall import COLBERT, MODEL, SMALL_SAMPLE_DOCS, SPLADE, sample  # noqa: E402
from sie_client import AsyncSIEClient, SIEClient  # noqa: E402
from sie_qdrant import AsyncSIEQdrant, SIEQdrant, point_id  # noqa: E402


def ids_of(points_per_query):
    return [[p.payload["id"] for p in points] for points in points_per_query]


async def test_upload_and_iter_points_as_the_sync_twin(sie_url):
    docs, _ = sample()
    docs = docs[:70]
    texts, ids = [d["text"] for d in docs], [d["id"] for d in docs]
    async with AsyncSIEClient(sie_url) as client:
        helper = AsyncSIEQdrant(dense_model=MODEL, client=client)
        streamed = [p async for p in helper.iter_points(texts, ids=ids, chunk=32)]
        qdrant = AsyncQdrantClient(":memory:")
        await helper.create_collection(qdrant, "uploaded")
        assert await helper.upload(qdrant, "uploaded", texts, ids=ids, chunk=32, batch_size=16) == len(docs)
        assert (await qdrant.count("uploaded")).count == len(docs)
        stored = await qdrant.retrieve("uploaded", ids=[point_id(i) for i in ids], with_vectors=True,
                                       with_payload=True)
    sync_points = SIEQdrant(dense_model=MODEL, client=SIEClient(sie_url)).points(texts, ids=ids)
    assert [p.id for p in streamed] == [p.id for p in sync_points]
    assert [p.payload for p in streamed] == [p.payload for p in sync_points]
    np.testing.assert_allclose([p.vector["dense"] for p in streamed], [p.vector["dense"] for p in sync_points],
                               atol=2e-5)
    by_id = {p.payload["id"]: p for p in stored}
    np.testing.assert_allclose([by_id[i].vector["dense"] for i in ids], [p.vector["dense"] for p in sync_points],
                               atol=2e-5)


async def test_multistage_search_batch_as_the_sync_twin(sie_url):
    docs, queries = sample(SMALL_SAMPLE_DOCS)
    texts, ids, questions = [d["text"] for d in docs], [d["id"] for d in docs], [q["query"] for q in queries][:8]
    options = dict(dense_model=MODEL, sparse_model=SPLADE, multivector_model=COLBERT)
    sync = SIEQdrant(**options, client=SIEClient(sie_url))
    qdrant = QdrantClient(":memory:")
    sync.create_collection(qdrant, "debian")
    sync.upsert(qdrant, "debian", texts, ids=ids)
    expected = ids_of(sync.multistage_search_batch(qdrant, "debian", questions, limit=5, prefetch_limit=20))
    async with AsyncSIEClient(sie_url) as client:
        helper = AsyncSIEQdrant(**options, client=client)
        async_qdrant = AsyncQdrantClient(":memory:")
        await helper.create_collection(async_qdrant, "debian")
        await helper.upload(async_qdrant, "debian", texts, ids=ids)
        found = ids_of(await helper.multistage_search_batch(async_qdrant, "debian", questions, limit=5,
                                                            prefetch_limit=20))
        one = await helper.multistage_search(async_qdrant, "debian", questions[0], limit=5, prefetch_limit=20)
    assert found == expected and ids_of([one]) == found[:1]
    assert all(len(row) == 5 for row in found)
