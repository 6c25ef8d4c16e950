"""The OpenAPI document agrees with the server, and the smaller items of issue #19 point 6.

`test_every_documented_answer_is_replayed`: for each path, method and status that
`/openapi.json` documents for SIE's own API, a request crafted to cause that status is
sent to a real server (tiny models) and the answer is validated against the documented
schema with jsonschema; every path also answers an undocumented method with 405, `Allow`
and the documented MethodNotAllowed body. The compatibility APIs (operations tagged
`compat:*`) answer in their own shapes and are replayed by their own tests.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import shutil
import threading
import time
from pathlib import Path

import httpx
import jsonschema
import pytest
from test_zeroshot_nli import _bert_nli

import fixed_label_models
from image_fixtures import make_tiny_clip, sample_images
from reliability_models import tiny_model_set
from server_fixtures import start_server
from sie_engine.errors import ModelLoadFailed
from sie_server.errors import error_body
from tiny_models import save_tiny, tiny_bert_config

KEY = "replay-key"
MAX_BODY = 64 * 2**10
BODY_IDLE_S = 0.25
MODEL_FOR = {"encode": "enc", "score": "ce", "extract": "gl", "embeddings": "enc"}
VALID = {
    "encode": {"items": ["hello world"]},
    "score": {"query": "capital of France", "items": ["Paris is the capital", "bananas"]},
    "extract": {"items": ["Ada Lovelace lived in London."], "labels": ["person", "city"]},
}


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    roots = tiny_model_set(tmp_path_factory.mktemp("replay-models"))
    roots["nli"] = _bert_nli(tmp_path_factory.mktemp("replay-nli") / "nli")  # Hugging Face's classification route
    roots["cls"] = fixed_label_models.bert(tmp_path_factory.mktemp("replay-cls") / "cls")  # Infinity's /classify
    broken = {}
    for name in ("enc", "ce", "gl", "nli", "cls"):  # each model's files with its weights damaged: a 503 for each task
        broken[f"broken-{name}"] = tmp_path_factory.mktemp("replay-broken") / name
        shutil.copytree(roots[name], broken[f"broken-{name}"])
        for weights in [*broken[f"broken-{name}"].glob("*.safetensors"), *broken[f"broken-{name}"].glob("*.bin")]:
            weights.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": not json}")
    # an image-text model for Weaviate's multi2vec-clip route, and its damaged copy
    roots["clip"] = make_tiny_clip(tmp_path_factory.mktemp("replay-clip") / "clip")
    broken["broken-clip"] = tmp_path_factory.mktemp("replay-broken") / "clip"
    shutil.copytree(roots["clip"], broken["broken-clip"])
    for weights in broken["broken-clip"].glob("*.safetensors"):
        weights.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": not json}")
    empty = tmp_path_factory.mktemp("replay-empty") / "empty"
    shutil.copytree(roots["enc"], empty)
    (empty / "model.safetensors").unlink()
    return {**roots, **broken, "empty": empty, **sparse_and_multivector(tmp_path_factory.mktemp("replay-cards"))}


SPLADE = Path(list(importlib.util.find_spec("cognition").submodule_search_locations)[0]) / "model"
CARDS = """\
id: {name}
weights: {{path: {root}}}
family: bert
outputs: [{output}]
max_seq_len: 128
options:
  {options}
"""
SPARSE = "sparse: {kind: splade}"
COLBERT = ("multivector: {kind: colbert, query_marker: '[unused0]', document_marker: '[unused1]', query_length: 12, "
           "expand_queries: true}")


def sparse_and_multivector(tmp: Path) -> dict[str, Path]:
    """Cards (in `tmp/cards`, for --models) of a sparse model (the real SPLADE-tiny) and a tiny
    random ColBERT, each with a copy whose weights are damaged: TEI's embed_sparse and
    embed_all need them."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import BertModel

    torch.manual_seed(0)
    colbert = save_tiny(BertModel(tiny_bert_config(), add_pooling_layer=False).eval(), tmp / "colbert")
    weights = {f"bert.{k}": v for k, v in load_file(str(colbert / "model.safetensors")).items()}
    weights["linear.weight"] = torch.randn(16, 32) * 0.2  # colbert-ir's projection
    save_file(weights, str(colbert / "model.safetensors"))
    roots = {"splade": SPLADE, "colbert": colbert}
    (tmp / "cards").mkdir()
    for name, output, options in (("splade", "sparse", SPARSE), ("colbert", "multivector", COLBERT)):
        damaged = tmp / f"broken-{name}"
        shutil.copytree(roots[name], damaged)
        for weights_file in damaged.glob("*.safetensors"):
            weights_file.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\": not json}")
        for card, root in ((name, roots[name]), (f"broken-{name}", damaged)):
            (tmp / "cards" / f"{card}.yaml").write_text(CARDS.format(name=card, root=root, output=output,
                                                                     options=options))
    return {"cards": tmp / "cards"}


