"""The clients that cannot share the test install, each from a venv of its own (made once per
machine in the test cache, tests/helpers/side_venvs.py), against a real `sie-server serve` (#29.4):

- infinity_client 0.0.78 (Infinity's generated OpenAPI client; needs httpx<0.28): embeddings,
  rerank, classify, models and health, every answer parsed by the client's own models
  (fixtures/infinity_client_calls.py), so a field, type or enum SIE answered differently from
  Infinity fails the parse, and a refused field is the 422 its HTTPValidationError reads;
- litellm 1.110.2 (botocore's python-dateutil<3 conflicts with the test install's kubernetes):
  its `huggingface` provider on the TEI route, `infinity` on the Infinity routes, `cohere` on
  Cohere's embed v2 and rerank, `openai` on `/v1/embeddings` (fixtures/litellm_calls.py).

Every vector equals SIE's own `/v1/encode` for the same text and mode, and every score its
`/v1/score`, to 1e-5 (float32 through JSON); fields the original server ignores (an `input_type`
sent to Infinity, litellm's `output_dimension` there, TEI's `top_n`) change nothing. One server
and one script run per client for the module.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from compat_fixtures import ASYM, CROSS, DOCS, MATRYOSHKA, QUERY, encode, scores, start_compat_server
from side_venvs import overlay, run_in_venv, side_venv

# the first run on a machine builds infinity_client's venv and litellm's overlay (under a minute); later
# runs reuse them
pytestmark = pytest.mark.timeout(900)
FIXTURES = Path(__file__).parent / "fixtures"
INFINITY_CLIENT = ("infinity_client==0.0.78", "httpx==0.27.2")
# litellm alone, over the test install (side_venvs.overlay): its other dependencies are there, but for
# boto3 (AWS providers) and these three
LITELLM = ("litellm==1.110.2", "fastuuid==0.14.0", "importlib-metadata==8.7.0", "zipp==4.1.2")
TOLERANCE = 1e-5  # float32 vectors and scores written as JSON decimals and read back


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    process = start_compat_server(tmp_path_factory.mktemp("compat-venv-clients"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def reference(server):
    """SIE's native answers for the inputs the clients send."""
    return {"docs": encode(server.url, ASYM, DOCS), "query": encode(server.url, ASYM, [QUERY], is_query=True)[0],
            "raw_docs": encode(server.url, ASYM, DOCS, template=False),
            "matryoshka": encode(server.url, MATRYOSHKA, DOCS[:2]),
            "matryoshka_64": encode(server.url, MATRYOSHKA, DOCS[:2], dims=64, normalize=True),
            "scores": scores(server.url, CROSS, QUERY, DOCS)}


def close(a, b) -> None:
    np.testing.assert_allclose(np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32), atol=TOLERANCE)


def best_first(expected: dict[int, float]) -> list[int]:
    return sorted(expected, key=expected.get, reverse=True)  # type: ignore[arg-type]


# ---- infinity_client ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def infinity(server):
    def call(name: str, kind: str, **body) -> dict:
        return {"name": name, "call": kind, "body": body}

    calls = [
        call("embeddings", "embeddings", model=ASYM, input=DOCS, encoding_format="float"),
        # an OpenAI-minded caller's `input_type` rides in the request model's additional_properties: ignored
        call("ignored", "embeddings", model=ASYM, input=DOCS, input_type="query"),
        call("query_alias", "embeddings", model=f"{ASYM}#query", input=QUERY),
        call("dimensions", "embeddings", model=MATRYOSHKA, input=DOCS[:2], dimensions=64),
        call("unnamed", "embeddings", model="default/not-specified", input=DOCS[:1]),
        call("rerank", "rerank", model=CROSS, query=QUERY, documents=DOCS, top_n=3, return_documents=True),
        call("rerank_bare", "rerank", model=CROSS, query=QUERY, documents=DOCS),
        call("classify_scorer", "classify", model=CROSS, input=DOCS[:1]),
        call("top_n_zero", "rerank", model=CROSS, query=QUERY, documents=DOCS, top_n=0),  # Infinity: gt=0
        call("no_documents", "rerank", model=CROSS, query=QUERY, documents=[]),  # Infinity: min_length=1
        {"name": "models", "call": "models"},
        {"name": "health", "call": "health"},
    ]
    python = side_venv("infinity-client-0.0.78", INFINITY_CLIENT)
    return run_in_venv(python, FIXTURES / "infinity_client_calls.py", server.url, stdin=calls)


