"""The built-in tasks: encode, score and extract (docs/api.md describes each field)."""

from __future__ import annotations

from .schemas import answer, obj, ref
from .tasks import Field, Task

OUTPUT_TYPES = ("dense", "sparse", "multivector")
OUTPUT_DTYPES = ("float32", "float16", "int8", "binary")
PRECISIONS = ("float32", "float16", "bfloat16", "int8")

ITEMS = Field("items", ref("Items"), required=True, description="texts: strings or {id?, text} objects")
TRUNCATE = Field("truncate", {"type": "boolean", "default": True},
                 description="false: a text longer than the model's window is a 400 instead of being cut")

ENCODE = Task(
    name="encode",
    summary="Dense, sparse and multi-vector embeddings",
    fields=(
        ITEMS,
        Field("output_types", {"type": "array", "items": {"enum": list(OUTPUT_TYPES)}},
              description="which outputs (default: the model's first)"),
        Field("is_query", {"type": "boolean", "default": False},
              description="query mode: the card's query template or instruction"),
        Field("instruction", {"type": "string"}, description="a query instruction replacing the card's"),
        Field("dims", {"type": "integer", "minimum": 1}, description="Matryoshka truncation of dense vectors"),
        Field("normalize", {"type": "boolean"}, description="L2-normalise (default: the card's)"),
        Field("output_dtype", {"enum": list(OUTPUT_DTYPES), "default": "float32"}),
        TRUNCATE,
        Field("precision", {"enum": list(PRECISIONS)},
              description="compute precision (default: the card's dtype); bfloat16 is the fast CPU mode"),
    ),
    served_by=OUTPUT_TYPES,
    implementation="sie_engine.tasks.encode:run",
    answer_schema=answer("items", obj({
        "id": {"type": "string"}, "dense": ref("Tensor"), "multivector": ref("Tensor"),
        "sparse": obj({"indices": ref("Tensor"), "values": ref("Tensor")}),
    }, ["id"])),
)

SCORE = Task(
    name="score",
    summary="Rerank items against a query, best first",
    fields=(
        Field("query", {"oneOf": [{"type": "string"}, obj({"text": {"type": "string"}}, ["text"])]}, required=True),
        ITEMS,
        Field("top_k", {"type": "integer", "minimum": 1}, description="keep the k best"),
        TRUNCATE,
        Field("instruction", {"type": "string"}, description="prompted LLM rerankers only: replaces the card's"),
    ),
    served_by=("score", "multivector"),
    implementation="sie_engine.tasks.score:run",
    answer_schema=answer("scores", obj({"id": {"type": "string"}, "index": {"type": "integer"},
                                        "score": {"type": "number"}, "rank": {"type": "integer"}})),
)

EXTRACT = Task(
    name="extract",
    summary="Zero-shot entity extraction and classification",
    fields=(
        ITEMS,
        Field("labels", {"type": "array", "items": {"type": "string"}, "minItems": 1}, required=True,
              description="the entity types to find, or the candidate classes of a classification model"),
        Field("threshold", {"type": "number", "minimum": 0, "maximum": 1},
              description="entities: keep spans scoring at least this (default 0.5); classifications: keep "
                          "labels scoring at least this (default: all labels)"),
        Field("flat", {"type": "boolean", "default": True}, description="entity models: no nested entities"),
        Field("multi_label", {"type": "boolean", "default": False},
              description="entities: a span may carry several labels; classifications: each label scored on its "
                          "own (else the scores over the labels sum to 1)"),
        Field("hypothesis_template", {"type": "string", "default": "This example is {}."},
              description="classification models: the hypothesis each label fills ({} is the label)"),
        Field("top_k", {"type": "integer", "minimum": 1}, description="classifications: keep the k best labels"),
    ),
    served_by=("extract", "zeroshot"),
    implementation="sie_engine.tasks.extract:run",
    answer_schema=answer("items", obj({"id": {"type": "string"}, "entities": {"type": "array", "items": obj({
        "text": {"type": "string"}, "label": {"type": "string"}, "score": {"type": "number"},
        "start": {"type": "integer"}, "end": {"type": "integer"}})},
        "classifications": {"type": "array", "items": obj({"label": {"type": "string"},
                                                           "score": {"type": "number"}})}})),
)

BUILTIN = (ENCODE, SCORE, EXTRACT)
