"""Tiny random fixed-label classifiers (`*ForSequenceClassification` with an id2label of their own),
built from transformers' config classes and saved with save_pretrained, for the tests that hold
SIE's `classifier` output to transformers' `pipeline("text-classification")`."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tiny_models import MINILM_VOCAB, save_tiny, tiny_bert_config, tiny_xlmr_config

SENTIMENT = {0: "negative", 1: "neutral", 2: "positive"}
EMOTIONS = {0: "anger", 1: "joy", 2: "sadness", 3: "surprise"}
MULTI = "multi_label_classification"
TEXTS = ["I love this film, it is wonderful.", "The service was slow and the food cold.",
         "Le train part à huit heures.", "Nothing happened today."]


def _spread(model):
    """At the usual 0.02 scale every label scores the same to 1e-5: widen the head so the scores differ."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "classifier" in name or "pooler" in name:
                param.normal_(0.0, 0.5 if name.endswith("weight") else 0.1)
    return model


def _labels(id2label: dict, **extra) -> dict:
    return dict(num_labels=len(id2label), id2label=dict(id2label), label2id={v: k for k, v in id2label.items()},
                initializer_range=0.3, **extra)


def _no_segment_ids(root: Path) -> Path:
    """RoBERTa, DistilBERT and DeBERTa feed no segment ids: say so as their tokenizer_config does."""
    tok_config = json.loads((root / "tokenizer_config.json").read_text())
    tok_config["model_input_names"] = ["input_ids", "attention_mask"]
    (root / "tokenizer_config.json").write_text(json.dumps(tok_config))
    return root


def bert(dest: Path) -> Path:
    """BertForSequenceClassification's pooler + classifier, single-label (softmax)."""
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    return save_tiny(_spread(BertForSequenceClassification(tiny_bert_config(**_labels(SENTIMENT))).eval()), dest)


def bert_multi(dest: Path) -> Path:
    """problem_type multi_label_classification (sigmoid), as go_emotions and toxic-bert declare it."""
    from transformers import BertForSequenceClassification

    torch.manual_seed(1)
    config = tiny_bert_config(num_hidden_layers=1, **_labels(EMOTIONS, problem_type=MULTI))
    return save_tiny(_spread(BertForSequenceClassification(config).eval()), dest)


def xlmr(dest: Path) -> Path:
    """XLMRobertaForSequenceClassification's classifier.dense + out_proj (RoBERTa's layout)."""
    from transformers import XLMRobertaForSequenceClassification

    torch.manual_seed(2)
    model = XLMRobertaForSequenceClassification(tiny_xlmr_config(**_labels(SENTIMENT))).eval()
    return _no_segment_ids(save_tiny(_spread(model), dest))


def distilbert(dest: Path) -> Path:
    """DistilBertForSequenceClassification's pre_classifier + ReLU + classifier, two labels."""
    from transformers import DistilBertConfig, DistilBertForSequenceClassification

    torch.manual_seed(3)
    config = DistilBertConfig(vocab_size=MINILM_VOCAB, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                              max_position_embeddings=128, **_labels({0: "NEGATIVE", 1: "POSITIVE"}))
    return _no_segment_ids(save_tiny(_spread(DistilBertForSequenceClassification(config).eval()), dest))


def deberta_multi(dest: Path) -> Path:
    """DebertaV2ForSequenceClassification's ContextPooler, multi-label."""
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    torch.manual_seed(4)
    config = DebertaV2Config(
        vocab_size=MINILM_VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=512, relative_attention=True, position_buckets=32, max_relative_positions=-1,
        pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0,
        pooler_hidden_size=32, pooler_hidden_act="gelu", **_labels(EMOTIONS, problem_type=MULTI))
    return _no_segment_ids(save_tiny(_spread(DebertaV2ForSequenceClassification(config).eval()), dest))


MODELS = {"bert": bert, "bert-multi": bert_multi, "xlmr": xlmr, "distilbert": distilbert,
          "deberta-multi": deberta_multi}


def pipeline_of(root: Path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    model = AutoModelForSequenceClassification.from_pretrained(str(root)).eval()
    return pipeline("text-classification", model=model, tokenizer=AutoTokenizer.from_pretrained(str(root)),
                    device="cpu")
