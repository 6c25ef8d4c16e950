"""The ecosystem's protocols field by field on a real `sie-server serve`, for the APIs whose
clients are servers or other languages: Weaviate's module protocols (the exact requests its
Go module clients send, the answers checked against the structs they decode into), TEI's
routes beyond what its Python clients call, Jina's and Infinity's request shapes, the errors of
each API in its own shape, and a fuzz of every compatibility route: never a 5xx, every 4xx in
its API's error shape. One server per module (tests/helpers/compat_fixtures.py)."""

from __future__ import annotations

import base64
import json
import math

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compat_fixtures import ASYM, CROSS, DOCS, MATRYOSHKA, QUERY, SPLADE, encode, scores, start_compat_server
from server_fixtures import metric_value
from tiny_models import MINILM_DIR

TEI = f"/tei/{ASYM}"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    process = start_compat_server(tmp_path_factory.mktemp("compat-protocols"), "--max-items", "40")
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


# ---- Weaviate's module protocols -----------------------------------------------------------------
def go_decode(value, go_type: str, where: str):
    """What Go's encoding/json does with `value` decoded into a field of `go_type`: null leaves
    the zero value; a wrong type is an error (which fails the module's whole call)."""
    if value is None:
        return None
    kinds = {"string": str, "int": int, "float64": (int, float), "[]float32": list, "[]DocumentScore": list}
    assert isinstance(value, kinds[go_type]) and not isinstance(value, bool), f"{where}: {value!r} is no Go {go_type}"
    if go_type == "[]float32":
        assert all(isinstance(v, (int, float)) for v in value), where
    return value


def vec_request(answer: httpx.Response) -> dict:
    """transformers.go's `vecRequest` {Text string, Dims int, Vector []float32, Error string}."""
    body = answer.json()
    assert isinstance(body, dict)
    return {"Text": go_decode(body.get("text"), "string", "text"), "Dims": go_decode(body.get("dims"), "int", "dims"),
            "Vector": go_decode(body.get("vector"), "[]float32", "vector"),
            "Error": go_decode(body.get("error"), "string", "error")}


def rank_response(answer: httpx.Response) -> dict:
    """ranker.go's `RankResponse` {Query string, Scores []DocumentScore, Property string, Score float64,
    Error string}."""
    body = answer.json()
    decoded = {"Query": go_decode(body.get("query"), "string", "query"),
               "Scores": go_decode(body.get("scores"), "[]DocumentScore", "scores"),
               "Property": go_decode(body.get("property"), "string", "property"),
               "Score": go_decode(body.get("score"), "float64", "score"),
               "Error": go_decode(body.get("error"), "string", "error")}
    for i, item in enumerate(decoded["Scores"] or []):
        go_decode(item.get("document"), "string", f"scores[{i}].document")
        go_decode(item.get("score"), "float64", f"scores[{i}].score")
    return decoded


def weaviate_vectorize(http, base: str, text: str, task_type: str, dimensions: int | None = None) -> httpx.Response:
    """The bytes Weaviate's Go client sends: json.Marshal(vecRequest{Text, Config}) with its zero
    values (dims 0, vector null, error "") and the omitempty config (pooling_strategy is set by
    the class settings' default; dimensions only when configured)."""
    config = {"pooling_strategy": "masked_mean", "task_type": task_type}
    if dimensions is not None:
        config["dimensions"] = dimensions
    body = json.dumps({"text": text, "dims": 0, "vector": None, "error": "", "config": config}, separators=(",", ":"))
    return http.post(f"{base}/vectors", content=body, headers={"Content-Type": "application/json"})


