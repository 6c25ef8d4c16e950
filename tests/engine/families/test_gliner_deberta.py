"""The packed DeBERTa-v2/v3 backbone (GLiNER's usual backbone) against transformers'
`DebertaV2Model` on tiny random configs: every weight loaded, outputs within 1e-4,
batch invariance; then a GLiNER on a DeBERTa-v3-style backbone against
`predict_entities`."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_gliner_extract import LABELS, TEXTS, assert_same, build_reference

from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.attention import GroupedSDPAAttention
from sie_engine.batch import pack
from sie_engine.checkpoints import describe
from sie_engine.layers.weights import load_checkpoint, materialize
from sie_engine.models import family_for
from sie_engine.models.deberta_v2.model import DebertaV2Config, DebertaV2Model
from sie_engine.tokenizer import TextTokenizer
from sie_engine.weights import Checkpoint, weight_files
from tiny_models import MINILM_VOCAB, save_tiny

CONFIGS = {
    # DeBERTa-v3: log-bucketed relative positions (small buckets, so texts reach the log
    # range), shared q/k projections for positions, LayerNorm'd relative embeddings,
    # no absolute positions, no segments
    "v3": dict(relative_attention=True, position_buckets=8, max_relative_positions=32, pos_att_type="p2c|c2p",
               share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0),
    # DeBERTa-v2 style: separate position projections, plain relative positions,
    # absolute positions too, segments, a narrower embedding projected up
    "v2": dict(relative_attention=True, max_relative_positions=16, pos_att_type=["c2p", "p2c"], share_att_key=False,
               position_biased_input=True, type_vocab_size=2, embedding_size=24),
    # content-to-position only
    "c2p-only": dict(relative_attention=True, max_relative_positions=24, pos_att_type=["c2p"], share_att_key=False,
                     position_biased_input=False, type_vocab_size=0),
}


def tiny_deberta(name: str, dest, seed: int = 0):
    from transformers import DebertaV2Config as HFConfig
    from transformers import DebertaV2Model as HFModel

    torch.manual_seed(seed)
    config = HFConfig(vocab_size=MINILM_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=128, hidden_act="gelu", **CONFIGS[name])
    return save_tiny(HFModel(config).eval(), dest)


def load_packed(root):
    config = dict(describe(root).config)
    family = family_for(config)
    assert family.name == "deberta-v2"
    typed = family.config_from_hf(config)
    with torch.device("meta"):
        model = DebertaV2Model(typed)
    model = materialize(model, torch.device("cpu"), torch.float32).eval()
    load_checkpoint(model, Checkpoint(weight_files(root)), model.weight_spec)  # raises listing any unloaded parameter
    return model


SENTENCES = [
    "DeBERTa improves BERT with disentangled attention.",
    "Short.",
    "A much longer sentence, so that relative positions reach well past the exact bucket range "
    "and into the logarithmic one, which the small test buckets make happen early on.",
    "Zürich and São Paulo are cities.",
]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_matches_transformers(tmp_path, name):
    from transformers import DebertaV2Model as HFModel

    root = tiny_deberta(name, tmp_path / name, seed=len(name))
    reference = HFModel.from_pretrained(root).eval()
    ours = load_packed(root)
    tokenizer = TextTokenizer(root, 128)
    ids = tokenizer.encode(SENTENCES).ids
    batch = pack(ids, GroupedSDPAAttention(), torch.device("cpu"))
    with torch.inference_mode():
        packed = ours(batch.input_ids, batch.positions, batch.attn)
        padded = torch.zeros(len(ids), max(map(len, ids)), dtype=torch.long)
        mask = torch.zeros_like(padded)
        for i, seq in enumerate(ids):
            padded[i, :len(seq)] = torch.from_numpy(seq.astype(np.int64))
            mask[i, :len(seq)] = 1
        expected = reference(input_ids=padded, attention_mask=mask).last_hidden_state
    offset = 0
    for i, seq in enumerate(ids):
        torch.testing.assert_close(packed[offset:offset + len(seq)], expected[i, :len(seq)], atol=1e-4, rtol=1e-4)
        offset += len(seq)
    # batch invariance: each sequence alone gives the same rows
    with torch.inference_mode():
        for i, seq in enumerate(ids):
            alone = pack([seq], GroupedSDPAAttention(), torch.device("cpu"))
            start = sum(len(s) for s in ids[:i])
            torch.testing.assert_close(ours(alone.input_ids, alone.positions, alone.attn),
                                       packed[start:start + len(seq)], atol=1e-5, rtol=1e-5)


def test_rejects_the_convolution_layer():
    with pytest.raises(ValueError, match="conv_kernel_size"):
        DebertaV2Config.from_hf(dict(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=16, conv_kernel_size=3))


def test_gliner_on_a_deberta_v3_backbone(tmp_path):
    backbone = tiny_deberta("v3", tmp_path / "backbone", seed=1)
    root = tmp_path / "gliner"
    # label vectors from the label words: on a tiny random backbone the <<ENT>> states are near-identical
    reference = build_reference(root, backbone, seed=2, hidden_size=48, max_width=6, embed_ent_token=False)
    card = ModelCard(id="gliner/deberta", weights=WeightsSource(path=str(root)), outputs=("extract",), max_seq_len=128)
    with Engine(Catalog([card]), device="cpu") as engine:
        for flat in (True, False):
            result = engine.extract_sync("gliner/deberta", TEXTS, LABELS, threshold=0.5, flat=flat)
            total = 0
            for text, item in zip(TEXTS, result.items):
                expected = reference.predict_entities(text, LABELS, flat_ner=flat, threshold=0.5)
                assert_same(item.entities, expected)
                total += len(expected)
            assert total >= 5


def test_urchade_layout_from_the_hub_cache(tmp_path, monkeypatch):
    """The urchade/gliner_*-v2.1 layout: gliner_config.json without backbone config, vocabulary
    size or token index, `model_name` a hub id whose repository gives config and tokenizer,
    pytorch_model.bin; both repositories served from the hub cache, offline."""
    import json
    import shutil

    import huggingface_hub.constants as hub_constants
    from test_gliner_extract import hub_cache_layout

    backbone = tiny_deberta("v3", tmp_path / "backbone", seed=4)
    saved = tmp_path / "saved"
    reference = build_reference(saved, backbone, seed=5, hidden_size=32, max_width=4, embed_ent_token=False)
    upload = tmp_path / "upload"
    upload.mkdir()
    config = json.loads((saved / "gliner_config.json").read_text())
    for key in ("encoder_config", "class_token_index", "vocab_size"):
        config.pop(key)
    config["model_name"] = "tiny/deberta-v3-backbone"
    (upload / "gliner_config.json").write_text(json.dumps(config))
    shutil.copy(saved / "pytorch_model.bin", upload / "pytorch_model.bin")
    (backbone / "model.safetensors").unlink()  # SIE must not need the backbone repository's weights
    cache = tmp_path / "hub"
    hub_cache_layout(cache, "someone/gliner_tiny-v2.1", upload)
    hub_cache_layout(cache, "tiny/deberta-v3-backbone", backbone)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    card = ModelCard(id="someone/gliner_tiny-v2.1", weights=WeightsSource(hub="someone/gliner_tiny-v2.1"),
                     family="deberta-v2", outputs=("extract",), max_seq_len=128)
    with Engine(Catalog([card]), device="cpu") as engine:
        result = engine.extract_sync(card.id, TEXTS, LABELS, threshold=0.5)
    for text, item in zip(TEXTS, result.items):
        assert_same(item.entities, reference.predict_entities(text, LABELS, threshold=0.5))


def test_catalog_has_the_gliner_cards():
    catalog = Catalog.builtin()
    for model_id in ("urchade/gliner_small-v2.1", "urchade/gliner_medium-v2.1", "urchade/gliner_large-v2.1",
                     "urchade/gliner_multi-v2.1", "numind/NuNER_Zero", "numind/NuNER_Zero-span"):
        card = catalog.get(model_id)
        assert card is not None and card.tasks == ("extract",) and card.family == "deberta-v2"
        assert card.weights.hub == model_id
