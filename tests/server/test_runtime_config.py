"""Models as runtime config (issue #32.3) on one real `sie-server serve`: the admin API
(`/v1/configs/models`) with and without its key, cards checked as `--models` files are and
nothing applied when one is bad, replace and remove, `pinned` and `idle_evict_s` honoured by the
pool and shown in `/v1/models`, the cards read back after a restart of the server process, and
each admin answer validated against the OpenAPI document.

The models are tiny random BERTs (two seeds) with the real MiniLM tokenizer; served vectors are
compared with transformers' BertModel on the same weights. The memory budget (12 MiB) holds two
of them (5.3 MiB charged each: weights plus a 512-token batch reserve) but not three.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import jsonschema
import numpy as np
import pytest

from server_fixtures import start_server
from tiny_models import make_tiny_bert

ADMIN_KEY = "admin-secret"
API_KEY = "user-key"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
USER = {"Authorization": f"Bearer {API_KEY}"}
CONFIGS = "/v1/configs/models"
TEXTS = ["the capital of France is Paris", "bananas are yellow"]


def card(model_id: str, root, **fields) -> dict:
    return {"id": model_id, "weights": {"path": str(root)}, "family": "bert", "max_seq_len": 128,
            "max_batch_tokens": 512, **fields}


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runtime-models")
    return {"one": make_tiny_bert(tmp / "one", seed=1), "two": make_tiny_bert(tmp / "two", seed=2)}


@pytest.fixture(scope="module")
def setup(roots, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runtime-config")
    (tmp / "admin.keys").write_text(ADMIN_KEY + "\n")
    for folder in ("cards", "log0", "log1"):
        (tmp / folder).mkdir()
    # a card the server starts with, and that --pin pins
    (tmp / "cards" / "base.yaml").write_text(
        f"id: base\nweights: {{path: {roots['one']}}}\nfamily: bert\nmax_seq_len: 128\nmax_batch_tokens: 512\n")
    args = ["--no-builtin", "--device", "cpu", "--models", str(tmp / "cards"), "--api-key", API_KEY,
            "--admin-key-file", str(tmp / "admin.keys"), "--config-dir", str(tmp / "config"),
            "--memory-budget", "12MiB", "--pin", "base", "--idle-evict-s", "600"]
    return tmp, args


@pytest.fixture(scope="module")
def server(setup):
    tmp, args = setup
    holder = {"process": start_server(*args, log_dir=tmp / "log0")}
    try:
        yield holder
    finally:
        holder["process"].stop()


@pytest.fixture(scope="module")
def url(server):
    return server["process"].url


@pytest.fixture(scope="module")
def document(url):
    return httpx.get(url + "/openapi.json", timeout=10).json()


def validated(document: dict, path: str, method: str, answer: httpx.Response) -> httpx.Response:
    """The answer, once it matches what the OpenAPI document says of its path, method and status."""
    responses = document["paths"][path][method]["responses"]
    assert str(answer.status_code) in responses, (path, method, answer.status_code, answer.text)
    schema = responses[str(answer.status_code)]["content"]["application/json"]["schema"]
    jsonschema.validate(answer.json(), {**schema, "components": document["components"]},
                        cls=jsonschema.Draft202012Validator)
    return answer


def encode(url: str, model: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/encode/{model}", json={"items": TEXTS}, headers=USER, timeout=60)


def model_info(url: str, model: str) -> dict:
    return httpx.get(f"{url}/v1/models/{model}", headers=USER, timeout=10).json()


def reference(root, normalize: bool = True) -> np.ndarray:
    """transformers' BertModel, mean pooled over the real tokens (sentence-transformers' recipe)."""
    import torch
    from transformers import AutoTokenizer, BertModel

    tokenizer = AutoTokenizer.from_pretrained(root)
    model = BertModel.from_pretrained(root).eval()
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    if normalize:
        pooled = torch.nn.functional.normalize(pooled, dim=-1)
    return pooled.numpy()


def dense(answer: httpx.Response) -> np.ndarray:
    assert answer.status_code == 200, answer.text
    return np.array([item["dense"] for item in answer.json()["items"]])


def wait_for_state(url: str, model: str, state: str, timeout: float = 10.0) -> float:
    started = time.monotonic()
    while model_info(url, model)["state"] != state:
        assert time.monotonic() - started < timeout, model_info(url, model)
        time.sleep(0.05)
    return time.monotonic() - started


# ---- the admin key ------------------------------------------------------------------------
def test_without_an_admin_key_file_the_admin_api_answers_403_saying_how_to_enable_it():
    """In-process app over an engine with no cards (nothing loads): the admin routes are off."""
    from aiohttp.test_utils import TestClient, TestServer

    from sie_engine import Catalog, Engine
    from sie_server.app import create_app
    from sie_server.settings import ServerSettings

    async def calls() -> list[tuple[int, dict]]:
        engine = Engine(Catalog(), device="cpu", memory_budget="64MiB")
        try:
            async with TestClient(TestServer(create_app(engine, ServerSettings(api_keys=(API_KEY,))))) as client:
                answers = [await client.get(CONFIGS, headers=USER),
                           await client.post(CONFIGS, json=card("x", "/nowhere"), headers=USER),
                           await client.delete(CONFIGS + "/x", headers=ADMIN)]
                return [(a.status, await a.json()) for a in answers]
        finally:
            engine.close()

    for status, body in asyncio.run(calls()):
        assert status == 403, body
        assert body["error"]["code"] == "forbidden" and "--admin-key-file" in body["error"]["message"]


def test_the_api_key_never_grants_the_admin_api(url, document, roots):
    for headers in ({}, USER, {"Authorization": "Bearer wrong"}):
        assert validated(document, CONFIGS, "get", httpx.get(url + CONFIGS, headers=headers)).status_code == 401
        answer = httpx.post(url + CONFIGS, json=card("nope", roots["one"]), headers=headers)
        assert validated(document, CONFIGS, "post", answer).status_code == 401
    assert encode(url, "nope").status_code == 404  # nothing was added
    # and the admin key is no API key: the work routes still want the API key
    assert httpx.post(f"{url}/v1/encode/base", json={"items": TEXTS}, headers=ADMIN).status_code == 401


# ---- add, refuse, replace, remove ---------------------------------------------------------
def test_a_card_added_over_http_is_served_as_the_reference_computes_it(url, document, roots):
    answer = validated(document, CONFIGS, "post", httpx.post(url + CONFIGS, json=card("rt", roots["two"]),
                                                             headers=ADMIN))
    assert answer.status_code == 200 and answer.json() == {"models": ["rt"], "changed": ["rt"]}
    np.testing.assert_allclose(dense(encode(url, "rt")), reference(roots["two"]), atol=1e-5)
    listed = validated(document, CONFIGS, "get", httpx.get(url + CONFIGS, headers=ADMIN)).json()["models"]
    assert [c["id"] for c in listed] == ["rt"] and listed[0]["weights"] == {"path": str(roots["two"])}
    # the same card again changes nothing
    assert httpx.post(url + CONFIGS, json=card("rt", roots["two"]), headers=ADMIN).json()["changed"] == []


@pytest.mark.parametrize("bad, message", [
    ({"id": "c", "bogus": 1}, "invalid model card body[1]: card c: unknown fields ['bogus']"),
    ({"id": "c", "pooling": "median"}, "invalid model card body[1]: card c: pooling 'median' not one of"),
    ({"id": "c", "idle_evict_s": -1}, "invalid model card body[1]: card c: idle_evict_s must be a number"),
    ({"weights": "/x"}, "invalid model card body[1]: card without id"),
    ("just text", "invalid model card body[1]: a card is a mapping of its fields"),
])
def test_a_list_with_one_invalid_card_is_refused_whole(url, document, roots, bad, message, tmp_path):
    before = httpx.get(url + CONFIGS, headers=ADMIN).json()
    answer = httpx.post(url + CONFIGS, json=[card("valid-but-refused", roots["one"]), bad], headers=ADMIN)
    assert validated(document, CONFIGS, "post", answer).status_code == 400
    assert answer.json()["error"]["message"].startswith(message), answer.text
    assert httpx.get(url + CONFIGS, headers=ADMIN).json() == before
    assert encode(url, "valid-but-refused").status_code == 404
    # the words a --models card file with the same content gets
    import yaml

    from sie_engine import Catalog

    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ValueError) as raised:
        Catalog().add_directory(tmp_path)
    assert str(raised.value).split(": ", 1)[1] == answer.json()["error"]["message"].split(": ", 1)[1]


def test_a_body_that_is_no_card_is_refused(url):
    for body in (b"[]", b"{not json", b"42"):
        answer = httpx.post(url + CONFIGS, content=body, headers={**ADMIN, "Content-Type": "application/json"})
        assert answer.status_code == 400, answer.text
    twice = httpx.post(url + CONFIGS, json=[{"id": "d", "weights": "/x"}, {"id": "d", "weights": "/y"}], headers=ADMIN)
    assert twice.status_code == 400 and "appears twice" in twice.json()["error"]["message"]


def test_a_replaced_card_is_unloaded_and_served_from_the_new_card(url, roots):
    assert model_info(url, "rt")["state"] == "loaded"
    answer = httpx.post(url + CONFIGS, json=card("rt", roots["two"], normalize=False), headers=ADMIN)
    assert answer.json()["changed"] == ["rt"]
    wait_for_state(url, "rt", "available")  # the old card's weights go once nothing uses them
    np.testing.assert_allclose(dense(encode(url, "rt")), reference(roots["two"], normalize=False), atol=1e-5)


def test_delete_stops_serving_and_a_replaced_start_card_comes_back(url, document, roots):
    path = CONFIGS + "/{model}"
    answer = validated(document, path, "delete", httpx.delete(url + CONFIGS + "/rt", headers=ADMIN))
    assert answer.json() == {"removed": "rt", "restored": False}
    assert encode(url, "rt").status_code == 404
    assert "rt" not in [c["id"] for c in httpx.get(url + CONFIGS, headers=ADMIN).json()["models"]]
    again = validated(document, path, "delete", httpx.delete(url + CONFIGS + "/rt", headers=ADMIN))
    assert again.status_code == 404
    not_runtime = httpx.delete(url + CONFIGS + "/base", headers=ADMIN)
    assert not_runtime.status_code == 404 and "restart" in not_runtime.json()["error"]["message"]
    # a runtime card over a card the server started with; removing it serves the start card again
    httpx.post(url + CONFIGS, json=card("base", roots["two"], normalize=False), headers=ADMIN).raise_for_status()
    assert httpx.delete(url + CONFIGS + "/base", headers=ADMIN).json() == {"removed": "base", "restored": True}
    np.testing.assert_allclose(dense(encode(url, "base")), reference(roots["one"]), atol=1e-5)


def test_a_delete_while_a_request_is_queued_still_answers_it(url, roots):
    import threading

    httpx.post(url + CONFIGS, json=card("brief", roots["two"]), headers=ADMIN).raise_for_status()
    many = {"items": [f"text number {i} " * 10 for i in range(512)]}  # ~40 batches of 512 tokens
    answers: list[httpx.Response] = []
    sender = threading.Thread(target=lambda: answers.append(
        httpx.post(f"{url}/v1/encode/brief", json=many, headers=USER, timeout=120)))
    sender.start()
    queued = False
    while sender.is_alive() and not queued:
        status = httpx.get(url + "/v1/status", timeout=10).json()
        queued = status["models"].get("brief", {}).get("queued_items", 0) > 0
    assert queued, "the request ended before it was seen queued"
    httpx.delete(url + CONFIGS + "/brief", headers=ADMIN).raise_for_status()
    assert encode(url, "brief").status_code == 404  # new requests: at once
    sender.join()
    assert answers[0].status_code == 200, answers[0].text  # the queued one: answered
    assert len(answers[0].json()["items"]) == 512


# ---- pinned and idle_evict_s --------------------------------------------------------------
def test_models_show_pinned_and_idle_evict_s(url, roots):
    httpx.post(url + CONFIGS, json=[card("idle", roots["two"], idle_evict_s=0.3),
                                    card("never", roots["two"], idle_evict_s=0)], headers=ADMIN).raise_for_status()
    shown = {m["id"]: (m["pinned"], m["idle_evict_s"])
             for m in httpx.get(url + "/v1/models", headers=USER).json()["data"]}
    assert shown["base"] == (True, None)  # --pin: a pin outranks the server's idle limit
    assert shown["idle"] == (False, 0.3)  # the card's own
    assert shown["never"] == (False, None)  # 0: never
    assert model_info(url, "idle")["idle_evict_s"] == 0.3
    from sie_client import SIEClient  # the typed client's model info carries both

    with SIEClient(url, api_key=API_KEY) as client:
        typed = {m.id: (m.pinned, m.idle_evict_s) for m in client.models()}
    assert typed == shown


def test_a_model_idle_past_its_idle_evict_s_is_unloaded(url, roots):
    expected = reference(roots["two"])
    served = encode(url, "idle")
    assert model_info(url, "idle")["state"] == "loaded"  # 0.3 s: asked at once, it is still there
    waited = wait_for_state(url, "idle", "available", timeout=5.0)
    assert waited < 3.0, waited  # its 0.3 s and the timer's wake-up, not some far later sweep
    np.testing.assert_allclose(dense(served), expected, atol=1e-5)
    assert encode(url, "idle").status_code == 200  # it loads again when asked


def test_a_pinned_model_is_never_evicted_and_what_needs_its_memory_is_refused(url, roots):
    assert dense(encode(url, "base")).shape == (2, 32)  # --pin base: loaded, and pinned
    httpx.post(url + CONFIGS, json=card("held", roots["one"], pinned=True), headers=ADMIN).raise_for_status()
    np.testing.assert_allclose(dense(encode(url, "held")), reference(roots["one"]), atol=1e-5)
    refused = encode(url, "idle")  # the budget holds two models: both pinned
    assert refused.status_code == 503, refused.text
    error = refused.json()["error"]
    assert error["reason"] == "out_of_memory" and "pinned" in error["message"], error
    assert "base" in error["message"] and "held" in error["message"]
    assert {model_info(url, m)["state"] for m in ("base", "held")} == {"loaded"}
    # unpinned, "held" is evicted for another model as before (LRU under the budget)
    httpx.post(url + CONFIGS, json=card("held", roots["one"]), headers=ADMIN).raise_for_status()
    np.testing.assert_allclose(dense(encode(url, "idle")), reference(roots["two"]), atol=1e-5)
    assert model_info(url, "held")["state"] == "available" and model_info(url, "base")["state"] == "loaded"


# ---- persistence --------------------------------------------------------------------------
def test_runtime_cards_are_served_again_after_a_restart(server, setup, url, roots):
    tmp, args = setup
    before = httpx.get(url + CONFIGS, headers=ADMIN).json()
    assert {c["id"] for c in before["models"]} == {"idle", "never", "held"}
    server["process"].stop()
    server["process"] = restarted = start_server(*args, log_dir=tmp / "log1")
    assert httpx.get(restarted.url + CONFIGS, headers=ADMIN).json() == before
    assert model_info(restarted.url, "idle")["idle_evict_s"] == 0.3
    np.testing.assert_allclose(dense(encode(restarted.url, "idle")), reference(roots["two"]), atol=1e-5)


def test_every_catalog_card_survives_the_config_file(tmp_path):
    """What --config-dir writes reads back to equal cards, for every kind of card SIE ships
    (sparse, multivector, extract, image-text options and templates)."""
    from sie_engine import Catalog
    from sie_server.runtime_cards import RuntimeCards

    cards = list(Catalog.builtin())
    RuntimeCards(tmp_path).put(cards)
    assert not [p for p in tmp_path.iterdir() if p.name != "models.yaml"]  # no temporary file left
    assert RuntimeCards(tmp_path).load() == cards
