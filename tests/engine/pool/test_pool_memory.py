"""What the pool charges a model against its memory budget, and where eviction's work runs.

- Before a load the charge is estimated from the checkpoint's headers, in the dtype the
  model will be held in (a bfloat16 checkpoint served in bfloat16 is not "float32 on disk,
  scaled"); after the load the model is charged what its tensors measure.
- The same weights cost the same with or without a card.
- Eviction to the host cache moves weights on a worker thread: the engine's event loop
  keeps serving meanwhile, and the memory stays charged until the move is done.
"""

from __future__ import annotations

import threading
import time

import torch

from engine_fixtures import Recorder, make_engine, tiny_cards
from sie_engine import Catalog, Engine, ModelCard, WeightsSource, card_from_local_dir
from sie_engine.weights import tensor_shapes
from tiny_models import MINILM_DIR, save_tiny, tiny_bert_config

TEXTS = ["the first text", "a second text"]


def checkpoint_numel(root) -> int:
    return sum(int(torch.Size(shape).numel()) for _, shape, _, _ in tensor_shapes(sorted(root.glob("*.safetensors"))))


def test_a_bfloat16_checkpoint_is_charged_its_bfloat16_size(tmp_path):
    from transformers import BertModel

    torch.manual_seed(0)
    root = save_tiny(BertModel(tiny_bert_config()).to(torch.bfloat16).eval(), tmp_path / "bf16")
    card = ModelCard(id="tiny/bf16", weights=WeightsSource(path=str(root)), dtype="bfloat16", max_seq_len=120,
                     max_batch_tokens=512)
    with Engine(Catalog([card]), device="cpu") as engine:
        plan = engine.pool._plan(card)
        assert plan.weight_bytes == 2 * checkpoint_numel(root)  # every tensor, 2 bytes each, from the headers
        engine.encode_sync(card.id, TEXTS)
        runner = engine.pool.resident(card.id)
        measured = runner.param_bytes
        assert measured == sum(p.numel() * 2 for p in runner.model.parameters())
        # the estimate never undercharges (the checkpoint's unused pooler is the difference) ...
        assert measured <= plan.weight_bytes < measured * 1.1
        # ... and once loaded the model is charged what it measures
        assert engine.pool.memory_bytes(card.id) == measured + plan.reserve


def test_the_same_weights_cost_the_same_with_or_without_a_card():
    catalog = Catalog.builtin()
    catalog.add(card_from_local_dir("local/minilm", MINILM_DIR))
    with Engine(catalog, device="cpu") as engine:
        for model in ("sentence-transformers/all-MiniLM-L6-v2", "local/minilm"):
            engine.load_sync(model)
        charged = {m: engine.pool.memory_bytes(m) for m in ("sentence-transformers/all-MiniLM-L6-v2", "local/minilm")}
    assert len(set(charged.values())) == 1, charged


def test_eviction_moves_weights_off_the_event_loop_and_keeps_them_charged(tmp_path):
    cards = tiny_cards(tmp_path)
    probe = make_engine(cards, Recorder())
    need = probe.pool._plan(cards[0]).need
    probe.close()
    engine = make_engine(cards, Recorder(), memory_budget=int(need * 1.5), host_cache=10 * need)
    offloads = []

    def slow_offload(runner):
        original = runner.offload

        def offload():
            offloads.append(runner.card.id)
            time.sleep(1.0)  # a multi-GB copy to pinned host memory, as on a GPU
            original()

        runner.offload = offload
        return runner

    builder = engine.pool._builder
    engine.pool._builder = lambda *args: slow_offload(builder(*args))
    try:
        engine.encode_sync("tiny/a", TEXTS)
        charged_a = engine.pool.memory_bytes("tiny/a")
        loading_b = threading.Thread(target=engine.encode_sync, args=("tiny/b", TEXTS))
        loading_b.start()
        # while a's weights move, the loop answers at once and a stays charged
        held, latencies = [], []
        deadline = time.monotonic() + 5
        while loading_b.is_alive() and time.monotonic() < deadline:
            started = time.monotonic()
            done = threading.Event()
            engine.loop.call_soon_threadsafe(done.set)
            assert done.wait(5)
            latencies.append(time.monotonic() - started)
            held.append(engine.pool.evicting_bytes)
            time.sleep(0.02)
        loading_b.join()
        assert offloads == ["tiny/a"]
        assert max(latencies) < 0.5, f"the event loop stalled for {max(latencies):.2f}s"
        assert charged_a in held  # a's bytes counted while its weights were still leaving
        assert engine.pool.evicting_bytes == 0 and engine.pool.used_bytes <= engine.budget_bytes
        assert "tiny/a" in engine.pool.host_cache  # the move finished: a is warm in host memory
    finally:
        engine.close()
