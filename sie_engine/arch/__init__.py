"""Architecture registry: from a checkpoint's `architectures` string to the family
whose packed forward pass runs it. Every family has reference tests
(tests/test_arch_registry_families.py and tests/test_arch_<family>.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..errors import UnsupportedArchitecture
from .bert import BertConfig, BertModel


@dataclass(frozen=True)
class Family:
    name: str
    config_from_hf: Callable[[Mapping[str, Any]], Any]
    model_class: type
    # Pooling the family's embedding models usually use, for cards that do not say.
    default_pooling: str = "mean"
    # Input preparation other than TextTokenizer's (same constructor and `encode`): static
    # embedders tokenise by model2vec's rules. None: the checkpoint's Hugging Face tokenizer.
    tokenizer: Callable[..., Any] | None = None

    def max_seq_len(self, config: Mapping[str, Any]) -> int | None:
        """The longest sequence the family's positions allow under this config.json (RoBERTa-style
        models lose the positions before their offset); None where positions set no limit."""
        return getattr(self.config_from_hf(config), "max_seq_len", None)


FAMILIES: dict[str, Family] = {
    "bert": Family("bert", BertConfig.from_hf, BertModel, "mean"),
}

# Hugging Face architecture string -> family name. Task heads on top of the
# backbone (masked LM, sequence classification) share the backbone's family.
ARCHITECTURES: dict[str, str] = {
    "BertModel": "bert",
    "BertForMaskedLM": "bert",
    "BertForSequenceClassification": "bert",
    "BertForTokenClassification": "bert",
    "RobertaModel": "bert",
    "RobertaForMaskedLM": "bert",
    "RobertaForSequenceClassification": "bert",
    "XLMRobertaModel": "bert",
    "XLMRobertaForMaskedLM": "bert",
    "XLMRobertaForSequenceClassification": "bert",
    "CamembertModel": "bert",
}

# config.json `model_type` -> family, for checkpoints without `architectures`.
MODEL_TYPES: dict[str, str] = {"bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "camembert": "bert"}


def register(family: Family, architectures: list[str], model_types: list[str] = ()) -> None:
    FAMILIES[family.name] = family
    for arch in architectures:
        ARCHITECTURES[arch] = family.name
    for model_type in model_types:
        MODEL_TYPES[model_type] = family.name


def family_for(config: Mapping[str, Any], requested: str | None = None) -> Family:
    """The family for a config.json, or the card's explicit family."""
    if requested is not None:
        if requested not in FAMILIES:
            raise UnsupportedArchitecture(f"family {requested!r} is not implemented "
                                          f"(known: {', '.join(sorted(FAMILIES))})")
        return FAMILIES[requested]
    for arch in config.get("architectures") or []:
        if arch in ARCHITECTURES:
            return FAMILIES[ARCHITECTURES[arch]]
    model_type = config.get("model_type")
    if model_type in MODEL_TYPES:
        return FAMILIES[MODEL_TYPES[model_type]]
    raise UnsupportedArchitecture(
        f"architecture {config.get('architectures')} (model_type {model_type!r}) is not supported; "
        f"supported: {', '.join(sorted(ARCHITECTURES))}"
    )


# Families beyond BERT; each has reference tests in tests/test_arch_<family>.py.
from .modernbert import ModernBertConfig, ModernBertModel  # noqa: E402
from .nomic_bert import NomicBertConfig, NomicBertModel  # noqa: E402
from .qwen import QwenConfig, QwenModel  # noqa: E402

register(
    Family("modernbert", ModernBertConfig.from_hf, ModernBertModel, "mean"),
    ["ModernBertModel", "ModernBertForMaskedLM", "ModernBertForSequenceClassification",
     "ModernBertForTokenClassification"],
    ["modernbert"],
)
# One forward pass for both generations; the config's model_type tells them apart.
for _qwen in ("qwen2", "qwen3"):
    register(
        Family(_qwen, QwenConfig.from_hf, QwenModel, "last"),
        [f"{_qwen.capitalize()}Model", f"{_qwen.capitalize()}ForCausalLM",
         f"{_qwen.capitalize()}ForSequenceClassification"],
        [_qwen],
    )
