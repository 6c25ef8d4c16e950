"""The compatibility routes as lenient as the servers they imitate, and blank texts answered as
each of them answers them (#29.2, #29.4), with the real clients against a real `sie-server serve`:

- TEI: answers valid under TEI's own OpenAPI document (fixtures/tei-openapi.json, copied from
  huggingface/text-embeddings-inference at commit 0d124dc, docs/openapi.json, Apache-2.0); fields
  it does not know ignored (its serde request structs have no `deny_unknown_fields`); a prompt
  applied only by `prompt_name` (core/src/tokenization.rs, `prepare_pre_prompt`), so a prompt the
  client wrote itself is not doubled; `""` is its `Empty` error (`EncodingInput::is_empty`), `"   "`
  is embedded.
- OpenAI: `""` refused with OpenAI's 400 "'$.input' is invalid", `"   "` embedded.
- Infinity: unknown fields (`input_type`) ignored (pydantic's default `extra="ignore"`), texts
  stripped and embedded (`StringConstraints(strip_whitespace=True)`, no minimum length),
  `owned_by: "infinity"` (its `ModelInfo.owned_by: Literal["infinity"]`).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import jsonschema
import numpy as np
import pytest

from compat_fixtures import ASYM, CROSS, DOCS, PROMPTS, QUERY, SPLADE, encode, scores, start_compat_server

TEI = f"/tei/{ASYM}"
OPENAPI = json.loads((Path(__file__).parent / "fixtures" / "tei-openapi.json").read_text())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    process = start_compat_server(tmp_path_factory.mktemp("compat-leniency"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def _nullable(schema):
    """OpenAPI 3.0's `nullable: true` as JSON Schema's `type: [T, "null"]`."""
    if isinstance(schema, dict):
        schema = {k: _nullable(v) for k, v in schema.items()}
        if schema.pop("nullable", False) and "type" in schema:
            schema["type"] = [schema["type"], "null"]
        return schema
    if isinstance(schema, list):
        return [_nullable(v) for v in schema]
    return schema


COMPONENTS = _nullable(OPENAPI["components"])


def assert_tei_answer(answer: httpx.Response, path: str, method: str = "post") -> None:
    """The answer fits TEI's documented schema for this path and status."""
    responses = OPENAPI["paths"][path][method]["responses"]
    assert str(answer.status_code) in responses, (path, answer.status_code, answer.text)
    schema = _nullable(responses[str(answer.status_code)]["content"]["application/json"]["schema"])
    jsonschema.Draft202012Validator({**schema, "components": COMPONENTS}).validate(answer.json())


def test_tei_answers_fit_teis_openapi(http):
    cases = [("/embed", TEI, {"inputs": DOCS[:2]}), ("/embed_sparse", f"/tei/{SPLADE}", {"inputs": ["capital"]}),
             ("/rerank", f"/tei/{CROSS}", {"query": QUERY, "texts": DOCS, "return_text": True}),
             ("/predict", f"/tei/{CROSS}", {"inputs": [[QUERY, DOCS[0]], [QUERY, DOCS[1]]]}),
             ("/similarity", TEI, {"inputs": {"source_sentence": QUERY, "sentences": DOCS}}),
             ("/tokenize", TEI, {"inputs": ["héllo world", ""]}),
             ("/embed", TEI, {"inputs": ["x", ""]}),  # 400 Empty
             ("/embed", TEI, {"inputs": "x", "prompt_name": "classification"})]  # 422 Validation
    for path, base, body in cases:
        assert_tei_answer(http.post(base + path, json=body), path)
    assert_tei_answer(http.get(f"{TEI}/info"), "/info", "get")
    assert_tei_answer(http.get(f"/tei/{CROSS}/info"), "/info", "get")


def test_tei_ignores_fields_it_does_not_know(http, server):
    """What litellm's huggingface provider and other clients add (TEI's serde ignores them)."""
    reference = encode(server.url, ASYM, DOCS[:2], template=False)
    body = {"inputs": DOCS[:2], "options": {"wait_for_model": True}, "parameters": {}, "model": ASYM,
            "encoding_format": "float", "user": "someone"}
    for path in (f"{TEI}/embed", TEI):
        answer = http.post(path, json=body)
        assert answer.status_code == 200, answer.text
        np.testing.assert_allclose(answer.json(), reference, atol=1e-5)
    ranked = http.post(f"/tei/{CROSS}/rerank", json={"query": QUERY, "texts": DOCS, "top_n": 2, "model": CROSS})
    assert ranked.status_code == 200 and len(ranked.json()) == len(DOCS)  # TEI has no top_n: all, best first
    similarity = http.post(f"{TEI}/similarity", json={"inputs": {"source_sentence": QUERY, "sentences": DOCS[:1]},
                                                      "parameters": {"prompt_name": None, "extra": 1}})
    assert similarity.status_code == 200, similarity.text


