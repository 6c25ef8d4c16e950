"""LoRA adapters and profiles over HTTP on a real `sie-server serve` (one server, tiny random BERT
weights and two random PEFT adapters from a user card): `lora_id` and `profile` on /v1/encode and
through the typed client equal peft's merged model per adapter; requests for two adapters and
the base model at once are each answered with their own; an unknown adapter or profile is a 400
naming the close one; the OpenAPI document declares both fields."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from lora_models import TEXTS, make_lora_models, peft_reference
from server_fixtures import start_server
from sie_client import SIEClient

MODEL = "test/lora-bert"
ROUTE = f"/v1/encode/{MODEL}"
ATOL = 2e-5  # float32, merged weights (peft) against the delta added apart (SIE)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    base, adapters = make_lora_models(tmp_path_factory.mktemp("lora"))
    reference = {name: peft_reference(base, path, TEXTS) for name, path in [(None, None), *adapters.items()]}
    return base, adapters, reference


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    base, adapters, _ = models
    cards = tmp_path_factory.mktemp("cards")
    (cards / "lora.yaml").write_text(json.dumps({
        "id": MODEL, "weights": {"path": str(base)}, "max_seq_len": 120, "max_batch_tokens": 2048,
        "adapters": {name: str(path) for name, path in adapters.items()},
        "profiles": {"short-all": {"lora_id": "all", "dims": 16}}}))
    process = start_server("--models", str(cards), "--preload", MODEL, "--device", "cpu",
                           log_dir=tmp_path_factory.mktemp("log"))
    try:
        yield process
    finally:
        process.stop()


def dense(answer: httpx.Response) -> np.ndarray:
    assert answer.status_code == 200, answer.text
    return np.asarray([item["dense"] for item in answer.json()["items"]], dtype=np.float32)


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def test_lora_id_and_the_base_model_at_once_each_equal_peft_merged(server, models):
    _, _, reference = models
    bodies = [{"items": TEXTS, "lora_id": "qv"}, {"items": TEXTS, "lora_id": "all"}, {"items": TEXTS}]
    with ThreadPoolExecutor(len(bodies)) as pool:  # at once: the scheduler may batch them together
        answers = list(pool.map(lambda body: httpx.post(server.url + ROUTE, json=body, timeout=60), bodies))
    for body, answer in zip(bodies, answers):
        np.testing.assert_allclose(dense(answer), reference[body.get("lora_id")], atol=ATOL,
                                   err_msg=str(body.get("lora_id")))


def test_a_profile_presets_its_adapter_and_options_and_the_typed_client_sends_both(server, models):
    _, _, reference = models
    profiled = httpx.post(server.url + ROUTE, json={"items": TEXTS, "profile": "short-all"}, timeout=60)
    np.testing.assert_allclose(dense(profiled), unit(reference["all"][:, :16]), atol=ATOL)
    with SIEClient(server.url) as client:
        result = client.encode(MODEL, TEXTS, profile="short-all", lora_id="qv", dims=8)  # the request's own win
        np.testing.assert_allclose(result.dense_matrix(), unit(reference["qv"][:, :8]), atol=ATOL)
        result = client.encode(MODEL, TEXTS, lora_id="all")
        np.testing.assert_allclose(result.dense_matrix(), reference["all"], atol=ATOL)


@pytest.mark.parametrize("body, field, message", [
    ({"lora_id": "al"}, "lora_id", "no LoRA adapter 'al'; did you mean 'all'?"),
    ({"profile": "short_all"}, "profile", "no profile 'short_all'; did you mean 'short-all'?"),
    ({"lora_id": 3}, "lora_id", "lora_id"),
])
def test_an_unknown_adapter_or_profile_is_a_400_naming_the_close_one(server, body, field, message):
    answer = httpx.post(server.url + ROUTE, json={"items": ["x"], **body}, timeout=60)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_request" and message in error["message"], error


def test_the_model_lists_its_adapters_and_profiles(server):
    entry = httpx.get(f"{server.url}/v1/models/{MODEL}", timeout=60).json()
    assert entry["adapters"] == ["qv", "all"] and entry["profiles"] == ["short-all"]


def test_the_openapi_document_declares_lora_id_and_profile(server):
    document = httpx.get(server.url + "/openapi.json", timeout=60).json()
    fields = document["components"]["schemas"]["EncodeRequest"]["properties"]
    assert fields["lora_id"]["type"] == fields["profile"]["type"] == "string"
    assert "adapters" in fields["lora_id"]["description"] and "profiles" in fields["profile"]["description"]
