"""Images through the framework adapters, against one real SIE server serving a tiny random CLIP
(tests/helpers/image_fixtures.py): LlamaIndex's `MultiModalEmbedding` (`SIEMultiModalEmbedding`,
in a `MultiModalVectorStoreIndex` with text-to-image and image-to-image retrieval), LangChain's
`embed_image(uris)` (`SIEImageEmbeddings`) and a Haystack indexing and query pipeline
(`SIEDocumentImageEmbedder` into an InMemoryDocumentStore, `SIETextEmbedder` for the query).

The model is random, so the tests check plumbing and equality: each stored vector equals SIE's
own image vector of the same file, and a caption ranks the images as the cosine between SIE's
own query vector and those image vectors does."""

from __future__ import annotations

import asyncio
import io

import numpy as np
import pytest

from image_fixtures import encode_image, make_tiny_clip, sample_pil_images
from server_fixtures import start_server
from sie_client import SIEClient

CLIP = "test/tiny-clip"
CAPTIONS = ["a red shoe on a table", "the dog runs on the beach", "a cat asleep in the sun"]


def unit(matrix) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float64)
    return matrix / np.linalg.norm(matrix, axis=-1, keepdims=True)


def assert_same_vectors(got, expected) -> None:
    got, expected = unit(got), unit(expected)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=1e-5)


def ranking(queries, stored) -> list[list[int]]:
    return [[int(i) for i in row] for row in np.argsort(-(unit(queries) @ unit(stored).T), axis=1, kind="stable")]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pictures")
    images = [img for name, img in sample_pil_images().items() if name != "gif_palette"]
    out = []
    for i, image in enumerate(images):
        out.append(directory / f"{i}.png")
        out[-1].write_bytes(encode_image(image, "PNG"))
    return out


@pytest.fixture(scope="module")
def sie_url(tmp_path_factory):
    clip = make_tiny_clip(tmp_path_factory.mktemp("clip") / "clip")
    with start_server("--device", "cpu", "--model", f"{CLIP}={clip}", "--preload", CLIP,
                      log_dir=tmp_path_factory.mktemp("sie-server")) as process:
        yield process.url


@pytest.fixture(scope="module")
def reference(sie_url, paths):
    """SIE's own image vectors of the files and query vectors of the captions."""
    with SIEClient(sie_url) as sie:
        images = sie.encode(CLIP, [{"image": p.read_bytes()} for p in paths]).dense_matrix()
        queries = sie.encode(CLIP, CAPTIONS, is_query=True).dense_matrix()
    return {"images": images, "queries": queries, "ranking": ranking(queries, images)}


# ---- LlamaIndex ------------------------------------------------------------------
def test_llamaindex_multimodal_embedding(sie_url, paths, reference):
    from llama_index.core.embeddings.multi_modal_base import MultiModalEmbedding

    from sie_llamaindex import SIEMultiModalEmbedding

    embed = SIEMultiModalEmbedding(model=CLIP, url=sie_url)
    assert isinstance(embed, MultiModalEmbedding)
    assert_same_vectors(embed.get_image_embedding_batch([str(p) for p in paths]), reference["images"])
    assert_same_vectors([embed.get_image_embedding(io.BytesIO(paths[0].read_bytes()))], reference["images"][:1])
    assert_same_vectors([embed.get_query_embedding(CAPTIONS[0])], reference["queries"][:1])

    async def both():
        return (await embed.aget_image_embedding_batch([str(p) for p in paths[:2]]),
                await embed.aget_image_embedding(str(paths[2])))

    batch, single = asyncio.run(both())
    assert_same_vectors(batch + [single], reference["images"][:3])


def test_llamaindex_multimodal_index_retrieves_images(sie_url, paths, reference):
    from llama_index.core.indices import MultiModalVectorStoreIndex
    from llama_index.core.schema import ImageNode

    from sie_llamaindex import SIEMultiModalEmbedding

    embed = SIEMultiModalEmbedding(model=CLIP, url=sie_url)
    # a caption each: LlamaIndex's vector indexes skip nodes without text
    nodes = [ImageNode(image_path=str(p), text=f"picture {i}", id_=str(i)) for i, p in enumerate(paths)]
    index = MultiModalVectorStoreIndex(nodes, embed_model=embed, image_embed_model=embed)
    retriever = index.as_retriever(image_similarity_top_k=len(paths))
    for caption, expected in zip(CAPTIONS, reference["ranking"]):
        hits = retriever.text_to_image_retrieve(caption)
        assert [int(h.node.node_id) for h in hits] == expected
    by_image = retriever.image_to_image_retrieve(str(paths[1]))
    assert by_image[0].node.image_path == str(paths[1])


# ---- LangChain -------------------------------------------------------------------
def test_langchain_embed_image(sie_url, paths, reference):
    from sie_langchain import SIEImageEmbeddings

    embeddings = SIEImageEmbeddings(model=CLIP, url=sie_url)
    assert_same_vectors(embeddings.embed_image([str(p) for p in paths]), reference["images"])
    assert_same_vectors(embeddings.embed_image([f"file://{paths[0]}"]), reference["images"][:1])
    assert_same_vectors(asyncio.run(embeddings.aembed_image([paths[1]])), reference["images"][1:2])
    assert ranking([embeddings.embed_query(c) for c in CAPTIONS],
                   embeddings.embed_image([str(p) for p in paths])) == reference["ranking"]
    with pytest.raises(ValueError, match="URL"):
        embeddings.embed_image(["https://example.com/cat.png"])


# ---- Haystack --------------------------------------------------------------------
def test_haystack_image_indexing_and_text_query_pipelines(sie_url, paths, reference):
    from haystack import Document, Pipeline
    from haystack.components.retrievers.in_memory import InMemoryEmbeddingRetriever
    from haystack.components.writers import DocumentWriter
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    from sie_haystack import SIEDocumentImageEmbedder, SIETextEmbedder

    store = InMemoryDocumentStore(embedding_similarity_function="cosine")
    indexing = Pipeline()
    indexing.add_component("embedder", SIEDocumentImageEmbedder(model=CLIP, url=sie_url,
                                                                root_path=str(paths[0].parent), progress_bar=False))
    indexing.add_component("writer", DocumentWriter(document_store=store))
    indexing.connect("embedder.documents", "writer.documents")
    documents = [Document(id=str(i), content=f"picture {i}", meta={"file_path": p.name}) for i, p in enumerate(paths)]
    indexing.run({"embedder": {"documents": documents}})
    stored = {d.id: d.embedding for d in store.filter_documents()}
    assert_same_vectors([stored[str(i)] for i in range(len(paths))], reference["images"])

    query = Pipeline()
    query.add_component("embedder", SIETextEmbedder(model=CLIP, url=sie_url))
    query.add_component("retriever", InMemoryEmbeddingRetriever(document_store=store, top_k=len(paths)))
    query.connect("embedder.embedding", "retriever.query_embedding")
    for caption, expected in zip(CAPTIONS, reference["ranking"]):
        hits = query.run({"embedder": {"text": caption}})["retriever"]["documents"]
        assert [int(d.id) for d in hits] == expected

    embedder = SIEDocumentImageEmbedder.from_dict(indexing.get_component("embedder").to_dict())
    async_run = asyncio.run(embedder.run_async(documents[:2]))
    assert_same_vectors([d.embedding for d in async_run["documents"]], reference["images"][:2])
    with pytest.raises(ValueError, match="file_path"):
        embedder.run([Document(content="no image here")])
