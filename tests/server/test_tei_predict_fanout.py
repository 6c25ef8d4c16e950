"""TEI `/predict` with thousands of distinct queries (issue #30.7) on a real `sie-server
serve`: one engine request, so it costs about what the same pairs cost through `/rerank`.

Before the fix each distinct query was a score call of its own (admitted, tokenised and
queued apart): 4,096 queries took 10.7 s against 0.2 s for the same pairs through rerank,
and `/healthz` stalled up to 1.8 s meanwhile. Timings are compared with rerank's in the same
run (ratios hold on a loaded 2-core box); the one absolute bound is generous."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
import yaml

from server_fixtures import start_server
from tiny_models import save_tiny, tiny_bert_config

MODEL = "test/tiny-cross"
PAIRS = 2048


def tiny_cross_encoder(dest):
    """A 2-layer BERT with a one-label head: its batches are cheap, so what is measured is
    the per-call cost around them."""
    import torch
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    return save_tiny(BertForSequenceClassification(tiny_bert_config(num_labels=1)).eval(), dest)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("tei-predict")
    cards = base / "cards"
    cards.mkdir()
    (cards / "cross.yaml").write_text(yaml.safe_dump({
        "id": MODEL, "weights": {"path": str(tiny_cross_encoder(base / "cross"))}, "outputs": ["score"],
        "max_seq_len": 128, "max_batch_tokens": 8192}))
    process = start_server("--models", str(cards), "--preload", MODEL, "--device", "cpu", "--max-items", "4096",
                           log_dir=base)
    try:
        yield process
    finally:
        process.stop()


async def timed(session: aiohttp.ClientSession, path: str, body: dict) -> tuple[float, float, object]:
    """(seconds to answer, slowest /healthz meanwhile, the answer)."""
    slowest = 0.0
    done = asyncio.Event()

    async def probe():
        nonlocal slowest
        while not done.is_set():
            sent = time.monotonic()
            async with session.get("/healthz") as r:
                assert r.status == 200
            slowest = max(slowest, time.monotonic() - sent)
            await asyncio.sleep(0.02)

    prober = asyncio.create_task(probe())
    sent = time.monotonic()
    async with session.post(path, json=body) as r:
        assert r.status == 200, await r.text()
        answer = await r.json()
    seconds = time.monotonic() - sent
    done.set()
    await prober
    return seconds, slowest, answer


async def test_predict_with_distinct_queries_costs_about_a_rerank(server):
    queries = [f"question number {i} about python packages" for i in range(PAIRS)]
    texts = [f"pip installs package {i} from the index" for i in range(PAIRS)]
    base = f"/tei/{MODEL}"
    async with aiohttp.ClientSession(server.url, timeout=aiohttp.ClientTimeout(total=300)) as session:
        await timed(session, base + "/rerank", {"query": queries[0], "texts": texts[:16]})  # warm both paths
        await timed(session, base + "/predict", {"inputs": [[queries[i], texts[i]] for i in range(16)]})
        rerank_s, rerank_healthz, _ = await timed(session, base + "/rerank", {"query": queries[0], "texts": texts})
        predict_s, predict_healthz, predictions = await timed(
            session, base + "/predict", {"inputs": [[q, t] for q, t in zip(queries, texts)]})
        # the same scores as a pair at a time through rerank
        _, _, few = await timed(session, base + "/predict", {"inputs": [[queries[i], texts[i]] for i in (0, 7)]})
        _, _, one = await timed(session, base + "/rerank", {"query": queries[7], "texts": [texts[7]]})
    print(f"{PAIRS} pairs: rerank {rerank_s:.2f}s (healthz {rerank_healthz:.2f}s), "
          f"predict {predict_s:.2f}s (healthz {predict_healthz:.2f}s)")
    assert len(predictions) == PAIRS and all(p[0]["label"] == "LABEL_0" for p in predictions)
    assert few[1][0]["score"] == pytest.approx(one[0]["score"], abs=1e-5)
    assert few[0][0]["score"] == pytest.approx(predictions[0][0]["score"], abs=1e-5)
    # distinct queries cost about what one query does: before, ~50 times as much
    assert predict_s <= 4 * rerank_s + 1.0, (predict_s, rerank_s)
    assert predict_healthz <= max(1.0, 4 * rerank_healthz), (predict_healthz, rerank_healthz)