def parsed(answers: dict, name: str, model: str) -> dict:
    answer = answers[name]
    assert answer.get("type") == model, (name, answer)
    return answer["value"]


def test_infinity_client_embeddings(infinity, reference):
    plain = parsed(infinity, "embeddings", "OpenAIEmbeddingResult")
    assert plain["object"] == "list" and plain["model"] == ASYM and plain["usage"]["total_tokens"] > 0
    assert [d["index"] for d in plain["data"]] == list(range(len(DOCS))) and {d["object"] for d in plain["data"]} == {
        "embedding"}
    close([d["embedding"] for d in plain["data"]], reference["docs"])
    close([d["embedding"] for d in parsed(infinity, "ignored", "OpenAIEmbeddingResult")["data"]], reference["docs"])
    close(parsed(infinity, "query_alias", "OpenAIEmbeddingResult")["data"][0]["embedding"], reference["query"])
    short = [d["embedding"] for d in parsed(infinity, "dimensions", "OpenAIEmbeddingResult")["data"]]
    assert np.asarray(short).shape == (2, 64)
    close(short, reference["matryoshka_64"])


def test_infinity_client_rerank(infinity, reference):
    expected = reference["scores"]
    ranked = parsed(infinity, "rerank", "ReRankResult")
    assert ranked["object"] == "rerank" and ranked["model"] == CROSS
    assert [r["index"] for r in ranked["results"]] == best_first(expected)[:3]
    for r in ranked["results"]:
        assert r["relevance_score"] == pytest.approx(expected[r["index"]], abs=TOLERANCE)
        assert r["document"] == DOCS[r["index"]]
    bare = parsed(infinity, "rerank_bare", "ReRankResult")["results"]
    assert [r["index"] for r in bare] == best_first(expected) and all("document" not in r for r in bare)


def test_infinity_client_models_health_and_refusals(infinity):
    listed = {m["id"]: m for m in parsed(infinity, "models", "OpenAIModelInfo")["data"]}
    assert listed[ASYM]["owned_by"] == "infinity" and listed[ASYM]["object"] == "model"  # the client's enums
    assert listed[ASYM]["capabilities"] == ["embed"] and listed[CROSS]["capabilities"] == ["rerank"]
    assert isinstance(parsed(infinity, "health", "ResponseHealth")["unix"], float)
    # the client's default model name, and classify on a reranker: Infinity's 400s (undocumented in its
    # OpenAPI, so its client raises UnexpectedStatus), with SIE's message
    for name, words in (("unnamed", "default/not-specified"), ("classify_scorer", "fixed-label classifier")):
        answer = infinity[name]
        assert answer["status"] == 400 and words in answer["content"], (name, answer)
    # a field Infinity's pydantic models refuse: FastAPI's 422, which the client parses as HTTPValidationError
    for name, field in (("top_n_zero", "top_n"), ("no_documents", "documents")):
        [detail] = parsed(infinity, name, "HTTPValidationError")["detail"]
        assert detail["loc"] == ["body", field] and field in detail["msg"], (name, detail)


