"""A split server (`--frontends 2`) answers every route as one process does (issue #27: "what
the server promises today holds across it").

Two real servers on the same tiny models and options, one process and one split in two
frontends and an engine core, get the same requests: every route of SIE's own API, of every
compatibility API (OpenAI, TEI, Cohere, Jina/Cohere rerank, Weaviate, Infinity, Hugging Face),
the admin API and the errors users meet (unknown model, bad body, wrong method). Each pair of
answers must agree: the same status, the same error, the same JSON with numbers within batch
invariance's tolerance; only what names a process or a moment (request ids, timestamps, pids,
timings) is left out. `test_every_route_is_compared` fails when a route is added that the list
leaves out.
"""

from __future__ import annotations

import base64
import math
import re
from pathlib import Path

import httpx
import pytest
import yaml
from test_zeroshot_nli import _bert_nli

import fixed_label_models
from image_fixtures import make_tiny_clip, sample_images
from reliability_models import tiny_model_set
from server_fixtures import start_server

ADMIN_KEY = "parity-admin-key"
RTOL, ATOL = 1e-4, 1e-5  # batch invariance: a text's vector alone and in a batch
# Answer fields that name a process or a moment, not what was computed
VOLATILE = {"created", "request_id", "pid", "uptime_s", "timings", "memory_bytes"}
FRESH_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # an answer's own uuid4
ADMIN_ROUTES = {"configs_list", "configs_add", "configs_remove"}  # test_admin_changes_reach_every_frontend


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    roots = tiny_model_set(tmp_path_factory.mktemp("parity-models"))
    roots["nli"] = _bert_nli(tmp_path_factory.mktemp("parity-nli") / "nli")
    roots["cls"] = fixed_label_models.bert(tmp_path_factory.mktemp("parity-cls") / "cls")
    roots["clip"] = make_tiny_clip(tmp_path_factory.mktemp("parity-clip") / "clip")
    return roots


def _start(models: dict[str, Path], base: Path, *extra: str):
    key_file = base / "admin-keys"
    key_file.write_text(ADMIN_KEY + "\n")
    args = [a for name, root in models.items() for a in ("--model", f"{name}={root}")]
    return start_server(*args, "--no-builtin", "--device", "cpu", "--admin-key-file", str(key_file),
                        "--config-dir", str(base / "config"), "--preload", "enc", *extra, log_dir=base)


@pytest.fixture(scope="module")
def servers(models, tmp_path_factory):
    one = _start(models, tmp_path_factory.mktemp("parity-one"))
    try:
        split_base = tmp_path_factory.mktemp("parity-split")
        split = _start(models, split_base, "--frontends", "2")
        split.config_dir = split_base / "config"
        try:
            yield one, split
        finally:
            split.stop()
    finally:
        one.stop()


