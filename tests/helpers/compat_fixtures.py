"""Models and a real `sie-server serve` for the tests of the ecosystem's APIs
(tests/server/compat/test_compat_clients.py, tests/server/compat/test_compat_protocols.py): each module starts its own.

- `ASYM`: the real all-MiniLM-L6-v2 weights with query and passage prompts in its
  config_sentence_transformers.json, so query mode changes the vector (served by `--model`);
- `MATRYOSHKA`: the same weights under a card with Matryoshka sizes (`--models`);
- `CROSS`: a random one-label classification head on MiniLM's backbone (a cross-encoder);
- `SPLADE`: the built-in sie/splade-tiny (real weights).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import numpy as np
import yaml

from server_fixtures import start_server
from tiny_models import MINILM_DIR, save_tiny

ASYM = "test/asym"
MATRYOSHKA = "test/matryoshka"
CROSS = "test/cross"
SPLADE = "sie/splade-tiny"
PROMPTS = {"query": "query: ", "passage": "passage: "}
QUERY = "how do I install a python package"
DOCS = ["pip installs Python packages from PyPI.", "A library for PNG images.", "Football is a sport.",
        "apt installs Debian packages, python3-pip among them."]


def asymmetric_minilm(dest: Path) -> Path:
    """MiniLM with query / passage prompts (the weights linked, not copied)."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry in MINILM_DIR.iterdir():
        if entry.name != "config_sentence_transformers.json":
            os.symlink(entry, dest / entry.name)
    config = json.loads((MINILM_DIR / "config_sentence_transformers.json").read_text())
    config.update(prompts=PROMPTS, default_prompt_name=None)
    (dest / "config_sentence_transformers.json").write_text(json.dumps(config))
    return dest


def cross_encoder(dest: Path) -> Path:
    import torch
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    return save_tiny(BertForSequenceClassification.from_pretrained(str(MINILM_DIR), num_labels=1).eval(), dest)


def start_compat_server(base: Path, *extra: str):
    cards = base / "cards"
    cards.mkdir()
    (cards / "cross.yaml").write_text(yaml.safe_dump({
        "id": CROSS, "weights": {"path": str(cross_encoder(base / "cross"))}, "outputs": ["score"],
        "max_seq_len": 128, "max_batch_tokens": 4096}))
    (cards / "matryoshka.yaml").write_text(yaml.safe_dump({
        "id": MATRYOSHKA, "weights": {"path": str(MINILM_DIR)}, "family": "bert", "outputs": ["dense"],
        "pooling": "mean", "normalize": True, "max_seq_len": 256, "dims": 384, "matryoshka_dims": [256, 128, 64]}))
    return start_server("--model", f"{ASYM}={asymmetric_minilm(base / 'asym')}", "--models", str(cards),
                        "--preload", ASYM, "--preload", CROSS, "--device", "cpu", *extra, log_dir=base)


def encode(url: str, model: str, texts: list[str], **fields) -> np.ndarray:
    """SIE's own /v1/encode: the reference every compatible route must match."""
    answer = httpx.post(f"{url}/v1/encode/{model}", json={"items": texts, **fields}, timeout=60)
    assert answer.status_code == 200, answer.text
    return np.array([item["dense"] for item in answer.json()["items"]], dtype=np.float32)


def scores(url: str, model: str, query: str, texts: list[str]) -> dict[int, float]:
    """SIE's own /v1/score: index -> score."""
    answer = httpx.post(f"{url}/v1/score/{model}", json={"query": query, "items": texts}, timeout=60)
    assert answer.status_code == 200, answer.text
    return {s["index"]: s["score"] for s in answer.json()["scores"]}
