"""Hugging Face's Inference API classification tasks, over SIE's extract: `POST /hf/{model}`.

`huggingface_hub.InferenceClient(base_url="http://host:8080/hf/<model>")` posts every task to
that URL itself (hf-inference's `_prepare_url` returns a URL model as it is; checked against
huggingface_hub 1.33, inference/_providers/hf_inference.py and _client.py), with the body
`{"inputs": <text>, "parameters": {...}}` (None parameters left out). The task is told apart by
its parameters:

- `zero_shot_classification(text, candidate_labels, multi_label=, hypothesis_template=)`:
  `parameters.candidate_labels` -> extract with those labels; the answer is
  `[{label, score}, ...]` best first, what `ZeroShotClassificationOutputElement.parse_obj_as_list`
  reads;
- `text_classification(text, top_k=, function_to_apply=)` on a fixed-label classifier (sentiment,
  emotions, toxicity, language: a `classifier` card): its own labels, as transformers'
  text-classification pipeline answers them (`top_k` default 1, the best label; `function_to_apply`
  softmax, sigmoid or none, the model's own activation when not sent). On a zero-shot classifier the
  labels come with the URL: `.../hf/<model>?labels=positive,negative` (repeated `labels=` or
  comma-separated; `hypothesis_template=` too for NLI models), as a fixed-label classifier's
  endpoint carries its labels in its weights. `function_to_apply` `softmax` scores the labels
  against each other, `sigmoid` each on its own (extract's `multi_label`), `none` (raw logits)
  is refused; `top_k` keeps the best k. The answer is `[[{label, score}, ...]]` best first (one
  list per input), what `text_classification` takes the first element of.

Both run on NLI cross-encoders (`hypothesis_template`) and GLiClass models. Errors are the
Inference API's `{"error": message}` with SIE's statuses (huggingface_hub's
`hf_raise_for_status` puts `error` in its exception's message).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from sie_engine import validation
from sie_engine.errors import InvalidRequest, SIEError

from . import codec, compat, compat_classify
from .handlers import body_of, timeout_of
from .state import ENGINE, PRE_ADMITTED, TIMINGS

FIELDS = ("inputs", "parameters")
ZERO_SHOT_PARAMETERS = ("candidate_labels", "multi_label", "hypothesis_template")
CLASSIFICATION_PARAMETERS = ("top_k", "function_to_apply")
FUNCTIONS = {"softmax": False, "sigmoid": True}  # function_to_apply -> multi_label
FIXED_FUNCTIONS = (*FUNCTIONS, "none")  # a fixed-label classifier's logits too (raw_scores)
NAMES = {"items[0].text": "inputs", "items": "inputs"}  # the engine's fields -> the Inference API's


def hf_error(error: SIEError, status: int) -> tuple[int, dict]:
    return status, {"error": error.message}


def url_labels(request: web.Request) -> list[str]:
    """`?labels=a,b` or `?labels=a&labels=b` -> the labels, in order."""
    labels = [label.strip() for value in request.query.getall("labels", []) for label in value.split(",")]
    if not labels:
        raise InvalidRequest("text_classification needs the labels to choose from in the URL, e.g. "
                             "InferenceClient(base_url='http://host:8080/hf/<model>?labels=positive,negative') "
                             "(SIE's classifiers are zero-shot); or call zero_shot_classification with "
                             "candidate_labels", field="labels")
    return labels


async def classify(request: web.Request, model: str, text: str, **fields: Any):
    """extract on one text -> its classifications, best first."""
    compat.label(request, model)
    given = {name: value for name, value in fields.items() if value is not None}
    try:
        result = await request.app[ENGINE].run("extract", model, [text], timeout=timeout_of(request),
                                               pre_admitted=request.get(PRE_ADMITTED), **given)
    except InvalidRequest as exc:
        if exc.field and exc.field.startswith("items"):
            raise InvalidRequest(exc.message.replace("items[0].text", "inputs").replace("items[0]", "inputs"),
                                 field="inputs") from None
        raise
    request[TIMINGS] = result.timings
    classes = result.items[0].classifications
    if classes is None:
        raise InvalidRequest(f"model {model!r} is not a classifier (an NLI or GLiClass model); it answers entities "
                             "or relations: use SIE's POST /v1/extract", field="model")
    return [{"label": c.label, "score": float(c.score)} for c in classes]


async def _fixed_labels(request: web.Request, model: str, text: str, top_k: int | None,
                       function: str | None) -> web.Response:
    """text_classification on a fixed-label classifier: `[[{label, score}, ...]]`, its k best labels."""
    if request.query.getall("labels", []):
        raise InvalidRequest(f"model {model!r} is a fixed-label classifier: it answers its own labels; leave labels "
                             "out of the URL", field="labels")
    result = await compat_classify.classify(
        request, model, [text], names=NAMES, top_k=top_k if top_k is not None else 1,
        multi_label=FUNCTIONS.get(function) if function else None, raw_scores=True if function == "none" else None)
    return await compat.answer(request, result.labels)


@compat.foreign_errors(hf_error)
async def root(request: web.Request) -> web.Response:
    model, _ = compat.split_mode(request.match_info["model"])  # a mode alias means nothing to a classifier
    body = await body_of(request)
    codec.check_fields(body, FIELDS, required=("inputs",))
    text = validation.check_text(body["inputs"], request.app[ENGINE].limits, "inputs")
    parameters = body.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise InvalidRequest("parameters must be an object", field="parameters")
    if "candidate_labels" in parameters:
        codec.check_fields(parameters, ZERO_SHOT_PARAMETERS)
        labels = parameters["candidate_labels"]
        if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
            raise InvalidRequest("parameters.candidate_labels must be a list of strings",
                                 field="parameters.candidate_labels")
        multi_label = validation.check_optional_bool(parameters.get("multi_label"), "parameters.multi_label")
        classes = await classify(request, model, text, labels=labels, multi_label=multi_label,
                                 hypothesis_template=parameters.get("hypothesis_template"))
        return await compat.answer(request, classes)
    codec.check_fields(parameters, CLASSIFICATION_PARAMETERS)
    function = parameters.get("function_to_apply")
    if function is not None and (not isinstance(function, str) or function not in FIXED_FUNCTIONS):
        raise InvalidRequest("parameters.function_to_apply must be softmax, sigmoid or none",
                             field="parameters.function_to_apply")
    if function == "none" and not compat_classify.is_classifier(request, model):
        raise InvalidRequest("parameters.function_to_apply must be softmax or sigmoid: SIE's zero-shot classifiers "
                             "answer probabilities, not raw logits (none)", field="parameters.function_to_apply")
    top_k = validation.check_positive_int(parameters.get("top_k"), "parameters.top_k")
    if compat_classify.is_classifier(request, model):
        return await _fixed_labels(request, model, text, top_k, function)
    classes = await classify(request, model, text, labels=url_labels(request), top_k=top_k,
                             multi_label=FUNCTIONS.get(function) if function else None,
                             hypothesis_template=request.query.get("hypothesis_template"))
    return await compat.answer(request, [classes])
