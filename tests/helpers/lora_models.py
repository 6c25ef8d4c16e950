"""A tiny random BERT and two random PEFT LoRA adapters over it, saved as peft saves them, and
peft's merged model as the reference (`PeftModel.from_pretrained(...).merge_and_unload()`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tiny_models import MINILM_VOCAB, make_tiny_bert, save_tiny

TEXTS = ["a tiny sentence", "the second text is somewhat longer than the first one", "short",
         "LoRA adapters change every layer's projections", "banking intent: transfer money", "x y z"]

# two adapters unlike each other: ranks, scalings (rsLoRA; a per-module rank), targets (the fused
# QKV's shards partly or all, the pooler peft adapts with `dense`, which no encode head reads)
ADAPTERS = {
    "qv": dict(r=4, lora_alpha=8, target_modules=["query", "value"]),
    "all": dict(r=2, lora_alpha=6, use_rslora=True, rank_pattern={"output.dense": 3},
                target_modules=["query", "key", "value", "dense"]),
}


def make_lora_models(root: Path) -> tuple[Path, dict[str, Path]]:
    """(the base model's directory, each adapter's directory by name)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import BertModel

    base = make_tiny_bert(root / "base", seed=0)
    adapters = {}
    for seed, (name, settings) in enumerate(ADAPTERS.items(), start=1):
        torch.manual_seed(seed)
        # init_lora_weights=False: random A and B (peft's default B is zeros, a delta of nothing)
        model = get_peft_model(BertModel.from_pretrained(str(base)).eval(),
                               LoraConfig(init_lora_weights=False, **settings))
        with torch.no_grad():  # deltas as large as a trained adapter's, so a missing one shows
            for param_name, param in model.named_parameters():
                if "lora_B" in param_name:
                    param.mul_(4.0)
        model.save_pretrained(str(root / name))
        adapters[name] = root / name
    return base, adapters


def make_distilbert_lora(root: Path) -> tuple[Path, Path]:
    """A tiny random DistilBERT and a random adapter on every one of its linear layers (peft's
    names for them: q_lin, k_lin, v_lin, out_lin, lin1, lin2)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import DistilBertConfig, DistilBertModel

    torch.manual_seed(3)
    base = save_tiny(DistilBertModel(DistilBertConfig(vocab_size=MINILM_VOCAB, dim=32, n_layers=2, n_heads=4,
                                                      hidden_dim=64, max_position_embeddings=128)).eval(),
                     root / "distilbert")
    model = get_peft_model(DistilBertModel.from_pretrained(str(base)).eval(), LoraConfig(
        r=4, lora_alpha=8, init_lora_weights=False,
        target_modules=["q_lin", "k_lin", "v_lin", "out_lin", "lin1", "lin2"]))
    model.save_pretrained(str(root / "distilbert-lora"))
    return base, root / "distilbert-lora"


def peft_reference(base: Path, adapter: Path | None, texts: list[str]) -> np.ndarray:
    """Mean-pooled, L2-normalised last hidden states of peft's merged model (the base model alone
    for None): `[len(texts), H]` float32."""
    import torch
    from peft import PeftModel
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(base)).eval()
    if adapter is not None:
        model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload().eval()
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()
