"""The built-in tasks: encode, score and extract (docs/api.md describes each field).

Each field names its type (`shapes`): the one declaration the server decodes into, the
engine validates against and the OpenAPI document and the typed client are derived from."""

from __future__ import annotations

from .shapes import (
    OUTPUT_DTYPES,
    OUTPUT_TYPES,
    PRECISIONS,
    Classify,
    Dims,
    EncodeAnswer,
    EncodeItems,
    ExtractAnswer,
    ExtractItems,
    Labels,
    Muvera,
    OutputDtype,
    OutputType,
    PositiveInt,
    Precision,
    Prompt,
    QueryText,
    Score,
    ScoreAnswer,
    TaskToken,
    WireEncodeItems,
    WireExtractItems,
    WireQueryText,
)
from .tasks import Field, Task

__all__ = ["BUILTIN", "ENCODE", "EXTRACT", "OUTPUT_DTYPES", "OUTPUT_TYPES", "PRECISIONS", "SCORE"]

TRUNCATE = Field("truncate", type=bool,
                 description="false: a text longer than the model's window is a 400 instead of being cut")

ENCODE = Task(
    name="encode",
    summary="Dense, sparse and multi-vector embeddings",
    fields=(
        Field("items", type=EncodeItems, wire_type=WireEncodeItems, required=True,
              description="texts, images and PDF documents: strings, {id?, text}, {id?, image} or {id?, document, "
                          "pages?, dpi?} objects (images and documents: image models only; a document answers one "
                          "item per page)"),
        Field("output_types", type=OutputType | list[OutputType],
              description="which outputs (default: the model's first)"),
        Field("is_query", type=bool, description="query mode: the card's query template or instruction"),
        Field("instruction", type=str, description="a query instruction replacing the card's"),
        Field("template", type=bool,
              description="false: the texts as sent, without the card's query or document template (the rule "
                          "of TEI's API without prompt_name); is_query still selects a ColBERT model's markers"),
        Field("dims", type=Dims, description="Matryoshka truncation of dense vectors"),
        Field("sparse_labels", type=bool,
              description="sparse outputs also carry `labels`: the vocabulary token of each index"),
        Field("normalize", type=bool, description="L2-normalise (default: the card's)"),
        Field("output_dtype", type=OutputDtype,
              description="float32 (the default), float16, int8, uint8 or binary"),
        Field("muvera", type=Muvera,
              description="the muvera output's parameters (FastEmbed's: k_sim, dim_proj, r_reps, random_seed)"),
        TRUNCATE,
        Field("precision", type=Precision,
              description="compute precision (default: the card's dtype); bfloat16 is the fast CPU mode"),
        Field("lora_id", type=str,
              description="a PEFT LoRA adapter of the model's card (its `adapters`) applied to these items; "
                          "requests for different adapters of one model batch together"),
        Field("profile", type=str,
              description="a named profile of the model's card (its `profiles`): an adapter and defaults for "
                          "the other fields, which the request's own fields override"),
        Field("late_chunking", type=bool,
              description="true: the texts are read as one sequence (in order, the card's template once around "
                          "them) and each text's vector is the mean of its own tokens there, so every chunk's "
                          "vector sees the whole document (Jina's late chunking); dense output of a mean-pooling "
                          "text model only, all texts within the model's window together"),
    ),
    served_by=OUTPUT_TYPES,
    implementation="sie_engine.tasks.encode:run",
    answer_type=EncodeAnswer,
)

SCORE = Task(
    name="score",
    summary="Rerank items against a query, best first",
    fields=(
        Field("query", type=QueryText, wire_type=WireQueryText, required=True,
              description="a string or {text}; a vision-language reranker (Qwen3-VL-Reranker) also takes {image} "
                          "or {video}, with or without their text"),
        Field("items", type=EncodeItems, wire_type=WireEncodeItems, required=True,
              description="texts: strings or {id?, text} objects; page images as {id?, image} (ColPali, ColQwen2); "
                          "a vision-language reranker's images and videos as {id?, image, text?} and "
                          "{id?, video, text?}"),
        Field("top_k", type=PositiveInt, description="keep the k best"),
        TRUNCATE,
        Field("instruction", type=str, description="prompted LLM rerankers only: replaces the card's"),
    ),
    served_by=("score", "multivector"),
    implementation="sie_engine.tasks.score:run",
    answer_type=ScoreAnswer,
)

