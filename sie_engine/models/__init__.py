"""The model registry: which family runs a checkpoint, which layouts SIE reads, which head
builds an output. Every entry is a `module:attr` (or module) string, imported only when a model
of it loads or a directory is inspected (vLLM's `_MODELS` table), so the table itself costs
nothing to import and names no class.

A family lives in `sie_engine/models/<family>/`: its typed config, forward pass and `FAMILY`
(`base.Family`) in `model.py`; a checkpoint layout of its own (`layout.py` or `checkpoint.py`:
`detects`, `describe_layout`, `local_card`), its heads, prompts and decoding beside them.
A plug-in family registers with `register_family`, `register_layout` and `register_head`
(tests/plugins/toy_family is the worked example). Every built-in family has reference tests
(tests/engine/families/test_arch_registry_families.py and tests/engine/families/test_arch_<family>.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import UnsupportedArchitecture

_M = "sie_engine.models"

# family name -> its `Family`
FAMILIES: dict[str, str] = {
    "bert": f"{_M}.bert.model:FAMILY",
    # BERT's forward under DistilBERT's names, no segment embeddings
    "distilbert": f"{_M}.bert.distilbert:FAMILY",
    "modernbert": f"{_M}.modernbert.model:FAMILY",
    # one forward pass for both Qwen generations and Mistral (no biases, a sliding window)
    "qwen2": f"{_M}.qwen.model:QWEN2",
    "qwen3": f"{_M}.qwen.model:QWEN3",
    "mistral": f"{_M}.qwen.model:MISTRAL",
    "llama": f"{_M}.qwen.model:LLAMA",
    # Gemma 3 text decoders (EmbeddingGemma: bidirectional, mean pooling and Dense layers in its card)
    "gemma3_text": f"{_M}.gemma3.model:FAMILY",
    "nomic_bert": f"{_M}.nomic_bert.model:FAMILY",
    # Jina's XLM-RoBERTa with rotary positions (jina-colbert-v2; transformers' JinaEmbeddingsV3Model)
    "jina_xlm_roberta": f"{_M}.jina_xlm_roberta.model:FAMILY",
    # DeBERTa-v2/v3: the backbone of most GLiNER models and of NLI cross-encoders
    "deberta-v2": f"{_M}.deberta_v2.model:FAMILY",
    # MPNet (all-mpnet-base-v2 and the other sentence-transformers MPNet models): a relative position bias
    "mpnet": f"{_M}.mpnet.model:FAMILY",
    # Static embedders (model2vec: potion-*): a token table and mean pooling, no transformer
    "static": f"{_M}.static.model:FAMILY",
    # Two-tower image-text models: the text tower is the packed forward, the vision tower `forward_images`
    "clip": f"{_M}.clip.model:FAMILY",
    "siglip": f"{_M}.siglip.model:FAMILY",
    # SigLIP 2 NaFlex: each image at its own aspect ratio (the fixed-resolution SigLIP 2 checkpoints are SiglipModel)
    "siglip2": f"{_M}.siglip.siglip2:FAMILY",
    # ColPali (PaliGemma: SigLIP vision tower, projector, Gemma decoder): multi-vector pages and queries
    "colpali": f"{_M}.colpali.model:FAMILY",
    # ColQwen2 (Qwen2-VL: vision tower at each page's own resolution, patch merger, Qwen2 decoder): the same outputs
    "colqwen2": f"{_M}.colqwen2.family:FAMILY",
    # Qwen3-VL (vision tower + DeepStack, Qwen3 decoder, interleaved M-RoPE): Qwen3-VL-Embedding and -Reranker
    "qwen3_vl": f"{_M}.qwen3_vl.family:FAMILY",
    # Donut (DonutSwin encoder + MBart decoder): generates from page images (sie_engine/generation)
    "donut": f"{_M}.donut.family:FAMILY",
    # OWLv2 open-vocabulary detection (CLIP's towers, box and class heads): extract with image items and labels
    "owlv2": f"{_M}.owlv2.model:FAMILY",
    # Grounding DINO open-vocabulary detection (Swin + BERT, deformable encoder/decoder): extract with images and labels
    "grounding-dino": f"{_M}.grounding_dino.family:FAMILY",
    # PP-DocLayoutV3 layout detection (HGNetV2 + RT-DETR's hybrid encoder and deformable decoder, reading order)
    "pp-doclayout": f"{_M}.pp_doclayout.family:FAMILY",
    # Florence-2 (DaViT vision tower + BART): generates from images, prompted by task tokens
    "florence2": f"{_M}.florence2.family:FAMILY",
    # LightOnOCR (Pixtral vision tower at each page's size, patch merger, Qwen3 decoder): generates a page's text
    "lighton_ocr": f"{_M}.lighton_ocr.family:FAMILY",
    # GLM-OCR (CogViT vision tower at each page's own resolution + GLM decoder): generates a page's text
    "glm_ocr": f"{_M}.glm_ocr.family:FAMILY",
    # PaddleOCR-VL (SigLIP-style encoder at each page's own resolution + ERNIE-4.5): generates a page's text
    "paddleocr_vl": f"{_M}.paddleocr_vl.family:FAMILY",
    # Idefics3 (SigLIP over a page's tiles, pixel-shuffle connector, Llama decoder): granite-docling's DocTags
    "idefics3": f"{_M}.idefics3.family:FAMILY",
}

# Hugging Face architecture string -> family name. Task heads on top of the backbone (masked LM,
# sequence classification) share the backbone's family.
ARCHITECTURES: dict[str, str] = {
    **dict.fromkeys(["BertModel", "BertForMaskedLM", "BertForSequenceClassification", "BertForTokenClassification",
                     "RobertaModel", "RobertaForMaskedLM", "RobertaForSequenceClassification", "XLMRobertaModel",
                     "XLMRobertaForMaskedLM", "XLMRobertaForSequenceClassification", "CamembertModel"], "bert"),
    **dict.fromkeys(["ModernBertModel", "ModernBertForMaskedLM", "ModernBertForSequenceClassification",
                     "ModernBertForTokenClassification"], "modernbert"),
    **dict.fromkeys(["Qwen2Model", "Qwen2ForCausalLM", "Qwen2ForSequenceClassification"], "qwen2"),
    **dict.fromkeys(["Qwen3Model", "Qwen3ForCausalLM", "Qwen3ForSequenceClassification"], "qwen3"),
    **dict.fromkeys(["MistralModel", "MistralForCausalLM"], "mistral"),
    **dict.fromkeys(["LlamaModel", "LlamaForCausalLM", "LlamaBidirectionalModel"], "llama"),
    "Gemma3TextModel": "gemma3_text",
    **dict.fromkeys(["JinaEmbeddingsV3Model", "JinaEmbeddingsV3ForMaskedLM"], "jina_xlm_roberta"),
    **dict.fromkeys(["NomicBertModel", "NomicBertForPreTraining", "NomicBertForMaskedLM",
                     "NomicBertForSequenceClassification"], "nomic_bert"),
    **dict.fromkeys(["DebertaV2Model", "DebertaV2ForMaskedLM", "DebertaV2ForSequenceClassification"], "deberta-v2"),
    **dict.fromkeys(["DistilBertModel", "DistilBertForMaskedLM", "DistilBertForSequenceClassification"],
                    "distilbert"),
    **dict.fromkeys(["MPNetModel", "MPNetForMaskedLM"], "mpnet"),
    "StaticModel": "static",
    "CLIPModel": "clip",
    "SiglipModel": "siglip",
    "Siglip2Model": "siglip2",
    "ColPaliForRetrieval": "colpali",
    "ColQwen2ForRetrieval": "colqwen2",
    **dict.fromkeys(["Qwen3VLForConditionalGeneration", "Qwen3VLModel"], "qwen3_vl"),
    # transformers' generic image-to-text wrapper; DonutConfig refuses an encoder other than DonutSwin by name
    "VisionEncoderDecoderModel": "donut",
    "Owlv2ForObjectDetection": "owlv2",
    "GroundingDinoForObjectDetection": "grounding-dino",
    "Florence2ForConditionalGeneration": "florence2",
    "PPDocLayoutV3ForObjectDetection": "pp-doclayout",
    "LightOnOcrForConditionalGeneration": "lighton_ocr",
    "GlmOcrForConditionalGeneration": "glm_ocr",
    "PaddleOCRVLForConditionalGeneration": "paddleocr_vl",
    "Idefics3ForConditionalGeneration": "idefics3",
}

# config.json `model_type` -> family, for checkpoints without `architectures`.
MODEL_TYPES: dict[str, str] = {
    "bert": "bert", "roberta": "bert", "xlm-roberta": "bert", "camembert": "bert", "modernbert": "modernbert",
    "qwen2": "qwen2", "qwen3": "qwen3", "mistral": "mistral", "llama": "llama", "llama_bidirec": "llama",
    "gemma3_text": "gemma3_text",
    "nomic_bert": "nomic_bert", "jina_embeddings_v3": "jina_xlm_roberta", "deberta-v2": "deberta-v2",
    "distilbert": "distilbert", "mpnet": "mpnet",
    "model2vec": "static", "clip": "clip", "siglip": "siglip", "siglip2": "siglip2", "colpali": "colpali",
    "colqwen2": "colqwen2", "qwen3_vl": "qwen3_vl", "vision-encoder-decoder": "donut", "owlv2": "owlv2",
    "florence2": "florence2", "grounding-dino": "grounding-dino", "pp_doclayout_v3": "pp-doclayout",
    "lighton_ocr": "lighton_ocr", "glm_ocr": "glm_ocr",
    "paddleocr_vl": "paddleocr_vl", "idefics3": "idefics3",
}

# (model_type, position_embedding_type) -> family, asked before `architectures`: Jina's rotary
# XLM-RoBERTa checkpoints say `model_type: xlm-roberta` (and XLM-R's or ColBERT's architectures),
# their position embedding type alone tells them from a plain XLM-RoBERTa.
POSITION_VARIANTS: dict[tuple[str, str], str] = {("xlm-roberta", "rotary"): "jina_xlm_roberta"}

# Checkpoint layouts other than a plain Hugging Face directory, asked in order: layout name -> the
# module with `detects(root) -> bool` (cheap: file names, a glance at config.json),
# `describe_layout(root) -> CheckpointLayout` and `local_card(name, root) -> ModelCard`. These
# modules import no head: the checkpoint resolver stays below the heads (tests/project/test_import_graph.py).
LAYOUTS: dict[str, str] = {
    "gliner": f"{_M}.gliner.checkpoint",
    "glirel": f"{_M}.glirel.checkpoint",
    "gliner2": f"{_M}.gliner2.checkpoint",
    "gliclass": f"{_M}.gliclass.checkpoint",
    "model2vec": f"{_M}.static.layout",
    "colpali-engine": f"{_M}.colqwen2.colpali_engine",
}

# A card's output -> the builder of its heads, `fn(HeadContext) -> {name: Head}` (sie_engine/heads:
# shared ones; a family's own beside it).
HEADS: dict[str, str] = {
    "dense": "sie_engine.heads.dense:build_dense",
    "sparse": "sie_engine.heads.sparse:build_sparse",
    "multivector": "sie_engine.heads.colbert:build_multivector",
    "score": "sie_engine.heads.classifier:build_score_head",
    "zeroshot": "sie_engine.heads.nli:build_zeroshot_head",
    "extract": f"{_M}.gliner.head:build_extract_head",
    "relations": f"{_M}.glirel.head:build_relations_head",
    "gliner2": f"{_M}.gliner2.head:build_gliner2_head",
    "gliclass": f"{_M}.gliclass.head:build_gliclass_head",
    # fixed-label classifiers (sentiment, emotions, toxicity, language): the checkpoint's own id2label
    "classifier": "sie_engine.heads.fixed_labels:build_classifier_head",
    # document models that generate (Donut): a family brings its own builder; the shared one refuses
    "generate": "sie_engine.generation.head:build",
    # open-vocabulary detection (OWLv2): the labels' query embeddings and each image's boxes
    "detect": f"{_M}.owlv2.head:build_detect_heads",
    # layout detection (PP-DocLayout): each page's regions by the model's own classes, in reading order
    "layout": f"{_M}.pp_doclayout.head:build_layout_heads",
}


def resolve(target: str) -> Any:
    """A registry entry's object: `module:attr` imports the module and takes the attribute (the
    registry's lazy import, not a capability probe); a bare module name is the module."""
    module, _, name = target.partition(":")
    imported = importlib.import_module(module)
    return getattr(imported, name) if name else imported


