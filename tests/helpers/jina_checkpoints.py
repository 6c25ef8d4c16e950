"""Tiny Jina XLM-RoBERTa checkpoints (rotary positions) for the jina_xlm_roberta family's tests:
transformers' port config, Jina's own remote-code layout of a saved port, and jina-embeddings-v3's
layout (task adapters as torch parametrizations, Jina's modeling_lora.py) with the reference its
tasks are tested against: the port with a task's deltas merged into its weights."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from arch_fixtures import MINILM_VOCAB, make_norms_count, no_segment_ids, reference_hidden, save_tiny

THETA = 10000.0  # jina-colbert-v2's base; the port's default (20000) is read from its rope_parameters


def tiny_config(**overrides):
    from transformers import JinaEmbeddingsV3Config

    fields = dict(vocab_size=MINILM_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=512,
                  rope_parameters={"rope_type": "default", "rope_theta": THETA})
    return JinaEmbeddingsV3Config(**{**fields, **overrides})


def jina_layout(src, dest, prefix: str = "roberta.", **config_fields):
    """`src` rewritten as Jina's remote-code checkpoints are: tensors under `prefix`, config.json in
    XLMRobertaFlashConfig's terms."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name not in ("model.safetensors", "config.json"):
            (dest / f.name).write_bytes(f.read_bytes())
    tensors = {prefix + k: v for k, v in load_file(str(src / "model.safetensors")).items()}
    save_file(tensors, str(dest / "model.safetensors"))
    port = json.loads((src / "config.json").read_text())
    config = {key: port[key] for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                         "intermediate_size", "max_position_embeddings", "type_vocab_size",
                                         "layer_norm_eps", "hidden_act", "pad_token_id")}
    config.update(model_type="xlm-roberta", architectures=["HF_ColBERT"], position_embedding_type="rotary",
                  rotary_emb_base=THETA, use_flash_attn=True, **config_fields)
    (dest / "config.json").write_text(json.dumps(config))
    return dest


TASKS = ["retrieval.query", "retrieval.passage", "separation", "classification", "text-matching"]
RANK, ALPHA = 2, 3.0  # scaling 1.5, so a missing scaling shows
QUERY_PROMPT = "Represent the query for retrieving evidence documents: "
PASSAGE_PROMPT = "Represent the document for retrieval: "
# the modules Jina's _register_lora adapts (every nn.Linear and nn.Embedding), in the port's saved names
ADAPTED = ("word_embeddings", "token_type_embeddings", "mixer.Wqkv", "mixer.out_proj", "mlp.fc1", "mlp.fc2",
           "pooler.dense")


def _adapted(name: str) -> bool:
    return name.endswith(".weight") and any(name[:-len(".weight")].endswith(m) for m in ADAPTED)


def _deltas(name: str, weight: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Stacked lora_A / lora_B for `weight` in Jina's shapes, as large as trained ones."""
    def rand(*shape):
        return torch.randn(*shape, generator=generator) * 0.3
    if "embeddings" in name:  # an embedding [vocab, dim]: A [tasks, vocab, r], B [tasks, r, dim]
        return rand(len(TASKS), weight.shape[0], RANK), rand(len(TASKS), RANK, weight.shape[1])
    return rand(len(TASKS), RANK, weight.shape[1]), rand(len(TASKS), weight.shape[0], RANK)


def task_adapter_checkpoint(tmp: Path) -> tuple[Path, Path, dict]:
    """jina-embeddings-v3's layout of a tiny random port under `tmp`: (Jina's checkpoint, the
    port's, the stacked deltas by the port's weight name)."""
    from transformers import JinaEmbeddingsV3Model

    torch.manual_seed(0)
    model = make_norms_count(JinaEmbeddingsV3Model(tiny_config(), add_pooling_layer=True).eval(), biases=True)
    port = no_segment_ids(save_tiny(model, tmp / "port"))
    jina = jina_layout(port, tmp / "jina", lora_adaptations=TASKS, lora_rank=RANK,
                       lora_alpha=ALPHA, lora_dropout_p=0.0, load_trained_adapters=True,
                       task_instructions={t: {"retrieval.query": QUERY_PROMPT,
                                              "retrieval.passage": PASSAGE_PROMPT}.get(t, "") for t in TASKS})
    generator = torch.Generator().manual_seed(1)
    tensors, deltas = {}, {}
    for name, tensor in load_file(str(port / "model.safetensors")).items():
        if not _adapted(name):
            tensors["roberta." + name] = tensor
            continue
        module = "roberta." + name[:-len(".weight")]
        deltas[name] = _deltas(name, tensor, generator)
        tensors[module + ".parametrizations.weight.original"] = tensor
        tensors[module + ".parametrizations.weight.0.lora_A"], tensors[module + ".parametrizations.weight.0.lora_B"] \
            = deltas[name]
    assert {n.split(".")[-2] for n in deltas} >= {"word_embeddings", "token_type_embeddings", "Wqkv", "out_proj",
                                                 "fc1", "fc2", "dense"}
    save_file(tensors, str(jina / "model.safetensors"))
    return jina, port, deltas


def merged_model(port: Path, deltas: dict, task: str | None, dest: Path):
    """transformers' port with `task`'s deltas merged into its weights (None: the base weights)."""
    from transformers import JinaEmbeddingsV3Model

    state = load_file(str(port / "model.safetensors"))
    if task is not None:
        i, scaling = TASKS.index(task), ALPHA / RANK
        for name, (a, b) in deltas.items():
            delta = a[i] @ b[i] if "embeddings" in name else b[i] @ a[i]
            state[name] = state[name] + delta * scaling
    dest.mkdir(parents=True, exist_ok=True)
    for f in port.iterdir():
        if f.name != "model.safetensors":
            (dest / f.name).write_bytes(f.read_bytes())
    save_file(state, str(dest / "model.safetensors"))
    return JinaEmbeddingsV3Model.from_pretrained(str(dest)).eval()


def task_reference(checkpoint, task: str | None, texts: list[str], tmp: Path) -> np.ndarray:
    """Jina's encode: the task's prompt before each text, mean pooling, L2 normalised."""
    from tokenizers import Tokenizer

    _, port, deltas = checkpoint
    prompt = {"retrieval.query": QUERY_PROMPT, "retrieval.passage": PASSAGE_PROMPT}.get(task or "", "")
    tokenizer = Tokenizer.from_file(str(port / "tokenizer.json"))
    tokenizer.no_padding()  # MiniLM's tokenizer.json pads a batch to its longest
    ids = [e.ids for e in tokenizer.encode_batch([prompt + t for t in texts])]
    hidden = reference_hidden(merged_model(port, deltas, task, tmp / (task or "base")), ids, pad_id=1)
    pooled = torch.stack([h.mean(0) for h in hidden])
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()
