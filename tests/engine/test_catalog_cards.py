"""Every built-in card whose only output is dense loads its architecture's code path and
encodes through the Engine, with tiny random weights standing in for the real ones (only
the hub has those).

Each stand-in is a tiny transformers model of the card's family and config class, saved
with the MiniLM tokenizer; the card is copied with its weights pointed at the stand-in and
everything else kept (family, pooling, normalisation, templates, instruction, dtype). The
Engine's output must equal transformers' forward on the same stand-in with the card's
template, pooling and normalisation applied by hand: within 1e-4 for float32 cards, a cosine
of at least 0.999 for bfloat16 ones. Cards with other outputs (sparse, multivector, score,
extract) are covered by their heads' tests.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from arch_fixtures import FP32_TOL, MINILM_VOCAB, cosine, reference_hidden, reference_pooled, save_tiny
from sie_engine import Catalog, Engine, WeightsSource
from sie_engine.models import FAMILIES

CATALOG = Catalog.builtin()
# Static embedders (model2vec) have no transformer to stand in for: tests/engine/families/test_arch_static.py
# checks their cards against model2vec itself.
# Image-text models (CLIP, SigLIP) take images too: tests/engine/families/test_images_engine.py runs their cards.
# Cards whose checkpoint holds task adapters (jina-embeddings-v3) run them by default: a plain stand-in has
# none, so tests/engine/families/test_jina_task_adapters.py checks the card on a checkpoint that holds them.
DENSE_CARDS = [card for card in CATALOG if tuple(card.outputs) == ("dense",) and card.family != "static"
               and "image" not in card.modalities
               and not any(source.checkpoint for source in card.adapters.values())]

# bert-family cards whose real checkpoint is XLM-RoBERTa (position offset, pad index 1), besides
# those whose description names XLM-R.
XLMR_CARDS = {
    "intfloat/multilingual-e5-base", "intfloat/multilingual-e5-large", "intfloat/multilingual-e5-large-instruct",
    "Snowflake/snowflake-arctic-embed-l-v2.0", "sentence-transformers/paraphrase-multilingual-mpnet-base-v2",
    "BAAI/bge-m3", "ibm-granite/granite-embedding-278m-multilingual",
}
QUERY, DOCUMENT = ("how do packed batches work",
                   "Sequences are concatenated without padding and attention runs per sequence.")


def _bert():
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig(vocab_size=MINILM_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=512), add_pooling_layer=False), 0


def _xlmr():
    from transformers import XLMRobertaConfig, XLMRobertaModel

    config = XLMRobertaConfig(vocab_size=MINILM_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                              intermediate_size=64, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1)
    return XLMRobertaModel(config, add_pooling_layer=False), 1


def _modernbert():
    from transformers import ModernBertConfig, ModernBertModel

    config = ModernBertConfig(vocab_size=MINILM_VOCAB, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                              intermediate_size=48, max_position_embeddings=512, local_attention=8,
                              pad_token_id=0, bos_token_id=101, cls_token_id=101, eos_token_id=102, sep_token_id=102)
    return ModernBertModel(config), 0


# transformers tokenises a qwen2/qwen3 directory with its Qwen2Tokenizer class (over MiniLM's
# vocabulary: character pieces) and adds <|endoftext|> after the vocabulary: leave room for it.
QWEN_VOCAB = MINILM_VOCAB + 64


def _qwen(generation: str):
    def build():
        from transformers import Qwen2Config, Qwen2Model, Qwen3Config, Qwen3Model

        common = dict(vocab_size=QWEN_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=96, max_position_embeddings=512)
        if generation == "qwen3":
            return Qwen3Model(Qwen3Config(head_dim=16, **common)), 0
        return Qwen2Model(Qwen2Config(**common)), 0

    return build


def _mistral():
    from transformers import MistralConfig, MistralModel

    config = MistralConfig(vocab_size=MINILM_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, intermediate_size=96, max_position_embeddings=512, sliding_window=256)
    return MistralModel(config), 0


def _llama():
    from transformers import LlamaConfig, LlamaModel

    rope = {"rope_type": "llama3", "rope_theta": 10_000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    config = LlamaConfig(vocab_size=MINILM_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=96, max_position_embeddings=512, rope_parameters=rope)
    return LlamaModel(config), 0


def _gemma3():
    from transformers import Gemma3TextConfig, Gemma3TextModel

    config = Gemma3TextConfig(vocab_size=MINILM_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, head_dim=32, intermediate_size=96, max_position_embeddings=512,
                              sliding_window=8, layer_types=["sliding_attention", "full_attention"],
                              use_bidirectional_attention=True, pad_token_id=0)
    return Gemma3TextModel(config), 0


def _distilbert():
    from transformers import DistilBertConfig, DistilBertModel

    return DistilBertModel(DistilBertConfig(vocab_size=MINILM_VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                            max_position_embeddings=512)), 0


def _nomic_bert():
    from transformers import NomicBertConfig, NomicBertModel

    return NomicBertModel(NomicBertConfig(vocab_size=MINILM_VOCAB, hidden_size=32, num_hidden_layers=2,
                                          num_attention_heads=4, intermediate_size=48, max_position_embeddings=512)), 0


def _mpnet():
    from transformers import MPNetConfig, MPNetModel

    config = MPNetConfig(vocab_size=MINILM_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=514)
    return MPNetModel(config, add_pooling_layer=False), 1  # positions from padding_idx + 1, as RoBERTa's


# family -> builder of (tiny transformers model, pad id). A new family needs a stand-in here.
STAND_INS = {"bert": _bert, "modernbert": _modernbert, "qwen2": _qwen("qwen2"), "qwen3": _qwen("qwen3"),
             "nomic_bert": _nomic_bert, "mpnet": _mpnet, "mistral": _mistral, "llama": _llama,
             "gemma3_text": _gemma3, "distilbert": _distilbert}


def _kind(card) -> str:
    family = card.family or "bert"
    xlmr = card.id in XLMR_CARDS or "XLM-R" in card.description  # cards name their backbone
    kind = "xlmr" if family == "bert" and xlmr else family
    overrides = (card.options or {}).get("backbone")
    return f"{kind}+{json.dumps(overrides, sort_keys=True)}" if overrides else kind


def _run_as_overridden(model, overrides) -> None:
    """The reference runs as the card's options.backbone says the checkpoint's own code runs it (the
    saved config.json keeps no override: SIE must apply it from the card)."""
    for key, value in overrides.items():
        setattr(model.config, key, value)
        for module in model.modules():
            if key == "is_causal" and hasattr(module, "is_causal"):
                module.is_causal = value


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    """kind -> (directory, reference model, pad id), built once per kind."""
    built = {}
    for card in DENSE_CARDS:
        kind = _kind(card)
        if kind in built:
            continue
        base = kind.split("+")[0]
        builder = _xlmr if base == "xlmr" else STAND_INS.get(base)
        assert builder is not None, f"{card.id}: no tiny stand-in for family {base!r}; add one to STAND_INS"
        torch.manual_seed(0)
        model, pad_id = builder()
        model.eval()
        root = save_tiny(model, tmp_path_factory.mktemp(base))
        _run_as_overridden(model, (card.options or {}).get("backbone") or {})
        built[kind] = (root, model, pad_id)
    return built


@pytest.fixture(scope="module")
def engine(stand_ins):
    cards = [dataclasses.replace(card, weights=WeightsSource(path=str(stand_ins[_kind(card)][0])))
             for card in DENSE_CARDS]
    engine = Engine(Catalog(cards), device="cpu")
    yield engine
    engine.close()


def test_catalog_is_broad():
    assert len(CATALOG) >= 30
    for card in DENSE_CARDS:
        assert card.family is None or card.family in FAMILIES, card.id
        assert card.dims, f"{card.id}: dense cards state their dimension"
        assert all(d <= card.dims for d in card.matryoshka_dims), card.id
        assert "{text}" in card.query_template and "{text}" in card.document_template, card.id
        if "{instruction}" in card.query_template:
            assert card.query_instruction, f"{card.id}: an instruct template needs a default instruction"


def _prompt_length(tokenizer, template: str, instruction: str | None) -> int:
    """The template's prompt in tokens as sentence-transformers measures it for include_prompt: false:
    tokenised alone, less a trailing special token."""
    ids = tokenizer(template.partition("{text}")[0].replace("{instruction}", instruction or ""))["input_ids"]
    return len(ids) - (ids[-1] in tokenizer.all_special_ids)


@pytest.mark.parametrize("card", DENSE_CARDS, ids=[c.id for c in DENSE_CARDS])
def test_card_encodes_like_transformers(card, engine, stand_ins):
    root, reference, pad_id = stand_ins[_kind(card)]
    from transformers import AutoTokenizer

    hf_tok = AutoTokenizer.from_pretrained(str(root))
    for is_query, text in ((True, QUERY), (False, DOCUMENT)):
        result = engine.encode_sync(card.id, [text], is_query=is_query)
        got = np.asarray(result.items[0].dense, dtype=np.float32)
        template, instruction = card.template_for(is_query, None)
        templated = template.replace("{instruction}", instruction or "").replace("{text}", text)
        ids = [np.asarray(hf_tok(templated)["input_ids"][:card.max_seq_len])]
        hidden = reference_hidden(reference, ids, pad_id=pad_id)
        if not card.options.get("dense", {}).get("include_prompt", True):  # the prompt's tokens left out
            hidden = [h[_prompt_length(hf_tok, template, instruction):] for h in hidden]
        expected = reference_pooled(hidden, card.pooling)[0]
        if card.normalize:
            expected = expected / np.linalg.norm(expected)
            assert abs(np.linalg.norm(got) - 1) < 1e-3
        assert got.shape == expected.shape and np.isfinite(got).all()
        if card.dtype in ("auto", "float32"):
            np.testing.assert_allclose(got, expected, atol=FP32_TOL, rtol=0)
        else:
            assert cosine(got, expected) > 0.999, card.id
    small = [d for d in card.matryoshka_dims if d <= got.shape[0]]
    if small:  # a Matryoshka size the stand-in can give: truncated, then renormalised
        truncated = engine.encode_sync(card.id, [DOCUMENT], dims=small[-1]).items[0].dense
        assert len(truncated) == small[-1]
