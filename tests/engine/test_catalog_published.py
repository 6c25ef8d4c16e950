"""Every built-in card against what its model publishes (tests/helpers/published_model_facts.py, one row
per card with the files it was read from), then every card that is not a plain dense one loaded
from the card alone on a tiny random stand-in of its family and run once through its task.

Dense cards run against transformers in tests/engine/test_catalog_cards.py; this module checks the
facts those cards carry (pooling, normalisation, width, window, prompts) against the published
ones, and loads the rest (score, sparse, multivector, zero-shot, extract): the card's head
settings must build on the family and give answers of the published shape.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from arch_fixtures import no_segment_ids
from published_model_facts import PUBLISHED
from sie_engine import Catalog, Engine, WeightsSource
from sie_engine.models import family_for
from sie_engine.models.gliner.checkpoint import SPAN_MODES
from tiny_models import MINILM_VOCAB, save_tiny, tiny_bert_config, tiny_xlmr_config

CATALOG = Catalog.builtin()
CARDS = list(CATALOG)
QUERY = "how do I install python packages"
DOCS = ["pip installs Python packages from the package index.", "A library for PNG images."]


def test_the_catalog_holds_190_cards_and_every_card_has_a_published_row():
    assert len(CARDS) >= 190  # issue 33's breadth goal
    ids = {card.id for card in CARDS}
    assert ids - set(PUBLISHED) == set(), "cards without a row in tests/helpers/published_model_facts.py: add one"
    assert set(PUBLISHED) - ids == set(), "rows without a card"
    assert all(row.source for row in PUBLISHED.values())


def _resolved(template: str, instruction: str | None) -> str:
    return template.replace("{instruction}", instruction or "")


def _published_config(row) -> dict:
    """The config.json fields that pick a row's family."""
    config = {"model_type": row.model_type}
    if row.position_embedding_type is not None:
        config["position_embedding_type"] = row.position_embedding_type
    return config


def _check_task_adapters(card, row) -> None:
    """The checkpoint's task adapters, where the row names them: all served; queries and documents run
    theirs without asking."""
    if row.task_adapters is None:
        return
    assert {name: source.checkpoint for name, source in card.adapters.items()} == \
        {task: task for task in row.task_adapters}, "task adapters"
    for side, task in ((card.query_profile, row.query_task), (card.document_profile, row.document_task)):
        assert side is not None and card.profiles[side]["lora_id"] == task, "the task a query / document runs"


@pytest.mark.parametrize("card", CARDS, ids=[c.id for c in CARDS])
def test_card_agrees_with_the_published_configuration(card):
    row = PUBLISHED.get(card.id)
    assert row is not None, f"{card.id}: add what the model publishes to tests/helpers/published_model_facts.py"
    assert family_for(_published_config(row)).name == card.family, "family"
    assert set(card.outputs) == set(row.outputs), "outputs"
    if row.max_seq_len is not None:
        if row.window is not None:
            assert row.window < row.max_seq_len and row.window <= card.max_seq_len
        assert card.max_seq_len == (row.window or row.max_seq_len), "max_seq_len"
    if "dense" in row.outputs:
        assert card.pooling == row.pooling, "pooling"
        if row.normalize is not None:
            assert card.normalize == row.normalize, "normalize"
        assert card.dims == row.dims, "dims"
        assert _resolved(card.query_template, card.query_instruction) == row.query, "query prompt"
        assert card.document_template == row.document, "document prompt"
        assert card.options.get("dense", {}).get("include_prompt", True) == row.include_prompt, "include_prompt"
    _check_task_adapters(card, row)
    if row.causal is not None:
        assert card.options.get("backbone", {}).get("is_causal", True) == row.causal, "causal attention"
    if "classifier" in row.outputs:
        options = card.options["classifier"]
        assert options["num_labels"] == row.num_labels, "num_labels"
        assert options.get("multi_label", False) == row.multi_label, "multi_label"
        assert card.document_template == row.document, "document prompt"
    if "multivector" in row.outputs and row.markers is not None:
        options = card.options["multivector"]
        assert (options.get("query_marker"), options.get("document_marker")) == row.markers
        assert options.get("query_length") == row.query_length
        if row.query_expansion is not None:
            assert options.get("expand_queries", False) == row.query_expansion, "query expansion"
        if row.attend_to_expansion is not None:
            assert options.get("attend_to_expansion_tokens", False) == row.attend_to_expansion, "attention to expansion"
    if "sparse" in row.outputs:
        assert card.options.get("sparse", {}).get("activation", "log1p_relu") == row.sparse_activation
    if "generate" in row.outputs:  # the decoder's positions are max_seq_len (checked above)
        assert card.image_size == max(row.image_size), "image_size (the long side)"
        options = card.options["generate"]
        assert options["task_prompt"] == row.task_prompt, "task prompt"
        assert 1 <= options["max_new_tokens"] < row.max_seq_len, "max_new_tokens leaves the prompt a position"
        if row.generation is not None:  # the checkpoint's decoding, as published: the card overrides none of it
            assert not set(options.get("generation") or {}) & set(row.generation), "generation overrides"
    if row.span_mode is not None:
        assert row.span_mode in SPAN_MODES, f"{row.span_mode}: a GLiNER span mode SIE does not implement"


