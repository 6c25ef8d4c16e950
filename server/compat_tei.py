"""Hugging Face text-embeddings-inference's API, one model per base URL: `/tei/{model}/...`.

TEI serves one model per process and names none in its requests, so each served model gets
its own base URL, `http://host:8080/tei/<model id>`; a TEI client given it works unchanged.
Checked field by field against TEI v1.9.3 (router/src/http/types.rs and server.rs, commit
0d124dc, and its docs/openapi.json):

| route | SIE call |
| --- | --- |
| `POST /embed` `{inputs, normalize, truncate, truncation_direction, prompt_name, dimensions}` | encode dense |
| `POST /embed_sparse` `{inputs, truncate, truncation_direction, prompt_name}` | encode sparse |
| `POST /embed_all` (per-token vectors) | encode multivector (models with one) |
| `POST /rerank` `{query, texts, truncate, truncation_direction, raw_scores, return_text}` | score |
| `POST /predict` `{inputs: [query, text] or a batch of pairs, ...}` | score, pair by pair |
| `POST /predict` `{inputs: text or a batch of [text], raw_scores, truncate}` (a classifier) | extract, every label |
| `POST /similarity` `{inputs: {source_sentence, sentences}, parameters}` | encode, cosine |
| `POST /tokenize` `{inputs, add_special_tokens, prompt_name}` | the model's tokenizer |
| `POST /decode` `{ids: a list of token ids or a batch of them, skip_special_tokens}` | the model's tokenizer |
| `POST /v1/embeddings`, `/embeddings` `{input, model (ignored), encoding_format, dimensions, user}` | encode dense |
| `GET /info`, `GET /health`, `GET /` | the card, the model's state |
| `POST /` (huggingface_hub's InferenceClient posts here) | by model: embed, embed_sparse, rerank, predict |

Prompts as TEI applies them (core/src/tokenization.rs, `prepare_pre_prompt`): only by
`prompt_name`, or TEI's `--default-prompt(-name)` (a TEI server option; SIE has none): without
either the text is embedded as sent, never with a prompt on top of one the client wrote.
`prompt_name` `query` is SIE's query mode (the card's query template); `document` / `passage` /
`corpus` its document mode (the card's document template); the `#query` / `#document` model
aliases select the same as those names do.
Fields TEI does not know are ignored, as TEI's serde request structs ignore them (no
`deny_unknown_fields`: litellm's huggingface provider sends extra ones). An empty string is
TEI's `Empty` error (400, "`inputs` cannot be empty": `EncodingInput::is_empty`); a blank one
(`"   "`) TEI embeds, as SIE does; a rerank pair is empty only when query and text both are.
`raw_scores` (logits) is refused for rerankers (they answer activated scores) and served for
fixed-label classifiers; `truncation_direction: left` is refused: SIE truncates on the right.
A fixed-label classifier's `/predict` answers every label of each text, best first, as TEI does;
its scores use the model's own activation (config.json's problem_type: sigmoid for a multi-label
model), where TEI takes softmax over any model of several labels. Token-id inputs are refused: send the text.
Errors are TEI's `{"error", "error_type"}` with TEI's statuses (422 validation, 400 empty,
413, 429 overloaded, 424 backend, 503 unhealthy), and 404 for a model not served here; its
OpenAI route answers them as TEI's OpenAICompatErrorResponse, `{"message", "code", "type"}`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from aiohttp import web

from sie_engine import validation
from sie_engine.errors import InvalidRequest, PayloadTooLarge, SIEError, UnsupportedTask

from . import compat, compat_classify, compat_pairs, openai_compat
from .compat_routes import TEI
from .errors import HTTPProblem
from .handlers import body_of
from .state import ENGINE, LIFECYCLE, SETTINGS

VERSION = "1.9.3"  # the TEI release whose API this follows
NAMES = {"items": "inputs"}
PROMPTS = {"query": True, "document": False, "passage": False, "corpus": False}
POOLING = {"last": "last_token", "cls": "cls", "mean": "mean"}  # SIE's names -> TEI's
TRUNCATE = ("truncate", "truncation_direction")
FIELDS = {
    "embed": ("inputs", "normalize", "prompt_name", "dimensions", "encoding_format", *TRUNCATE),
    "embed_sparse": ("inputs", "prompt_name", *TRUNCATE),
    "embed_all": ("inputs", "prompt_name", *TRUNCATE),
    "rerank": ("query", "texts", "raw_scores", "return_text", *TRUNCATE),
    # `parameters`: the Inference API's envelope huggingface_hub sends (TEI ignores it)
    "predict": ("inputs", "raw_scores", "parameters", *TRUNCATE),
    "similarity": ("inputs", "parameters"),
    "tokenize": ("inputs", "add_special_tokens", "prompt_name"),
    "decode": ("ids", "skip_special_tokens"),
    "openai": ("input", "model", "user", "encoding_format", "dimensions"),
}


def tei_error(error: SIEError, status: int) -> tuple[int, dict]:
    """TEI's ErrorResponse: `error` and `error_type` (one of TEI's ErrorType names)."""
    if isinstance(error, compat.EmptyInput):
        status, kind = 400, "Empty"
    elif status == 400:
        status, kind = 422, "Validation"  # TEI answers validation errors 422
    elif status == 429:
        kind = "Overloaded"
    elif status == 503:
        kind = "Unhealthy"
    elif error.code == "inference_failed":
        status, kind = 424, "Backend"
    elif status >= 500:
        kind = "Backend"
    else:
        kind = "Validation"
    return status, {"error": error.message, "error_type": kind}


tei = compat.foreign_errors(tei_error)


def tei_openai_error(error: SIEError, status: int) -> tuple[int, dict]:
    """TEI's OpenAICompatErrorResponse: the same error as `message`, its status as `code`, its kind as `type`."""
    status, body = tei_error(error, status)
    return status, {"message": body["error"], "code": status, "type": body["error_type"]}


