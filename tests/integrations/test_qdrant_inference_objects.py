"""qdrant-client's own inference objects (`models.Document`, `models.Image`) embedded by SIE through
`sie_qdrant.inference.use_sie`, in qdrant-client's local mode (`QdrantClient(":memory:")`, and the
async client) against a real SIE server: the vectors qdrant-client stores and queries with equal
SIE's own (documents in document mode, queries in query mode), named dense and sparse vectors from
Documents in one upsert, a hybrid query with Document prefetches, images on a tiny CLIP,
`upload_points` with `parallel`, and the errors for what SIE cannot embed."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from qdrant_client import AsyncQdrantClient, QdrantClient, models

from image_fixtures import make_tiny_clip, sample_images
from server_fixtures import start_server
from sie_client import SIEClient
from sie_qdrant.inference import use_sie

DENSE = "sentence-transformers/all-MiniLM-L6-v2"
SPARSE = "sie/splade-tiny"
CLIP = "test/tiny-clip"
DOCS = ["Mounting disks with udisks", "A library for PNG images", "Football is a sport",
        "apt installs Debian packages"]
QUERY = "how do I mount a USB disk?"


def unit(matrix) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float64)
    return matrix / np.linalg.norm(matrix, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def sie_url(tmp_path_factory):
    clip = make_tiny_clip(tmp_path_factory.mktemp("clip") / "clip")
    with start_server("--device", "cpu", "--model", f"{CLIP}={clip}", "--preload", DENSE,
                      log_dir=tmp_path_factory.mktemp("sie-server")) as process:
        yield process.url


@pytest.fixture(scope="module")
def sie(sie_url):
    with SIEClient(sie_url) as client:
        yield client


def document(text: str, model: str = DENSE, **options) -> models.Document:
    return models.Document(text=text, model=f"sie/{model}", options=options or None)


def test_upsert_and_query_points_with_documents(sie_url, sie):
    qdrant = use_sie(QdrantClient(":memory:"), sie_url)
    qdrant.create_collection("docs", vectors_config=models.VectorParams(size=384, distance=models.Distance.COSINE))
    qdrant.upsert("docs", [models.PointStruct(id=i, vector=document(text), payload={"text": text})
                           for i, text in enumerate(DOCS)])
    stored = qdrant.retrieve("docs", ids=list(range(len(DOCS))), with_vectors=True)
    expected = sie.encode(DENSE, DOCS).dense_matrix()
    np.testing.assert_allclose(unit([p.vector for p in stored]), unit(expected), atol=1e-5)

    query = sie.encode(DENSE, [QUERY], is_query=True).dense_matrix()[0]
    hits = qdrant.query_points("docs", query=document(QUERY), limit=len(DOCS), with_payload=True).points
    cosines = unit(expected) @ unit(query)
    assert [h.id for h in hits] == [int(i) for i in np.argsort(-cosines)]
    np.testing.assert_allclose([h.score for h in hits], np.sort(cosines)[::-1], atol=1e-5)
    assert hits[0].payload["text"] == "Mounting disks with udisks"

    batch = qdrant.query_batch_points("docs", [models.QueryRequest(query=document(QUERY), limit=1),
                                               models.QueryRequest(query=document("Debian"), limit=1)])
    assert batch[0].points[0].id == hits[0].id and len(batch) == 2


def test_named_dense_and_sparse_vectors_and_a_hybrid_query(sie_url, sie):
    qdrant = use_sie(QdrantClient(":memory:"), sie_url)
    qdrant.create_collection("hybrid", vectors_config={"dense": models.VectorParams(size=384,
                                                                                    distance=models.Distance.COSINE)},
                             sparse_vectors_config={"sparse": models.SparseVectorParams()})
    qdrant.upsert("hybrid", [models.PointStruct(id=i, vector={"dense": document(text),
                                                             "sparse": document(text, SPARSE)})
                             for i, text in enumerate(DOCS)])
    stored = qdrant.retrieve("hybrid", ids=[0], with_vectors=True)[0].vector["sparse"]
    expected = sie.encode(SPARSE, DOCS[:1], output_types=["sparse"]).items[0].sparse
    assert stored.indices == expected.indices.tolist()
    # upserted in batches with the other documents, then encoded alone: sums in another order
    np.testing.assert_allclose(stored.values, expected.values, rtol=1e-4)

    hits = qdrant.query_points("hybrid", prefetch=[
        models.Prefetch(query=document(QUERY), using="dense", limit=4),
        models.Prefetch(query=document(QUERY, SPARSE), using="sparse", limit=4)],
        query=models.FusionQuery(fusion=models.Fusion.RRF), limit=1).points
    assert hits[0].id == 0
    explicit = qdrant.query_points("hybrid", query=document(QUERY, output_type="dense"), using="dense", limit=1)
    assert explicit.points[0].id == 0


def test_images_and_upload_points(sie_url, sie):
    pictures = [sample_images()[name] for name in ("png_rgb", "jpeg_rgb", "webp_rgb")]
    qdrant = use_sie(QdrantClient(":memory:"), sie_url)
    size = sie.model(CLIP).dims["dense"]
    qdrant.create_collection("photos", vectors_config=models.VectorParams(size=size, distance=models.Distance.COSINE))
    qdrant.upload_points("photos", [models.PointStruct(id=i, vector=models.Image(image=data, model=f"sie/{CLIP}"))
                                    for i, data in enumerate(pictures)], parallel=2, batch_size=2)
    stored = qdrant.retrieve("photos", ids=[0, 1, 2], with_vectors=True)
    expected = sie.encode(CLIP, [{"image": data} for data in pictures]).dense_matrix()
    np.testing.assert_allclose(unit([p.vector for p in stored]), unit(expected), atol=1e-5)
    by_image = qdrant.query_points("photos", query=models.Image(image=pictures[1], model=f"sie/{CLIP}"), limit=1)
    assert by_image.points[0].id == 1
    caption = sie.encode(CLIP, ["a red shoe"], is_query=True).dense_matrix()[0]
    by_text = qdrant.query_points("photos", query=document("a red shoe", CLIP), limit=3).points
    assert [h.id for h in by_text] == [int(i) for i in np.argsort(-(unit(expected) @ unit(caption)))]


def test_async_client(sie_url, sie):
    async def run():
        qdrant = use_sie(AsyncQdrantClient(":memory:"), sie_url)
        await qdrant.create_collection("docs", vectors_config=models.VectorParams(size=384,
                                                                                  distance=models.Distance.COSINE))
        await qdrant.upsert("docs", [models.PointStruct(id=i, vector=document(t)) for i, t in enumerate(DOCS)])
        return (await qdrant.query_points("docs", query=document(QUERY), limit=1)).points[0].id

    assert asyncio.run(run()) == 0


def test_what_sie_cannot_embed_is_refused_by_name(sie_url):
    qdrant = use_sie(QdrantClient(":memory:"), sie_url)
    qdrant.create_collection("docs", vectors_config=models.VectorParams(size=384, distance=models.Distance.COSINE))
    with pytest.raises(ValueError, match="no 'sparse' output"):
        qdrant.query_points("docs", query=document(QUERY, output_type="sparse"))
    with pytest.raises(ValueError, match="unknown options"):
        qdrant.query_points("docs", query=document(QUERY, dimensions=64))
    with pytest.raises(ValueError, match="BAAI/bge-small-en"):  # neither SIE's (no prefix) nor FastEmbed's here
        qdrant.query_points("docs", query=models.Document(text=QUERY, model="BAAI/bge-small-en"))
    with pytest.raises(ValueError, match="cloud_inference"):
        use_sie(QdrantClient("http://127.0.0.1:1", cloud_inference=True, check_compatibility=False), sie_url)