def test_tei_applies_a_prompt_only_by_prompt_name(server, monkeypatch):
    """A client that wrote the model's prompt into the text gets exactly that text's vector (not the
    card's document prompt on top of it); prompt_name or the model alias applies the card's prompt."""
    from huggingface_hub import InferenceClient, constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # the suite's offline flag blocks local URLs too
    client = InferenceClient(model=f"{server.url}/tei/{ASYM}")
    intended = encode(server.url, ASYM, [QUERY], is_query=True)[0]  # the card's "query: " prompt
    written = np.asarray(client.feature_extraction(PROMPTS["query"] + QUERY)[0])
    np.testing.assert_allclose(written, intended, atol=1e-5)
    np.testing.assert_allclose(client.feature_extraction(QUERY, prompt_name="query")[0], intended, atol=1e-5)
    passage = encode(server.url, ASYM, DOCS[:1])[0]  # the card's "passage: " prompt
    np.testing.assert_allclose(client.feature_extraction(DOCS[0], prompt_name="passage")[0], passage, atol=1e-5)
    np.testing.assert_allclose(client.feature_extraction(PROMPTS["passage"] + DOCS[0])[0], passage, atol=1e-5)
    tokens = httpx.post(f"{server.url}{TEI}/tokenize", json={"inputs": "query: hi", "add_special_tokens": False})
    assert [t["text"] for t in tokens.json()[0]] == ["query", ":", "hi"]  # no prompt added to the written one


def test_tei_blank_and_empty_texts(http, server, monkeypatch):
    from huggingface_hub import InferenceClient, constants
    from huggingface_hub.errors import HfHubHTTPError

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    client = InferenceClient(model=f"{server.url}/tei/{ASYM}")
    blank = client.feature_extraction(["   ", "\n", DOCS[0]])
    np.testing.assert_allclose(blank, encode(server.url, ASYM, ["   ", "\n", DOCS[0]], template=False), atol=1e-5)
    with pytest.raises(HfHubHTTPError) as empty:
        client.feature_extraction(["x", ""])
    assert empty.value.response.status_code == 400
    assert empty.value.response.json() == {"error": "`inputs` cannot be empty", "error_type": "Empty"}
    # a rerank pair is empty only when both its texts are (TEI's EncodingInput::Dual)
    ranked = http.post(f"/tei/{CROSS}/rerank", json={"query": "", "texts": ["   ", DOCS[0]]})
    expected = scores(server.url, CROSS, "", ["   ", DOCS[0]])
    assert {r["index"]: r["score"] for r in ranked.json()} == pytest.approx(expected)
    both = http.post(f"/tei/{CROSS}/rerank", json={"query": "", "texts": [DOCS[0], ""]})
    assert both.status_code == 400 and both.json()["error_type"] == "Empty"
    assert http.post(f"/tei/{CROSS}/predict", json={"inputs": ["", ""]}).status_code == 400
    assert http.post(f"/tei/{CROSS}/rerank", json={"query": QUERY, "texts": [""]}).status_code == 200


def test_openai_refuses_an_empty_string_and_embeds_a_blank_one(server):
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    for value in ("", ["a", ""]):
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model=ASYM, input=value)
        assert "'$.input' is invalid" in refused.value.message
    blank = client.embeddings.create(model=ASYM, input=["   ", "\n"], encoding_format="float")
    np.testing.assert_allclose([d.embedding for d in blank.data], encode(server.url, ASYM, ["   ", "\n"]),
                               atol=1e-5)


def test_infinity_ignores_input_type_strips_and_embeds_blanks(http, server):
    texts = ["", "   ", f"  {DOCS[0]} "]
    answer = http.post("/embeddings", json={"model": ASYM, "input": texts, "input_type": "query", "user": "u",
                                            "extra": {"any": 1}})
    assert answer.status_code == 200, answer.text
    expected = encode(server.url, ASYM, ["", "", DOCS[0]])  # stripped, as Infinity's pydantic strings are
    np.testing.assert_allclose([d["embedding"] for d in answer.json()["data"]], expected, atol=1e-5)
    ranked = http.post("/rerank", json={"model": CROSS, "query": " ", "documents": ["", DOCS[0]],
                                        "return_documents": True, "raw_scores": False, "instruction": None})
    assert ranked.status_code == 200, ranked.text
    assert {r["index"]: r["relevance_score"] for r in ranked.json()["results"]} == pytest.approx(
        scores(server.url, CROSS, "", ["", DOCS[0]]))
    models = http.get("/models").json()["data"]
    assert models and {m["owned_by"] for m in models} == {"infinity"} and all(m["object"] == "model" for m in models)
