"""GLiNER extraction and the DeBERTa backbone on a CUDA device, against the CPU/CUDA
references on the same weights. Needs a GPU: run it there with
`pytest tests/engine/heads/test_gliner_cuda.py` (plain torch + transformers + gliner; flash-attn optional)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_gliner_deberta import SENTENCES, load_packed, tiny_deberta
from test_gliner_extract import LABELS, TEXTS, assert_same, build_reference, models  # noqa: F401

from sie_engine import Catalog, Engine, ModelCard, WeightsSource

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on the GPU machine)")


@pytest.fixture(autouse=True)
def no_tf32(monkeypatch):
    """cuDNN may run the LSTM in TF32 by default (about 1e-3 relative error); the float32
    comparisons below are to 1e-4, so they turn it off."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)


@pytest.mark.parametrize("flat", [True, False])
def test_float32_on_cuda_matches_predict_entities(models, flat):  # noqa: F811
    cards = [ModelCard(id=name, weights=WeightsSource(path=str(root)), outputs=("extract",), dtype="float32",
                       max_seq_len=512) for name, (root, _) in models.items()]
    with Engine(Catalog(cards), device="cuda") as engine:
        for name, (_, reference) in models.items():
            result = engine.extract_sync(name, TEXTS, LABELS, threshold=0.5, flat=flat)
            for text, item in zip(TEXTS, result.items):
                assert_same(item.entities, reference.predict_entities(text, LABELS, flat_ner=flat, threshold=0.5))


def test_float16_backbone_stays_close(models):  # noqa: F811
    root, reference = models["minilm-markerV0-first"]
    card = ModelCard(id="fp16", weights=WeightsSource(path=str(root)), outputs=("extract",), dtype="float16")
    with Engine(Catalog([card]), device="cuda") as engine:
        result = engine.extract_sync("fp16", TEXTS, LABELS, threshold=0.5)
    for text, item in zip(TEXTS, result.items):
        expected = {(e["start"], e["end"], e["label"]): e["score"]
                    for e in reference.predict_entities(text, LABELS, threshold=0.5)}
        ours = {(e.start, e.end, e.label): e.score for e in item.entities}
        shared = set(ours) & set(expected)
        # half precision may move a near-tie or a near-threshold span; most must agree
        assert len(shared) >= 0.8 * max(len(expected), len(ours))
        assert all(abs(ours[k] - expected[k]) < 2e-2 for k in shared)


@pytest.mark.parametrize("name", ["v3", "v2"])
def test_deberta_on_cuda_matches_transformers(tmp_path, name):
    from transformers import DebertaV2Model as HFModel

    from sie_engine.attention import select_backend
    from sie_engine.batch import pack
    from sie_engine.tokenizer import TextTokenizer

    root = tiny_deberta(name, tmp_path / name)
    reference = HFModel.from_pretrained(root).eval().cuda()
    ours = load_packed(root).cuda()
    ids = TextTokenizer(root, 128).encode(SENTENCES).ids
    batch = pack(ids, select_backend(torch.device("cuda"), torch.float32), torch.device("cuda"))
    with torch.inference_mode():
        packed = ours(batch.input_ids, batch.positions, batch.attn)
        for i, seq in enumerate(ids):
            expected = reference(input_ids=torch.from_numpy(seq.astype(np.int64))[None].cuda()).last_hidden_state[0]
            start = sum(len(s) for s in ids[:i])
            torch.testing.assert_close(packed[start:start + len(seq)], expected, atol=1e-4, rtol=1e-4)


def test_gliner_on_deberta_on_cuda(tmp_path):
    backbone = tiny_deberta("v3", tmp_path / "backbone", seed=1)
    root = tmp_path / "gliner"
    reference = build_reference(root, backbone, seed=2, hidden_size=48, max_width=6, embed_ent_token=False)
    card = ModelCard(id="d", weights=WeightsSource(path=str(root)), outputs=("extract",), dtype="float32",
                     max_seq_len=128)
    with Engine(Catalog([card]), device="cuda") as engine:
        result = engine.extract_sync("d", TEXTS, LABELS, threshold=0.5)
    for text, item in zip(TEXTS, result.items):
        assert_same(item.entities, reference.predict_entities(text, LABELS, threshold=0.5))


def test_many_windows_in_one_batch_on_cuda(models):  # noqa: F811
    """A batch of many long texts: chunked span computation and the LSTM over packed windows."""
    root, reference = models["minilm-markerV0-first"]
    card = ModelCard(id="w", weights=WeightsSource(path=str(root)), outputs=("extract",), dtype="float32",
                     max_seq_len=512, max_batch_tokens=65536)
    texts = [" ".join(TEXTS[(i + j) % len(TEXTS)] for j in range(12)) for i in range(40)]  # ~170 words each
    with Engine(Catalog([card]), device="cuda") as engine:
        result = engine.extract_sync("w", texts, LABELS, threshold=0.5)
    for text, item in zip(texts[:5], result.items):
        assert_same(item.entities, reference.predict_entities(text, LABELS, threshold=0.5))