# ---- loading the non-dense cards on tiny stand-ins ---------------------------------------------

LOADED = [card for card in CARDS
          if set(card.outputs) & {"score", "sparse", "multivector", "zeroshot", "extract", "classifier"}]
# Their own modules build the layouts these need (sparse_linear.pt / colbert_linear.pt; a causal LM's
# yes/no prompt) and check the card end to end.
ELSEWHERE = {
    "BAAI/bge-m3": "tests/engine/heads/test_heads_bge_m3.py",
    "Qwen/Qwen3-Reranker-0.6B": "tests/engine/tasks/test_score_llm_reranker.py",
    "Qwen/Qwen3-Reranker-4B": "tests/engine/tasks/test_score_llm_reranker.py",
    "Qwen/Qwen3-Reranker-8B": "tests/engine/tasks/test_score_llm_reranker.py",
    "mixedbread-ai/mxbai-rerank-base-v2": "tests/engine/tasks/test_score_mxbai_rerank_v2.py",
    "mixedbread-ai/mxbai-rerank-large-v2": "tests/engine/tasks/test_score_mxbai_rerank_v2.py",
    "jinaai/jina-colbert-v2": "tests/engine/heads/test_heads_colbert_jina.py",
    "vidore/colpali-v1.3-hf": "tests/engine/families/test_colpali.py",
    "vidore/colqwen2-v1.0-hf": "tests/engine/families/test_colqwen2.py",
    "vidore/colqwen2-v1.0": "tests/engine/families/test_colqwen2_colpali_engine.py",
    "vidore/colqwen2.5-v0.2": "tests/engine/families/test_colqwen2_colpali_engine.py",
    "Qwen/Qwen3-VL-Reranker-2B": "tests/engine/families/test_qwen3_vl.py",
    "Qwen/Qwen3-VL-Reranker-8B": "tests/engine/families/test_qwen3_vl.py",
    # a ModernBERT or DeBERTa-v3 text encoder and a labels encoder
    **dict.fromkeys(["knowledgator/gliner-bi-edge-v2.0", "knowledgator/gliner-bi-small-v2.0",
                     "knowledgator/gliner-bi-base-v2.0", "knowledgator/gliner-bi-large-v2.0",
                     "knowledgator/modern-gliner-bi-base-v1.0", "knowledgator/modern-gliner-bi-large-v1.0",
                     "knowledgator/gliner-bi-small-v1.0", "knowledgator/gliner-bi-base-v1.0",
                     "knowledgator/gliner-bi-large-v1.0", "Ihor/gliner-biomed-bi-small-v1.0",
                     "Ihor/gliner-biomed-bi-base-v1.0", "Ihor/gliner-biomed-bi-large-v1.0"],
                    "tests/engine/heads/test_gliner_bi.py"),
}
LOADED = [card for card in LOADED if card.id not in ELSEWHERE]