def test_weaviate_text2vec_transformers(http, server):
    base = f"/weaviate/{ASYM}"
    assert http.get(f"{base}/.well-known/ready").status_code == 204  # CheckReady: any status <= 299
    assert http.get(f"{base}/.well-known/live").status_code == 204
    meta = http.get(f"{base}/meta")
    assert meta.status_code == 200 and isinstance(meta.json(), dict)  # map[string]any
    assert meta.json()["model"]["_name_or_path"] == ASYM

    passage = vec_request(weaviate_vectorize(http, base, DOCS[0], "passage"))
    np.testing.assert_allclose(passage["Vector"], encode(server.url, ASYM, DOCS[:1])[0], atol=1e-5)
    assert passage["Text"] == DOCS[0] and passage["Dims"] == 384 and not passage["Error"]
    query = vec_request(weaviate_vectorize(http, base, QUERY, "query"))
    np.testing.assert_allclose(query["Vector"], encode(server.url, ASYM, [QUERY], is_query=True)[0], atol=1e-5)
    # separate passage / query inference URLs (passageInferenceUrl, queryInferenceUrl) both work
    aliased = vec_request(weaviate_vectorize(http, f"/weaviate/{ASYM}%23query", QUERY, "query"))
    np.testing.assert_allclose(aliased["Vector"], query["Vector"], atol=1e-6)

    short = vec_request(weaviate_vectorize(http, f"/weaviate/{MATRYOSHKA}", DOCS[0], "passage", dimensions=128))
    assert short["Dims"] == 128 and len(short["Vector"]) == 128
    refused = weaviate_vectorize(http, base, DOCS[0], "passage", dimensions=128)  # no Matryoshka sizes
    assert refused.status_code == 400 and "Matryoshka" in vec_request(refused)["Error"]
    unknown = weaviate_vectorize(http, "/weaviate/no/such-model", DOCS[0], "passage")
    assert unknown.status_code == 404 and vec_request(unknown)["Error"]
    assert http.get("/weaviate/no/such-model/.well-known/ready").status_code == 404


def test_weaviate_reranker_transformers(http, server):
    base = f"/weaviate/{CROSS}"
    assert http.get(f"{base}/.well-known/ready").status_code == 204
    assert isinstance(http.get(f"{base}/meta").json(), dict)
    documents = [f"{DOCS[i % len(DOCS)]} ({i})" for i in range(40)]
    expected = scores(server.url, CROSS, QUERY, documents)
    got = []
    for start in range(0, len(documents), 32):  # ranker.go chunks documents by 32 and keeps their order
        chunk = documents[start:start + 32]
        body = json.dumps({"query": QUERY, "documents": chunk, "property": ""}, separators=(",", ":"))
        answer = http.post(f"{base}/rerank", content=body, headers={"Content-Type": "application/json"})
        assert answer.status_code == 200, answer.text
        decoded = rank_response(answer)
        assert [s["document"] for s in decoded["Scores"]] == chunk
        got += [s["score"] for s in decoded["Scores"]]
    np.testing.assert_allclose(got, [expected[i] for i in range(len(documents))], atol=1e-6)
    single = rank_response(http.post(f"{base}/rerank", json={"query": QUERY, "property": DOCS[0]}))
    assert single["Score"] == pytest.approx(scores(server.url, CROSS, QUERY, DOCS[:1])[0], abs=1e-6)
    failed = http.post(f"/weaviate/{ASYM}/rerank", json={"query": QUERY, "documents": DOCS, "property": ""})
    assert failed.status_code == 400 and rank_response(failed)["Error"]  # "fail with status 400: <error>"


# ---- TEI -------------------------------------------------------------------------------------------
def test_tei_embed_fields(http, server):
    reference = encode(server.url, ASYM, DOCS[:2], template=False)  # TEI: no prompt_name, no prompt
    np.testing.assert_allclose(http.post(f"{TEI}/embed", json={"inputs": DOCS[:2]}).json(), reference, atol=1e-5)
    single = http.post(f"{TEI}/embed", json={"inputs": DOCS[0], "truncate": True, "truncation_direction": "Right",
                                             "normalize": False, "prompt_name": "passage"}).json()
    assert len(single) == 1  # TEI answers a list of vectors for a single input too
    np.testing.assert_allclose(single[0], encode(server.url, ASYM, DOCS[:1], normalize=False)[0], atol=1e-5)
    short = http.post(f"/tei/{MATRYOSHKA}/embed", json={"inputs": DOCS[0], "dimensions": 64}).json()[0]
    assert len(short) == 64 and np.linalg.norm(short) == pytest.approx(1.0, abs=1e-5)


