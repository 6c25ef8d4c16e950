"""API keys (flag, environment, rotating key file) and queue-bound admission
(429 with Retry-After) on a real `sie-server serve` subprocess."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import httpx
import openai
import pytest

from dev_corpus import load_docs
from server_fixtures import DEFAULT_MODEL, metric_value, start_server

FLAG_KEY, ENV_KEYS, FILE_KEY, ROTATED_KEY = "flag-key-1", ("env-key-a", "env-key-b"), "file-key-1", "file-key-2"
MAX_QUEUED_TOKENS = 2500
ENCODE = f"/v1/encode/{DEFAULT_MODEL}"


@pytest.fixture(scope="module")
def key_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.txt"
    path.write_text(f"# rotated by the operator\n{FILE_KEY}\n")
    return path


@pytest.fixture(scope="module")
def server(key_file, tmp_path_factory):
    process = start_server("--preload", DEFAULT_MODEL, "--api-key", FLAG_KEY, "--api-key-file", str(key_file),
                           "--max-queued-tokens", str(MAX_QUEUED_TOKENS), env={"SIE_API_KEYS": ",".join(ENV_KEYS)},
                           log_dir=tmp_path_factory.mktemp("server"))
    yield process
    assert process.stop() == 0, process.log_text()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def test_probes_metrics_status_and_openapi_need_no_key(http):
    # /health is Infinity's probe, which Infinity leaves open when it has an API key
    for path in ("/healthz", "/readyz", "/health", "/metrics", "/openapi.json", "/v1/status"):
        assert http.get(path).status_code == 200, path


@pytest.mark.parametrize("headers", [{}, bearer("wrong"), {"Authorization": f"Basic {FLAG_KEY}"},
                                     {"Authorization": "Bearer"}])
def test_missing_or_wrong_keys_are_refused(http, headers):
    for method, path, body in (("POST", ENCODE, {"items": ["a"]}), ("GET", "/v1/models", None),
                               ("GET", f"/v1/models/{DEFAULT_MODEL}", None)):
        answer = http.request(method, path, json=body, headers=headers)
        assert answer.status_code == 401
        assert answer.json()["error"]["code"] == "unauthorized"
        assert answer.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("key", [FLAG_KEY, *ENV_KEYS, FILE_KEY])
def test_every_configured_key_is_accepted(http, key):
    answer = http.post(ENCODE, json={"items": ["a"]}, headers=bearer(key))
    assert answer.status_code == 200, answer.text


def test_openai_client_with_and_without_the_key(server):
    good = openai.OpenAI(base_url=server.url + "/v1", api_key=FLAG_KEY, max_retries=0)
    assert len(good.embeddings.create(model=DEFAULT_MODEL, input="hello").data[0].embedding) == 384
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        bad.embeddings.create(model=DEFAULT_MODEL, input="hello")
    assert refused.value.body["code"] == "unauthorized"


def test_key_file_rotates_without_restart(http, key_file):
    key_file.write_text(f"{ROTATED_KEY}\n")
    deadline = time.monotonic() + 10
    while http.post(ENCODE, json={"items": ["a"]}, headers=bearer(ROTATED_KEY)).status_code != 200:
        assert time.monotonic() < deadline, "the rotated key was not picked up"
        time.sleep(0.2)
    assert http.post(ENCODE, json={"items": ["a"]}, headers=bearer(FILE_KEY)).status_code == 401
    assert http.post(ENCODE, json={"items": ["a"]}, headers=bearer(FLAG_KEY)).status_code == 200


async def test_queue_bound_answers_429_with_retry_after(server):
    texts = [d["text"] for d in load_docs(400) if len(d["text"]) > 700][:8]  # ~8 x 128+ tokens per request
    headers = bearer(FLAG_KEY)
    async with aiohttp.ClientSession(server.url, headers=headers) as session:
        async def one():
            async with session.post(ENCODE, json={"items": texts}) as r:
                return r.status, r.headers.get("Retry-After"), await r.json()

        answers = await asyncio.gather(*(one() for _ in range(24)))
        async with session.get("/metrics") as r:
            metrics = await r.text()
    statuses = [status for status, _, _ in answers]
    assert set(statuses) <= {200, 429}, statuses
    assert statuses.count(429) >= 1 and statuses.count(200) >= 1, statuses
    for status, retry_after, body in answers:
        if status == 429:
            assert body["error"]["code"] == "overloaded" and int(retry_after) >= 1
        else:
            assert len(body["items"]) == len(texts)
    assert metric_value(metrics, "sie_rejected_total", model=DEFAULT_MODEL, reason="overloaded") == statuses.count(429)


def test_request_larger_than_the_queue_bound_is_413(http):
    answer = http.post(ENCODE, json={"items": ["word " * 300] * 12}, headers=bearer(FLAG_KEY))
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "payload_too_large"
