"""PEFT LoRA adapters over a BERT model (sie_engine/lora.py, layers/lora.py): one packed batch that
mixes two adapters and the base model equals peft's merged model per adapter (and the base model
alone for the rest), through the runner and through `encode`'s `lora_id` and `profile`; unknown
names are 400s that suggest the close ones; the pool charges adapters their bytes and evicts them
least recently used, never one a request holds; adapters SIE cannot apply are refused at load;
DistilBERT's adapters (peft's q_lin ... lin2) map through its own checkpoint names."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from engine_fixtures import Recorder, make_engine, patch_run
from lora_models import TEXTS, make_distilbert_lora, make_lora_models, peft_reference
from sie_engine import ModelCard, WeightsSource
from sie_engine.errors import InvalidRequest, ModelLoadFailed
from sie_engine.work import WorkItem

MODEL = "tiny/lora"
# float32 on both sides; the merged weights round once where SIE adds the delta separately
ATOL = 2e-5


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return make_lora_models(tmp_path_factory.mktemp("lora"))


@pytest.fixture(scope="module")
def reference(models):
    base, adapters = models
    return {name: peft_reference(base, path, TEXTS) for name, path in [(None, None), *adapters.items()]}


def lora_card(models, **overrides) -> ModelCard:
    base, adapters = models
    fields = dict(id=MODEL, weights=WeightsSource(path=str(base)), max_seq_len=120, max_batch_tokens=512,
                  adapters={name: WeightsSource(path=str(path)) for name, path in adapters.items()},
                  profiles={"banking": {"lora_id": "all", "dims": 16}})
    fields.update(overrides)
    return ModelCard(**fields)


@pytest.fixture(scope="module")
def engine(models):
    with make_engine([lora_card(models)], Recorder()) as engine:
        yield engine


def on_loop(engine, coroutine):
    return asyncio.run_coroutine_threadsafe(coroutine, engine.loop).result(timeout=60)


def unit(rows) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


def test_one_batch_of_two_adapters_and_the_base_model_equals_peft_merged(engine, reference):
    engine.load_sync(MODEL)
    runner = engine.pool.resident(MODEL)
    adapters = {name: on_loop(engine, engine.pool.acquire_adapter(MODEL, name)) for name in ("qv", "all")}
    try:
        # interleaved on purpose: the runner sorts the batch by adapter and answers in item order
        use = ["qv", None, "all", "qv", "all", None]
        tokenized = runner.tokenizer.encode(TEXTS)
        items = [WorkItem(None, i, ids, outputs=frozenset({"dense"}), extra=False,
                          adapter=adapters[name] if name else None)
                 for i, (ids, name) in enumerate(zip(tokenized.ids, use))]
        results = runner.run(items)
    finally:
        for name in adapters:
            engine.pool.release_adapter(MODEL, name)
    got = unit([result["dense"] for result in results])
    for i, name in enumerate(use):
        np.testing.assert_allclose(got[i], reference[name][i], atol=ATOL, err_msg=f"item {i} ({name})")
    # the adapters matter: each is far from the base model and from the other
    assert np.abs(reference["qv"] - reference[None]).max() > 0.05
    assert np.abs(reference["all"] - reference["qv"]).max() > 0.05


def test_requests_for_two_adapters_and_the_base_model_share_one_batch(models, reference):
    recorder = Recorder()
    # one inference thread, held by a first batch until the three requests are queued behind it
    with make_engine([lora_card(models)], recorder, cpu_batches=1) as engine:
        entered, gate = threading.Event(), threading.Event()

        def held(run, items):
            if not entered.is_set():
                entered.set()
                gate.wait(60)
            return run(items)

        patch_run(engine, MODEL, held)
        with ThreadPoolExecutor(4) as pool:
            first = pool.submit(engine.encode_sync, MODEL, ["the batch that holds the thread"])
            assert entered.wait(60)
            calls = {name: pool.submit(engine.encode_sync, MODEL, TEXTS, **({"lora_id": name} if name else {}))
                     for name in (None, "qv", "all")}
            deadline = time.monotonic() + 60
            while engine.queued(MODEL)[0] < 3 * len(TEXTS) and time.monotonic() < deadline:
                time.sleep(0.005)  # the engine's own queue count decides, not a guess at the machine's speed
            gate.set()
            first.result(60)
            results = {name: call.result(60) for name, call in calls.items()}
    assert [items for _, items, _ in recorder.batches[-1:]] == [3 * len(TEXTS)]  # all three in one batch
    for name, result in results.items():
        np.testing.assert_allclose(np.stack([it.dense for it in result.items]), reference[name], atol=ATOL,
                                   err_msg=str(name))


def test_encode_lora_id_and_profile(engine, reference):
    for name in ("qv", "all"):
        result = engine.encode_sync(MODEL, TEXTS, lora_id=name)
        np.testing.assert_allclose(np.stack([it.dense for it in result.items]), reference[name], atol=ATOL)
    plain = engine.encode_sync(MODEL, TEXTS)
    np.testing.assert_allclose(np.stack([it.dense for it in plain.items]), reference[None], atol=ATOL)
    # the profile: its adapter and its dims; a field the request sends wins over the profile's
    profiled = engine.encode_sync(MODEL, TEXTS, profile="banking")
    np.testing.assert_allclose(np.stack([it.dense for it in profiled.items]), unit(reference["all"][:, :16]),
                               atol=ATOL)
    overridden = engine.encode_sync(MODEL, TEXTS, profile="banking", lora_id="qv")
    np.testing.assert_allclose(np.stack([it.dense for it in overridden.items]), unit(reference["qv"][:, :16]),
                               atol=ATOL)


def test_unknown_adapter_or_profile_is_a_400_that_suggests_the_close_name(engine):
    with pytest.raises(InvalidRequest, match=r"no LoRA adapter 'qw'; did you mean 'qv'\?.*adapters: qv, all") as exc:
        engine.encode_sync(MODEL, ["x"], lora_id="qw")
    assert exc.value.field == "lora_id"
    with pytest.raises(InvalidRequest, match=r"no profile 'bankin'; did you mean 'banking'\?") as exc:
        engine.encode_sync(MODEL, ["x"], profile="bankin")
    assert exc.value.field == "profile"


def test_the_pool_charges_adapters_and_evicts_the_least_recently_used(models):
    with make_engine([lora_card(models)], Recorder()) as engine:
        pool = engine.pool
        engine.load_sync(MODEL)
        model_bytes = pool.used_bytes
        sizes = {}
        for name in ("all", "qv"):  # "qv" is used last
            adapter = on_loop(engine, pool.acquire_adapter(MODEL, name))
            pool.release_adapter(MODEL, name)
            sizes[name] = adapter.nbytes
        assert 0 < sizes["qv"] < sizes["all"] and pool.adapter_bytes == sum(sizes.values())
        assert pool.used_bytes == model_bytes + sum(sizes.values())
        pool.evict_adapter((MODEL, "all"))
        assert pool.used_bytes == model_bytes + sizes["qv"]
        engine.encode_sync(MODEL, ["x"])  # a batch on the model: the adapter is the least recently used now
        # room for the model and one adapter: the second one evicts the first, idle, one
        pool.budget_bytes = model_bytes + sizes["all"]
        on_loop(engine, pool.acquire_adapter(MODEL, "all"))
        pool.release_adapter(MODEL, "all")
        assert pool.adapter_ids() == [(MODEL, "all")] and pool.resident(MODEL) is not None
        # an adapter a request holds is never the victim: the idle model goes instead
        on_loop(engine, pool.acquire_adapter(MODEL, "all"))
        pool.budget_bytes = pool.used_bytes + 1
        on_loop(engine, pool.acquire_adapter(MODEL, "qv"))
        assert (MODEL, "qv") in pool.adapter_ids() and (MODEL, "all") in pool.adapter_ids()
        assert pool.resident(MODEL) is None


def test_an_adapter_sie_cannot_apply_is_refused_at_load_naming_why(models, tmp_path):
    base, adapters = models
    dora = tmp_path / "dora"
    shutil.copytree(adapters["qv"], dora)
    config = json.loads((dora / "adapter_config.json").read_text())
    (dora / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    card = lora_card(models, adapters={"dora": WeightsSource(path=str(dora))}, profiles={})
    with make_engine([card], Recorder()) as engine:
        with pytest.raises(ModelLoadFailed, match=r"LoRA adapter 'dora'.*use_dora is not supported") as exc:
            engine.encode_sync(MODEL, ["x"], lora_id="dora")
        assert exc.value.reason == "invalid_weights"
        assert engine.encode_sync(MODEL, ["x"]).items[0].dense is not None  # the model itself still serves


def test_distilbert_takes_peft_adapters_by_its_own_module_names(tmp_path):
    base, adapter = make_distilbert_lora(tmp_path)
    card = ModelCard(id="tiny/distil", weights=WeightsSource(path=str(base)), max_seq_len=120,
                     adapters={"all": WeightsSource(path=str(adapter))})
    with make_engine([card], Recorder()) as engine:
        for name, path in (("all", adapter), (None, None)):
            got = engine.encode_sync("tiny/distil", TEXTS, **({"lora_id": name} if name else {}))
            np.testing.assert_allclose(np.stack([it.dense for it in got.items]), peft_reference(base, path, TEXTS),
                                       atol=ATOL, err_msg=str(name))


def test_cards_check_their_profiles():
    weights = WeightsSource(path="/nonexistent")
    adapters = {"a": WeightsSource(path="/nonexistent")}
    with pytest.raises(ValueError, match="lora_id 'b' is not one of the card's adapters"):
        ModelCard(id="x", weights=weights, adapters=adapters, profiles={"p": {"lora_id": "b"}})
    with pytest.raises(ValueError, match="labels cannot be preset"):
        ModelCard(id="x", weights=weights, profiles={"p": {"labels": ["a"]}})
    with pytest.raises(ValueError, match="profile 'p'"):
        ModelCard(id="x", weights=weights, profiles={"p": {"dims": "many"}})
    card = ModelCard.from_dict({"id": "x", "weights": "/w", "adapters": {"a": "/a", "h": {"hub": "org/lora"}},
                                "profiles": {"p": {"lora_id": "h", "is_query": True}}})
    assert card.adapters["a"] == WeightsSource(path="/a") and card.adapters["h"].hub == "org/lora"
    assert ModelCard.from_dict(card.to_dict()) == card
