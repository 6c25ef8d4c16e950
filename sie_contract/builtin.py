"""The built-in tasks: encode, score and extract (docs/api.md describes each field)."""

from __future__ import annotations

from .schemas import TEXT, answer, obj, ref
from .tasks import Field, Task

OUTPUT_TYPES = ("dense", "sparse", "multivector")
OUTPUT_DTYPES = ("float32", "float16", "int8", "binary")
PRECISIONS = ("float32", "float16", "bfloat16", "int8")

TRUNCATE = Field("truncate", {"type": "boolean", "default": True},
                 description="false: a text longer than the model's window is a 400 instead of being cut")

ENCODE = Task(
    name="encode",
    summary="Dense, sparse and multi-vector embeddings",
    fields=(
        Field("items", ref("EncodeItems"), required=True,
              description="texts and images: strings, {id?, text} or {id?, image} objects (image models only)"),
        Field("output_types", {"type": "array", "items": {"enum": list(OUTPUT_TYPES)}},
              description="which outputs (default: the model's first)"),
        Field("is_query", {"type": "boolean", "default": False},
              description="query mode: the card's query template or instruction"),
        Field("instruction", {"type": "string"}, description="a query instruction replacing the card's"),
        Field("dims", {"type": "integer", "minimum": 1}, description="Matryoshka truncation of dense vectors"),
        Field("sparse_labels", {"type": "boolean", "default": False},
              description="sparse outputs also carry `labels`: the vocabulary token of each index"),
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
        "sparse": obj({"indices": ref("Tensor"), "values": ref("Tensor"),
                       "labels": {"type": "array", "items": {"type": "string"}}}),
    }, ["id"])),
)

SCORE = Task(
    name="score",
    summary="Rerank items against a query, best first",
    fields=(
        Field("query", {"oneOf": [TEXT, obj({"text": TEXT}, ["text"])]}, required=True),
        Field("items", ref("EncodeItems"), required=True,
              description="texts: strings or {id?, text} objects; page images as {id?, image} (ColPali only)"),
        Field("top_k", {"type": "integer", "minimum": 1}, description="keep the k best"),
        TRUNCATE,
        Field("instruction", {"type": "string"}, description="prompted LLM rerankers only: replaces the card's"),
    ),
    served_by=("score", "multivector"),
    implementation="sie_engine.tasks.score:run",
    answer_schema=answer("scores", obj({"id": {"type": "string"}, "index": {"type": "integer"},
                                        "score": {"type": "number"}, "rank": {"type": "integer"}})),
)

ENTITY = obj({"text": {"type": "string"}, "label": {"type": "string"}, "score": {"type": "number"},
             "start": {"type": "integer"}, "end": {"type": "integer"}})
# relation models: an item may carry its entities, character offsets into its text (end exclusive)
ENTITY_SPAN = obj({"start": {"type": "integer", "minimum": 0}, "end": {"type": "integer", "minimum": 1},
                   "label": {"type": "string"}, "text": {"type": "string"}, "score": {"type": "number"}},
                  ["start", "end", "label"])
EXTRACT_ITEMS = Field("items", {"type": "array", "minItems": 1, "items": {"oneOf": [
    TEXT,
    obj({"id": {"type": "string"}, "text": TEXT, "entities": {"type": "array", "items": ENTITY_SPAN}},
        ["text"])]}}, required=True,
    description="texts: strings or {id?, text} objects; for a relation model, {id?, text, entities}")

EXTRACT = Task(
    name="extract",
    summary="Zero-shot entity extraction, classification and relation extraction",
    fields=(
        EXTRACT_ITEMS,
        Field("labels", {"type": "array", "items": {"type": "string"}, "minItems": 1}, required=True,
              description="the entity types to find, the candidate classes of a classification model, or the "
                          "relation types of a relation model"),
        Field("threshold", {"type": "number", "minimum": 0, "maximum": 1},
              description="entities: keep spans scoring at least this (default 0.5); classifications: keep "
                          "labels scoring at least this (default: all labels); relations: keep triples scoring "
                          "above this (default: the card's, 0.5)"),
        Field("flat", {"type": "boolean", "default": True}, description="entity models: no nested entities"),
        Field("multi_label", {"type": "boolean"},
              description="entities: a span may carry several labels (default false); classifications: each label "
                          "scored on its own, else the scores over the labels sum to 1 (default: the model's, false "
                          "for NLI, true for GLiClass, as their libraries)"),
        Field("hypothesis_template", {"type": "string", "default": "This example is {}."},
              description="NLI classification models: the hypothesis each label fills ({} is the label)"),
        Field("top_k", {"type": "integer", "minimum": 1},
              description="classifications: keep the k best labels; relations: each entity pair's k best"),
        Field("classify", obj({"task": {"type": "string"}, "labels": {"type": "array", "items": {"type": "string"},
                                                                 "minItems": 1},
                               "multi_label": {"type": "boolean"}}, ["task", "labels"]),
              description="GLiNER2 models: one classification task answered beside the entities, in the same pass"),
        Field("relation_labels", {"type": "array", "items": {"type": "string"}, "minItems": 1},
              description="GLiNER2 models: relation types whose (head, tail) spans are found beside the entities, "
                          "in the same pass"),
        Field("entity_model", {"type": "string"},
              description="relation models: a GLiNER model that finds the items' entities first"),
        Field("entity_labels", {"type": "array", "items": {"type": "string"}, "minItems": 1},
              description="relation models with entity_model: the entity types it finds"),
        Field("entity_threshold", {"type": "number", "minimum": 0, "maximum": 1},
              description="relation models with entity_model: its threshold (default 0.5)"),
    ),
    served_by=("extract", "zeroshot", "gliclass", "relations", "gliner2"),
    implementation="sie_engine.tasks.extract:run",
    answer_schema=answer("items", obj({"id": {"type": "string"}, "entities": {"type": "array", "items": ENTITY},
        "classifications": {"type": "array", "items": obj({"label": {"type": "string"},
                                                           "score": {"type": "number"}})},
        "relations": {"type": "array", "items": obj({"head": ENTITY, "relation": {"type": "string"},
                                                      "tail": ENTITY, "score": {"type": "number"}})}})),
)

BUILTIN = (ENCODE, SCORE, EXTRACT)