IMAGE = base64.b64encode(next(data for name, data in sample_images().items() if name.startswith("png"))).decode()
# (method, path, JSON body or None): every route, answered and refused
REQUESTS: list[tuple[str, str, object]] = [
    # SIE's own API
    ("POST", "/v1/encode/enc", {"items": ["hello world", "the quick brown fox"]}),
    ("POST", "/v1/encode/enc", {"items": ["hello"], "dims": 999}),
    ("POST", "/v1/encode/nope", {"items": ["hello"]}),
    ("POST", "/v1/score/ce", {"query": "capital of France", "items": ["Paris is the capital", "bananas"]}),
    ("POST", "/v1/extract/gl", {"items": ["Ada Lovelace lived in London."], "labels": ["person", "city"]}),
    ("POST", "/v1/extract/cls", {"items": ["what a lovely day"]}),
    ("POST", "/v1/extract/nli", {"items": ["the match ended 2-1"], "labels": ["sport", "politics"]}),
    ("POST", "/v1/extract/enc", {"items": ["x"], "labels": ["y"]}),
    ("GET", "/v1/models", None),
    ("GET", "/v1/models/enc", None),
    ("GET", "/v1/models/nope", None),
    ("GET", "/v1/status", None),
    ("GET", "/healthz", None),
    ("GET", "/readyz", None),
    ("GET", "/openapi.json", None),
    ("GET", "/metrics", None),
    ("DELETE", "/v1/models", None),
    # OpenAI
    ("POST", "/v1/embeddings", {"model": "enc", "input": ["hello world", "a second text"]}),
    ("POST", "/v1/embeddings", {"model": "enc", "input": "one", "encoding_format": "base64"}),
    ("POST", "/v1/embeddings", {"model": "nope", "input": "one"}),
    # TEI
    ("POST", "/tei/enc/embed", {"inputs": ["hello world", "the quick brown fox"]}),
    ("POST", "/tei/enc/embed", {"inputs": "hello world", "prompt_name": "query"}),
    ("POST", "/tei/enc/embed_sparse", {"inputs": "hello"}),
    ("POST", "/tei/enc/embed_all", {"inputs": "hello world"}),
    ("POST", "/tei/ce/rerank", {"query": "capital of France", "texts": ["Paris", "bananas"], "return_text": True}),
    ("POST", "/tei/cls/predict", {"inputs": "what a lovely day"}),
    ("POST", "/tei/ce/predict", {"inputs": [["capital of France", "Paris"]]}),
    ("POST", "/tei/enc/similarity", {"inputs": {"source_sentence": "hello", "sentences": ["hi there", "bye"]}}),
    ("POST", "/tei/enc/tokenize", {"inputs": ["hello world", "the quick brown fox"]}),
    ("POST", "/tei/enc/tokenize", {"inputs": "hello world", "add_special_tokens": False}),
    ("POST", "/tei/enc/tokenize", {"inputs": "hello world", "prompt_name": "query"}),
    ("POST", "/tei/enc/decode", {"ids": [[101, 7592, 2088, 102], [2088]], "skip_special_tokens": False}),
    ("POST", "/tei/enc/decode", {"ids": [101, 99999999]}),  # refused in the engine core's tokenizer pool
    ("POST", "/tei/enc/decode", {"ids": [[101], []]}),
    ("POST", "/tei/enc/v1/embeddings", {"input": ["hello world", "a second text"], "model": "tei"}),
    ("POST", "/tei/enc/embeddings", {"input": ""}),
    ("GET", "/tei/enc/info", None),
    ("GET", "/tei/ce/info", None),
    ("GET", "/tei/cls/info", None),
    ("GET", "/tei/enc/health", None),
    ("GET", "/tei/nope/health", None),
    ("POST", "/tei/enc", {"inputs": "hello world"}),
    ("GET", "/tei/enc", None),
    # Cohere and Jina rerank, Cohere embed
    ("POST", "/v1/rerank", {"model": "ce", "query": "capital of France", "documents": ["Paris", "bananas"]}),
    ("POST", "/v2/rerank", {"model": "ce", "query": "capital of France", "documents": ["Paris", "bananas"],
                            "top_n": 1}),
    ("POST", "/v2/embed", {"model": "enc", "texts": ["hello"], "input_type": "search_query",
                           "embedding_types": ["float", "int8"]}),
    # Weaviate
    ("POST", "/weaviate/enc/vectors", {"text": "hello world"}),
    ("POST", "/weaviate/enc/vectors/", {"text": "hello world"}),
    ("POST", "/weaviate/ce/rerank", {"query": "capital of France", "documents": ["Paris", "bananas"]}),
    ("POST", "/weaviate/clip/vectorize", {"texts": ["a photo"], "images": [IMAGE]}),
    ("GET", "/weaviate/enc/meta", None),
    ("GET", "/weaviate/clip/meta", None),
    ("GET", "/weaviate/enc/.well-known/ready", None),
    ("GET", "/weaviate/enc/.well-known/live", None),
    # Infinity
    ("POST", "/embeddings", {"model": "enc", "input": ["hello world"]}),
    ("POST", "/rerank", {"model": "ce", "query": "capital of France", "documents": ["Paris", "bananas"]}),
    ("POST", "/classify", {"model": "cls", "input": ["what a lovely day"]}),
    ("GET", "/models", None),
    ("GET", "/health", None),
    # Hugging Face's InferenceClient
    ("POST", "/hf/enc", {"inputs": "hello world"}),
    ("POST", "/hf/cls", {"inputs": "what a lovely day"}),
    ("POST", "/hf/nli", {"inputs": "the match ended 2-1", "parameters": {"candidate_labels": ["sport", "news"]}}),
    ("POST", "/hf/ce", {"inputs": {"source_sentence": "hello", "sentences": ["hi", "bye"]}}),
]


def _send(server, method: str, path: str, body: object, headers: dict | None = None) -> httpx.Response:
    return httpx.request(method, server.url + path, json=body, headers=headers, timeout=60)