EXTRACT = Task(
    name="extract",
    summary="Zero-shot entity extraction, classification (zero-shot and fixed-label), relation extraction and "
            "document reading (text and JSON from page images and PDFs), open-vocabulary object detection and "
            "layout detection",
    fields=(
        Field("items", type=ExtractItems, wire_type=WireExtractItems, required=True,
              description="texts: strings or {id?, text} objects; for a relation model, {id?, text, entities}; "
                          "for a document model (Donut), page images {id?, image} and PDFs {id?, document, "
                          "pages?, dpi?} (one answer per page, with its page); for an open-vocabulary detector "
                          "(OWLv2, Grounding DINO), images: {id?, image} objects (and, for Grounding DINO, PDFs, "
                          "one answer per page); for a layout model (PP-DocLayout), images and PDFs (one answer "
                          "per page)"),
        Field("labels", type=Labels, positional=True,
              description="the entity types to find, the candidate classes of a zero-shot classification model, "
                          "the relation types of a relation model or the objects a detector boxes (required for "
                          "them); a fixed-label classifier or a layout model takes none: it answers its own labels "
                          "(config.json's id2label)"),
        Field("threshold", type=Score,
              description="entities: keep spans scoring at least this (default 0.5); classifications: keep "
                          "labels scoring at least this (default: all labels); relations: keep triples scoring "
                          "above this (default: the card's, 0.5); regions: keep boxes scoring above this (default "
                          "0.1 for OWLv2, 0.25 for Grounding DINO, as transformers' post-processing; layout models: "
                          "at least this, default 0.5)"),
        Field("flat", type=bool, description="entity models: no nested entities (default true)"),
        Field("multi_label", type=bool,
              description="entities: a span may carry several labels (default false); classifications: each label "
                          "scored on its own (sigmoid), else the scores over the labels sum to 1 (softmax) (default: "
                          "the model's, false for NLI, true for GLiClass, as their libraries; a fixed-label "
                          "classifier's config.json problem_type, as transformers' pipeline)"),
        Field("hypothesis_template", type=str,
              description="NLI classification models: the hypothesis each label fills ({} is the label; default "
                          "'This example is {}.')"),
        Field("top_k", type=PositiveInt, nullable=True,
              description="classifications: keep the k best labels (fixed-label classifiers: default 1, the "
                          "best, and null for every label, as transformers' text-classification pipeline); "
                          "relations: each entity pair's k best"),
        Field("raw_scores", type=bool,
              description="fixed-label classifiers: the logits, without the sigmoid or softmax (TEI's raw_scores)"),
        Field("truncate", type=bool,
              description="fixed-label classifiers: false makes a text longer than the model's window a 400 "
                          "instead of being cut"),
        Field("classify", type=Classify,
              description="GLiNER2 models: one classification task answered beside the entities, in the same pass"),
        Field("relation_labels", type=Labels,
              description="GLiNER2 models: relation types whose (head, tail) spans are found beside the entities, "
                          "in the same pass"),
        Field("entity_model", type=str,
              description="relation models: a GLiNER model that finds the items' entities first"),
        Field("entity_labels", type=Labels,
              description="relation models with entity_model: the entity types it finds"),
        Field("entity_threshold", type=Score,
              description="relation models with entity_model: its threshold (default 0.5)"),
        Field("task", type=TaskToken,
              description="document models prompted by task (Florence-2; required there): the task token, "
                          "one of <OCR>, <OCR_WITH_REGION>, <CAPTION>, <DETAILED_CAPTION>, <MORE_DETAILED_CAPTION>, "
                          "<OD>, <DENSE_REGION_CAPTION>, <REGION_PROPOSAL>, <CAPTION_TO_PHRASE_GROUNDING>, "
                          "<REFERRING_EXPRESSION_SEGMENTATION>, <REGION_TO_SEGMENTATION>, "
                          "<OPEN_VOCABULARY_DETECTION>, <REGION_TO_CATEGORY>, <REGION_TO_DESCRIPTION>, "
                          "<REGION_TO_OCR> (the last seven take a prompt)"),
        Field("prompt", type=Prompt,
              description="document models whose card takes one: the text the model is prompted with (Donut "
                          "DocVQA: the question, placed in its task prompt; Florence-2: the task's text input, "
                          "a caption, a phrase or a region as four <loc_0..999> tokens)"),
        Field("max_new_tokens", type=PositiveInt,
              description="document models: the most tokens generated per item or page (default and most: "
                          "the card's)"),
        Field("text_threshold", type=Score,
              description="Grounding DINO: a region's label is the prompt's tokens scoring above this for its "
                          "box (default 0.25, as transformers' post-processing)"),
    ),
    served_by=("extract", "zeroshot", "gliclass", "relations", "gliner2", "classifier", "generate", "detect",
               "layout"),
    implementation="sie_engine.tasks.extract:run",
    answer_type=ExtractAnswer,
)

BUILTIN = (ENCODE, SCORE, EXTRACT)