def register_family(name: str, target: str, architectures: Iterable[str] = (), model_types: Iterable[str] = ()) -> None:
    """Add a family (`target`: the `module:attr` of its `Family`) and the config.json strings naming it."""
    FAMILIES[name] = target
    for arch in architectures:
        ARCHITECTURES[arch] = name
    for model_type in model_types:
        MODEL_TYPES[model_type] = name


def register_layout(name: str, module: str) -> None:
    """Add a checkpoint layout (asked after the built-in ones)."""
    LAYOUTS[name] = module


def register_head(output: str, target: str) -> None:
    """Add an output a card may name, built by `target` (`module:function`)."""
    HEADS[output] = target


def unregister_family(name: str) -> None:
    """Remove a family and every architecture string and model_type naming it."""
    FAMILIES.pop(name, None)
    for table in (ARCHITECTURES, MODEL_TYPES):
        for key in [k for k, v in table.items() if v == name]:
            del table[key]


def unregister_layout(name: str) -> None:
    LAYOUTS.pop(name, None)


def unregister_head(output: str) -> None:
    HEADS.pop(output, None)


# The registry names no class, not even for type checkers (an import of .base here, even under
# TYPE_CHECKING, would sit above everything base imports): a family is a `base.Family`, which
# callers annotate where they keep one.
def family(name: str) -> Any:
    """A registered family (a `base.Family`) by name."""
    if name not in FAMILIES:
        raise UnsupportedArchitecture(f"family {name!r} is not implemented (known: {', '.join(sorted(FAMILIES))})")
    return resolve(FAMILIES[name])