@pytest.fixture(scope="module")
def server(roots, tmp_path_factory):
    models = [a for name, root in roots.items() if name != "cards" for a in ("--model", f"{name}={root}")]
    models += ["--models", str(roots["cards"])]
    process = start_server(*models, "--no-builtin", "--device", "cpu", "--api-key", KEY,
                           "--preload", "enc", "--preload", "ce", "--preload", "gl",
                           "--max-body-bytes", str(MAX_BODY), "--body-idle-timeout", str(BODY_IDLE_S),
                           "--max-queue-wait", "0.001", wait_ready=False,
                           log_dir=tmp_path_factory.mktemp("replay-server"))
    # while the preloads run, readiness is 503 not_ready: the one moment that answer occurs
    process.starting_readyz = httpx.get(process.url + "/readyz", timeout=10)
    deadline = time.monotonic() + 180
    while httpx.get(process.url + "/readyz", timeout=10).status_code != 200:
        assert time.monotonic() < deadline, process.log_text()
        time.sleep(0.2)
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def document(server):
    return httpx.get(server.url + "/openapi.json", timeout=10).json()


def validate(document: dict, schema: dict, value) -> None:
    jsonschema.validate(value, {**schema, "components": document["components"]},
                        cls=jsonschema.Draft202012Validator)


# ---- crafting one request per (operation, status) ---------------------------------
def task_of(path: str) -> str | None:
    parts = path.split("/")
    return parts[2] if len(parts) == 4 and parts[3] == "{model}" and parts[2] in VALID else None


def call(server, method: str, path: str, body=None, key: bool = True, headers=None, content=None) -> httpx.Response:
    sent = {"Authorization": f"Bearer {KEY}"} if key else {}
    sent.update(headers or {})
    return httpx.request(method, server.url + path, json=body, content=content, headers=sent, timeout=30)


def work_request(path: str, model: str) -> tuple[str, dict]:
    """The URL path and a valid body of a work route, for `model`."""
    if path == "/v1/embeddings":
        return path, {"model": model, "input": ["hello world"]}
    task = task_of(path)
    return path.replace("{model}", model), dict(VALID[task])


def flood_until_429(server, url: str, body: dict) -> httpx.Response:
    """Concurrent requests until one is refused for the queue's expected wait (`--max-queue-wait`
    is 1 ms here, so a request that arrives while another is queued is refused)."""
    def bigger(value):  # more work per request: lists 8 times as long, texts 16 times (in objects too)
        if isinstance(value, dict):
            return {name: bigger(inner) for name, inner in value.items()}
        return value * 8 if isinstance(value, list) else value * 16 if isinstance(value, str) else value

    # a model's name and an enum (Cohere's input_type) stay as they are: the flood is of valid requests,
    # so their 429 comes from the queue; a body made invalid was refused 400 before it could queue
    big = {name: value if name in ("model", "input_type") else bigger(value) for name, value in body.items()}
    answers: list[httpx.Response] = []
    for _ in range(5):
        answers.clear()
        threads = [threading.Thread(target=lambda: answers.append(call(server, "POST", url, big))) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        refused = [a for a in answers if a.status_code == 429]
        if refused:
            return refused[0]
    raise AssertionError(f"no 429 from {url}: {[a.status_code for a in answers]}")


def stalled_body(server, url: str) -> httpx.Response:
    """A body that stops arriving: half of it, then nothing (the server waits BODY_IDLE_S)."""
    def halves():
        yield b'{"items": ['
        time.sleep(BODY_IDLE_S * 2)  # past the idle timeout, within the server's linger
        yield b'"x"]}'

    try:
        return httpx.post(server.url + url, content=halves(), timeout=30,
                          headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json",
                                   "Content-Length": "16"})
    except httpx.HTTPError as exc:  # the server closes after answering; the answer is what counts
        raise AssertionError(f"no 408 answer: {exc!r}") from exc