# ---- litellm ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def litellm(server):
    url = server.url

    def call(name: str, kind: str, model: str, api_base: str, **kwargs) -> dict:
        return {"name": name, "call": kind, "kwargs": {"model": model, "api_base": api_base, **kwargs}}

    # `input_type` is litellm's HF task for its huggingface provider: without it litellm asks
    # huggingface.co for the model's pipeline tag before it calls api_base
    hf = {"input_type": "feature-extraction"}
    cohere = {"api_key": "unused", "api_base": f"{url}/v2/embed"}  # litellm posts to Cohere's api_base as it is
    openai = {"api_key": "unused", "api_base": f"{url}/v1"}
    calls = [
        call("hf", "embedding", f"huggingface/{ASYM}", f"{url}/tei/{ASYM}", input=DOCS, **hf),
        call("hf_query", "embedding", f"huggingface/{ASYM}", f"{url}/tei/{ASYM}%23query", input=[QUERY], **hf),
        # a model name with `sentence-transformers` in it makes litellm send sentence-similarity's request
        call("hf_similarity", "embedding", "huggingface/sentence-transformers/any", f"{url}/tei/{ASYM}", input=DOCS,
             **hf),
        call("hf_rerank", "rerank", f"huggingface/{CROSS}", f"{url}/tei/{CROSS}", query=QUERY, documents=DOCS,
             top_n=2),
        call("infinity", "embedding", f"infinity/{ASYM}", url, input=DOCS),
        # litellm maps `dimensions` to `output_dimension` for Infinity, which Infinity ignores: the full width
        call("infinity_dimensions", "embedding", f"infinity/{MATRYOSHKA}", url, input=DOCS[:2], dimensions=64),
        call("infinity_rerank", "rerank", f"infinity/{CROSS}", url, query=QUERY, documents=DOCS, top_n=2,
             return_documents=True),
        call("missing", "embedding", "infinity/no/such-model", url, input=DOCS[:1]),
        call("cohere", "embedding", f"cohere/{ASYM}", input=DOCS, **cohere),  # litellm's default: search_document
        call("cohere_query", "embedding", f"cohere/{ASYM}", input=[QUERY], input_type="search_query", **cohere),
        # Cohere's output_dimension (litellm's `dimensions`) is served on Matryoshka models
        call("cohere_dimensions", "embedding", f"cohere/{MATRYOSHKA}", input=DOCS[:2], dimensions=64, **cohere),
        call("cohere_rerank", "rerank", f"cohere/{CROSS}", url, query=QUERY, documents=DOCS, top_n=3,
             api_key="unused"),
        call("openai", "embedding", f"openai/{ASYM}", input=DOCS, **openai),
        call("openai_query", "embedding", f"openai/{ASYM}", input=[QUERY], extra_body={"input_type": "query"},
             **openai),
    ]
    folder = overlay("litellm-1.110.2", LITELLM)
    return run_in_venv(Path(sys.executable), FIXTURES / "litellm_calls.py", stdin=calls, pythonpath=folder)


def vectors(answers: dict, name: str) -> np.ndarray:
    answer = answers[name]
    assert "value" in answer, (name, answer)
    data = sorted(answer["value"]["data"], key=lambda d: d["index"])
    return np.asarray([d["embedding"] for d in data], dtype=np.float32)


def test_litellm_huggingface_provider_on_the_tei_route(litellm, reference):
    close(vectors(litellm, "hf"), reference["raw_docs"])  # TEI without prompt_name: the text as sent
    close(vectors(litellm, "hf_query")[0], reference["query"])  # the `#query` alias in api_base
    # litellm's "embeddings" for a sentence-transformers name: TEI's similarity of the first text to the others
    similarities = [d["embedding"] for d in sorted(litellm["hf_similarity"]["value"]["data"], key=lambda d: d["index"])]
    close(similarities, reference["raw_docs"][1:] @ reference["raw_docs"][0])
    ranked = litellm["hf_rerank"]["value"]["results"]
    # TEI has no top_n and ignores it (so does SIE), and litellm does not cut: every text, best first
    assert [r["index"] for r in ranked] == best_first(reference["scores"])
    assert {r["index"]: r["relevance_score"] for r in ranked} == pytest.approx(reference["scores"], abs=TOLERANCE)


def test_litellm_infinity_provider(litellm, reference):
    close(vectors(litellm, "infinity"), reference["docs"])
    close(vectors(litellm, "infinity_dimensions"), reference["matryoshka"])  # output_dimension ignored
    ranked = litellm["infinity_rerank"]["value"]["results"]
    assert [r["index"] for r in ranked] == best_first(reference["scores"])[:2]
    for r in ranked:
        assert r["relevance_score"] == pytest.approx(reference["scores"][r["index"]], abs=TOLERANCE)
        assert r["document"]["text"] == DOCS[r["index"]]
    missing = litellm["missing"]
    assert missing["status"] == 404 and "no/such-model" in missing["message"], missing


def test_litellm_cohere_and_openai_providers(litellm, reference):
    close(vectors(litellm, "cohere"), reference["docs"])
    close(vectors(litellm, "cohere_query")[0], reference["query"])
    close(vectors(litellm, "cohere_dimensions"), reference["matryoshka_64"])
    ranked = litellm["cohere_rerank"]["value"]["results"]
    assert [r["index"] for r in ranked] == best_first(reference["scores"])[:3]
    assert all(r["relevance_score"] == pytest.approx(reference["scores"][r["index"]], abs=TOLERANCE) for r in ranked)
    close(vectors(litellm, "openai"), reference["docs"])
    close(vectors(litellm, "openai_query")[0], reference["query"])


def test_each_client_ran_from_its_own_venv(infinity, litellm):
    """The scripts ran the pinned clients, infinity_client beside the httpx it needs (not the test install's)."""
    assert infinity["_versions"] == {"infinity_client": "0.0.78", "httpx": "0.27.2"}
    assert litellm["_versions"]["litellm"] == "1.110.2"