tei_openai = compat.foreign_errors(tei_openai_error)


# ---- request values -----------------------------------------------------------------
def path_model(request: web.Request) -> tuple[str, bool | None]:
    return compat.split_mode(request.match_info["model"])


EMPTY = "`inputs` cannot be empty"  # TEI's message for an empty input (core/src/tokenization.rs)


def mode(body: dict, alias: bool | None) -> bool:
    """`prompt_name` -> query mode (the path's `#query` alias without it)."""
    name = body.get("prompt_name")
    if name is not None and (not isinstance(name, str) or name not in PROMPTS):
        raise InvalidRequest(f"prompt_name must be one of {', '.join(PROMPTS)} (SIE serves each model's query "
                             "and document prompts)", field="prompt_name")
    return bool(compat.choose_mode(alias, PROMPTS.get(name) if name is not None else None, "prompt_name"))


def prompted(body: dict, alias: bool | None) -> dict[str, bool]:
    """encode's mode fields: the card's template applies only when a prompt is named (prompt_name or
    the model alias), as TEI applies a prompt only by prompt_name; without one, the text as sent."""
    is_query = mode(body, alias)
    return {"is_query": is_query, "template": body.get("prompt_name") is not None or alias is not None}


def truncate(body: dict) -> bool:
    direction = body.get("truncation_direction")
    if direction is not None and direction not in ("right", "Right", "left", "Left"):
        raise InvalidRequest("truncation_direction must be right or left", field="truncation_direction")
    if direction in ("left", "Left"):
        raise InvalidRequest("truncation_direction left is not supported: SIE truncates on the right",
                             field="truncation_direction")
    return compat.check_bool(body, "truncate", True)


def no_raw_scores(body: dict) -> None:
    if compat.check_bool(body, "raw_scores", False):
        raise InvalidRequest("raw_scores is not supported: SIE's rerankers answer activated scores (the model's "
                             "own activation, sigmoid for one label)", field="raw_scores")