def work_answer(server, path: str, status: str) -> httpx.Response:
    task = "embeddings" if path == "/v1/embeddings" else task_of(path)
    url, body = work_request(path, MODEL_FOR[task])
    if status == "200":
        return call(server, "POST", url, body)
    if status == "400":
        return call(server, "POST", url, {"unknown_field": 1})
    if status == "401":
        return call(server, "POST", url, body, key=False)
    if status == "404":
        return call(server, "POST", *work_request(path, "no-such-model"))
    if status == "408":
        return stalled_body(server, url)
    if status == "413":
        return call(server, "POST", url, content=json.dumps({"items": ["x" * MAX_BODY]}).encode(),
                    headers={"Content-Type": "application/json"})
    if status == "415":
        return call(server, "POST", url, content=json.dumps(body).encode(),
                    headers={"Content-Type": "application/json", "Content-Encoding": "br"})
    if status == "429":
        return flood_until_429(server, url, body)
    if status == "503":
        return call(server, "POST", *work_request(path, "broken-" + MODEL_FOR[task]))
    if status == "504":
        return call(server, "POST", url, body, headers={"X-SIE-Timeout-Ms": "0.001"})
    raise AssertionError(f"no recipe for {status} on {path}")


def read_answer(server, path: str, status: str) -> httpx.Response:
    url = path.replace("{model}", "enc")
    if status == "200":
        return call(server, "GET", url, key=path not in ("/healthz", "/readyz", "/metrics", "/openapi.json",
                                                         "/v1/status"))
    if status == "401":
        return call(server, "GET", url, key=False)
    if status == "404":
        return call(server, "GET", path.replace("{model}", "no-such-model"))
    if status == "503" and path == "/readyz":
        return server.starting_readyz
    raise AssertionError(f"no recipe for {status} on GET {path}")


def sie_operations(document: dict):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            # the compat APIs and the admin API (tests/server/test_runtime_config.py) are replayed elsewhere
            if not any(tag.startswith("compat:") or tag == "admin" for tag in operation.get("tags", ())):
                yield path, method, operation


def test_every_documented_answer_is_replayed(server, document):
    replayed = []
    for path, method, operation in sie_operations(document):
        public = operation.get("security", document["security"]) == []
        if public:  # documented as needing no key: it answers without one
            assert call(server, method.upper(), path, key=False).status_code != 401, path
        for status, answer_doc in operation["responses"].items():
            answer = (work_answer if method == "post" else read_answer)(server, path, status)
            assert answer.status_code == int(status), (path, method, status, answer.text[:300])
            content = answer_doc.get("content", {})
            media = answer.headers["Content-Type"].split(";")[0]
            assert media in content, (path, status, media, list(content))
            if media == "application/json":
                validate(document, content[media]["schema"], answer.json())
            if int(status) in (429, 503):
                assert "Retry-After" in answer.headers or answer.headers.get("X-Should-Retry") == "false"
            replayed.append((path, method, status))
    assert len(replayed) >= 50, replayed


def test_every_path_answers_an_undocumented_method_with_405_and_allow(server, document):
    schema = document["components"]["responses"]["MethodNotAllowed"]["content"]["application/json"]["schema"]
    for path, item in document["paths"].items():
        method = "DELETE" if "delete" not in item else "PATCH"
        answer = call(server, method, path.replace("{model}", "enc"))
        assert answer.status_code == 405, (path, answer.status_code, answer.text[:200])
        assert set(answer.headers["Allow"].split(",")) >= {m.upper() for m in item}, (path, answer.headers["Allow"])
        validate(document, schema, answer.json())


def test_public_routes_are_documented_as_public(document):
    from sie_server.middleware import PUBLIC_ROUTES

    public = {path for path, item in document["paths"].items() for op in item.values() if op.get("security") == []}
    assert public == {"/healthz", "/readyz", "/metrics", "/openapi.json", "/v1/status", "/health"}
    assert {"healthz", "readyz", "metrics", "openapi", "status", "infinity_health"} == set(PUBLIC_ROUTES)


# ---- point 6's smaller items ---------------------------------------------------------
@pytest.mark.parametrize("user", [5, ["a"], {"id": "a"}, True])
def test_embeddings_user_must_be_a_string(server, user):
    answer = call(server, "POST", "/v1/embeddings", {"model": "enc", "input": "hi", "user": user})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "user", answer.text
    assert call(server, "POST", "/v1/embeddings", {"model": "enc", "input": "hi", "user": "u-1"}).status_code == 200


REFUSED = [  # (path, body): bodies the server answers 400
    ("/v1/embeddings", {"model": "enc", "input": "hi", "user": 5}), ("/v1/embeddings", {"model": "enc", "input": []}),
    ("/v1/embeddings", {"model": "enc", "input": "hi", "extra": 1}),
    ("/v1/embeddings", {"model": "enc", "input": ""}),  # OpenAI's 400 for an empty string
    ("/v1/encode/{model}", {"items": []}), ("/v1/extract/{model}", {"items": ["x"], "labels": [" "]}),
    # (blank texts are texts since #29.2: tests/engine/tasks/test_blank_texts.py)
]


