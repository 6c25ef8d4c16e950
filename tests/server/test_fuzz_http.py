"""Property-based fuzzing of every route of a live `sie-server`, driven by the
server's own OpenAPI document (`GET /openapi.json`).

For each route the document lists, hypothesis generates requests from the
route's request schema: bodies that follow it, bodies with any node replaced by
an arbitrary value (wrong types, nulls, NaN / Infinity, huge numbers, empty and
unicode strings, unknown fields), and byte-level damage (truncation, invalid
UTF-8, deep nesting, the wrong content type), in JSON or msgpack, with or
without the API key and with odd timeout and request-id headers; also wrong
methods and model ids that look like paths or hub repositories. Every answer
must come within the timeout, never be a 5xx (a 504 only for a request that set
its own deadline), be a well-formed error for a 4xx, and match the document's
response schema for a 200. Afterwards the server still answers a valid request
with the same vector as before, has logged no unhandled error, and counted no 5xx.
"""

from __future__ import annotations

import json
import math
from urllib.parse import quote

import httpx
import jsonschema
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reliability_models import tiny_model_set
from server_fixtures import metric_value, start_server

KEY = "fuzz-key"
MODELS = ("enc", "ce", "gl")
MAX_ITEMS = 32
EXAMPLES = 2000  # requests, spread over every route


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    roots = tiny_model_set(tmp_path_factory.mktemp("fuzz-models"))
    process = start_server(*[a for name in MODELS for a in ("--model", f"{name}={roots[name]}")], "--no-builtin",
                           "--device", "cpu", "--api-key", KEY, "--max-items", str(MAX_ITEMS),
                           "--max-body-bytes", "256KiB", "--preload", "enc", "--preload", "ce", "--preload", "gl",
                           # a loaded machine measures a slow model: no refusal at admission skews the statuses
                           "--max-queue-wait", "120",
                           log_dir=tmp_path_factory.mktemp("fuzz-server"))
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {KEY}"}) as client:
        yield client


@pytest.fixture(scope="module")
def document(http):
    return http.get("/openapi.json").json()


# ---- values ------------------------------------------------------------------
HUGE = st.sampled_from([2**63, -2**63 - 1, 10**30, 1e308, -1e308, 1e-320])
NASTY_FLOATS = st.sampled_from([math.nan, math.inf, -math.inf, -0.0])
TEXTS = st.one_of(
    st.text(max_size=60),
    st.sampled_from(["", " ", "\x00", "\ud800", "\n\t", "🙂" * 50, "a" * 5000, "word " * 400, "[CLS] [SEP] [MASK]",
                     "<<ENT>>", "<<SEP>>", "../../etc/passwd", "%s%n", "\u202e\u200b"]),
)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10, 5000), HUGE, NASTY_FLOATS,
                    st.floats(allow_nan=False), TEXTS)
WILD = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.one_of(st.sampled_from(["text", "id", "items", "query", "labels", "model", "input", "x"]), st.text(max_size=8)),
    inner, max_size=4), max_leaves=12)


@st.composite
def from_schema(draw, schema: dict, components: dict, mutate: int, depth: int = 0):
    """A value for an OpenAPI (JSON Schema) node; with `mutate` > 0, each node is
    replaced by an arbitrary value with probability mutate/100."""
    if mutate and draw(st.integers(0, 99)) < mutate:
        return draw(WILD)
    if "$ref" in schema:
        return draw(from_schema(components[schema["$ref"].rsplit("/", 1)[1]], components, mutate, depth))
    if "oneOf" in schema:
        return draw(st.one_of(*[from_schema(s, components, mutate, depth) for s in schema["oneOf"]]))
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return draw(st.sampled_from(schema["enum"]))
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = draw(st.sampled_from(kind))
    if kind == "object" or "properties" in schema:
        return _object_from_schema(draw, schema, components, mutate, depth)
    if kind == "array":
        return _array_from_schema(draw, schema, components, mutate, depth)
    if kind == "string":
        return draw(TEXTS)
    if kind == "integer":
        low = schema.get("minimum", -5)
        return draw(st.integers(low, low + 2000) | HUGE.filter(lambda x: isinstance(x, int)))
    if kind == "number":
        return draw(st.floats(-2, 2, allow_nan=False) | NASTY_FLOATS | HUGE)
    if kind == "boolean":
        return draw(st.booleans())
    return draw(WILD)  # an untyped option: anything