def test_tei_sparse_rerank_predict_similarity(http, server):
    sparse = http.post(f"/tei/{SPLADE}/embed_sparse", json={"inputs": ["capital of france"]}).json()[0]
    reference = httpx.post(f"{server.url}/v1/encode/{SPLADE}", json={"items": ["capital of france"],
                                                                       "output_types": ["sparse"]}).json()
    assert [t["index"] for t in sparse] == reference["items"][0]["sparse"]["indices"]
    np.testing.assert_allclose([t["value"] for t in sparse], reference["items"][0]["sparse"]["values"], atol=1e-6)
    assert http.post(f"/tei/{SPLADE}", json={"inputs": "capital of france"}).json()[0] == sparse  # the root route

    expected = scores(server.url, CROSS, QUERY, DOCS)
    ranked = http.post(f"/tei/{CROSS}/rerank", json={"query": QUERY, "texts": DOCS, "return_text": True}).json()
    assert [r["index"] for r in ranked] == sorted(expected, key=expected.get, reverse=True)
    assert all(r["text"] == DOCS[r["index"]] and r["score"] == pytest.approx(expected[r["index"]]) for r in ranked)
    assert http.post(f"/tei/{CROSS}", json={"query": QUERY, "texts": DOCS}).json()[0]["index"] == ranked[0]["index"]
    pair = http.post(f"/tei/{CROSS}/predict", json={"inputs": [QUERY, DOCS[2]]}).json()
    assert pair == [{"score": pytest.approx(expected[2]), "label": "LABEL_0"}]
    batch = http.post(f"/tei/{CROSS}/predict", json={"inputs": [[QUERY, DOCS[0]], ["other", DOCS[1]],
                                                                [QUERY, DOCS[3]]]}).json()
    assert batch[0][0]["score"] == pytest.approx(expected[0]) and batch[2][0]["score"] == pytest.approx(expected[3])

    vectors = encode(server.url, ASYM, DOCS, template=False)
    similarity = http.post(f"{TEI}/similarity", json={"inputs": {"source_sentence": DOCS[0], "sentences": DOCS[1:]}})
    np.testing.assert_allclose(similarity.json(), vectors[1:] @ vectors[0], atol=1e-5)


def test_tei_tokenize_info_health(http):
    tokens = http.post(f"/tei/{MATRYOSHKA}/tokenize", json={"inputs": "héllo world"}).json()
    assert [t["text"] for t in tokens[0]] == ["[CLS]", "héllo", "world", "[SEP]"]
    assert tokens[0][1] == {"id": 7592, "text": "héllo", "special": False, "start": 0, "stop": 6}  # byte offsets
    assert tokens[0][0]["special"] and tokens[0][0]["start"] is None
    # the tokens SIE embeds: the prompt named (query or document), none without prompt_name (as TEI)
    for prompt_name, prompt in (("query", ["query", ":"]), ("passage", ["passage", ":"]), (None, [])):
        prompted = http.post(f"{TEI}/tokenize", json={"inputs": ["hi"], "prompt_name": prompt_name,
                                                      "add_special_tokens": False}).json()
        assert [t["text"] for t in prompted[0]] == [*prompt, "hi"]
    info = http.get(f"{TEI}/info").json()
    required = {"model_id", "model_dtype", "served_model_name", "model_type", "max_concurrent_requests",
                "max_input_length", "max_batch_tokens", "max_client_batch_size", "auto_truncate",
                "tokenization_workers", "version"}  # TEI's Info struct, required fields
    assert required <= set(info) and info["max_client_batch_size"] == 40 and info["model_dtype"] == "float32"
    assert http.get(f"/tei/{SPLADE}/info").json()["model_type"] == {"embedding": {"pooling": "splade"}}
    assert http.get(f"{TEI}/health").status_code == 200 and http.get(TEI).status_code == 200


