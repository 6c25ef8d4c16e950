"""The five tools an agent gets, one per kind of work: each declares which served models
it takes (from their outputs), its arguments' JSON Schema, its answer's JSON Schema and
the `sie_client` call that answers it.

One tool per kind of work, with `model` as an enum of the served models of that kind
(defaulting to SIE's default model or the first one), rather than one tool per model: an
agent picks among five verbs whatever the server serves (a catalog of thirty models would
otherwise be thirty near-identical tools, and tool choice degrades as the list grows), the
tool's description lists each model with its own description, and a model added to SIE
shows up as one more enum value, not a new tool.

Answers are summarised for an agent: `embed` gives the width and the texts' cosine
similarities, with the vectors themselves only when asked (`include_vectors`); `rerank`
gives each document's index, rank and score with the start of its text; the extractors
give their entities, classes and triples per text, by the text's position.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sie_client import DEFAULT_MODEL, AsyncSIEClient, Entity, ExtractResult

from .catalog import MAX_DESCRIPTION, ServedModel

# Bounds of one tool call: an agent's call, not a bulk job (the client still chunks the
# request to SIE). Larger inputs belong in a pipeline using sie_client directly.
MAX_TEXTS = 256
MAX_LABELS = 64
# The N x N similarity table is shown up to this many texts (32 x 32 numbers are ~7 kB).
MAX_SIMILARITY_TEXTS = 32
# A reranked document is echoed up to this many characters, so the agent sees what ranked where.
DOCUMENT_ECHO = 200
# A tool's description is in the agent's context on every turn: its models' descriptions share
# about this many characters (SIE's built-in catalog has 91 text embedders: 80 characters each;
# `--models` narrows the list), and none is cut below MIN_MODEL_DESCRIPTION.
DESCRIPTION_BUDGET = 6000
MIN_MODEL_DESCRIPTION = 80

Schema = dict[str, Any]


def texts_schema(what: str) -> Schema:
    return {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": MAX_TEXTS, "description": what}


def labels_schema(what: str) -> Schema:
    return {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "maxItems": MAX_LABELS,
            "uniqueItems": True, "description": what}


THRESHOLD: Schema = {"type": "number", "minimum": 0, "maximum": 1}
TOP_K: Schema = {"type": "integer", "minimum": 1}
SPAN: Schema = {"type": "object", "properties": {
    "text": {"type": "string"}, "label": {"type": "string"}, "score": {"type": ["number", "null"]},
    "start": {"type": "integer"}, "end": {"type": "integer"}}, "required": ["text", "label", "start", "end"]}
TOKENS: Schema = {"type": "integer", "description": "tokens SIE processed"}


def answer_schema(properties: Schema, required: Sequence[str]) -> Schema:
    return {"type": "object", "properties": {"model": {"type": "string"}, **properties, "tokens": TOKENS},
            "required": ["model", *required]}


def per_text(item_properties: Schema, required: Sequence[str]) -> Schema:
    return {"type": "array", "items": {"type": "object", "properties": {
        "index": {"type": "integer", "description": "position of the text in `texts`"}, **item_properties},
        "required": ["index", *required]}}


@dataclass(frozen=True)
class ToolKind:
    """One MCP tool: the served models it takes, its arguments and answer, its SIE call.

    `arguments(models, served)` gives the argument properties besides `model` and the
    required ones, from the tool's models and everything served (the relation tool offers
    the served entity models); `run(client, model, arguments, served)` makes the call and
    returns the answer (an object matching `output_schema`).
    """

    name: str
    title: str
    summary: str
    serves: Callable[[ServedModel], bool]
    arguments: Callable[[Sequence[ServedModel], Sequence[ServedModel]], tuple[Schema, list[str]]]
    output_schema: Schema
    run: Callable[[AsyncSIEClient, ServedModel, dict[str, Any], Sequence[ServedModel]], Awaitable[dict[str, Any]]]


class ToolArgumentError(ValueError):
    """Arguments the schema admits but the served models cannot take (reported as a tool error)."""


def _given(arguments: dict[str, Any], *names: str) -> dict[str, Any]:
    return {name: arguments[name] for name in names if arguments.get(name) is not None}


def _span(entity: Entity) -> dict[str, Any]:
    return {"text": entity.text, "label": entity.label, "score": entity.score, "start": entity.start,
            "end": entity.end}


# ---- embed -----------------------------------------------------------------
def _embed_arguments(models: Sequence[ServedModel], served: Sequence[ServedModel]) -> tuple[Schema, list[str]]:
    truncatable = [f"{m.id}: {', '.join(map(str, m.matryoshka_dims))}" for m in models if m.matryoshka_dims]
    dims = {"type": "integer", "minimum": 1,
            "description": "Matryoshka truncation of the vectors (models trained for it only"
                           + (f": {'; '.join(truncatable)})" if truncatable else ")")}
    return {
        "texts": texts_schema("the texts to embed"),
        "is_query": {"type": "boolean", "default": False,
                     "description": "true for search queries (the model's query prompt), false for documents"},
        "dims": dims,
        "include_vectors": {"type": "boolean", "default": False,
                            "description": "return the vectors themselves (long); by default only their width and "
                                           "the texts' cosine similarities"},
    }, ["texts"]


async def _embed(client: AsyncSIEClient, model: ServedModel, arguments: dict[str, Any],
                 served: Sequence[ServedModel]) -> dict[str, Any]:
    texts = arguments["texts"]
    result = await client.encode(model.id, texts, output_types=["dense"], **_given(arguments, "is_query", "dims"))
    vectors: np.ndarray = result.dense_matrix().astype(np.float32)  # [N, dims]
    answer: dict[str, Any] = {"model": result.model, "dims": int(vectors.shape[1]), "count": len(texts)}
    if 2 <= len(texts) <= MAX_SIMILARITY_TEXTS:
        unit = vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
        answer["cosine_similarity"] = np.round(unit @ unit.T, 4).tolist()  # [N, N]
    if arguments.get("include_vectors"):
        answer["vectors"] = vectors.tolist()
    answer["tokens"] = result.tokens
    return answer


EMBED = ToolKind(
    name="embed", title="Embed texts",
    summary="Embed texts into dense vectors with a model served by SIE. Answers the vectors' width and, for 2 to "
            f"{MAX_SIMILARITY_TEXTS} texts, their pairwise cosine similarities (row i, column j: text i against "
            "text j); the vectors themselves only with include_vectors.",
    serves=lambda m: "dense" in m.outputs and "text" in m.modalities,
    arguments=_embed_arguments,
    output_schema=answer_schema({
        "dims": {"type": "integer", "description": "width of each vector"},
        "count": {"type": "integer", "description": "number of texts embedded"},
        "cosine_similarity": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
        "vectors": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
    }, ["dims", "count"]),
    run=_embed,
)


# ---- rerank ----------------------------------------------------------------
def _rerank_arguments(models: Sequence[ServedModel], served: Sequence[ServedModel]) -> tuple[Schema, list[str]]:
    return {
        "query": {"type": "string", "minLength": 1, "description": "what the documents are ranked against"},
        "documents": texts_schema("the candidate texts"),
        "top_k": {**TOP_K, "description": "keep only the k best documents (default: all)"},
    }, ["query", "documents"]


def _echo(text: str) -> str:
    return text if len(text) <= DOCUMENT_ECHO else text[:DOCUMENT_ECHO - 1] + "…"


async def _rerank(client: AsyncSIEClient, model: ServedModel, arguments: dict[str, Any],
                  served: Sequence[ServedModel]) -> dict[str, Any]:
    documents = arguments["documents"]
    result = await client.score(model.id, arguments["query"], documents, **_given(arguments, "top_k"))
    return {"model": result.model, "results": [
        {"index": s.index, "rank": s.rank, "score": s.score, "document": _echo(documents[s.index])}
        for s in result.scores], "tokens": result.tokens}


RERANK = ToolKind(
    name="rerank", title="Rerank documents",
    summary="Rank documents by relevance to a query with a reranking model served by SIE (a cross-encoder or late "
            "interaction). Answers the documents best first: their position in `documents`, rank (0 is best), "
            f"score (higher is more relevant) and first {DOCUMENT_ECHO} characters.",
    serves=lambda m: "score" in m.tasks,
    arguments=_rerank_arguments,
    output_schema=answer_schema({"results": {"type": "array", "items": {"type": "object", "properties": {
        "index": {"type": "integer"}, "rank": {"type": "integer"}, "score": {"type": "number"},
        "document": {"type": "string"}}, "required": ["index", "rank", "score"]}}}, ["results"]),
    run=_rerank,
)


# ---- extract entities ------------------------------------------------------
ENTITY_OUTPUTS = ("extract", "gliner2")


def _entity_arguments(models: Sequence[ServedModel], served: Sequence[ServedModel]) -> tuple[Schema, list[str]]:
    return {
        "texts": texts_schema("the texts to search"),
        "labels": labels_schema("the entity types to find, in plain words (\"person\", \"product\", \"city\")"),
        "threshold": {**THRESHOLD, "default": 0.5, "description": "keep entities scoring at least this"},
        "multi_label": {"type": "boolean", "default": False, "description": "a span may carry several labels"},
        "flat": {"type": "boolean", "default": True, "description": "false: nested entities are kept too"},
    }, ["texts", "labels"]


def _items(result: ExtractResult, field: Callable[[Any], dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"index": i, **field(item)} for i, item in enumerate(result.items)]


async def _extract_entities(client: AsyncSIEClient, model: ServedModel, arguments: dict[str, Any],
                            served: Sequence[ServedModel]) -> dict[str, Any]:
    result = await client.extract(model.id, arguments["texts"], arguments["labels"],
                                  **_given(arguments, "threshold", "multi_label", "flat"))
    return {"model": result.model, "items": _items(result, lambda it: {"entities": [_span(e) for e in it.entities]}),
            "tokens": result.tokens}


EXTRACT_ENTITIES = ToolKind(
    name="extract_entities", title="Extract entities",
    summary="Find named entities of the given types in texts with a zero-shot entity model served by SIE "
            "(GLiNER): any labels, no training. Answers per text the spans found: text, label, score and character "
            "offsets (end exclusive).",
    serves=lambda m: any(o in m.outputs for o in ENTITY_OUTPUTS),
    arguments=_entity_arguments,
    output_schema=answer_schema({"items": per_text({"entities": {"type": "array", "items": SPAN}}, ["entities"])},
                                ["items"]),
    run=_extract_entities,
)


# ---- classify --------------------------------------------------------------
def _classify_arguments(models: Sequence[ServedModel], served: Sequence[ServedModel]) -> tuple[Schema, list[str]]:
    properties: Schema = {
        "texts": texts_schema("the texts to classify"),
        "labels": labels_schema("the candidate classes, in plain words (a taxonomy's leaves, say)"),
        "multi_label": {"type": "boolean",
                        "description": "score each label on its own (several may apply); false: the scores sum to 1 "
                                       "over the labels (default: the model's)"},
        "threshold": {**THRESHOLD, "description": "keep labels scoring at least this (default: all labels)"},
        "top_k": {**TOP_K, "description": "keep the k best labels"},
    }
    if any("zeroshot" in m.outputs for m in models):
        nli = ", ".join(m.id for m in models if "zeroshot" in m.outputs)
        properties["hypothesis_template"] = {
            "type": "string", "pattern": r"\{\}", "default": "This example is {}.",
            "description": f"NLI models only ({nli}): the sentence each label fills, {{}} standing for the label"}
    return properties, ["texts", "labels"]


async def _classify(client: AsyncSIEClient, model: ServedModel, arguments: dict[str, Any],
                    served: Sequence[ServedModel]) -> dict[str, Any]:
    result = await client.extract(model.id, arguments["texts"], arguments["labels"],
                                  **_given(arguments, "multi_label", "threshold", "top_k", "hypothesis_template"))

    def classes(item: Any) -> dict[str, Any]:
        ranked = [{"label": c.label, "score": c.score} for c in item.classifications or ()]
        return {"label": ranked[0]["label"] if ranked else None, "classifications": ranked}

    return {"model": result.model, "items": _items(result, classes), "tokens": result.tokens}


CLASSIFY = ToolKind(
    name="classify", title="Classify texts into given labels",
    summary="Classify texts into candidate labels given in the call with a zero-shot classification model served by "
            "SIE (NLI or GLiClass): any labels, no training, e.g. a product into a catalogue's categories. Answers "
            "per text the best label and every kept label with its score, best first.",
    serves=lambda m: "zeroshot" in m.outputs or "gliclass" in m.outputs,
    arguments=_classify_arguments,
    output_schema=answer_schema({"items": per_text({
        "label": {"type": ["string", "null"], "description": "the best label (null when the threshold kept none)"},
        "classifications": {"type": "array", "items": {"type": "object", "properties": {
            "label": {"type": "string"}, "score": {"type": "number"}}, "required": ["label", "score"]}},
    }, ["label", "classifications"])}, ["items"]),
    run=_classify,
)


# ---- extract relations -----------------------------------------------------
def _entity_models(served: Sequence[ServedModel]) -> list[ServedModel]:
    """Models a relation model may chain to find its entities first (GLiNER)."""
    return [m for m in served if "extract" in m.outputs]


def _relation_arguments(models: Sequence[ServedModel], served: Sequence[ServedModel]) -> tuple[Schema, list[str]]:
    properties: Schema = {
        "texts": texts_schema("the texts to read"),
        "relation_labels": labels_schema("the relation types to find, in plain words (\"works for\", \"born in\")"),
        "entity_labels": labels_schema("the entity types the relations hold between (\"person\", \"organization\")"),
        "threshold": {**THRESHOLD, "description": "keep triples scoring above this (default: the model's)"},
    }
    glirel = [m.id for m in models if "relations" in m.outputs]
    entity_models = _entity_models(served)
    if glirel:
        properties["top_k"] = {**TOP_K, "description": f"relation models ({', '.join(glirel)}): each entity pair's k "
                                                       "best relations"}
        properties["entity_threshold"] = {**THRESHOLD, "description": "the entity model's threshold (default 0.5)"}
    if glirel and entity_models:
        properties["entity_model"] = {
            "type": "string", "enum": [m.id for m in entity_models], "default": default_model(entity_models),
            "description": f"relation models ({', '.join(glirel)}): the entity model that finds the entities first"}
    return properties, ["texts", "relation_labels", "entity_labels"]


async def _extract_relations(client: AsyncSIEClient, model: ServedModel, arguments: dict[str, Any],
                             served: Sequence[ServedModel]) -> dict[str, Any]:
    texts = arguments["texts"]
    if "relations" in model.outputs:
        # a GLiREL reads relations between given entities: a GLiNER finds them first, in the same call
        entity_models = _entity_models(served)
        entity_model = arguments.get("entity_model") or (default_model(entity_models) if entity_models else None)
        if entity_model is None:
            raise ToolArgumentError(f"{model.id} reads relations between entities an entity model finds first, and "
                                    "no entity model (GLiNER) is served (or sie-mcp's --models leaves none)")
        result = await client.extract(model.id, texts, arguments["relation_labels"], entity_model=entity_model,
                                      entity_labels=arguments["entity_labels"],
                                      **_given(arguments, "threshold", "top_k", "entity_threshold"))
    else:
        # a GLiNER2 finds the entities and the relations between them in one pass
        result = await client.extract(model.id, texts, arguments["entity_labels"],
                                      relation_labels=arguments["relation_labels"],
                                      **_given(arguments, "threshold", "top_k", "entity_model", "entity_threshold"))

    def triples(item: Any) -> dict[str, Any]:
        return {"relations": [{"head": _span(r.head), "relation": r.relation, "tail": _span(r.tail), "score": r.score}
                              for r in item.relations or ()],
                "entities": [_span(e) for e in item.entities]}

    return {"model": result.model, "items": _items(result, triples), "tokens": result.tokens}


EXTRACT_RELATIONS = ToolKind(
    name="extract_relations", title="Extract relations",
    summary="Find relations of the given types between entities of the given types in texts with a zero-shot "
            "relation model served by SIE (GLiREL, with a GLiNER finding the entities, or GLiNER2): a knowledge "
            "graph's triples. Answers per text the (head, relation, tail) triples with scores, and the entities.",
    serves=lambda m: "relations" in m.outputs or "gliner2" in m.outputs,
    arguments=_relation_arguments,
    output_schema=answer_schema({"items": per_text({
        "relations": {"type": "array", "items": {"type": "object", "properties": {
            "head": SPAN, "relation": {"type": "string"}, "tail": SPAN, "score": {"type": "number"}},
            "required": ["head", "relation", "tail", "score"]}},
        "entities": {"type": "array", "items": SPAN},
    }, ["relations"])}, ["items"]),
    run=_extract_relations,
)

KINDS: tuple[ToolKind, ...] = (EMBED, RERANK, EXTRACT_ENTITIES, CLASSIFY, EXTRACT_RELATIONS)


def default_model(models: Sequence[ServedModel]) -> str:
    """The model a call without `model` gets: one already loaded, else one whose weights are
    here (not fetched on first use), SIE's default model first among equals, else the first."""
    ranked = sorted(enumerate(models), key=lambda im: (im[1].state != "loaded", im[1].weights != "local",
                                                      im[1].id != DEFAULT_MODEL, im[0]))
    return ranked[0][1].id