def _object_from_schema(draw, schema: dict, components: dict, mutate: int, depth: int) -> dict:
    """from_schema's object: every required property and some optional ones, and with
    `mutate` now and then a property the schema does not have."""
    properties = schema.get("properties", {})
    required = set(schema.get("required", ()))
    value = {}
    for name, sub in properties.items():
        if name in required or draw(st.booleans()):
            value[name] = draw(from_schema(sub, components, mutate, depth + 1))
    if mutate and draw(st.integers(0, 9)) == 0:
        value[draw(st.sampled_from(["extra", "Items", "normalise", "__proto__"]))] = draw(WILD)
    return value


def _array_from_schema(draw, schema: dict, components: dict, mutate: int, depth: int) -> list:
    """from_schema's array: mostly a few items, one time in 20 none or one over the item limit."""
    low = schema.get("minItems", 0)
    size = draw(st.integers(low, max(low, 5)) if draw(st.integers(0, 19)) else st.sampled_from([0, MAX_ITEMS + 1]))
    return [draw(from_schema(schema.get("items", {}), components, mutate, depth + 1)) for _ in range(size)]


def encode_body(value, fmt: str) -> bytes:
    if fmt == "msgpack":
        try:
            return msgpack.packb(value, use_bin_type=True)
        except (OverflowError, TypeError, ValueError, UnicodeEncodeError):
            pass
    return json.dumps(value, allow_nan=True).encode("utf-8", "surrogatepass")


@st.composite
def damaged(draw, raw: bytes) -> bytes:
    how = draw(st.sampled_from(["truncate", "invalid-utf8", "nest", "nest-items", "garbage"]))
    if how == "truncate":
        return raw[:draw(st.integers(0, max(0, len(raw) - 1)))]
    if how == "invalid-utf8":
        at = draw(st.integers(0, len(raw)))
        return raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"])) + raw[at:]
    if how == "nest":
        depth = draw(st.sampled_from([100, 2000, 20000]))
        return b"[" * depth + b"]" * depth
    if how == "nest-items":
        depth = draw(st.sampled_from([50, 600]))
        return b'{"items": [' + b'{"text": ' * depth + b'"x"' + b"}" * depth + b"]}"
    return draw(st.binary(max_size=64))


MODEL_IDS = st.one_of(st.sampled_from(MODELS), st.sampled_from([
    "sentence-transformers/all-MiniLM-L6-v2", "bert-base-uncased", "../../etc/passwd", "/tmp", "%2e%2e%2fenc",
    "enc/../ce", "enc@float16", "enc@int8", "enc@nope", "enc ", "x" * 300]), st.text(min_size=1, max_size=12).filter(
    lambda s: "/" not in s and "?" not in s and "#" not in s))


@st.composite
def requests(draw, document: dict):
    components = document["components"]["schemas"]
    # work routes three times as often: they are where input reaches the models. The ecosystem's
    # APIs (tagged compat:*) answer in their own error shapes: tests/server/compat/test_compat_protocols.py fuzzes them.
    paths = sorted((path, ops) for path, ops in document["paths"].items()
                   if not any(tag.startswith("compat:") for op in ops.values() for tag in op.get("tags", ())))
    path, operations = draw(st.sampled_from(paths + [p for p in paths if "post" in p[1]] * 2))
    method = draw(st.sampled_from(sorted(operations))).upper() if draw(st.integers(0, 19)) else \
        draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "OPTIONS"]))
    url = path.replace("{model}", quote(draw(MODEL_IDS), safe="/@%"))
    headers = {}
    auth = draw(st.integers(0, 19))
    headers["Authorization"] = f"Bearer {KEY}" if auth else draw(st.sampled_from(["", "Bearer wrong", f"Basic {KEY}"]))
    if draw(st.integers(0, 9)) == 0:
        headers["X-SIE-Timeout-Ms"] = draw(st.sampled_from(["0.001", "1", "5000", "-1", "nan", "inf", "1e309", "soon"]))
    if draw(st.integers(0, 9)) == 0:
        headers["X-Request-Id"] = draw(st.sampled_from(["ok-id-1", "bad id\twith tab", "x" * 500, "ünï"]))
    fmt = draw(st.sampled_from(["json", "json", "msgpack"]))
    if fmt == "msgpack":
        headers["Content-Type"] = "application/msgpack"
        headers["Accept"] = draw(st.sampled_from(["application/msgpack", "application/json", "*/*"]))
    else:
        headers["Content-Type"] = draw(st.sampled_from(["application/json"] * 4 + ["text/plain", "application/x-www"]))
    body = None
    operation = operations.get(method.lower())
    if method in ("POST", "PUT") and operation and "requestBody" in operation:
        schema = operation["requestBody"]["content"]["application/json"]["schema"]
        mutate = draw(st.sampled_from([0, 0, 5, 15, 40]))
        value = draw(from_schema(schema, components, mutate))
        if path.startswith("/v1/embeddings") and isinstance(value, dict) and draw(st.booleans()):
            value["model"] = draw(MODEL_IDS)
        body = encode_body(value, fmt)
        if draw(st.integers(0, 9)) == 0:
            body = draw(damaged(body))
    elif method in ("POST", "PUT"):
        body = encode_body(draw(WILD), fmt)
    return method, url, headers, body