def test_tei_decode_is_the_rust_tokenizers_decode(http):
    """TEI's /decode runs the model's Rust tokenizer's decode (core/src/tokenization.rs decode_ids):
    the same library here, on the same tokenizer.json, is the reference."""
    from tokenizers import Tokenizer

    reference = Tokenizer.from_file(str(MINILM_DIR / "tokenizer.json"))
    texts = ["héllo world", "pip installs Python packages from PyPI."]
    batch = [[t["id"] for t in tokens] for tokens in http.post(f"{TEI}/tokenize", json={"inputs": texts}).json()]
    assert batch[0][0] == reference.token_to_id("[CLS]")  # special tokens in: the decode's flag matters
    assert http.post(f"{TEI}/decode", json={"ids": batch}).json() == reference.decode_batch(batch) == [
        "hello world", "pip installs python packages from pypi."]  # the uncased model's normaliser
    kept = http.post(f"{TEI}/decode", json={"ids": batch, "skip_special_tokens": False}).json()
    assert kept == reference.decode_batch(batch, skip_special_tokens=False) and kept[0].startswith("[CLS]")
    # one list of ids answers a list of one text, as TEI's InputIds::Single does
    assert http.post(f"{TEI}/decode", json={"ids": batch[1]}).json() == [reference.decode(batch[1])]


def test_tei_openai_route_at_the_models_url(server, http):
    """TEI's /v1/embeddings (and /embeddings) at the model's base URL, driven by the openai SDK as a
    TEI user points it (base_url `.../tei/<model>/v1`, any model name): TEI's /embed vectors, no
    prompt unless the URL's alias names one, normalised."""
    import openai

    plain = np.asarray(http.post(f"{TEI}/embed", json={"inputs": DOCS}).json())
    client = openai.OpenAI(base_url=f"{server.url}{TEI}/v1", api_key="unused", max_retries=0)
    answer = client.embeddings.create(model="tei", input=DOCS)  # the SDK asks for base64 and decodes it
    assert answer.model == ASYM and answer.usage.prompt_tokens > len(DOCS)
    np.testing.assert_allclose([d.embedding for d in answer.data], plain, atol=1e-6)
    floats = http.post(f"{TEI}/embeddings", json={"input": DOCS[0], "encoding_format": "float"}).json()
    np.testing.assert_allclose(floats["data"][0]["embedding"], plain[0], atol=1e-6)
    queried = http.post(f"/tei/{ASYM}%23query/v1/embeddings", json={"input": [QUERY]}).json()
    expected = http.post(f"{TEI}/embed", json={"inputs": [QUERY], "prompt_name": "query"}).json()
    np.testing.assert_allclose(queried["data"][0]["embedding"], expected[0], atol=1e-6)


@pytest.mark.parametrize("body, status, error_type", [
    ({"input": []}, 400, "Empty"),
    ({"input": ["x", ""]}, 400, "Empty"),
    ({"input": "x", "encoding_format": "int8"}, 422, "Validation"),
    ({"input": "x", "dimensions": 64}, 422, "Validation"),
    ({"input": [101, 7592]}, 422, "Validation"),
    ({"model": "tei"}, 422, "Validation"),
])
def test_tei_openai_route_errors_in_its_shape(http, body, status, error_type):
    answer = http.post(f"{TEI}/v1/embeddings", json=body)
    assert answer.status_code == status, answer.text
    assert answer.json() == {"message": answer.json()["message"], "code": status, "type": error_type}


@pytest.mark.parametrize("method, path, body, status, error_type", [
    ("POST", f"{TEI}/decode", {"ids": []}, 400, "Empty"),
    ("POST", f"{TEI}/decode", {"ids": [[101], []]}, 400, "Empty"),
    ("POST", f"{TEI}/decode", {"ids": "hello"}, 422, "Validation"),
    ("POST", f"{TEI}/decode", {"ids": [101, "world"]}, 422, "Validation"),
    ("POST", f"{TEI}/decode", {"ids": [101, -1]}, 422, "Validation"),
    ("POST", f"{TEI}/decode", {"ids": [[101], [30522]]}, 422, "Validation"),  # beyond the vocabulary
    ("POST", f"{TEI}/decode", {"ids": [[101]] * 41}, 413, "Validation"),
    ("POST", f"{TEI}/decode", {"ids": [101], "skip_special_tokens": "yes"}, 422, "Validation"),
    ("POST", f"{TEI}/embed", {"inputs": []}, 400, "Empty"),
    ("POST", f"{TEI}/embed", {"inputs": ["x", ""]}, 400, "Empty"),
    ("POST", f"{TEI}/embed", {"inputs": [101, 7592, 102]}, 422, "Validation"),
    ("POST", f"{TEI}/embed", {"inputs": "x", "dimensions": 64}, 422, "Validation"),
    ("POST", f"{TEI}/embed", {"inputs": "x", "truncation_direction": "left"}, 422, "Validation"),
    ("POST", f"{TEI}/embed", {"inputs": "x", "prompt_name": "classification"}, 422, "Validation"),
    ("POST", f"{TEI}/embed", {"inputs": ["x"] * 41}, 413, "Validation"),
    ("POST", f"{TEI}/embed_all", {"inputs": "x"}, 422, "Validation"),
    ("POST", f"{TEI}/rerank", {"query": "x", "texts": ["y"]}, 422, "Validation"),
    ("POST", f"/tei/{CROSS}/rerank", {"query": "x", "texts": ["y"], "raw_scores": True}, 422, "Validation"),
    ("POST", f"/tei/{CROSS}/predict", {"inputs": "a text alone"}, 422, "Validation"),
    ("POST", "/tei/no/such-model/embed", {"inputs": "x"}, 404, "Validation"),
    ("GET", f"{TEI}/embed", None, 405, "Validation"),
])
def test_tei_errors_in_tei_shape(http, method, path, body, status, error_type):
    answer = http.request(method, path, json=body)
    assert answer.status_code == status, answer.text
    assert set(answer.json()) == {"error", "error_type"} and answer.json()["error_type"] == error_type