async def read(request: web.Request, route: str, required: tuple[str, ...]) -> dict:
    """The body; fields besides FIELDS[route] are ignored, as TEI ignores them."""
    body = await body_of(request)
    compat.require(body, required)
    return body


# ---- embeddings -----------------------------------------------------------------------
async def _embed(request: web.Request, model: str, alias: bool | None, body: dict) -> web.Response:
    encoding_format = body.get("encoding_format")
    if encoding_format not in (None, "float"):
        raise InvalidRequest("encoding_format: TEI's /embed answers floats only", field="encoding_format")
    texts = compat.texts_of(body["inputs"], request.app[ENGINE].limits, "inputs", empty=EMPTY)
    dims = await compat.check_dimensions(request, model, body.get("dimensions"), "dimensions")
    result = await compat.encode(request, model, texts, names={**NAMES, "dims": "dimensions"}, output_types=["dense"],
                                 **prompted(body, alias), truncate=truncate(body), dims=dims,
                                 normalize=compat.check_bool(body, "normalize", True))
    vectors = [item.dense for item in result.items]
    return await compat.answer(request, vectors, sum(v.nbytes for v in vectors))


async def _embed_sparse(request: web.Request, model: str, alias: bool | None, body: dict) -> web.Response:
    texts = compat.texts_of(body["inputs"], request.app[ENGINE].limits, "inputs", empty=EMPTY)
    result = await compat.encode(request, model, texts, names=NAMES, output_types=["sparse"],
                                 **prompted(body, alias), truncate=truncate(body))
    payload = [[{"index": int(i), "value": float(v)} for i, v in zip(item.sparse.indices, item.sparse.values)]
               for item in result.items]
    return await compat.answer(request, payload, sum(item.sparse.values.nbytes * 4 for item in result.items))


@tei
async def embed(request: web.Request) -> web.Response:
    model, alias = path_model(request)
    return await _embed(request, model, alias, await read(request, "embed", ("inputs",)))


@tei_openai
async def openai_embeddings(request: web.Request) -> web.Response:
    """TEI's OpenAI route at the model's base URL (its openai_embed): the model is the URL's, the
    body's `model` is ignored as TEI ignores it; no prompt but the path's alias; normalised vectors."""
    model, alias = path_model(request)
    body = await read(request, "openai", ("input",))
    encoding_format = openai_compat.check_encoding_format(body.get("encoding_format") or None) or "float"
    openai_compat.check_user(body)
    texts = compat.texts_of(body["input"], request.app[ENGINE].limits, "input", empty=EMPTY)
    dims = await compat.check_dimensions(request, model, body.get("dimensions"), "dimensions")
    result = await compat.encode(request, model, texts, names={"items": "input", "dims": "dimensions"},
                                 output_types=["dense"], **prompted({}, alias), dims=dims, normalize=True)
    return await compat.answer(request, openai_compat.embeddings_payload(result, model, encoding_format),
                               sum(item.dense.nbytes for item in result.items))


@tei
async def embed_sparse(request: web.Request) -> web.Response:
    model, alias = path_model(request)
    return await _embed_sparse(request, model, alias, await read(request, "embed_sparse", ("inputs",)))


@tei
async def embed_all(request: web.Request) -> web.Response:
    model, alias = path_model(request)
    body = await read(request, "embed_all", ("inputs",))
    if "multivector" not in request.app[ENGINE].model_info(model).outputs:
        raise InvalidRequest(f"model {model!r} has no per-token output: /embed_all is served for multi-vector "
                             "models (ColBERT, BGE-M3); use /embed", field="inputs")
    texts = compat.texts_of(body["inputs"], request.app[ENGINE].limits, "inputs", empty=EMPTY)
    result = await compat.encode(request, model, texts, names=NAMES, output_types=["multivector"],
                                 **prompted(body, alias), truncate=truncate(body))
    matrices = [item.multivector for item in result.items]
    return await compat.answer(request, matrices, sum(m.nbytes for m in matrices))