# Mistral (e5-mistral-7b-instruct and the embedders trained from it): the same blocks, no biases,
# a sliding window that caps the sequence length (arch/qwen.py)
register(Family("mistral", QwenConfig.from_hf, QwenModel, "last"), ["MistralModel", "MistralForCausalLM"],
         ["mistral"])
from .gemma3 import Gemma3TextConfig, Gemma3TextModel  # noqa: E402

# Gemma 3 text decoders (EmbeddingGemma: bidirectional, mean pooling and Dense layers in its card)
register(Family("gemma3_text", Gemma3TextConfig.from_hf, Gemma3TextModel, "mean"), ["Gemma3TextModel"],
         ["gemma3_text"])
register(
    Family("nomic_bert", NomicBertConfig.from_hf, NomicBertModel, "mean"),
    ["NomicBertModel", "NomicBertForPreTraining", "NomicBertForMaskedLM", "NomicBertForSequenceClassification"],
    ["nomic_bert"],
)

from .deberta_v2 import DebertaV2Config, DebertaV2Model  # noqa: E402

# DeBERTa-v2/v3: the backbone of most GLiNER models and of NLI cross-encoders (zero-shot classification)
register(
    Family("deberta-v2", DebertaV2Config.from_hf, DebertaV2Model, "cls"),
    ["DebertaV2Model", "DebertaV2ForMaskedLM", "DebertaV2ForSequenceClassification"],
    ["deberta-v2"],
)

from .distilbert import DistilBertModel, distilbert_config  # noqa: E402

# DistilBERT: BERT's forward under DistilBERT's names, no segment embeddings
register(
    Family("distilbert", distilbert_config, DistilBertModel, "mean"),
    ["DistilBertModel", "DistilBertForMaskedLM"],
    ["distilbert"],
)

from .mpnet import MPNetConfig, MPNetModel  # noqa: E402

# MPNet (all-mpnet-base-v2 and the other sentence-transformers MPNet models): a relative position bias
register(
    Family("mpnet", MPNetConfig.from_hf, MPNetModel, "mean"),
    ["MPNetModel", "MPNetForMaskedLM"],
    ["mpnet"],
)

from .static import StaticConfig, StaticEmbedding, StaticTokenizer  # noqa: E402

# Static embedders (model2vec: potion-*): a token table and mean pooling, no transformer
register(
    Family("static", StaticConfig.from_hf, StaticEmbedding, "mean", tokenizer=StaticTokenizer),
    ["StaticModel"],
    ["model2vec"],
)

from .clip import ClipInputs, ClipModel, ImageTextConfig  # noqa: E402
from .siglip import SiglipInputs, SiglipModel, siglip_config  # noqa: E402
from .siglip2 import Siglip2Inputs, Siglip2Model, siglip2_config  # noqa: E402

# Two-tower image-text models: the text tower is the packed forward, the vision tower
# `forward_images`; their input preparation reads the checkpoint's image processor too.
register(Family("clip", ImageTextConfig.from_hf, ClipModel, "last", tokenizer=ClipInputs), ["CLIPModel"], ["clip"])
register(Family("siglip", siglip_config, SiglipModel, "last", tokenizer=SiglipInputs), ["SiglipModel"], ["siglip"])
# SigLIP 2 NaFlex: each image at its own aspect ratio (the fixed-resolution SigLIP 2 checkpoints are SiglipModel)
register(Family("siglip2", siglip2_config, Siglip2Model, "last", tokenizer=Siglip2Inputs), ["Siglip2Model"],
         ["siglip2"])

from .paligemma import ColPaliInputs, PaliGemmaConfig, PaliGemmaModel  # noqa: E402

# ColPali (PaliGemma: SigLIP vision tower, projector, Gemma decoder): multi-vector pages and queries
register(Family("colpali", PaliGemmaConfig.from_hf, PaliGemmaModel, "none", tokenizer=ColPaliInputs),
         ["ColPaliForRetrieval"], ["colpali"])