# ---- Jina, Cohere's wire shape, Infinity ----------------------------------------------------------------
def test_jina_rerank_request_and_answer(http, server):
    expected = scores(server.url, CROSS, QUERY, DOCS)
    answer = http.post("/v1/rerank", json={"model": CROSS, "query": QUERY, "top_n": 2,
                                           "documents": [DOCS[0], {"text": DOCS[1]}, DOCS[2], DOCS[3]]})
    body = answer.json()
    assert answer.status_code == 200 and body["model"] == CROSS and body["usage"]["total_tokens"] > 0
    assert [r["index"] for r in body["results"]] == sorted(expected, key=expected.get, reverse=True)[:2]
    assert all(r["document"] == {"text": DOCS[r["index"]]} for r in body["results"])  # Jina returns them by default
    assert body["meta"]["api_version"]["version"] == "1" and body["id"]
    v2 = http.post("/v2/rerank", json={"model": CROSS, "query": QUERY, "documents": DOCS, "max_tokens_per_doc": 512})
    assert "document" not in v2.json()["results"][0] and v2.json()["meta"]["api_version"]["version"] == "2"
    for body, field in [({"model": CROSS, "query": QUERY, "documents": []}, "documents"),
                        ({"query": QUERY, "documents": DOCS}, "model"),
                        ({"model": CROSS, "query": QUERY, "documents": DOCS, "relevant_spans": {"enabled": True}},
                         "relevant_spans"),
                        ({"model": CROSS, "query": QUERY, "documents": [{"image": "x.png"}]}, "documents[0]")]:
        refused = http.post("/v2/rerank", json=body)
        assert refused.status_code == 400 and set(refused.json()) == {"message"} and field in refused.json()["message"]