@tei
async def similarity(request: web.Request) -> web.Response:
    model, alias = path_model(request)
    return await _similarity(request, model, alias, await read(request, "similarity", ("inputs",)))


async def _similarity(request: web.Request, model: str, alias: bool | None, body: dict) -> web.Response:
    inputs, parameters = body["inputs"], body.get("parameters") or {}
    if not isinstance(inputs, dict) or set(inputs) != {"source_sentence", "sentences"}:
        raise InvalidRequest("inputs must be {source_sentence, sentences}", field="inputs")
    if not isinstance(parameters, dict):
        raise InvalidRequest("parameters must be an object", field="parameters")
    source = compat.texts_of(inputs["source_sentence"], request.app[ENGINE].limits, "inputs.source_sentence",
                             empty=EMPTY)
    if len(source) != 1:
        raise InvalidRequest("inputs.source_sentence must be one string", field="inputs.source_sentence")
    others = compat.texts_of(inputs["sentences"], request.app[ENGINE].limits, "inputs.sentences", single=False,
                             empty=EMPTY)
    result = await compat.encode(request, model, source + others, names=NAMES, output_types=["dense"],
                                 **prompted(parameters, alias), truncate=truncate(parameters), normalize=True)
    vectors = np.stack([item.dense for item in result.items])
    return await compat.answer(request, [float(s) for s in vectors[1:] @ vectors[0]])


# ---- rerankers --------------------------------------------------------------------------
@tei
async def rerank(request: web.Request) -> web.Response:
    model, _ = path_model(request)
    return await _rerank(request, model, await read(request, "rerank", ("query", "texts")))


async def _rerank(request: web.Request, model: str, body: dict) -> web.Response:
    no_raw_scores(body)
    limits = request.app[ENGINE].limits
    query = compat.texts_of(body["query"], limits, "query")
    if len(query) != 1:
        raise InvalidRequest("query must be a string", field="query")
    texts = compat.texts_of(body["texts"], limits, "texts", single=False)
    if query[0] == "" and "" in texts:  # TEI's pair (query, text) is empty when both are
        raise compat.EmptyInput(EMPTY, field=f"texts[{texts.index('')}]")
    return_text = compat.check_bool(body, "return_text", False)
    result = await compat.score(request, model, query[0], texts, names={"items": "texts", "query.text": "query"},
                                truncate=truncate(body))
    ranks = []
    for scored in result.scores:  # best first, as TEI sorts them
        rank = {"index": scored.index, "score": float(scored.score)}
        if return_text:
            rank["text"] = texts[scored.index]
        ranks.append(rank)
    return await compat.answer(request, ranks)


def pairs_of(inputs: Any) -> tuple[list[tuple[str, str]], bool]:
    """TEI's PredictInput -> (query, text) pairs and whether it was a batch. SIE's rerankers
    score pairs; a single text (classification) has no SIE model to serve it."""
    def pair(value: Any, where: str) -> tuple[str, str]:
        if isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value):
            return value[0], value[1]
        raise InvalidRequest(f"{where} must be a pair [query, text]: SIE's rerankers score pairs, and single-text "
                             "classification is not served", field="inputs")

    if isinstance(inputs, list) and inputs and all(isinstance(v, list) for v in inputs):
        return [pair(v, f"inputs[{i}]") for i, v in enumerate(inputs)], True
    return [pair(inputs, "inputs")], False


@tei
async def predict(request: web.Request) -> web.Response:
    model, _ = path_model(request)
    return await _predict(request, model, await read(request, "predict", ("inputs",)))