@pytest.mark.parametrize("path, body", REFUSED)
def test_request_schemas_refuse_what_the_server_refuses(server, document, path, body):
    schema = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    with pytest.raises(jsonschema.ValidationError):
        validate(document, schema, body)
    model = MODEL_FOR["embeddings" if path == "/v1/embeddings" else task_of(path)]
    assert call(server, "POST", path.replace("{model}", model), body).status_code == 400, body


def test_answers_name_no_local_paths(server, roots):
    listing = call(server, "GET", "/v1/models").text
    for root in roots.values():
        assert str(root) not in listing and str(root.parent) not in listing
    models = {m["id"]: m for m in call(server, "GET", "/v1/models").json()["data"]}
    assert models["enc"]["weights"]["status"] == "local"  # where the weights are stays known
    failed = call(server, "POST", "/v1/encode/empty", VALID["encode"])
    assert failed.status_code == 503 and failed.json()["error"]["reason"] == "not_found", failed.text
    assert str(roots["empty"]) not in failed.text and "…/empty" in failed.json()["error"]["message"]
    assert str(roots["empty"]) in server.log_text()  # the operator's log keeps the whole path


def test_error_messages_name_no_site_packages_paths():
    site = str(Path(jsonschema.__file__).parent.parent)
    error = ModelLoadFailed("m", "error", f"ImportError: cannot import name 'X' from 'transformers' "
                                          f"({site}/transformers/__init__.py)")
    for shape in (False, True):
        message = error_body(error, openai_shape=shape)["error"]["message"]
        assert site not in message and "<site-packages>/transformers/__init__.py" in message


def test_a_corrupt_safetensors_file_is_invalid_weights(server):
    answer = call(server, "POST", "/v1/encode/broken-enc", VALID["encode"])
    assert answer.status_code == 503
    error = answer.json()["error"]
    assert error["code"] == "model_load_failed" and error["reason"] == "invalid_weights", error
    assert error["retryable"] is False and "Retry-After" not in answer.headers


# ---- the compatibility APIs, in their own shapes ------------------------------------
# A valid request per compat operation: (model, body); GETs have no body.
COMPAT_VALID = {
    ("/tei/{model}/embed", "post"): ("enc", {"inputs": "hello world"}),
    ("/tei/{model}/embed_sparse", "post"): ("splade", {"inputs": "hello world"}),
    ("/tei/{model}/embed_all", "post"): ("colbert", {"inputs": "hello world"}),
    ("/tei/{model}/rerank", "post"): ("ce", {"query": "capital of France", "texts": ["Paris", "bananas"]}),
    ("/tei/{model}/predict", "post"): ("ce", {"inputs": ["capital of France", "Paris"]}),
    ("/tei/{model}/similarity", "post"): ("enc", {"inputs": {"source_sentence": "a cat", "sentences": ["a dog"]}}),
    ("/tei/{model}/tokenize", "post"): ("enc", {"inputs": "hello world"}),
    ("/tei/{model}/decode", "post"): ("enc", {"ids": [101, 7592, 2088, 102]}),
    ("/tei/{model}/v1/embeddings", "post"): ("enc", {"input": ["hello world"], "model": "tei"}),
    ("/tei/{model}/embeddings", "post"): ("enc", {"input": "hello world"}),
    ("/tei/{model}/info", "get"): ("enc", None),
    ("/tei/{model}/health", "get"): ("enc", None),
    ("/tei/{model}", "post"): ("enc", {"inputs": "hello world"}),
    ("/tei/{model}", "get"): ("enc", None),
    ("/v1/rerank", "post"): ("ce", {"model": "ce", "query": "capital of France", "documents": ["Paris", "x"]}),
    ("/v2/rerank", "post"): ("ce", {"model": "ce", "query": "capital of France", "documents": ["Paris", "x"]}),
    ("/weaviate/{model}/vectors", "post"): ("enc", {"text": "hello world"}),
    ("/weaviate/{model}/rerank", "post"): ("ce", {"query": "capital of France", "documents": ["Paris", "x"]}),
    ("/weaviate/{model}/vectorize", "post"): ("clip", {"texts": ["a red shoe"], "images": [
        base64.b64encode(sample_images()["png_rgb"]).decode()]}),
    ("/weaviate/{model}/meta", "get"): ("enc", None),
    ("/weaviate/{model}/.well-known/ready", "get"): ("enc", None),
    ("/weaviate/{model}/.well-known/live", "get"): ("enc", None),
    ("/embeddings", "post"): ("enc", {"model": "enc", "input": ["hello world"]}),
    ("/rerank", "post"): ("ce", {"model": "ce", "query": "capital of France", "documents": ["Paris", "x"]}),
    ("/classify", "post"): ("cls", {"model": "cls", "input": ["hello world"]}),
    ("/models", "get"): ("enc", None),
    ("/health", "get"): ("enc", None),
    ("/v2/embed", "post"): ("enc", {"model": "enc", "input_type": "search_query", "texts": ["hello world"]}),
    ("/hf/{model}", "post"): ("nli", {"inputs": "hello world", "parameters": {"candidate_labels": ["a", "b"]}}),
}