def test_infinity_routes(http, server):
    reference = encode(server.url, ASYM, DOCS[:2])
    floats = http.post("/embeddings", json={"model": ASYM, "input": DOCS[:2], "dimensions": 0}).json()
    assert floats["object"] == "list" and floats["id"].startswith("infinity-") and floats["usage"]["total_tokens"] > 0
    np.testing.assert_allclose([d["embedding"] for d in floats["data"]], reference, atol=1e-5)
    packed = http.post("/embeddings", json={"model": ASYM, "input": DOCS[0], "encoding_format": "base64"}).json()
    np.testing.assert_allclose(np.frombuffer(base64.b64decode(packed["data"][0]["embedding"]), "<f4"), reference[0],
                               atol=1e-5)
    expected = scores(server.url, CROSS, QUERY, DOCS)
    ranked = http.post("/rerank", json={"model": CROSS, "query": QUERY, "documents": DOCS, "top_n": 3,
                                        "return_documents": True}).json()
    assert ranked["object"] == "rerank" and len(ranked["results"]) == 3
    assert all(r["document"] == DOCS[r["index"]] and r["relevance_score"] == pytest.approx(expected[r["index"]])
               for r in ranked["results"])
    models = {m["id"]: m for m in http.get("/models").json()["data"]}
    assert models[ASYM]["capabilities"] == ["embed"] and models[CROSS]["capabilities"] == ["rerank"]
    for body, status in [({"model": CROSS, "input": "x"}, 400),  # a reranker: Infinity's ModelNotDeployedError
                         ({"model": "no/such-model", "input": "x"}, 404)]:
        refused = http.post("/embeddings", json=body)
        error = refused.json()["error"]
        assert refused.status_code == status and error["code"] == status and error["message"], refused.text
    # a field its pydantic models refuse: FastAPI's 422 with the field's location
    for path, body, loc in [("/embeddings", {"model": ASYM, "input": "x", "modality": "image"}, ["body", "modality"]),
                            ("/rerank", {"model": CROSS, "query": "q", "documents": ["d"], "raw_scores": True},
                             ["body", "raw_scores"]),
                            ("/rerank", {"model": CROSS, "query": "q", "documents": ["d", None]},
                             ["body", "documents", 1]),
                            ("/embeddings", {"model": ASYM, "input": ["a"], "dimensions": -1}, ["body", "dimensions"])]:
        refused = http.post(path, json=body)
        assert refused.status_code == 422, (body, refused.text)
        [detail] = refused.json()["detail"]
        assert detail["loc"] == loc and detail["msg"] and detail["type"] == "value_error", (body, detail)


def test_openapi_lists_every_compat_route(http):
    paths = http.get("/openapi.json").json()["paths"]
    for path in ("/tei/{model}/embed", "/tei/{model}", "/v1/rerank", "/v2/rerank", "/weaviate/{model}/vectors",
                 "/weaviate/{model}/.well-known/ready", "/embeddings", "/rerank", "/models"):
        operations = paths[path].values()
        assert all(op["tags"][0].startswith("compat:") for op in operations), path


# ---- fuzz: never a 5xx, every error in its API's shape -----------------------------------------------
def tei_shape(body) -> bool:
    return isinstance(body, dict) and set(body) == {"error", "error_type"} and isinstance(body["error"], str)


def cohere_shape(body) -> bool:
    return isinstance(body, dict) and set(body) == {"message"} and isinstance(body["message"], str)


def weaviate_shape(body) -> bool:
    return isinstance(body, dict) and set(body) == {"error"} and isinstance(body["error"], str)


def infinity_shape(body) -> bool:
    """Infinity's OpenAIException body, or FastAPI's HTTPValidationError (its 422 for a field refused)."""
    if isinstance(body, dict) and isinstance(body.get("detail"), list) and body["detail"]:
        return all(set(d) == {"loc", "msg", "type"} and d["loc"][0] == "body" for d in body["detail"])
    return isinstance(body, dict) and isinstance(body.get("error"), dict) and isinstance(body["error"]["code"], int)


def tei_openai_shape(body) -> bool:
    """TEI's OpenAICompatErrorResponse."""
    return isinstance(body, dict) and set(body) == {"message", "code", "type"} and isinstance(body["code"], int)