def texts_of(inputs: Any, limits) -> tuple[list[str], bool]:
    """TEI's PredictInput for a classifier -> its single texts and whether it was a batch (of
    one-element lists, as TEI's schema writes a batch of single texts). A pair is refused: a
    fixed-label classifier reads one text."""
    if isinstance(inputs, list) and inputs and all(isinstance(v, list) for v in inputs):
        texts = []
        for i, value in enumerate(inputs):
            if len(value) != 1:
                raise InvalidRequest(f"inputs[{i}] must be [text]: this model is a fixed-label classifier, which "
                                     "reads single texts, not pairs", field=f"inputs[{i}]")
            texts.append(value[0])
        where = [f"inputs[{i}]" for i in range(len(texts))]
        batch = True
    elif isinstance(inputs, list):
        raise InvalidRequest("inputs must be a text or a batch of [text]: this model is a fixed-label classifier, "
                             "which reads single texts, not pairs", field="inputs")
    else:
        texts, where, batch = [inputs], ["inputs"], False
    if len(texts) > limits.max_items:
        raise PayloadTooLarge(f"inputs holds {len(texts)} texts; at most {limits.max_items} per request",
                              field="inputs")
    for text, field in zip(texts, where):
        validation.check_text(text, limits, field)
        if text == "":
            raise compat.EmptyInput(EMPTY, field=field)
    return texts, batch


async def _classify(request: web.Request, model: str, body: dict) -> web.Response:
    texts, batch = texts_of(body["inputs"], request.app[ENGINE].limits)
    predictions = (await compat_classify.classify(
        request, model, texts, names={"items": "inputs"}, truncate=truncate(body),
        raw_scores=compat.check_bool(body, "raw_scores", False) or None)).labels
    return await compat.answer(request, predictions if batch else predictions[0])


def _holds_pairs(inputs: Any) -> bool:
    return isinstance(inputs, list) and (len(inputs) == 2 and all(isinstance(v, str) for v in inputs) or any(
        isinstance(v, list) and len(v) == 2 for v in inputs))


async def _predict(request: web.Request, model: str, body: dict) -> web.Response:
    outputs = request.app[ENGINE].model_info(model).outputs
    # a classifier reads single texts; pairs go to its score head when it has one
    if compat_classify.CLASSIFIER in outputs and not ("score" in outputs and _holds_pairs(body["inputs"])):
        return await _classify(request, model, body)
    no_raw_scores(body)
    pairs, batch = pairs_of(body["inputs"])
    limits = request.app[ENGINE].limits
    if len(pairs) > limits.max_items:
        raise PayloadTooLarge(f"inputs holds {len(pairs)} pairs; at most {limits.max_items} per request",
                              field="inputs")
    if ("", "") in pairs:  # TEI's pair is empty when both of its texts are
        raise compat.EmptyInput(EMPTY, field=f"inputs[{pairs.index(('', ''))}]" if batch else "inputs")
    cut = truncate(body)
    engine = request.app[ENGINE]
    if engine.scores_pairs(model):  # a cross-encoder: every pair in one request, whatever its query (#30)
        scores = [0.0] * len(pairs)
        for scored in (await compat_pairs.score_pairs(request, model, pairs, cut)).scores:
            scores[scored.index] = float(scored.score)
        return await compat.answer(request, _predictions(scores, batch))
    by_query: dict[str, list[int]] = {}
    for i, (query, _) in enumerate(pairs):
        by_query.setdefault(query, []).append(i)
    results = await asyncio.gather(*[
        compat.score(request, model, query, [pairs[i][1] for i in rows], truncate=cut,
                     names={"items": "inputs", "query.text": "inputs"})
        for query, rows in by_query.items()])
    scores = [0.0] * len(pairs)
    for rows, result in zip(by_query.values(), results):
        for scored in result.scores:
            scores[rows[scored.index]] = float(scored.score)
    return await compat.answer(request, _predictions(scores, batch))


def _predictions(scores: list[float], batch: bool) -> Any:
    # A one-label reranker's prediction, as TEI labels it from config.json's default id2label.
    predictions = [[{"score": s, "label": "LABEL_0"}] for s in scores]
    return predictions if batch else predictions[0]