def family_name(config: Mapping[str, Any]) -> str:
    """The family a config.json names (a position variant, its `architectures`, else its `model_type`),
    without importing it."""
    variant = POSITION_VARIANTS.get((str(config.get("model_type")), str(config.get("position_embedding_type"))))
    if variant is not None:
        return variant
    for arch in config.get("architectures") or []:
        if arch in ARCHITECTURES:
            return ARCHITECTURES[arch]
    model_type = config.get("model_type")
    if model_type in MODEL_TYPES:
        return MODEL_TYPES[model_type]
    raise UnsupportedArchitecture(
        f"architecture {config.get('architectures')} (model_type {model_type!r}) is not supported; "
        f"supported: {', '.join(sorted(ARCHITECTURES))}"
    )


def family_for(config: Mapping[str, Any], requested: str | None = None) -> Any:
    """The family (a `base.Family`) for a config.json, or the card's explicit family."""
    return family(requested if requested is not None else family_name(config))


def layout_module(name: str) -> Any:
    """A registered layout's module."""
    return resolve(LAYOUTS[name])


def head_builder(output: str) -> Callable:
    """The builder of an output's heads: `fn(HeadContext) -> {name: Head}`."""
    return resolve(HEADS[output])


__all__ = ["ARCHITECTURES", "FAMILIES", "HEADS", "LAYOUTS", "MODEL_TYPES", "POSITION_VARIANTS", "family", "family_for",
           "family_name", "head_builder", "layout_module", "register_family", "register_head", "register_layout",
           "resolve", "unregister_family", "unregister_head", "unregister_layout"]