ROUTES = [  # (method, path, error shape, a valid body to mutate)
    ("POST", f"{TEI}/embed", tei_shape, {"inputs": ["a", "b"], "normalize": True, "prompt_name": "query"}),
    ("POST", f"/tei/{SPLADE}/embed_sparse", tei_shape, {"inputs": "a"}),
    ("POST", f"/tei/{CROSS}/rerank", tei_shape, {"query": "q", "texts": ["a"], "return_text": True}),
    ("POST", f"/tei/{CROSS}/predict", tei_shape, {"inputs": [["q", "a"]]}),
    ("POST", f"{TEI}/similarity", tei_shape, {"inputs": {"source_sentence": "a", "sentences": ["b"]}}),
    ("POST", f"{TEI}/tokenize", tei_shape, {"inputs": "a", "add_special_tokens": False}),
    ("POST", f"{TEI}/decode", tei_shape, {"ids": [[101, 7592, 102], [2088]], "skip_special_tokens": False}),
    ("POST", f"{TEI}/v1/embeddings", tei_openai_shape, {"input": ["a"], "model": "tei", "encoding_format": "float"}),
    ("POST", TEI, tei_shape, {"inputs": "a"}),
    ("POST", f"/tei/{CROSS}", tei_shape, {"query": "q", "texts": ["a"]}),
    ("POST", "/v1/rerank", cohere_shape, {"model": CROSS, "query": "q", "documents": ["a"], "top_n": 1}),
    ("POST", "/v2/rerank", cohere_shape, {"model": CROSS, "query": "q", "documents": ["a"]}),
    ("POST", f"/weaviate/{ASYM}/vectors", weaviate_shape, {"text": "a", "config": {"task_type": "query"}}),
    ("POST", f"/weaviate/{CROSS}/rerank", weaviate_shape, {"query": "q", "documents": ["a"], "property": ""}),
    ("POST", "/embeddings", infinity_shape, {"model": ASYM, "input": ["a"], "dimensions": 0}),
    ("POST", "/rerank", infinity_shape, {"model": CROSS, "query": "q", "documents": ["a"]}),
]
WILD = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([2**63, math.nan, math.inf, 1e308]),
              st.text(max_size=8), st.sampled_from(["", " ", "\x00", "query", "a" * 300, "x#query"])),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)


@st.composite
def mutated(draw, value):
    """`value` with some of its nodes replaced by anything, a field dropped or one added."""
    if draw(st.integers(0, 4)) == 0:
        return draw(WILD)
    if isinstance(value, dict):
        value = {k: draw(mutated(v)) if draw(st.booleans()) else v for k, v in value.items()
                 if draw(st.integers(0, 5))}
        if draw(st.integers(0, 5)) == 0:
            value[draw(st.text(max_size=6))] = draw(WILD)
        return value
    if isinstance(value, list):
        return [draw(mutated(v)) for v in value] + draw(st.lists(WILD, max_size=2))
    return value


EXTRA_FIELDS = {  # optional fields the valid bodies leave out, given wrong values below too
    "/embed": ("truncate", "truncation_direction", "dimensions", "encoding_format"),
    "/rerank": ("raw_scores", "truncate", "top_n", "return_documents"),
    "/predict": ("raw_scores", "parameters"),
    "/v1/rerank": ("rank_fields", "return_documents", "max_chunks_per_doc"),
    "/v2/rerank": ("max_tokens_per_doc", "relevant_spans", "priority", "top_n"),
    "/vectors": ("dims", "vector", "error"),
    "/embeddings": ("encoding_format", "modality", "user"),
}


def test_every_field_of_the_wrong_type_is_a_4xx_in_its_own_shape(http):
    for method, path, shape, valid in ROUTES:
        extra = next((names for suffix, names in EXTRA_FIELDS.items() if path.endswith(suffix)), ())
        for name in [*valid, *extra, "config.task_type", "config.dimensions"]:
            for wrong in ([], {}, [[]], 1.5, -1, "x", True, None, [1, 2]):
                body = json.loads(json.dumps(valid))
                target, key = (body.setdefault("config", {}), name[7:]) if name.startswith("config.") else (body, name)
                target[key] = wrong
                answer = http.request(method, path, json=body)
                assert answer.status_code < 500, (path, body, answer.text)
                assert answer.status_code == 200 or shape(answer.json()), (path, body, answer.text)


def test_fuzzed_compat_requests_get_4xx_in_their_own_shape(http, server):
    statuses: dict[int, int] = {}

    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(route=st.sampled_from(ROUTES), data=st.data())
    def send(route, data):
        method, path, shape, valid = route
        body = json.dumps(data.draw(mutated(valid)), allow_nan=True).encode()
        if data.draw(st.integers(0, 9)) == 0:
            body = body[:data.draw(st.integers(0, len(body)))]
        answer = http.request(method, path, content=body, headers={"Content-Type": "application/json"})
        statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
        assert answer.status_code < 500, (path, body, answer.text)
        if answer.status_code >= 400:
            assert shape(answer.json()), (path, body, answer.text)

    send()
    assert statuses.get(200, 0) >= 20 and sum(v for k, v in statuses.items() if k >= 400) >= 100, statuses
    assert metric_value(http.get("/metrics").text, "sie_requests_total", status="500") == 0
    assert "Traceback" not in server.log_text()