def _spread(model):
    """Random heads at 0.02 give every input the same score: widen them so answers differ."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.startswith(("classifier", "pooler", "bert.pooler", "roberta.pooler")):
                param.normal_(0.0, 0.5 if name.endswith("weight") else 0.1)
    return model


def _deberta_config(**extra):
    from transformers import DebertaV2Config

    return DebertaV2Config(vocab_size=MINILM_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=512, relative_attention=True,
                           position_buckets=32, max_relative_positions=-1, pos_att_type=["p2c", "c2p"],
                           norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0,
                           pooler_hidden_size=32, pooler_hidden_act="gelu", initializer_range=0.3, **extra)


NLI = {0: "contradiction", 1: "entailment", 2: "neutral"}


def _labels(id2label):
    return dict(num_labels=len(id2label), id2label=dict(id2label), label2id={v: k for k, v in id2label.items()})


def _classifier(model_type: str, id2label, dest):
    from transformers import (
        BertForSequenceClassification,
        DebertaV2ForSequenceClassification,
        ModernBertConfig,
        ModernBertForSequenceClassification,
        XLMRobertaForSequenceClassification,
    )

    labels = _labels(id2label)
    if model_type == "distilbert":
        from transformers import DistilBertConfig, DistilBertForSequenceClassification

        model = DistilBertForSequenceClassification(DistilBertConfig(
            vocab_size=MINILM_VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64, initializer_range=0.3, **labels))
    elif model_type == "bert":
        model = BertForSequenceClassification(tiny_bert_config(initializer_range=0.3, **labels))
    elif model_type in ("roberta", "xlm-roberta"):
        model = XLMRobertaForSequenceClassification(tiny_xlmr_config(initializer_range=0.3, **labels))
    elif model_type == "deberta-v2":
        model = DebertaV2ForSequenceClassification(_deberta_config(**labels))
    else:
        model = ModernBertForSequenceClassification(ModernBertConfig(
            vocab_size=MINILM_VOCAB, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
            intermediate_size=48, max_position_embeddings=512, local_attention=8, pad_token_id=0,
            bos_token_id=101, cls_token_id=101, eos_token_id=102, sep_token_id=102, **labels))
    root = save_tiny(_spread(model.eval()), dest)
    return root if model_type == "bert" else no_segment_ids(root)


def _masked_lm(model_type: str, dest):
    """A masked-LM checkpoint, with an idf.json as inference-free (opensearch doc-*) models ship it."""
    from transformers import BertForMaskedLM, DistilBertConfig, DistilBertForMaskedLM, RobertaConfig, RobertaForMaskedLM

    if model_type == "bert":
        root = save_tiny(BertForMaskedLM(tiny_bert_config()).eval(), dest)
    elif model_type == "distilbert":
        config = DistilBertConfig(vocab_size=MINILM_VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64)
        root = no_segment_ids(save_tiny(DistilBertForMaskedLM(config).eval(), dest))
    else:
        config = RobertaConfig(**tiny_xlmr_config().to_dict())
        root = no_segment_ids(save_tiny(RobertaForMaskedLM(config).eval(), dest))
    vocab = json.loads((root / "tokenizer.json").read_text())["model"]["vocab"]
    (root / "idf.json").write_text(json.dumps({token: 1.0 + i % 7 for i, token in enumerate(list(vocab)[999:])}))
    return root


def _colbert_ir(dest):
    """colbert-ir's layout: a BERT checkpoint with the projection `linear.weight` beside it."""
    from safetensors.torch import load_file, save_file
    from transformers import BertModel

    root = save_tiny(BertModel(tiny_bert_config(), add_pooling_layer=False).eval(), dest)
    tensors = load_file(str(root / "model.safetensors"))
    tensors["linear.weight"] = torch.randn(16, 32) * 0.2
    save_file(tensors, str(root / "model.safetensors"), metadata={"format": "pt"})
    return root


