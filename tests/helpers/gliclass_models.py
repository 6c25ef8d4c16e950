"""Tiny random GLiClass models built with the gliclass library's own classes (its config,
`GLiClassModel`, `save_pretrained`), over tiny DeBERTa-v2 and BERT backbones from
transformers' config classes (DeBERTa-v2, BERT, ModernBERT) and the real MiniLM tokenizer with gliclass' prompt tokens
added, as knowledgator's checkpoints ship them; and gliclass' pipeline on the same files."""

from __future__ import annotations

from pathlib import Path

import torch

from tiny_models import copy_tokenizer, tiny_bert_config

PROMPT_TOKENS = ["<<LABEL>>", "<<SEP>>"]
DEBERTA = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
               max_position_embeddings=512, relative_attention=True, position_buckets=32, max_relative_positions=-1,
               pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0)

MODERNBERT = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
                  max_position_embeddings=512, local_attention=8, pad_token_id=0, bos_token_id=101, cls_token_id=101,
                  eos_token_id=102, sep_token_id=102)

LABEL_SPREAD = {"model.classes_projector.linear_2.weight": 0.05}


def sentencepiece_tokenizer(dest: Path, vocab_size: int = 2000):
    """A DeBERTa-v3-style tokenizer (Unigram pieces behind a Metaspace pre-tokenizer, [CLS] ... [SEP]),
    trained on dev documents: the real checkpoints' kind, where MiniLM's is WordPiece."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import DebertaV2TokenizerFast

    from dev_corpus import load_docs

    specials = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tokenizer.train_from_iterator([doc["text"] for doc in load_docs(400)],
                                  trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=specials,
                                                          unk_token="[UNK]"))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[(t, tokenizer.token_to_id(t)) for t in ("[CLS]", "[SEP]")])
    DebertaV2TokenizerFast(tokenizer_object=tokenizer, bos_token="[CLS]", eos_token="[SEP]", unk_token="[UNK]",
                           sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]",
                           mask_token="[MASK]").save_pretrained(str(dest))


def make_gliclass(dest: Path, backbone: str = "deberta", seed: int = 0, scale: dict | None = None,
                  sentencepiece: bool = False, **settings) -> Path:
    """A saved GLiClass directory. `settings`: GLiClassModelConfig fields (prompt_first, pooling_strategy,
    scorer_type, ...); `sentencepiece`: a DeBERTa-v3-style tokenizer instead of MiniLM's. `scale` multiplies
    parameters by name (default: the labels' projection by 0.05) so that logits land near 1 and scores tell
    the labels apart: random weights at the 0.3 scale that makes states differ between positions saturate
    the sigmoid."""
    from gliclass import GLiClassModel
    from gliclass.config import GLiClassModelConfig
    from transformers import AutoTokenizer, DebertaV2Config

    dest.mkdir(parents=True, exist_ok=True)
    if sentencepiece:
        sentencepiece_tokenizer(dest)
    else:
        copy_tokenizer(dest)
    tokenizer = AutoTokenizer.from_pretrained(str(dest))
    tokenizer.add_tokens(PROMPT_TOKENS, special_tokens=True)
    tokenizer.save_pretrained(str(dest))
    if backbone == "deberta":
        encoder = DebertaV2Config(vocab_size=len(tokenizer), **DEBERTA)
    elif backbone == "modernbert":
        from transformers import ModernBertConfig

        encoder = ModernBertConfig(vocab_size=len(tokenizer), **MODERNBERT)
    else:
        encoder = tiny_bert_config(vocab_size=len(tokenizer))
    torch.manual_seed(seed)
    config = GLiClassModelConfig(encoder_config=encoder.to_dict(), encoder_model=f"tiny-{backbone}",
                                 class_token_index=tokenizer.convert_tokens_to_ids("<<LABEL>>"),
                                 vocab_size=len(tokenizer), **{"initializer_range": 0.3, **settings})
    model = GLiClassModel(config).eval()
    parameters = dict(model.named_parameters())
    with torch.no_grad():
        for name, factor in (LABEL_SPREAD if scale is None else scale).items():
            parameters[name].mul_(factor)
    model.save_pretrained(str(dest))
    return dest


def gliclass_pipeline(root: Path, max_length: int = 1024):
    from gliclass import GLiClassModel, ZeroShotClassificationPipeline
    from transformers import AutoTokenizer

    model = GLiClassModel.from_pretrained(str(root)).eval()
    return ZeroShotClassificationPipeline(model, AutoTokenizer.from_pretrained(str(root)), max_length=max_length,
                                          device="cpu", progress_bar=False)


def reference_scores(pipeline, texts: list[str], labels: list[str], multi_label: bool,
                     batch_size: int = 1) -> list[dict[str, float]]:
    """Every label's score per text, as gliclass computes them (`return_hierarchical` keeps them all;
    a batch of one by default: its avg / max / last pooling counts the padding of a batch)."""
    kind = "multi-label" if multi_label else "single-label"
    return pipeline(texts, labels, classification_type=kind, return_hierarchical=True, batch_size=batch_size)
