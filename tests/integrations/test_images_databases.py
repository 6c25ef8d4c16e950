"""Images through each database adapter: Chroma (EphemeralClient, `images=` and `uris=`
with its ImageLoader), LanceDB (a local table over image bytes and over paths), Qdrant
(":memory:", sync and async) and Weaviate (the real client against
tests/helpers/weaviate_test_server.py, sync and async), all against one real SIE server
serving a tiny random CLIP (tests/helpers/image_fixtures.py).

The model is random, so the tests check plumbing and equality, not quality: the
vectors each database stores equal SIE's own image vectors of the same pixels; a
query image finds itself first; a query text ranks every stored image in the order
of the cosine between SIE's own query vector of the text and SIE's image vectors
(the databases search exactly at this size: brute force or a complete HNSW graph).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from image_fixtures import encode_image, make_tiny_clip, sample_pil_images
from server_fixtures import start_server
from sie_client import AsyncSIEClient, SIEClient

CLIP = "test/tiny-clip"
CAPTIONS = ["a red shoe on a table", "the dog runs on the beach", "a cat asleep in the sun",
            "city lights at night", "a bowl of ripe apples"]
TOL = 1e-5


def unit(matrix) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float64)
    return matrix / np.linalg.norm(matrix, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def pictures():
    """Five pictures as lossless PNG bytes (RGB, grayscale and RGBA of different sizes;
    the palette one is left out: a pixel array of it, as Chroma's ImageLoader reads it,
    holds palette indices, not colours)."""
    images = [img for name, img in sample_pil_images().items() if name != "gif_palette"]
    assert len(images) == len(CAPTIONS)
    return [encode_image(img, "PNG") for img in images]


@pytest.fixture(scope="module")
def paths(pictures, tmp_path_factory):
    directory = tmp_path_factory.mktemp("pictures")
    out = []
    for i, data in enumerate(pictures):
        (directory / f"{i}.png").write_bytes(data)
        out.append(directory / f"{i}.png")
    return out


@pytest.fixture(scope="module")
def sie_url(tmp_path_factory):
    clip = make_tiny_clip(tmp_path_factory.mktemp("clip") / "clip")
    with start_server("--device", "cpu", "--model", f"{CLIP}={clip}", "--preload", CLIP,
                      log_dir=tmp_path_factory.mktemp("sie-server")) as process:
        yield process.url


@pytest.fixture(scope="module")
def sie(sie_url):
    with SIEClient(sie_url) as client:
        yield client


@pytest.fixture(scope="module")
def reference(sie, pictures):
    """SIE's own vectors: the pictures (document mode) and the captions as queries, and for
    each caption the pictures ranked by cosine (what every database must answer)."""
    images = sie.encode(CLIP, [{"image": data} for data in pictures]).dense_matrix()
    queries = sie.encode(CLIP, CAPTIONS, is_query=True).dense_matrix()
    return {"images": images, "queries": queries, "ranking": ranking(queries, images)}


def ranking(queries, stored) -> list[list[int]]:
    """Per query, the stored rows best first by cosine."""
    return [[int(i) for i in row] for row in np.argsort(-(unit(queries) @ unit(stored).T), axis=1, kind="stable")]


def assert_same_vectors(got, expected):
    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert got.shape == expected.shape
    assert np.allclose(unit(got), unit(expected), atol=TOL), np.abs(unit(got) - unit(expected)).max()


# ---- Chroma -------------------------------------------------------------------
def test_chroma_images_uris_and_text_queries(sie_url, pictures, paths, reference):
    chromadb = pytest.importorskip("chromadb")
    from chromadb.config import Settings
    from chromadb.utils.data_loaders import ImageLoader
    from PIL import Image

    from sie_chroma import SIEEmbeddingFunction

    ef = SIEEmbeddingFunction(model=CLIP, url=sie_url)
    chroma = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    photos = chroma.create_collection("photos", embedding_function=ef, data_loader=ImageLoader(max_workers=1),
                                      configuration={"hnsw": {"space": "cosine"}})
    arrays = [np.array(Image.open(io.BytesIO(data))) for data in pictures]
    ids = [str(i) for i in range(len(pictures))]
    photos.add(ids=ids[:3], images=arrays[:3])                                # pixel arrays
    photos.add(ids=ids[3:], uris=[str(p) for p in paths[3:]])                 # read by the ImageLoader

    stored = photos.get(ids=ids, include=["embeddings"])
    order = [stored["ids"].index(i) for i in ids]
    assert_same_vectors(np.asarray(stored["embeddings"])[order], reference["images"])

    by_text = photos.query(query_texts=CAPTIONS, n_results=len(ids))
    assert [[int(i) for i in hits] for hits in by_text["ids"]] == reference["ranking"]
    by_image = photos.query(query_images=arrays, n_results=1)
    assert [hits[0] for hits in by_image["ids"]] == ids
    by_uri = photos.query(query_uris=[str(p) for p in paths], n_results=1)
    assert [hits[0] for hits in by_uri["ids"]] == ids


def test_chroma_reopened_collection_rebuilds_the_function_for_images(sie_url, paths, reference, tmp_path):
    """A persisted multimodal collection reopened without a function: Chroma rebuilds it from
    the stored config; the data loader, which Chroma does not store, is passed again."""
    chromadb = pytest.importorskip("chromadb")
    from chromadb.config import Settings
    from chromadb.utils.data_loaders import ImageLoader

    from sie_chroma import SIEEmbeddingFunction

    first = chromadb.PersistentClient(path=str(tmp_path), settings=Settings(anonymized_telemetry=False))
    first.create_collection("photos", embedding_function=SIEEmbeddingFunction(model=CLIP, url=sie_url),
                            data_loader=ImageLoader(max_workers=1), configuration={"hnsw": {"space": "cosine"}})
    again = chromadb.PersistentClient(path=str(tmp_path), settings=Settings(anonymized_telemetry=False))
    photos = again.get_collection("photos", data_loader=ImageLoader(max_workers=1))
    photos.add(ids=[str(i) for i in range(len(paths))], uris=[str(p) for p in paths])
    by_text = photos.query(query_texts=CAPTIONS, n_results=len(paths))
    assert [[int(i) for i in hits] for hits in by_text["ids"]] == reference["ranking"]


def test_chroma_refuses_float_pixels_with_a_clear_message(sie_url):
    pytest.importorskip("chromadb")
    from sie_chroma import SIEEmbeddingFunction

    with pytest.raises(ValueError, match="0-255 integers"):
        SIEEmbeddingFunction(model=CLIP, url=sie_url)([np.zeros((8, 8, 3), dtype=np.float64)])


# ---- LanceDB ------------------------------------------------------------------
def test_lancedb_image_bytes_and_paths_searched_by_text_and_image(sie_url, pictures, paths, reference, tmp_path):
    lancedb = pytest.importorskip("lancedb")
    from lancedb.embeddings import get_registry
    from lancedb.pydantic import LanceModel, Vector
    from PIL import Image

    import sie_lancedb  # noqa: F401  (registers "sie-image")

    func = get_registry().get("sie-image").create(model=CLIP, url=sie_url)
    assert func.ndims() == reference["images"].shape[1]

    class Photo(LanceModel):
        name: str
        image: bytes = func.SourceField()
        vector: Vector(func.ndims()) = func.VectorField()

    class PhotoFile(LanceModel):
        name: str
        path: str = func.SourceField()
        vector: Vector(func.ndims()) = func.VectorField()

    db = lancedb.connect(tmp_path / "lance")
    photos = db.create_table("photos", schema=Photo)
    photos.add([{"name": str(i), "image": data} for i, data in enumerate(pictures)])
    files = db.create_table("files", schema=PhotoFile)
    files.add([{"name": str(i), "path": str(p) if i % 2 else p.as_uri()} for i, p in enumerate(paths)])

    for table in (photos, files):
        rows = sorted(table.to_arrow().to_pylist(), key=lambda row: int(row["name"]))
        assert_same_vectors([row["vector"] for row in rows], reference["images"])

    reopened = lancedb.connect(tmp_path / "lance").open_table("photos")   # the function rebuilt from the schema
    ranked = [[int(row["name"]) for row in reopened.search(caption).distance_type("cosine").limit(len(CAPTIONS))
               .to_list()] for caption in CAPTIONS]
    assert ranked == reference["ranking"]
    for i, data in enumerate(pictures):
        for query in (Image.open(io.BytesIO(data)), data, paths[i]):       # PIL, bytes, Path
            assert photos.search(query).distance_type("cosine").limit(1).to_list()[0]["name"] == str(i)


def test_lancedb_empty_and_none_images_get_no_vector(sie_url, pictures, reference, tmp_path):
    """As empty texts do: the table's on_bad_vectors policy decides about such rows (here kept
    without a vector); the other rows are embedded in the same call."""
    lancedb = pytest.importorskip("lancedb")
    from lancedb.embeddings import get_registry
    from lancedb.pydantic import LanceModel, Vector

    import sie_lancedb  # noqa: F401

    func = get_registry().get("sie-image").create(model=CLIP, url=sie_url)

    class Photo(LanceModel):
        name: str
        image: bytes | None = func.SourceField()
        vector: Vector(func.ndims()) = func.VectorField()

    table = lancedb.connect(tmp_path / "lance").create_table("photos", schema=Photo)
    table.add([{"name": "a", "image": pictures[0]}, {"name": "b", "image": b""}, {"name": "c", "image": None}],
              on_bad_vectors="null")
    rows = {row["name"]: row["vector"] for row in table.to_arrow().to_pylist()}
    assert rows["b"] is None and rows["c"] is None
    assert_same_vectors([rows["a"]], reference["images"][:1])


# ---- Qdrant -------------------------------------------------------------------
def check_qdrant_hits(by_text, by_image, by_image_on_text, reference, captions_for_images):
    assert [[hit.id for hit in hits] for hits in by_text] == reference["ranking"]
    assert [hits[0].id for hits in by_image] == list(range(len(CAPTIONS)))
    assert [[hit.id for hit in hits] for hits in by_image_on_text] == captions_for_images


@pytest.fixture(scope="module")
def caption_vectors(sie):
    """The captions as stored documents (CLIP's text tower, document mode)."""
    return sie.encode(CLIP, CAPTIONS).dense_matrix()


@pytest.fixture(scope="module")
def captions_for_images(reference, caption_vectors):
    """Per picture, the captions ranked by SIE's vectors: an image query on the text vector."""
    return ranking(reference["images"], caption_vectors)


def test_qdrant_image_and_text_vectors_side_by_side(sie, pictures, paths, reference, caption_vectors,
                                                    captions_for_images):
    qdrant_client = pytest.importorskip("qdrant_client")
    from sie_qdrant import SIEQdrant

    helper = SIEQdrant(dense_model=CLIP, dense_name="text", image_model=CLIP, client=sie)
    qdrant = qdrant_client.QdrantClient(":memory:")
    helper.create_collection(qdrant, "photos")
    images = [pictures[0], paths[1]] + pictures[2:]                       # bytes and a Path
    helper.upsert(qdrant, "photos", CAPTIONS, ids=list(range(len(CAPTIONS))), images=images)
    helper.upsert(qdrant, "photos", images=[pictures[0]], ids=[99])       # an image without a caption

    stored = sorted(qdrant.retrieve("photos", list(range(len(CAPTIONS))), with_vectors=True), key=lambda p: p.id)
    assert_same_vectors([p.vector["image"] for p in stored], reference["images"])
    assert_same_vectors([p.vector["text"] for p in stored], caption_vectors)
    assert set(qdrant.retrieve("photos", [99], with_vectors=True)[0].vector) == {"image"}
    qdrant.delete("photos", points_selector=[99])

    helper.create_collection(qdrant, "uploaded")                          # qdrant-client's upload_points
    assert helper.upload(qdrant, "uploaded", ids=list(range(len(CAPTIONS))), images=pictures, chunk=2) == len(CAPTIONS)
    uploaded = sorted(qdrant.retrieve("uploaded", list(range(len(CAPTIONS))), with_vectors=True), key=lambda p: p.id)
    assert_same_vectors([p.vector["image"] for p in uploaded], reference["images"])

    by_text = helper.search_batch(qdrant, "photos", CAPTIONS, using="image", limit=len(CAPTIONS))
    by_image = helper.search_image_batch(qdrant, "photos", pictures, limit=1)
    by_image_on_text = helper.search_image_batch(qdrant, "photos", pictures, using="text", limit=len(CAPTIONS))
    check_qdrant_hits(by_text, by_image, by_image_on_text, reference, captions_for_images)
    with pytest.raises(ValueError, match="image model"):
        SIEQdrant(dense_name="text", image_model=CLIP, client=sie).search_image(qdrant, "photos", pictures[0],
                                                                               using="text")


async def test_async_qdrant_images(sie_url, pictures, reference, captions_for_images):
    qdrant_client = pytest.importorskip("qdrant_client")
    from sie_qdrant import AsyncSIEQdrant

    async with AsyncSIEClient(sie_url) as sie:
        helper = AsyncSIEQdrant(dense_model=CLIP, dense_name="text", image_model=CLIP, client=sie)
        qdrant = qdrant_client.AsyncQdrantClient(":memory:")
        await helper.create_collection(qdrant, "photos")
        await helper.upsert(qdrant, "photos", CAPTIONS, ids=list(range(len(CAPTIONS))), images=pictures)
        by_text = [await helper.search(qdrant, "photos", caption, using="image", limit=len(CAPTIONS))
                   for caption in CAPTIONS]
        by_image = await helper.search_image_batch(qdrant, "photos", pictures, limit=1)
        by_image_on_text = [await helper.search_image(qdrant, "photos", data, using="text", limit=len(CAPTIONS))
                            for data in pictures]
        await qdrant.close()
    check_qdrant_hits(by_text, by_image, by_image_on_text, reference, captions_for_images)


# ---- Weaviate -----------------------------------------------------------------
@pytest.fixture(scope="module")
def weaviate_server():
    pytest.importorskip("weaviate")
    from weaviate_test_server import WeaviateTestServer

    with WeaviateTestServer() as server:
        yield server


def connect_weaviate(server, asynchronous: bool = False):
    import weaviate

    connect = weaviate.use_async_with_custom if asynchronous else weaviate.connect_to_custom
    return connect(http_host="127.0.0.1", http_port=server.http_port, http_secure=False,
                   grpc_host="127.0.0.1", grpc_port=server.grpc_port, grpc_secure=False)


def weaviate_objects(pictures, paths):
    """Captioned pictures given as bytes, a Path and a PIL image, and one picture without a caption."""
    from PIL import Image

    images = [pictures[0], paths[1], Image.open(io.BytesIO(pictures[2]))] + pictures[3:]
    return [{"text": caption, "image": image, "name": str(i)}
            for i, (caption, image) in enumerate(zip(CAPTIONS, images))]


def check_weaviate_hits(by_text, by_image, reference):
    assert [[int(hit.properties["name"]) for hit in hits] for hits in by_text] == reference["ranking"]
    assert [hits[0].properties["name"] for hits in by_image] == [str(i) for i in range(len(CAPTIONS))]


def test_weaviate_image_vectors_and_blobs(sie, weaviate_server, pictures, paths, reference, caption_vectors):
    import base64

    from sie_weaviate import SIEWeaviate

    helper = SIEWeaviate(dense_model=CLIP, dense_name="text", image_model=CLIP, client=sie)
    client = connect_weaviate(weaviate_server)
    try:
        photos = helper.create_collection(client, "Photos")
        helper.import_objects(photos, weaviate_objects(pictures, paths))
        stored = {o.properties["name"]: o for o in photos.query.fetch_objects(limit=10, include_vector=True).objects}
        assert base64.b64decode(stored["0"].properties["image"]) == pictures[0]   # the blob, as Weaviate keeps it
        assert_same_vectors([stored[str(i)].vector["image"] for i in range(len(CAPTIONS))], reference["images"])
        assert_same_vectors([stored[str(i)].vector["text"] for i in range(len(CAPTIONS))], caption_vectors)
        mixed = helper.create_collection(client, "Mixed")         # objects with only an image or only a text
        helper.import_objects(mixed, [{"image": pictures[0], "name": "photo"}, {"text": CAPTIONS[0], "name": "text"}])
        vectors = {o.properties["name"]: set(o.vector) for o in mixed.query.fetch_objects(include_vector=True).objects}
        assert vectors == {"photo": {"image"}, "text": {"text"}}
        for target, found in (("image", "photo"), ("text", "text")):   # each object in the indexes it has vectors in
            hits = helper.near_text(mixed, CAPTIONS[0], target_vector=target, return_properties=["name"])
            assert [hit.properties["name"] for hit in hits] == [found]

        by_text = [helper.near_text(photos, caption, target_vector="image", limit=len(CAPTIONS),
                                    return_properties=["name"]) for caption in CAPTIONS]
        by_image = [helper.near_image(photos, data, limit=1, return_properties=["name"]) for data in pictures]
        check_weaviate_hits(by_text, by_image, reference)
    finally:
        client.collections.delete(["Photos", "Mixed"])
        client.close()


async def test_async_weaviate_images(sie_url, weaviate_server, pictures, paths, reference):
    from sie_weaviate import AsyncSIEWeaviate

    async with AsyncSIEClient(sie_url) as sie, connect_weaviate(weaviate_server, asynchronous=True) as client:
        helper = AsyncSIEWeaviate(dense_model=None, image_model=CLIP, client=sie)
        photos = await helper.create_collection(client, "AsyncPhotos")
        try:
            await helper.import_objects(photos, weaviate_objects(pictures, paths))
            by_text = [await helper.near_text(photos, caption, limit=len(CAPTIONS), return_properties=["name"])
                       for caption in CAPTIONS]
            by_image = [await helper.near_image(photos, base64_of(data), limit=1, return_properties=["name"])
                        for data in pictures]
            check_weaviate_hits(by_text, by_image, reference)
        finally:
            await client.collections.delete("AsyncPhotos")


def base64_of(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode("ascii")


def test_image_inputs_refuse_urls_and_unreadable_paths(sie, tmp_path):
    from sie_qdrant import SIEQdrant

    helper = SIEQdrant(dense_model=None, image_model=CLIP, client=sie)
    with pytest.raises(ValueError, match="does not fetch URLs|do not fetch URLs"):
        helper.embed_images(["https://example.com/cat.jpg"])
    with pytest.raises(ValueError, match="cannot read image file"):
        helper.embed_images([Path(tmp_path / "missing.png")])


def test_helpers_say_what_an_image_needs(sie, pictures):
    from sie_qdrant import SIEQdrant
    from sie_weaviate import SIEWeaviate

    with pytest.raises(ValueError, match="images need image_model"):
        SIEQdrant(dense_model=CLIP, client=sie).embed_images(pictures[:1])
    with pytest.raises(ValueError, match="distinct names"):
        SIEQdrant(dense_model=CLIP, dense_name="image", image_model=CLIP, client=sie)
    helper = SIEWeaviate(dense_model=CLIP, image_model=CLIP, client=sie)
    with pytest.raises(ValueError, match="has no 'text' text or 'image' image"):
        helper.import_parts([{"text": "a caption"}, {"name": "neither"}], None, 10)
    with pytest.raises(ValueError, match="read as base64"):
        helper.image_vectors(["photo.png"])
