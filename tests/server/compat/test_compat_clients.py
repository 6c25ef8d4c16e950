"""The ecosystem's own clients against a real `sie-server serve`, with no code of SIE's between
them: `openai` (query and document mode), huggingface_hub's `InferenceClient`, Chroma's
`HuggingFaceEmbeddingServer`, LlamaIndex's `TextEmbeddingsInference` embeddings and TEI
reranker, and the `cohere` client (v1 and v2 rerank); then the same query through every route
(OpenAI, TEI, Weaviate's module, Infinity) gives `/v1/encode`'s query-mode vector, also through
the router. One server per module (tests/helpers/compat_fixtures.py)."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest

from compat_fixtures import ASYM, CROSS, DOCS, MATRYOSHKA, QUERY, encode, scores, start_compat_server
from router_fixtures import start_router

QUERY_ALIAS = f"{ASYM}%23query"  # `#query` in a URL path (a bare `#` would start the fragment)
DOCUMENT_ALIAS = f"{ASYM}%23document"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    process = start_compat_server(tmp_path_factory.mktemp("compat-clients"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def reference(server):
    """/v1/encode's vectors of QUERY and DOCS in both modes, and as sent (no prompt: what TEI embeds
    without prompt_name)."""
    return {"query": encode(server.url, ASYM, [QUERY], is_query=True)[0],
            "query_as_document": encode(server.url, ASYM, [QUERY])[0],
            "docs": encode(server.url, ASYM, DOCS),
            "raw_query": encode(server.url, ASYM, [QUERY], template=False)[0],
            "raw_docs": encode(server.url, ASYM, DOCS, template=False)}


def close(a, b, atol: float = 1e-5) -> None:
    np.testing.assert_allclose(np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32), atol=atol)


def test_query_mode_changes_the_vector(reference):
    assert float(reference["query"] @ reference["query_as_document"]) < 0.99  # the prompts matter for this model


# ---- OpenAI ------------------------------------------------------------------------------
def test_openai_client_query_and_document_modes(server, reference):
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    documents = client.embeddings.create(model=ASYM, input=DOCS)  # base64, as the client asks by default
    close([d.embedding for d in documents.data], reference["docs"])
    by_field = client.embeddings.create(model=ASYM, input=QUERY, extra_body={"input_type": "query"})
    close(by_field.data[0].embedding, reference["query"])
    by_alias = client.embeddings.create(model=f"{ASYM}#query", input=[QUERY], encoding_format="float")
    close(by_alias.data[0].embedding, reference["query"])
    assert by_alias.model == ASYM
    explicit_document = client.embeddings.create(model=ASYM, input=QUERY, extra_body={"input_type": "document"})
    close(explicit_document.data[0].embedding, reference["query_as_document"])


def test_openai_dimensions_only_where_the_model_has_matryoshka_sizes(server):
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    short = client.embeddings.create(model=MATRYOSHKA, input=DOCS[:2], dimensions=64)
    vectors = np.array([d.embedding for d in short.data])
    assert vectors.shape == (2, 64)
    close(vectors, encode(server.url, MATRYOSHKA, DOCS[:2], dims=64, normalize=True))
    full = client.embeddings.create(model=ASYM, input=DOCS[0], dimensions=384)  # the full width cuts nothing
    assert len(full.data[0].embedding) == 384
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model=ASYM, input=DOCS[0], dimensions=64)
    assert "Matryoshka" in str(refused.value) and refused.value.body["param"] == "dimensions"


def test_openai_token_ids_and_mode_conflicts_are_refused_with_the_fix(server):
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model=ASYM, input=[[101, 7592, 102]])
    assert "check_embedding_ctx_length=False" in str(refused.value)
    with pytest.raises(openai.BadRequestError) as conflict:
        client.embeddings.create(model=f"{ASYM}#query", input="x", extra_body={"input_type": "document"})
    assert conflict.value.body["param"] == "input_type"
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model=f"{ASYM}#queries", input="x")


# ---- Hugging Face TEI clients ----------------------------------------------------------------
def test_huggingface_hub_inference_client(server, reference, monkeypatch):
    from huggingface_hub import InferenceClient, constants
    from huggingface_hub.errors import HfHubHTTPError

    # the suite runs with HF_HUB_OFFLINE=1 (no hub downloads), which also blocks requests to a local URL
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)

    client = InferenceClient(model=f"{server.url}/tei/{ASYM}")
    close(client.feature_extraction(DOCS), reference["raw_docs"])  # TEI: no prompt_name, no prompt
    close(client.feature_extraction(DOCS, prompt_name="passage"), reference["docs"])
    close(client.feature_extraction(QUERY, prompt_name="query")[0], reference["query"])
    close(InferenceClient(model=f"{server.url}/tei/{QUERY_ALIAS}").feature_extraction(QUERY)[0], reference["query"])
    similarities = client.sentence_similarity(DOCS[0], other_sentences=DOCS[1:])
    close(similarities, reference["raw_docs"][1:] @ reference["raw_docs"][0])
    endpoint = InferenceClient(model=f"{server.url}/tei/{ASYM}", provider="hf-inference")  # what info needs
    info = endpoint.get_endpoint_info()
    assert info["model_id"] == ASYM and info["model_type"] == {"embedding": {"pooling": "mean"}}
    assert endpoint.health_check()
    cross = InferenceClient(model=f"{server.url}/tei/{CROSS}", provider="hf-inference")
    assert cross.get_endpoint_info()["model_type"]["reranker"]["id2label"] == {"0": "LABEL_0"}
    with pytest.raises(HfHubHTTPError) as refused:  # single-text classification: no SIE model serves it
        cross.text_classification("a text alone")
    assert refused.value.response.status_code == 422 and "pair" in refused.value.response.json()["error"]


def test_chroma_huggingface_embedding_server(server, reference):
    import chromadb
    from chromadb.config import Settings
    from chromadb.utils.embedding_functions import HuggingFaceEmbeddingServer

    close(HuggingFaceEmbeddingServer(url=f"{server.url}/tei/{ASYM}/embed")(DOCS), reference["raw_docs"])
    documents = HuggingFaceEmbeddingServer(url=f"{server.url}/tei/{DOCUMENT_ALIAS}/embed")
    close(documents(DOCS), reference["docs"])
    queries = HuggingFaceEmbeddingServer(url=f"{server.url}/tei/{QUERY_ALIAS}/embed")
    close(queries([QUERY])[0], reference["query"])

    client = chromadb.EphemeralClient(Settings(anonymized_telemetry=False))
    collection = client.create_collection("compat", embedding_function=documents, configuration={
        "hnsw": {"space": "cosine"}})
    collection.add(ids=[str(i) for i in range(len(DOCS))], documents=DOCS)
    hits = collection.query(query_embeddings=queries([QUERY]), n_results=2)
    assert set(hits["ids"][0]) == {"0", "3"}  # the two documents about installing packages


def test_llamaindex_text_embeddings_inference(server, reference):
    from llama_index.embeddings.text_embeddings_inference import TextEmbeddingsInference

    plain = TextEmbeddingsInference(model_name=ASYM, base_url=f"{server.url}/tei/{ASYM}")
    close(plain.get_text_embedding_batch(DOCS), reference["raw_docs"])  # LlamaIndex sends no mode: no prompt
    close(plain.get_query_embedding(QUERY), reference["raw_query"])
    documents = TextEmbeddingsInference(model_name=ASYM, base_url=f"{server.url}/tei/{DOCUMENT_ALIAS}")
    close(documents.get_text_embedding_batch(DOCS), reference["docs"])
    queries = TextEmbeddingsInference(model_name=ASYM, base_url=f"{server.url}/tei/{QUERY_ALIAS}")
    close(queries.get_query_embedding(QUERY), reference["query"])
    close(asyncio.run(queries.aget_query_embedding(QUERY)), reference["query"])


def test_llamaindex_tei_reranker(server):
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
    from llama_index.postprocessor.tei_rerank import TextEmbeddingInference

    expected = scores(server.url, CROSS, QUERY, DOCS)
    reranker = TextEmbeddingInference(base_url=f"{server.url}/tei/{CROSS}", top_n=3)
    nodes = [NodeWithScore(node=TextNode(text=text, id_=str(i)), score=0.0) for i, text in enumerate(DOCS)]
    ranked = reranker.postprocess_nodes(nodes, QueryBundle(QUERY))
    assert [n.node.id_ for n in ranked] == [str(i) for i in sorted(expected, key=expected.get, reverse=True)[:3]]
    for node in ranked:
        assert node.score == pytest.approx(expected[int(node.node.id_)], abs=1e-6)


# ---- Cohere ---------------------------------------------------------------------------------
def test_cohere_client_v1_and_v2_rerank(server):
    import cohere

    expected = scores(server.url, CROSS, QUERY, DOCS)
    best = sorted(expected, key=expected.get, reverse=True)
    v1 = cohere.Client(api_key="unused", base_url=server.url, max_retries=0)
    answer = v1.rerank(model=CROSS, query=QUERY, documents=DOCS, top_n=3, return_documents=True)
    assert [r.index for r in answer.results] == best[:3]
    for r in answer.results:
        assert r.relevance_score == pytest.approx(expected[r.index], abs=1e-6)
        assert r.document.text == DOCS[r.index]
    fielded = v1.rerank(model=CROSS, query=QUERY, rank_fields=["title", "text"],
                        documents=[{"title": "pip", "text": DOCS[0], "url": "u0"}, {"title": "png", "text": DOCS[1]}])
    assert {r.index: r.document for r in fielded.results}[0].url == "u0"  # the object comes back whole

    v2 = cohere.ClientV2(api_key="unused", base_url=server.url, max_retries=0)
    answer = v2.rerank(model=CROSS, query=QUERY, documents=DOCS, top_n=2)
    assert [r.index for r in answer.results] == best[:2]
    assert answer.results[0].relevance_score == pytest.approx(expected[best[0]], abs=1e-6)
    with pytest.raises(cohere.BadRequestError) as refused:
        v2.rerank(model=ASYM, query=QUERY, documents=DOCS)  # an embedder, not a reranker
    assert "score" in refused.value.body["message"]
    with pytest.raises(cohere.NotFoundError):
        v2.rerank(model="no/such-model", query=QUERY, documents=DOCS)


# ---- every route, one vector -------------------------------------------------------------------
def query_vectors(url: str) -> dict[str, np.ndarray]:
    """QUERY in query mode through every route that can ask for it, as each API's client sends it."""
    with httpx.Client(base_url=url, timeout=60) as http:
        def post(path: str, body: dict):
            answer = http.post(path, json=body)
            assert answer.status_code == 200, (path, answer.text)
            return answer.json()

        def openai(body: dict):
            return post("/v1/embeddings", body)["data"][0]["embedding"]

        tei = f"/tei/{ASYM}"
        weaviate_body = {"text": QUERY, "dims": 0, "vector": None, "error": "",
                         "config": {"pooling_strategy": "masked_mean", "task_type": "query"}}
        return {
            "openai input_type": openai({"model": ASYM, "input": QUERY, "input_type": "query"}),
            "openai alias": openai({"model": f"{ASYM}#query", "input": [QUERY]}),
            "tei prompt_name": post(f"{tei}/embed", {"inputs": QUERY, "prompt_name": "query"})[0],
            "tei alias": post(f"/tei/{QUERY_ALIAS}/embed", {"inputs": [QUERY]})[0],
            "tei root": post(tei, {"inputs": QUERY, "prompt_name": "query", "normalize": True})[0],
            "weaviate task_type": post(f"/weaviate/{ASYM}/vectors", weaviate_body)["vector"],
            "infinity alias": post("/embeddings", {"model": f"{ASYM}#query", "input": [QUERY]})["data"][0]["embedding"],
        }