def compat_request(path: str, method: str, model: str) -> tuple[str, dict | None]:
    _, body = COMPAT_VALID[(path, method)]
    if body is not None and "model" in body:
        body = {**body, "model": model}
    return path.replace("{model}", model), body


INFINITY_ROUTES = ("/embeddings", "/rerank", "/classify")


def broken_model_answer(server, verb: str, path: str, method: str, model: str) -> httpx.Response:
    # A failed load is remembered for a cool-down only, and reads (TEI /info, Weaviate's ready)
    # load nothing: fail it just now.
    call(server, "POST", f"/v1/encode/broken-{model}", {"items": ["x"]})
    return call(server, verb, *compat_request(path, method, "broken-" + model))


def bad_request(server, verb: str, url: str, path: str, body: dict) -> httpx.Response:
    if path in INFINITY_ROUTES:  # Infinity answers a body it cannot read 422, as FastAPI does; 400 an unnamed model
        return call(server, verb, url, {**body, "model": "default/not-specified"})
    return call(server, verb, url, content=b"{not json", headers={"Content-Type": "application/json"})


def compat_answer(server, path: str, method: str, status: str) -> httpx.Response:
    model, _ = COMPAT_VALID[(path, method)]
    url, body = compat_request(path, method, model)
    verb = method.upper()
    if status in ("200", "204"):
        return call(server, verb, url, body)
    if body is None and status in ("400", "408", "413", "415", "422", "429"):
        raise AssertionError("a GET has no body to get this status from")
    if status == "400":
        return bad_request(server, verb, url, path, body)
    if status == "422":
        return call(server, verb, url, {"unknown_field": 1})
    if status == "401":
        return call(server, verb, url, body, key=False)
    if status == "404":
        return call(server, verb, *compat_request(path, method, "no-such-model"))
    if status == "408":
        return stalled_body(server, url)
    if status == "413":
        return call(server, verb, url, content=json.dumps({"inputs": "x" * MAX_BODY}).encode(),
                    headers={"Content-Type": "application/json"})
    if status == "415":
        return call(server, verb, url, content=json.dumps(body).encode(),
                    headers={"Content-Type": "application/json", "Content-Encoding": "br"})
    if status == "429":
        if path.endswith("/predict"):  # a batch of pairs rather than one longer pair
            body = {"inputs": [body["inputs"]] * 4}
        return flood_until_429(server, url, body)
    if status == "503":
        return broken_model_answer(server, verb, path, method, model)
    if status == "504":
        return call(server, verb, url, body, headers={"X-SIE-Timeout-Ms": "0.001"})
    raise AssertionError(f"no recipe for {status} on {method} {path}")


def test_every_documented_compat_answer_is_replayed(server, document):
    mismatches = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if not any(tag.startswith("compat:") for tag in operation.get("tags", ())):
                continue
            assert (path, method) in COMPAT_VALID, f"no valid request for {method} {path}"
            for status, answer_doc in operation["responses"].items():
                try:
                    answer = compat_answer(server, path, method, status)
                except AssertionError as exc:
                    mismatches.append((method, path, status, str(exc)[:100]))
                    continue
                if answer.status_code != int(status):
                    mismatches.append((method, path, status, answer.status_code, answer.text[:100]))
                    continue
                content = answer_doc.get("content", {})
                if content:
                    media = answer.headers["Content-Type"].split(";")[0]
                    if media not in content:
                        mismatches.append((method, path, status, media))
                    elif media == "application/json":
                        try:
                            validate(document, content[media]["schema"], answer.json())
                        except jsonschema.ValidationError as exc:
                            mismatches.append((method, path, status, exc.message[:100]))
    assert not mismatches, "\n".join(map(str, mismatches))
