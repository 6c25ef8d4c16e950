"""SIE's packed BERT-family forward pass against transformers on the same weights.

Tolerance: 1e-5 absolute on hidden states and pooled outputs in float32.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sie_engine.card import ModelCard, WeightsSource
from sie_engine.layers.weights import WeightLoadError, load_checkpoint
from sie_engine.runner import build_runner
from sie_engine.work import WorkItem
from tiny_models import save_tiny, tiny_bert_config, tiny_xlmr_config

TEXTS = [
    "a short one",
    "The quick brown fox jumps over the lazy dog, again and again, until the dog finally wakes up.",
    "packed sequences of different lengths",
    "x",
    "Variable-length attention must mask nothing it should not and everything it should; " * 3,
]
TOL = 1e-5


def _reference(kind: str, tmp_path):
    from transformers import BertModel, XLMRobertaModel

    torch.manual_seed(1)
    model = BertModel(tiny_bert_config()) if kind == "bert" else XLMRobertaModel(tiny_xlmr_config())
    return save_tiny(model.eval(), tmp_path / kind), model.eval()


def _runner(root, pooling="mean"):
    card = ModelCard(id="tiny", weights=WeightsSource(path=str(root)), pooling=pooling, max_seq_len=120,
                     max_batch_tokens=4096)
    return build_runner(card, root, torch.device("cpu"))


def _run_hidden(runner, ids_list):
    from sie_engine.batch import pack

    batch = pack(ids_list, runner.backend, runner.device)
    with torch.inference_mode():
        return runner.backbone(batch.input_ids, batch.positions, batch.attn), batch


@pytest.mark.parametrize("kind", ["bert", "xlmr"])
def test_hidden_states_and_pooling_match_transformers(kind, tmp_path):
    root, reference = _reference(kind, tmp_path)
    runner = _runner(root)
    tokenized = runner.tokenizer.encode(TEXTS)
    hidden, batch = _run_hidden(runner, tokenized.ids)
    offset = 0
    for ids in tokenized.ids:
        ids_t = torch.from_numpy(ids.astype(np.int64))[None]
        with torch.no_grad():
            expected = reference(input_ids=ids_t).last_hidden_state[0]
        got = hidden[offset:offset + len(ids)]
        torch.testing.assert_close(got, expected, atol=TOL, rtol=0)
        offset += len(ids)
    # pooled outputs through the runner's heads (mean, cls, last) against padded transformers
    from transformers import AutoTokenizer

    hf_tok = AutoTokenizer.from_pretrained(root)
    enc = hf_tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        ref_hidden = reference(**{k: enc[k] for k in ("input_ids", "attention_mask")}).last_hidden_state
    mask = enc["attention_mask"].unsqueeze(-1).float()
    ref_mean = (ref_hidden * mask).sum(1) / mask.sum(1)
    for pooling, expected in [("mean", ref_mean), ("cls", ref_hidden[:, 0])]:
        runner = _runner(root, pooling)
        items = [WorkItem(None, i, ids, outputs=frozenset({"dense"})) for i, ids in enumerate(tokenized.ids)]
        got = np.stack([r["dense"] for r in runner.run(items)])
        np.testing.assert_allclose(got, expected.numpy(), atol=TOL, rtol=0)


def test_batch_invariance(tmp_path):
    """Row i of a packed batch equals the same input alone."""
    root, _ = _reference("bert", tmp_path)
    runner = _runner(root)
    tokenized = runner.tokenizer.encode(TEXTS)
    items = [WorkItem(None, i, ids, outputs=frozenset({"dense"})) for i, ids in enumerate(tokenized.ids)]
    together = runner.run(items)
    for item, joint in zip(items, together):
        alone = runner.run([item])[0]
        np.testing.assert_allclose(joint["dense"], alone["dense"], atol=1e-6, rtol=0)


def test_every_weight_loaded_with_its_shape(tmp_path):
    root, reference = _reference("bert", tmp_path)
    runner = _runner(root)
    ref_state = reference.state_dict()
    for name, param in runner.backbone.named_parameters():
        if ".qkv." in name:
            parts = [ref_state[name.replace("attention.qkv", f"attention.self.{p}")] for p in ("query", "key", "value")]
            expected = torch.cat(parts, 0)
        else:
            expected = ref_state[name]
        assert param.shape == expected.shape, name
        torch.testing.assert_close(param.detach(), expected, atol=0, rtol=0)


def test_missing_and_misshaped_weights_are_all_listed(tmp_path):
    from safetensors.torch import load_file

    root, _ = _reference("bert", tmp_path)
    runner = _runner(root)
    tensors = load_file(str(root / "model.safetensors"))
    del tensors["encoder.layer.1.output.dense.weight"]
    tensors["encoder.layer.0.intermediate.dense.bias"] = torch.zeros(3)
    with pytest.raises(WeightLoadError) as info:
        load_checkpoint(runner.backbone, tensors, runner.backbone.weight_spec)
    message = str(info.value)
    assert "encoder.layer.1.output.dense.weight" in message
    assert "encoder.layer.0.intermediate.dense.bias" in message