def _comparable(value, path: str = ""):
    """The answer without what names a process or a moment."""
    if isinstance(value, dict):
        return {k: _comparable(v, f"{path}.{k}") for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_comparable(v, path) for v in value]
    if isinstance(value, str):  # Cohere's and Infinity's answer ids: a fresh uuid each
        return FRESH_ID.sub("<uuid>", value)
    return value


def _differences(a, b, where: str = "$") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        found = [f"{where}: keys {sorted(set(a) ^ set(b))} in one answer only"] if set(a) != set(b) else []
        return found + [d for k in set(a) & set(b) for d in _differences(a[k], b[k], f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} against {len(b)} entries"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{where}[{i}]")]
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return [] if math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL) else [f"{where}: {a} against {b}"]
    return [] if a == b else [f"{where}: {a!r} against {b!r}"]


def _answer(response: httpx.Response):
    if response.headers.get("content-type", "").startswith("application/json"):
        return _comparable(response.json())
    return response.content if response.request.url.path != "/metrics" else None


def test_every_route_answers_as_one_process(servers):
    one, split = servers
    failures = []
    for method, path, body in REQUESTS:
        a, b = _send(one, method, path, body), _send(split, method, path, body)
        if a.status_code != b.status_code:
            failures.append(f"{method} {path}: {a.status_code} against {b.status_code}: {b.text[:300]}")
            continue
        if a.headers.get("content-type") != b.headers.get("content-type"):
            failures.append(f"{method} {path}: content-type {a.headers.get('content-type')} against "
                            f"{b.headers.get('content-type')}")
            continue
        found = _differences(_answer(a), _answer(b))
        if found:
            failures.append(f"{method} {path} ({a.status_code}): " + "; ".join(found[:5]))
    assert not failures, "\n".join(failures)


def _route_of(routes, method: str, path: str) -> str | None:
    """The name of the route aiohttp matches first (as the server's router does)."""
    for route in routes:
        info = route.resource.get_info()
        if route.method == method and (info.get("path") == path or
                                       ("pattern" in info and info["pattern"].fullmatch(path))):
            return route.name
    return None


def test_every_route_is_compared():
    """A route added to the server fails here until REQUESTS sends it to both servers."""
    from sie_engine import Engine
    from sie_engine.card import Catalog
    from sie_server import create_app

    engine = Engine(Catalog(), device="cpu")
    try:
        routes = [r for r in create_app(engine).router.routes() if r.method != "HEAD"]
    finally:
        engine.close()
    compared = {_route_of(routes, method, path) for method, path, _ in REQUESTS} | ADMIN_ROUTES
    assert {r.name for r in routes} - compared == set()


def test_admin_changes_reach_every_frontend(servers, models):
    """A card added through one frontend is served and listed by every frontend at once; its
    removal too, and the config dir keeps what the engine serves."""
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    card = {"id": "runtime/enc", "weights": {"path": str(models["enc"])}, "family": "bert", "outputs": ["dense"],
            "max_seq_len": 64}
    for server in servers:
        added = _send(server, "POST", "/v1/configs/models", card, headers)
        assert added.status_code == 200, added.text
        assert added.json() == {"models": ["runtime/enc"], "changed": ["runtime/enc"]}
    one, split = servers
    for _ in range(8):  # new connections: the kernel spreads them over both frontends
        listed = httpx.get(split.url + "/v1/configs/models", headers={**headers, "Connection": "close"}, timeout=30)
        assert [c["id"] for c in listed.json()["models"]] == ["runtime/enc"]
        encoded = httpx.post(split.url + "/v1/encode/runtime/enc", json={"items": ["hello"]},
                             headers={"Connection": "close"}, timeout=60)
        assert encoded.status_code == 200, encoded.text
        status = httpx.get(split.url + "/v1/status", headers={"Connection": "close"}, timeout=30).json()
        assert status["configs"] == _send(one, "GET", "/v1/status", None).json()["configs"]
    persisted = yaml.safe_load((split.config_dir / "models.yaml").read_text())
    assert [c["id"] for c in persisted["models"]] == ["runtime/enc"]
    for server in servers:
        removed = _send(server, "DELETE", "/v1/configs/models/runtime/enc", None, headers)
        assert removed.status_code == 200, removed.text
    for _ in range(8):
        gone = httpx.post(split.url + "/v1/encode/runtime/enc", json={"items": ["hello"]},
                          headers={"Connection": "close"}, timeout=60)
        assert gone.status_code == 404, gone.text
