"""What the server refuses before a handler runs (a missing API key, a drain) comes in each
compatibility API's own error shape, so its clients read errors they know; SIE's routes keep
SIE's shape. In-process: nothing here loads a model."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient, TestServer

from sie_engine import Engine
from sie_server import ServerSettings, create_app
from sie_server.state import LIFECYCLE

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
REFUSED = [  # (path, body, the shape's check)
    (f"/tei/{MODEL}/embed", {"inputs": "a"}, lambda b: set(b) == {"error", "error_type"}),
    ("/v1/rerank", {"model": MODEL, "query": "q", "documents": ["a"]}, lambda b: set(b) == {"message"}),
    (f"/weaviate/{MODEL}/vectors", {"text": "a"}, lambda b: set(b) == {"error"}),
    ("/embeddings", {"model": MODEL, "input": ["a"]}, lambda b: isinstance(b["error"], dict) and "code" in b["error"]),
    (f"/v1/encode/{MODEL}", {"items": ["a"]}, lambda b: b["error"]["code"] in ("unauthorized", "draining")),
]


@pytest.fixture(scope="module")
def engine():
    with Engine(device="cpu") as engine:
        yield engine


@pytest.mark.parametrize("path,body,shaped", REFUSED)
async def test_a_missing_key_and_a_drain_are_refused_in_the_apis_shape(engine, path, body, shaped):
    app = create_app(engine, ServerSettings(api_keys=("secret",)))
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        refused = await client.post(path, json=body)
        assert refused.status == 401 and shaped(await refused.json())
        app[LIFECYCLE].draining = True
        draining = await client.post(path, json=body, headers={"Authorization": "Bearer secret"})
        assert draining.status == 503 and shaped(await draining.json()) and draining.headers["Retry-After"]