def input_schema(kind: ToolKind, served: Sequence[ServedModel] | None) -> Schema | None:
    """The tool's argument schema over the served models, None when none serves it;
    with `served` None (SIE could not list its models), `model` is any model id."""
    if served is None:
        model: Schema = {"type": "string", "minLength": 1, "description": "the SIE model id"}
        properties, required = kind.arguments((), ())
    else:
        models = [m for m in served if kind.serves(m)]
        if not models:
            return None
        model = {"type": "string", "enum": [m.id for m in models], "default": default_model(models),
                 "description": "the SIE model to use (the tool's description says what each does)"}
        properties, required = kind.arguments(models, served)
    return {"type": "object", "properties": {"model": model, **properties}, "required": required,
            "additionalProperties": False}


def description(kind: ToolKind, served: Sequence[ServedModel] | None, problem: str | None = None) -> str:
    """The tool's description: what it does, then each of its models with the model's own description."""
    if served is None:
        return f"{kind.summary}\n\n(SIE's models could not be listed: {problem}. Pass a model id.)"
    models = [m for m in served if kind.serves(m)]
    limit = max(MIN_MODEL_DESCRIPTION, min(MAX_DESCRIPTION, DESCRIPTION_BUDGET // len(models)))
    lines = "\n".join(f"- {m.summary(limit)}" for m in models)
    return f"{kind.summary}\n\nModels (argument `model`, default {default_model(models)}):\n{lines}"