def _pylate_modernbert(dest):
    """PyLate's layout: ModernBERT at the root, the projection in 1_Dense/, the [Q] / [D] markers
    added to the tokenizer as PyLate adds them."""
    from safetensors.torch import save_file
    from tokenizers import AddedToken, Tokenizer
    from transformers import ModernBertConfig, ModernBertModel

    config = ModernBertConfig(vocab_size=MINILM_VOCAB + 2, hidden_size=32, num_hidden_layers=3,
                              num_attention_heads=4, intermediate_size=48, max_position_embeddings=512,
                              local_attention=8, pad_token_id=0, bos_token_id=101, cls_token_id=101,
                              eos_token_id=102, sep_token_id=102)
    root = save_tiny(ModernBertModel(config).eval(), dest)
    tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
    tokenizer.add_special_tokens([AddedToken("[Q] ", normalized=False), AddedToken("[D] ", normalized=False)])
    tokenizer.save(str(root / "tokenizer.json"))
    (root / "1_Dense").mkdir()
    (root / "1_Dense" / "config.json").write_text(json.dumps(
        {"in_features": 32, "out_features": 16, "bias": False,
         "activation_function": "torch.nn.modules.linear.Identity"}))
    save_file({"linear.weight": torch.randn(16, 32) * 0.2}, str(root / "1_Dense" / "model.safetensors"))
    (root / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"}]))
    return root


def _gliner(dest):
    from test_gliner_deberta import tiny_deberta
    from test_gliner_extract import build_reference

    backbone = tiny_deberta("v3", dest / "backbone", seed=3)
    build_reference(dest / "gliner", backbone, seed=3, hidden_size=32, max_width=4, embed_ent_token=False)
    return dest / "gliner"


def _stand_in_kind(card) -> tuple[str, ...]:
    row = PUBLISHED[card.id]
    output = next(o for o in card.outputs if o != "dense")
    if output == "classifier":  # a stand-in with the card's number of labels
        return ("roberta" if row.model_type == "xlm-roberta" else row.model_type), output, str(row.num_labels)
    if output == "multivector":
        return row.model_type, output
    model_type = "roberta" if row.model_type == "xlm-roberta" else row.model_type
    return (model_type if output != "extract" else "gliner"), output


def _build(kind, dest):
    model_type, output = kind[:2]
    torch.manual_seed(0)
    if output == "classifier":
        return _classifier(model_type, {i: f"class_{i}" for i in range(int(kind[2]))}, dest)
    if output == "score":
        return _classifier(model_type, {0: "LABEL_0"}, dest)
    if output == "zeroshot":
        return _classifier(model_type, NLI, dest)
    if output == "sparse":
        return _masked_lm(model_type, dest)
    if output == "multivector":
        return _colbert_ir(dest) if model_type == "bert" else _pylate_modernbert(dest)
    return _gliner(dest)


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    kinds = sorted({_stand_in_kind(card) for card in LOADED})
    return {kind: _build(kind, tmp_path_factory.mktemp("-".join(kind))) for kind in kinds}


@pytest.fixture(scope="module")
def engine(stand_ins):
    cards = [dataclasses.replace(card, weights=WeightsSource(path=str(stand_ins[_stand_in_kind(card)])))
             for card in LOADED]
    with Engine(Catalog(cards), device="cpu") as engine:
        yield engine


@pytest.mark.parametrize("card", LOADED, ids=[c.id for c in LOADED])
def test_card_loads_from_itself_on_a_stand_in_and_answers(card, engine):
    outputs = set(card.outputs)
    if "score" in outputs:
        scores = engine.score_sync(card.id, QUERY, DOCS).scores
        assert sorted(s.index for s in scores) == [0, 1] and all(np.isfinite(s.score) for s in scores)
    if "sparse" in outputs:
        for is_query in (False, True):
            vector = engine.encode_sync(card.id, [DOCS[0]], output_types=["sparse"], is_query=is_query).items[0].sparse
            assert len(vector.indices) > 0 and (np.asarray(vector.values) > 0).all()
    if "multivector" in outputs:
        options = card.options["multivector"]
        query = engine.encode_sync(card.id, [QUERY], output_types=["multivector"], is_query=True).items[0]
        vectors = np.asarray(query.multivector)
        if options.get("expand_queries"):
            assert vectors.shape == (options["query_length"], 16)  # [MASK]-expanded to the query length
        else:
            assert vectors.shape[1] == 16 and 0 < len(vectors) <= options["query_length"]
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    if "zeroshot" in outputs:
        labels = ["software", "graphics"]
        item = engine.extract_sync(card.id, DOCS, labels).items[0]
        assert sorted(c.label for c in item.classifications) == sorted(labels)
    if "classifier" in outputs:  # its own labels, the best one by default
        every = engine.extract_sync(card.id, DOCS, top_k=64).items[0].classifications
        assert len(every) == card.options["classifier"]["num_labels"]
        assert engine.extract_sync(card.id, DOCS).items[0].classifications == every[:1]
    if "extract" in outputs:
        items = engine.extract_sync(card.id, ["Ada Lovelace was born in London."], ["person", "city"],
                                    threshold=0.0).items
        assert len(items) == 1 and items[0].entities
