"""Late chunking on the real all-MiniLM-L6-v2 against sentence-transformers' token embeddings of
the chunks joined into one text, pooled as jina-ai/late-chunking's `chunked_pooling` does; its
parts on their own: the span pooling against a plain loop, and which models and requests it
refuses (the shipped cards). Over HTTP, with a template and LoRA task adapters, against
transformers' jina-embeddings-v3 port: tests/server/test_jina_tasks_http.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import sie_engine.catalog
from sie_engine import Engine
from sie_engine.card import ModelCard
from sie_engine.errors import InvalidRequest
from sie_engine.heads.pooling import span_mean
from sie_engine.tasks.late_chunking import check_late_chunking
from tiny_models import MINILM_DIR

CATALOG = Path(sie_engine.catalog.__file__).parent


def card(name: str) -> ModelCard:
    return ModelCard.from_dict(yaml.safe_load((CATALOG / name).read_text()))


MODEL = "sentence-transformers/all-MiniLM-L6-v2"
CHUNKS = ["Berlin is the capital and largest city of Germany.", "Its more than 3.85 million inhabitants make it",
          "the most populous city of the European Union.", "The city is also one of the states of Germany."]


def test_real_minilm_equals_chunked_pooling_of_sentence_transformers_token_embeddings():
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(MINILM_DIR), device="cpu")
    tokenizer = st.tokenizer
    # WordPiece splits at spaces, so the joined text's ids are the chunks' own ids one after another
    pieces = [tokenizer(chunk, add_special_tokens=False)["input_ids"] for chunk in CHUNKS]
    joined = tokenizer(" ".join(CHUNKS))["input_ids"]
    assert joined == [tokenizer.cls_token_id, *(i for piece in pieces for i in piece), tokenizer.sep_token_id]
    hidden = st.encode(" ".join(CHUNKS), output_value="token_embeddings", convert_to_tensor=True)
    spans, start = [], 1
    for piece in pieces:
        spans.append((start, start + len(piece)))
        start += len(piece)
    pooled = torch.stack([hidden[s:e].sum(0) / (e - s) for s, e in spans])  # chunked_pooling
    want = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    with Engine(device="cpu") as engine:
        late = np.stack([item.dense for item in engine.encode_sync(MODEL, CHUNKS, late_chunking=True).items])
        alone = np.stack([item.dense for item in engine.encode_sync(MODEL, CHUNKS).items])
    np.testing.assert_allclose(late, want, atol=1e-5, rtol=0)
    assert np.abs(late - alone).max() > 1e-2  # the chunks saw each other


def test_span_mean_is_each_ranges_mean():
    torch.manual_seed(0)
    hidden = torch.randn(40, 8)
    spans = [(1, 4), (4, 5), (5, 19), (22, 23), (23, 39)]  # within two packed sequences, gaps between
    got = span_mean(hidden, torch.tensor([s for s, _ in spans]), torch.tensor([e - s for s, e in spans]))
    want = torch.stack([hidden[s:e].sum(0) / (e - s) for s, e in spans])
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


def test_a_mean_pooling_text_models_dense_output_is_served():
    check_late_chunking(card("jina-embeddings-v3.yaml"), ["dense"])


@pytest.mark.parametrize(("name", "words"), [
    ("bge-small-en-v1.5.yaml", "it pools by cls"),
    ("potion-base-8M.yaml", "do not attend to each other"),
    ("openai-clip-vit-base-patch32.yaml", "image-text model"),
])
def test_other_models_are_a_400_naming_late_chunking(name, words):
    with pytest.raises(InvalidRequest) as refused:
        check_late_chunking(card(name), ["dense"])
    assert refused.value.field == "late_chunking" and words in str(refused.value)


def test_other_outputs_are_a_400_naming_output_types():
    with pytest.raises(InvalidRequest) as refused:
        check_late_chunking(card("jina-embeddings-v3.yaml"), ["dense", "sparse"])
    assert refused.value.field == "output_types"
