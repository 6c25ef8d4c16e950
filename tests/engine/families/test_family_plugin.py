"""A new model family is one folder plus one registry entry: tests/plugins/toy_family (a tiny
backbone of its own, its own dense head and a card-less checkpoint layout), registered by the
test alone, is recognised as a local directory, loads, serves `encode` over HTTP, is listed by
`GET /v1/models` (in the fields OpenAPI documents), and works through the typed client. Its vectors
are checked against the toy model computed here with plain torch from the saved tensors.
"""

from __future__ import annotations

import asyncio
import json
import sys

import numpy as np
import pytest
import torch
from aiohttp.test_utils import TestClient, TestServer
from plugins import toy_family
from safetensors.torch import save_file

from sie_client import SIEClient
from sie_engine import Catalog, Engine, card_from_local_dir
from sie_engine.checkpoints import describe
from sie_server import ServerSettings, create_app

MODEL = "toy/tiny"
WORDS = ["[UNK]", "apt", "installs", "debian", "packages", "a", "second", "text", "about", "x"]
HIDDEN, OUT, POSITIONS = 8, 6, 16
TEXTS = ["apt installs debian packages", "a second text about packages and more", "x"]


@pytest.fixture(scope="module")
def toy_dir(tmp_path_factory):
    """A toy checkpoint: toy_config.json (no config.json), a whitespace WordLevel tokenizer.json and
    random tensors (the backbone's and the head's) in model.safetensors."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    root = tmp_path_factory.mktemp("toy")
    (root / "toy_config.json").write_text(json.dumps(
        {"vocab_size": len(WORDS), "hidden_size": HIDDEN, "max_positions": POSITIONS, "out_dim": OUT}))
    tokenizer = Tokenizer(WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = WhitespaceSplit()
    tokenizer.save(str(root / "tokenizer.json"))
    generator = torch.Generator().manual_seed(0)
    tensors = {
        "tokens.weight": torch.randn(len(WORDS), HIDDEN, generator=generator),
        "positions.weight": torch.randn(POSITIONS, HIDDEN, generator=generator),
        "mix.weight": torch.randn(HIDDEN, HIDDEN, generator=generator),
        "mix.bias": torch.randn(HIDDEN, generator=generator),
        "head.weight": torch.randn(OUT, HIDDEN, generator=generator),
        "head.bias": torch.randn(OUT, generator=generator),
    }
    save_file(tensors, str(root / "model.safetensors"))
    return root


def reference(root, texts: list[str]) -> np.ndarray:
    """The toy model by hand: ids from the word list, `tanh(mix(tokens + positions))`, the max over
    each text's rows, the head's projection, L2-normalised (the card's `normalize`)."""
    from safetensors.torch import load_file

    w = load_file(str(root / "model.safetensors"))
    index = {word: i for i, word in enumerate(WORDS)}
    rows = []
    for text in texts:
        ids = torch.tensor([index.get(word, 0) for word in text.split()][:POSITIONS])
        hidden = torch.tanh((w["tokens.weight"][ids] + w["positions.weight"][: len(ids)]) @ w["mix.weight"].T
                            + w["mix.bias"])
        vector = hidden.max(dim=0).values @ w["head.weight"].T + w["head.bias"]
        rows.append((vector / vector.norm()).numpy())
    return np.stack(rows)


@pytest.fixture(scope="module")
def engine(toy_dir):
    toy_family.register()  # the one registry entry
    try:
        with Engine(Catalog([card_from_local_dir(MODEL, toy_dir)]), device="cpu") as engine:
            yield engine
    finally:
        toy_family.unregister()


def test_the_family_layout_gives_the_card_without_importing_the_model(engine, toy_dir):
    card = engine.card(MODEL)
    assert card.family == "toy" and card.outputs == ("dense",) and card.max_seq_len == POSITIONS
    assert describe(toy_dir).kind == "toy"
    # the registry imports a family's model only when a model of it loads
    assert f"{toy_family.PACKAGE}.model" not in sys.modules


def test_the_engine_runs_the_family_and_its_head(engine, toy_dir):
    result = engine.encode_sync(MODEL, TEXTS)
    got = np.stack([item.dense for item in result.items])
    np.testing.assert_allclose(got, reference(toy_dir, TEXTS), rtol=1e-5, atol=1e-6)
    assert engine.model_info(MODEL).dims == {"dense": OUT}


async def test_it_serves_over_http_openapi_and_the_typed_client(engine, toy_dir):
    expected = reference(toy_dir, TEXTS)
    async with TestClient(TestServer(create_app(engine, ServerSettings()), host="127.0.0.1")) as server:
        answer = await server.post(f"/v1/encode/{MODEL}", json={"items": [{"text": t} for t in TEXTS]})
        assert answer.status == 200, await answer.text()
        body = await answer.json()
        np.testing.assert_allclose([item["dense"] for item in body["items"]], expected, rtol=1e-5, atol=1e-6)

        listed = (await (await server.get("/v1/models")).json())["data"]
        entry = next(m for m in listed if m["id"] == MODEL)
        assert entry["family"] == "toy" and entry["dims"] == {"dense": OUT} and "encode" in entry["tasks"]
        document = await (await server.get("/openapi.json")).json()
        assert "/v1/encode/{model}" in document["paths"]
        # what the listing says of the family's model is what OpenAPI documents a model entry by
        documented = set(document["components"]["schemas"]["Model"]["properties"])
        assert {"id", "family", "dims", "tasks", "outputs"} <= documented

        url = str(server.make_url("")).rstrip("/")

        def through_the_client():
            with SIEClient(url) as client:
                return client.encode(MODEL, TEXTS).dense_matrix(), client.model(MODEL)

        # the sync client on a thread of its own: the server runs on this test's event loop
        vectors, info = await asyncio.to_thread(through_the_client)
        np.testing.assert_allclose(vectors, expected, rtol=1e-5, atol=1e-6)
        assert info.family == "toy" and info.dims == {"dense": OUT}