# ---- tokenizer, info, health -------------------------------------------------------------
def _tokens(tokenizer, texts: list[str], add_special_tokens: bool) -> list[list[dict]]:
    """TEI's SimpleTokens: special tokens by their vocabulary text, the others by the text's
    bytes they cover (TEI's offsets are UTF-8 byte offsets; Python's tokenizers give characters)."""
    answer = []
    for text, encoding in zip(texts, tokenizer.rust_tokenizer().encode_batch(
            texts, add_special_tokens=add_special_tokens)):
        byte_at = np.concatenate([[0], np.cumsum([len(c.encode("utf-8")) for c in text])])
        tokens = []
        for token_id, token, (start, stop), special in zip(encoding.ids, encoding.tokens, encoding.offsets,
                                                           encoding.special_tokens_mask):
            if special:
                tokens.append({"id": token_id, "text": token, "special": True, "start": None, "stop": None})
            else:
                tokens.append({"id": token_id, "text": text[start:stop], "special": False,
                               "start": int(byte_at[start]), "stop": int(byte_at[stop])})
        answer.append(tokens)
    return answer


@tei
async def tokenize(request: web.Request) -> web.Response:
    model, alias = path_model(request)
    body = await read(request, "tokenize", ("inputs",))
    engine = request.app[ENGINE]
    texts = compat.texts_of(body["inputs"], engine.limits, "inputs", empty=EMPTY)
    add_special = compat.check_bool(body, "add_special_tokens", True)
    card = engine.card(model)
    fields = prompted(body, alias)
    if fields["template"]:
        texts = card.prompted(texts, fields["is_query"])
    compat.label(request, model)
    tokens, _ = await engine.with_tokenizer(card, _tokens, texts, add_special)  # the weights need not be loaded
    return await compat.answer(request, tokens)


def _decoded(tokenizer, batch: list, single: bool, skip_special_tokens: bool) -> list[str]:
    """TEI's decode_ids: each list of ids through the Rust tokenizer's decode (on the tokenizer
    threads: a body of ids is checked id by id). An id beyond the vocabulary is a 422 where TEI's
    tokenizer would leave it out of the text unsaid."""
    rust = tokenizer.rust_tokenizer()
    size = rust.get_vocab_size(with_added_tokens=True)
    for i, ids in enumerate(batch):
        where = "ids" if single else f"ids[{i}]"
        for j, token_id in enumerate(ids):
            if not isinstance(token_id, int) or isinstance(token_id, bool) or not 0 <= token_id < size:
                shown = token_id if isinstance(token_id, int) else type(token_id).__name__
                raise InvalidRequest(f"{where}[{j}] is {shown}: a token id is an integer from 0 to {size - 1} "
                                     "(the model's vocabulary)", field=f"{where}[{j}]")
    return rust.decode_batch(batch, skip_special_tokens=skip_special_tokens)


@tei
async def decode(request: web.Request) -> web.Response:
    model, _ = path_model(request)
    body = await read(request, "decode", ("ids",))
    engine = request.app[ENGINE]
    ids = body["ids"]
    if not isinstance(ids, list):
        raise InvalidRequest("ids must be a list of token ids or a batch of lists of ids", field="ids")
    single = not ids or not all(isinstance(row, list) for row in ids)  # a batch is a list of lists
    batch = [ids] if single else ids
    if len(batch) > engine.limits.max_items:
        raise PayloadTooLarge(f"ids holds {len(batch)} lists; at most {engine.limits.max_items} per request",
                              field="ids")
    for i, row in enumerate(batch):  # TEI's Empty error, in its words
        if not row:
            raise compat.EmptyInput("`input_ids` cannot be empty", field="ids" if single else f"ids[{i}]")
    skip = compat.check_bool(body, "skip_special_tokens", True)
    card = engine.card(model)
    compat.label(request, model)
    texts, _ = await engine.with_tokenizer(card, _decoded, batch, single, skip)  # the weights need not be loaded
    return await compat.answer(request, texts)