def test_every_route_gives_the_query_vector_of_v1_encode(server, reference):
    for route, vector in query_vectors(server.url).items():
        np.testing.assert_allclose(vector, reference["query"], atol=1e-5, err_msg=route)


def test_the_router_routes_every_api_by_model(server, reference, tmp_path_factory):
    router = start_router([f"--worker={server.url}", "--poll-interval=0.2"], tmp_path_factory.mktemp("router"))
    try:
        for route, vector in query_vectors(router.url).items():
            np.testing.assert_allclose(vector, reference["query"], atol=1e-5, err_msg=f"router: {route}")
        expected = scores(server.url, CROSS, QUERY, DOCS)
        for path, body in [("/v1/rerank", {"model": CROSS, "query": QUERY, "documents": DOCS}),
                           ("/v2/rerank", {"model": CROSS, "query": QUERY, "documents": DOCS}),
                           ("/rerank", {"model": CROSS, "query": QUERY, "documents": DOCS})]:
            answer = httpx.post(router.url + path, json=body, timeout=60)
            assert answer.status_code == 200 and answer.headers["X-SIE-Worker"] == server.url, answer.text
            assert {r["index"]: r["relevance_score"] for r in answer.json()["results"]} == pytest.approx(expected)
        ranked = httpx.post(f"{router.url}/tei/{CROSS}/rerank", json={"query": QUERY, "texts": DOCS}, timeout=60)
        assert {r["index"]: r["score"] for r in ranked.json()} == pytest.approx(expected)
        assert httpx.get(f"{router.url}/weaviate/{ASYM}/.well-known/ready", timeout=10).status_code == 204
        assert httpx.get(f"{router.url}/tei/{ASYM}/info", timeout=10).json()["model_id"] == ASYM
        assert ASYM in {m["id"] for m in httpx.get(f"{router.url}/models", timeout=10).json()["data"]}
        assert httpx.get(f"{router.url}/health", timeout=10).json()["unix"] > 0  # Infinity's, from any worker
    finally:
        router.stop()
