"""jina-embeddings-v3's task adapters, read from its own checkpoint, against transformers'
JinaEmbeddingsV3Model with each task's deltas merged into its weights (what Jina's
`encode(task=...)` computes: modeling_lora.py's `lora_forward` adds `B @ A * lora_alpha / lora_rank`
to every linear layer's weight and `A @ B * scaling` to every embedding table).

The tiny checkpoint is written in Jina's layout: tensors under `roberta.`, each adapted module's base
weight as `parametrizations.weight.original` and all tasks' deltas stacked in
`parametrizations.weight.0.lora_A` / `lora_B`, the pooler's too; config.json with
`lora_adaptations`, `lora_rank`, `lora_alpha`. The card is the catalog's own
(sie_engine/catalog/jina-embeddings-v3.yaml) over these weights: queries run retrieval.query with
its prompt, documents retrieval.passage with its, `profile` the other tasks without one.

Tolerance: float32 embeddings within 2e-5 absolute (the merged weights round once where SIE adds
each delta separately).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import sie_engine.catalog
from arch_fixtures import TEXTS
from engine_fixtures import Recorder, make_engine, patch_run
from jina_checkpoints import TASKS, task_adapter_checkpoint, task_reference
from sie_engine import ModelCard, WeightsSource

CARD = Path(sie_engine.catalog.__file__).parent / "jina-embeddings-v3.yaml"  # the shipped card
TOL = 2e-5


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return task_adapter_checkpoint(tmp_path_factory.mktemp("jina-v3"))


@pytest.fixture(scope="module")
def references(checkpoint, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("merged")
    return {task: task_reference(checkpoint, task, TEXTS, tmp) for task in [*TASKS, None]}


def catalog_card(root: Path, **fields) -> ModelCard:
    card = ModelCard.from_file(CARD)
    return dataclasses.replace(card, weights=WeightsSource(path=str(root)), max_seq_len=120, **fields)


def test_every_task_is_its_merged_model_in_one_mixed_batch(checkpoint, references):
    """The catalog's card: queries and documents get their adapters (and prompts) without asking,
    `profile` the others; all of them, and an explicit lora_id, batch together."""
    card = catalog_card(checkpoint[0])
    adapters_per_batch: list[set] = []

    def recording(original, items):
        adapters_per_batch.append({it.adapter.name if it.adapter else None for it in items})
        return original(items)

    with make_engine([card], Recorder()) as engine:
        patch_run(engine, card.id, recording)

        async def every_task():
            return await asyncio.gather(
                engine.encode(card.id, TEXTS, is_query=True), engine.encode(card.id, TEXTS),
                *(engine.encode(card.id, TEXTS, profile=task) for task in TASKS),
                engine.encode(card.id, TEXTS, lora_id="separation", template=False))

        results = engine._sync(every_task)
    expected = [references["retrieval.query"], references["retrieval.passage"],
                *(references[task] for task in TASKS), references["separation"]]
    for result, want, what in zip(results, expected, ["query", "document", *TASKS, "lora_id"]):
        got = np.stack([item.dense for item in result.items])
        np.testing.assert_allclose(got, want, atol=TOL, rtol=0, err_msg=what)
    assert max(len(names) for names in adapters_per_batch) > 1  # tasks shared a batch
    assert np.abs(references["classification"] - references[None]).max() > 1e-2  # the deltas change them
    assert np.abs(references["classification"] - references["separation"]).max() > 1e-2


def test_matryoshka_dims_cut_the_task_embedding(checkpoint, references):
    card = catalog_card(checkpoint[0], dims=32, matryoshka_dims=(16, 32))
    with make_engine([card], Recorder()) as engine:
        got = engine.encode_sync(card.id, TEXTS, profile="text-matching", dims=16)
    cut = references["text-matching"][:, :16]
    np.testing.assert_allclose(np.stack([it.dense for it in got.items]),
                               cut / np.linalg.norm(cut, axis=1, keepdims=True), atol=TOL, rtol=0)


def test_checkpoint_adapters_are_pool_residents(checkpoint):
    """Charged and evicted as PEFT adapters are; loaded again from the model's host copy."""
    card = catalog_card(checkpoint[0])
    with make_engine([card], Recorder()) as engine:
        first = engine.encode_sync(card.id, TEXTS[:2], profile="classification")
        keys = engine.pool.adapter_ids()
        assert (card.id, "classification") in keys and (card.id, "retrieval.passage") not in keys
        assert engine.pool.adapter_bytes > 0

        async def evict():
            engine.pool.evict_adapter((card.id, "classification"))

        engine._sync(evict)
        assert (card.id, "classification") not in engine.pool.adapter_ids()
        again = engine.encode_sync(card.id, TEXTS[:2], profile="classification")
    np.testing.assert_array_equal(np.stack([i.dense for i in first.items]), np.stack([i.dense for i in again.items]))


def test_what_does_not_fit_is_refused(checkpoint, tmp_path):
    from sie_engine.models.jina_xlm_roberta.model import JinaXLMRobertaConfig
    from sie_engine.runner import build_runner

    config = json.loads((checkpoint[0] / "config.json").read_text())
    assert JinaXLMRobertaConfig.from_hf(config).task_adapters == tuple(TASKS)
    with pytest.raises(ValueError, match="load_trained_adapters"):
        JinaXLMRobertaConfig.from_hf({**config, "load_trained_adapters": False})
    with pytest.raises(ValueError, match="lora_rank"):
        JinaXLMRobertaConfig.from_hf({**config, "lora_rank": 0})
    with pytest.raises(ValueError, match="distinct"):
        JinaXLMRobertaConfig.from_hf({**config, "lora_adaptations": ["a", "a"]})
    # a delta stacked for fewer tasks than config.json names: refused at load, naming the tensor
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in checkpoint[0].iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    tensors = load_file(str(checkpoint[0] / "model.safetensors"))
    key = "roberta.encoder.layers.0.mlp.fc1.parametrizations.weight.0.lora_A"
    tensors[key] = tensors[key][:2].contiguous()
    save_file(tensors, str(broken / "model.safetensors"))
    with pytest.raises(ValueError, match="mlp.fc1.*do not fit"):
        build_runner(catalog_card(broken), broken, torch.device("cpu"))


def test_card_refuses_a_default_profile_it_lacks_and_mixed_sources():
    data = ModelCard.from_file(CARD).to_dict()
    assert ModelCard.from_dict(data) == ModelCard.from_file(CARD)  # round trip, checkpoint sources included
    with pytest.raises(ValueError, match="query_profile 'nope'"):
        ModelCard.from_dict({**data, "query_profile": "nope"})
    with pytest.raises(ValueError, match="not both"):
        ModelCard.from_dict({**data, "adapters": {**data["adapters"],
                                                  "separation": {"checkpoint": "separation", "path": "/x"}}})
    with pytest.raises(ValueError, match="weights.checkpoint"):
        ModelCard.from_dict({**data, "weights": {"checkpoint": "separation"}})


def test_precision_variants_run_the_tasks_too(checkpoint, references):
    """A precision variant is a model of its own: its runner reads the adapters in its own dtype."""
    card = catalog_card(checkpoint[0])
    with make_engine([card], Recorder()) as engine:
        for precision in ("bfloat16", "int8"):
            got = engine.encode_sync(card.id, TEXTS, is_query=True, precision=precision)
            cosines = (np.stack([it.dense for it in got.items]) * references["retrieval.query"]).sum(1)
            assert cosines.min() > 0.999, precision