def _model_type(card, outputs: tuple[str, ...]) -> dict:
    if compat_classify.CLASSIFIER in outputs:  # its id2label is read when the weights load, not listed here
        return {"classifier": {"id2label": {}, "label2id": {}}}
    if "score" in outputs:  # a one-label reranker, labelled as config.json's default id2label
        return {"reranker": {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}}
    if "dense" in outputs or "multivector" in outputs:
        return {"embedding": {"pooling": POOLING.get(card.pooling, card.pooling)}}
    if "sparse" in outputs:
        return {"embedding": {"pooling": "splade"}}
    return {"classifier": {"id2label": {}, "label2id": {}}}


@tei
async def info(request: web.Request) -> web.Response:
    model, _ = path_model(request)
    engine = request.app[ENGINE]
    card, model_info = engine.card(model), await compat.served_model(request, model)
    compat.label(request, model)
    # str(): a split server's frontend knows the engine core's device by name (it imports no torch)
    on_gpu = str(engine.device).startswith("cuda")
    dtype = card.dtype if card.dtype != "auto" else ("float16" if on_gpu else "float32")
    return await compat.answer(request, {
        "model_id": model, "model_sha": None, "served_model_name": model, "model_dtype": dtype,
        "model_type": _model_type(card, model_info.outputs),
        "max_concurrent_requests": request.app[SETTINGS].max_connections,
        "max_input_length": model_info.max_seq_len, "max_batch_tokens": card.max_batch_tokens,
        "max_batch_requests": None, "max_client_batch_size": engine.limits.max_items,
        # SIE's tokenizer threads are the engine's own (--tokenizer-threads), not reported here
        "auto_truncate": True, "tokenization_workers": 0,
        "version": VERSION, "sha": None, "docker_label": None,
    })


@tei
async def health(request: web.Request) -> web.Response:
    model, _ = path_model(request)
    base, _, tail = model.rpartition("/")
    if model not in request.app[ENGINE].catalog and base in request.app[ENGINE].catalog and f"/{tail}" in POSTS:
        # GET /tei/<model>/embed reached the root's GET (model ids hold slashes): say what is wrong
        raise HTTPProblem("method_not_allowed", f"/{tail} takes POST")
    lifecycle = request.app[LIFECYCLE]
    state = (await compat.served_model(request, model)).state  # 404 for a model not served here
    if lifecycle.draining or not lifecycle.ready or state == "failed":
        return await compat.answer(request, {"error": "unhealthy", "error_type": "Unhealthy"}, status=503)
    return web.Response(status=200)


# ---- the root route ------------------------------------------------------------------------
@tei
async def root(request: web.Request) -> web.Response:
    """`POST /tei/{model}`: TEI's root serves the model's own kind of call (what
    huggingface_hub's InferenceClient posts `{"inputs": ...}` to)."""
    model, alias = path_model(request)
    outputs = request.app[ENGINE].model_info(model).outputs
    body = await body_of(request)
    if compat_classify.CLASSIFIER in outputs and "query" not in body:  # text-classification's {inputs}
        compat.require(body, ("inputs",))
        return await _classify(request, model, body)
    if "score" in outputs:
        if "query" in body:
            compat.require(body, ("query", "texts"))
            return await _rerank(request, model, body)
        compat.require(body, ("inputs",))
        return await _predict(request, model, body)
    if isinstance(body.get("inputs"), dict):  # sentence-similarity's {source_sentence, sentences}
        compat.require(body, ("inputs",))
        return await _similarity(request, model, alias, body)
    if "dense" in outputs:
        compat.require(body, ("inputs",))
        return await _embed(request, model, alias, body)
    if "sparse" in outputs:
        compat.require(body, ("inputs",))
        return await _embed_sparse(request, model, alias, body)
    raise UnsupportedTask(f"model {model!r} serves none of TEI's calls (embed, embed_sparse, rerank, predict)",
                          field="model")


# TEI's POST routes under /tei/{model} (compat_routes.TEI): `model/embed` names a route, not a model
POSTS = frozenset(r.path for r in TEI.routes if r.method == "POST" and r.path)