def check_answer(answer: httpx.Response, method: str, url: str, headers: dict, document: dict) -> None:
    where = f"{method} {url} {headers} -> {answer.status_code} {answer.content[:300]!r}"
    status = answer.status_code
    if status == 504:  # only a deadline the request set itself may pass
        assert "X-SIE-Timeout-Ms" in headers, where
    else:
        assert status < 500, where
    assert answer.headers.get("X-Request-Id"), where
    if status >= 400 and answer.headers.get("Content-Type", "").startswith("application/json"):
        error = answer.json()["error"]
        assert error["code"] and error["message"], where
    if status in (429, 503):
        assert int(answer.headers["Retry-After"]) >= 1, where
    if status == 200 and answer.headers.get("Content-Type", "").startswith("application/json"):
        validate_ok(answer.json(), url, method, document, where)


def validate_ok(payload, url: str, method: str, document: dict, where: str) -> None:
    for path, operations in document["paths"].items():
        prefix = path.split("{", 1)[0]
        if (url == path or ("{" in path and url.startswith(prefix))) and method.lower() in operations:
            content = operations[method.lower()]["responses"]["200"]["content"]
            schema = content.get("application/json", {}).get("schema")
            if schema and "$ref" in schema:
                root = {**schema, "components": document["components"]}
                jsonschema.Draft202012Validator(root).validate(payload)
            return


def test_thousands_of_generated_requests_get_no_5xx_and_no_hang(server, http, document):
    reference = http.post("/v1/encode/enc", json={"items": ["the reference text"]}).json()["items"][0]["dense"]
    counts: dict[str, int] = {}
    statuses: dict[int, int] = {}
    transport = httpx.Client(base_url=server.url, timeout=30)

    # derandomize: the same requests every run (a random draw once gave a route 35 of its 40), so a
    # failure here is the code's, reproducible, not the draw's
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None,
              derandomize=True)
    @given(request=requests(document))
    def send(request):
        method, url, headers, body = request
        answer = transport.request(method, url, headers={k: v.encode() for k, v in headers.items() if v}, content=body)
        check_answer(answer, method, url, headers, document)
        route = url.split("/")[2] if url.startswith("/v1/") else url
        counts[route] = counts.get(route, 0) + 1
        statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1

    try:
        send()
    finally:
        transport.close()
    print("requests per route:", counts, "statuses:", statuses)
    assert sum(counts.values()) >= EXAMPLES * 0.9
    # every route drawn, and often: a GET-only route's share is about 50 of the 2,000, and the derandomized
    # draw moves whenever the OpenAPI document changes (a schema edit once left /metrics 38), so the bound
    # sits well under the share, at what a route that the strategy still reaches cannot fall below
    for route in ("encode", "score", "extract", "embeddings", "models", "status", "/healthz", "/readyz", "/metrics",
                  "/openapi.json"):
        assert counts.get(route, 0) >= EXAMPLES // 100, (route, counts)
    # plenty reach the models, not only the validators: a 200 is 20-27% of the draws (394-549 of 2,000 over
    # five draws, the derandomized one moving with the document too), so the bound sits at half of that
    assert statuses.get(200, 0) >= EXAMPLES // 10, statuses

    # still alive and still right
    again = http.post("/v1/encode/enc", json={"items": ["the reference text"]})
    assert again.status_code == 200 and again.json()["items"][0]["dense"] == reference
    assert server.process.poll() is None
    metrics = http.get("/metrics").text
    assert metric_value(metrics, "sie_requests_total", status="500") == 0
    log = server.log_text()
    assert "Traceback" not in log and "unhandled error" not in log, log[-3000:]


def test_cors_is_off_by_default(server, http):
    preflight = httpx.options(server.url + "/v1/encode/enc", headers={
        "Origin": "https://elsewhere.example", "Access-Control-Request-Method": "POST"})
    assert preflight.status_code in (401, 405)  # no key on a preflight; no CORS route either
    assert not any(h.lower().startswith("access-control-") for h in preflight.headers)
    answer = http.post("/v1/encode/enc", json={"items": ["x"]}, headers={"Origin": "https://elsewhere.example"})
    assert answer.status_code == 200 and not any(h.lower().startswith("access-control-") for h in answer.headers)
