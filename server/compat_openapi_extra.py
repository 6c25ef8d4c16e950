"""OpenAPI paths and schemas of the compatibility routes added after compat_openapi.py's:
Cohere's embed v2 (server/compat_cohere.py), Hugging Face's classification tasks
(server/compat_hf.py). compat_openapi.py merges them into its own
`SCHEMAS` and `PATHS`, so the document and its tests see one table."""

from __future__ import annotations

from sie_contract.schemas import NUMBERS, obj, ref

INTS = {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}}
COHERE_CONTENT = {"oneOf": [
    obj({"type": {"const": "text"}, "text": {"type": "string"}}, ["type", "text"]),
    obj({"type": {"const": "image_url"}, "image_url": obj({"url": {"type": "string"}}, ["url"])},
        ["type", "image_url"])]}

SCHEMAS = {
    "CohereEmbedRequest": obj({
        "model": {"type": "string"},
        "input_type": {"enum": ["search_document", "search_query", "classification", "clustering", "image"]},
        "texts": {"type": "array", "items": {"type": "string"}},
        "images": {"type": "array", "items": {"type": "string", "description": "data:image/...;base64,... URI"}},
        "inputs": {"type": "array", "items": obj({"content": {"type": "array", "items": COHERE_CONTENT,
                                                              "minItems": 1, "maxItems": 1}}, ["content"])},
        "max_tokens": {"type": "integer", "minimum": 1},
        "output_dimension": {"type": "integer", "minimum": 1},
        "embedding_types": {"type": "array", "items": {
            "enum": ["float", "int8", "uint8", "binary", "ubinary", "base64"]}},
        "truncate": {"enum": ["NONE", "END"]},
        "priority": {"type": "integer", "minimum": 0}}, ["model"]),
    "CohereEmbedResponse": obj({
        "id": {"type": "string"}, "response_type": {"const": "embeddings_by_type"},
        "embeddings": obj({"float": {"type": "array", "items": NUMBERS}, "int8": INTS, "uint8": INTS,
                           "binary": INTS, "ubinary": INTS,
                           "base64": {"type": "array", "items": {"type": "string"}}}),
        "texts": {"type": "array", "items": {"type": "string"}}, "meta": {"type": "object"}},
        ["id", "embeddings"]),
    "HFError": obj({"error": {"type": "string"}}, ["error"]),
    "HFClassifyRequest": obj({"inputs": {"type": "string"}, "parameters": {"oneOf": [
        obj({"candidate_labels": {"type": "array", "items": {"type": "string"}}, "multi_label": {"type": "boolean"},
             "hypothesis_template": {"type": "string"}}, ["candidate_labels"]),
        obj({"top_k": {"type": "integer", "minimum": 1},
             "function_to_apply": {"enum": ["softmax", "sigmoid", "none"]}})]}},
        ["inputs"]),
}

LABELLED = {"type": "array", "items": obj({"label": {"type": "string"}, "score": {"type": "number"}})}
HF_LABELS = [{"name": "labels", "in": "query", "required": False, "schema": {"type": "string"},
              "description": "text classification: the labels to choose from, comma-separated or repeated"},
             {"name": "hypothesis_template", "in": "query", "required": False, "schema": {"type": "string"},
              "description": "text classification on NLI models: the hypothesis each label fills"}]


def paths(op) -> dict:
    """The paths, each built with compat_openapi's `_op` (passed in: this module is imported by it)."""
    return {
        "/v2/embed": {"post": op("cohere", "Cohere v2 embed: texts, images or inputs; float and quantised types",
                                 ref("CohereEmbedResponse"), "CohereError",
                                 "CohereEmbedRequest")},
        "/hf/{model}": {"post": _with_parameters(op(
            "hf", "Hugging Face InferenceClient: zero_shot_classification (parameters.candidate_labels) -> "
                  "[{label, score}]; text_classification (a fixed-label classifier's own labels, or for a "
                  "zero-shot one the labels in the URL) -> [[{label, score}]]",
            {"oneOf": [LABELLED, {"type": "array", "items": LABELLED}]}, "HFError", "HFClassifyRequest",
            model=True), HF_LABELS)},
    }


def _with_parameters(operation: dict, extra: list[dict]) -> dict:
    return {**operation, "parameters": [*operation.get("parameters", []), *extra]}
