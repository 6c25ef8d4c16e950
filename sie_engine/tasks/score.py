"""The `score` task: rank items against a query.

Three kinds of model score:

- cross-encoders (card output `score`): every (query, item) pair is tokenised as a
  sentence pair and runs through the backbone as one packed sequence; the
  classification head gives its score. Pairs of concurrent requests share batches
  like any other work.
- LLM rerankers (`options.score.kind: yes-no`): every pair is the card's prompt around the query
  and the item, P(yes) at its last token; a vision-language one (Qwen3-VL-Reranker: `image` among
  its modalities) takes image items and an image query, with or without their text, inside its own
  image prompts, and video items and a video query where its card reads `video`.
- late-interaction models (card output `multivector`): the query is encoded once
  (with its query marker and expansion), then the items run as `score` work whose
  head computes MaxSim against the query's vectors on the device, so item vectors
  never leave it.

The answer lists items best first with their request index and rank.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from .. import validation as v
from ..errors import InvalidRequest
from ..heads.classifier import yes_no_options
from ..heads.colbert import marked_encode_args
from ..types import ScoredItem, ScoreResult
from ..work import WorkItem
from .common import check_truncation, longest_first
from .context import Call, TaskContext
from .encode import ImagePrompts, item_kind, refuse_videos, submit_images

SCORE = frozenset({"score"})  # the head score work runs
# multi-vector kinds whose documents are page images (their text items are queries): ColPali, ColQwen2
PAGE_RETRIEVERS = ("colpali", "colqwen2")


def parse_query(query: Any, limits: v.Limits, card) -> tuple[str, Any | None]:
    """`{"text": ...}` or a plain string -> (the query text, None); for a vision-language reranker
    (`takes_image_query`) also `{"image": ..., "text"?: ...}` -> (its text, "" without one; the image as
    sent, decoded off the event loop), and where its card reads video `{"video": ..., "text"?: ...}`
    (the video a `VideoItem`, its frames sampled off the event loop)."""
    media = None
    if isinstance(query, Mapping):
        unknown = set(query) - {"text", "id", "image", "video"}
        if unknown:
            raise InvalidRequest(f"query has unknown fields {sorted(unknown)} (allowed: text, image, video)",
                                 field="query")
        sent = [name for name in ("image", "video") if query.get(name) is not None]
        if len(sent) > 1:
            raise InvalidRequest("query has both image and video; send one of them (its text beside it)",
                                 field="query")
        if sent:
            media = _query_media(query, sent[0], card)
        query = query.get("text", "" if media is not None else None)
    elif not isinstance(query, str):
        raise InvalidRequest("query must be an object with a text field or a string", field="query")
    return v.check_text(query, limits, "query.text"), media


def _query_media(query: Mapping[str, Any], name: str, card) -> Any:
    """The query's image (as sent) or video (a `VideoItem`), refused where the model cannot read it."""
    field, value = f"query.{name}", query[name]
    if not takes_image_query(card):
        raise InvalidRequest(f"{field}: model {card.id!r} ranks against text queries; only a vision-language "
                             "reranker (Qwen3-VL-Reranker) takes an image or video query", field=field)
    if name == "video" and "video" not in card.modalities:
        raise InvalidRequest(f"{field}: model {card.id!r} reads images only; send frames of the video as the "
                             "query's image", field=field)
    if not isinstance(value, (str, bytes, bytearray)):
        raise InvalidRequest(f"{field} must be bytes (msgpack) or a base64 string (JSON), got {type(value).__name__}",
                             field=field)
    return v.VideoItem(value) if name == "video" else value


def takes_image_query(card) -> bool:
    """A prompted reranker with a vision tower (Qwen3-VL-Reranker) writes a query image into its prompt."""
    return "image" in card.modalities and ((card.options or {}).get("score") or {}).get("kind") == "yes-no"


async def run(engine: TaskContext, call: Call) -> ScoreResult:
    card, fields = call.card, call.fields
    query_text, query_media = parse_query(fields["query"], engine.limits, card)
    maybe_texts: Sequence[str | None]
    score_kind = ((card.options or {}).get("score") or {}).get("kind")
    if "image" in card.modalities and "multivector" in card.outputs:  # ColPali: pages are image items
        ids, maybe_texts, images = v.parse_encode_items(fields["items"], engine.limits)
    elif "image" in card.modalities and score_kind == "yes-no":  # Qwen3-VL-Reranker: images and videos, with texts
        ids, maybe_texts, images = v.parse_encode_items(fields["items"], engine.limits, image_text=True, videos=True)
    else:
        (ids, maybe_texts), images = v.parse_items(fields["items"], engine.limits), []
    image_positions = [i for i, image in enumerate(images) if image is not None]
    refuse_videos(card, images, image_positions)
    documents = [i for i in image_positions if isinstance(images[i], v.DocumentItem)]
    if documents:  # a score answers per item, and a document is many pages
        raise InvalidRequest(f"items[{documents[0]}] is a document; score ranks page images: encode the document "
                             "(one multivector per page) and score those, or send each page as {\"image\": ...}",
                             field=f"items[{documents[0]}].document")
    text_positions = [i for i, text in enumerate(maybe_texts) if text is not None and i not in image_positions]
    texts = [maybe_texts[i] or "" for i in text_positions]
    if text_positions and (card.options or {}).get("multivector", {}).get("kind") in PAGE_RETRIEVERS:
        first = text_positions[0]
        raise InvalidRequest(f"items[{first}] is a text, but model {card.id!r} ranks page images: send each page as "
                             "{\"image\": ...} (its text items are queries)", field=f"items[{first}]")
    top_k, truncate = fields.get("top_k"), fields.get("truncate")
    instruction = v.check_instruction(fields.get("instruction"), engine.limits)
    if instruction is not None and score_kind != "yes-no":
        raise InvalidRequest(f"model {card.id!r} takes no instruction (only prompted LLM rerankers do)",
                             field="instruction")

    if score_kind == "yes-no":  # LLM reranker: one prompt per pair, P(yes) at its last token
        request = engine.new_request(call, "score", len(ids))
        if query_media is not None:
            tokens, tokenize_s = await _submit_media_query(engine, card, request, query_text, query_media,
                                                           instruction, images, maybe_texts)
        else:
            tokens, tokenize_s = await _submit_yes_no(engine, card, request, query_text, instruction, truncate,
                                                      texts, text_positions, images, image_positions, maybe_texts)
        scores = await request.future
    elif "score" in card.outputs:
        tokenized, tokenize_s = await engine.tokenize(card, "encode_pairs", [query_text] * len(texts), texts)
        check_truncation(tokenized, truncate)
        tokens = tokenized.num_tokens
        request = engine.new_request(call, "score", len(texts))
        types = tokenized.type_ids
        work: list[WorkItem[None]] = [WorkItem(request, i, tokenized.ids[i], type_ids=types[i] if types else None,
                                               outputs=SCORE) for i in longest_first(tokenized.ids)]
        scores = await engine.run_items(card, "score", work, request)
    else:  # late interaction: MaxSim against the query's multivector
        q_tok, q_s = await engine.tokenize(card, "encode_marked", [query_text], **marked_encode_args(card, True))
        if truncate is False and q_tok.truncated[0]:
            raise InvalidRequest("query is longer than the model's query window; shorten it or allow truncation",
                                 field="query.text")
        d_tok, d_s = await engine.tokenize(card, "encode_marked", texts, **marked_encode_args(card, False)) \
            if texts else (None, 0.0)
        if d_tok is not None:
            check_truncation(d_tok, truncate, positions=text_positions)
        tokenize_s = q_s + d_s
        tokens = q_tok.num_tokens + (d_tok.num_tokens if d_tok is not None else 0)
        q_request = engine.new_request(call, "encode", 1)
        (encoded,) = await engine.run_items(
            card, "encode", [WorkItem(q_request, 0, q_tok.ids[0], outputs=frozenset({"multivector"}),
                                      key_len=q_tok.key_lens[0] if q_tok.key_lens else None)], q_request
        )
        query_vectors = encoded["multivector"]
        request = engine.new_request(call, "score", len(ids))  # the call's deadline: what is left of it
        if d_tok is not None:
            engine.submit(card, "score", [WorkItem(request, text_positions[i], d_tok.ids[i], extra=query_vectors,
                                                   outputs=SCORE) for i in longest_first(d_tok.ids)], request)
        if image_positions:  # page images: the vision tower's queue, MaxSim in the same head
            try:
                image_tokens, image_s = await submit_images(engine, card, request, images, image_positions, SCORE,
                                                            queue="score:image", extra=query_vectors)
            except BaseException as exc:  # a bad image: the texts already queued must not wait on it
                request.fail(exc if isinstance(exc, Exception) else asyncio.CancelledError())
                request.future.exception()
                raise
            tokens, tokenize_s = tokens + image_tokens, tokenize_s + image_s
        scores = await request.future

    ranked = rank(ids, [r["score"] for r in scores], top_k)
    return ScoreResult(card.id, ranked, tokens, engine.timings(request, call.started, tokenize_s))


async def _submit_yes_no(engine: TaskContext, card, request, query_text: str, instruction: str | None,
                         truncate: bool | None, texts: list[str], text_positions: list[int], images: Sequence[Any],
                         image_positions: list[int], item_texts: Sequence[str | None]) -> tuple[int, float]:
    """Queue every pair's prompt (the card's yes/no prompt with the query and the item): text items
    tokenised as the card's parts say, image items (Qwen3-VL-Reranker's: an image, its text after it)
    through the model's own image prompts; returns (tokens, seconds spent preparing)."""
    prompt = yes_no_options(card)
    fill = dict(instruction=_instruction(prompt, instruction), query=query_text)
    whole = all(isinstance(prompt[key], str) for key in ("prefix", "suffix", "template"))
    tokens, tokenize_s = 0, 0.0
    if texts:
        tokenized, tokenize_s = await _tokenize_yes_no(engine, card, prompt, fill, texts, whole)
        check_truncation(tokenized, truncate, positions=text_positions)
        tokens = tokenized.num_tokens
        engine.submit(card, "score", [WorkItem(request, text_positions[i], tokenized.ids[i], outputs=SCORE)
                                      for i in longest_first(tokenized.ids)], request)
    if image_positions:
        if not whole:
            raise ValueError(f"card {card.id}: image items need a yes/no prompt of whole strings")

        def wrap(contents: list[str]) -> list[str]:
            return [prompt["prefix"] + prompt["template"].format(**fill, document=c) + prompt["suffix"]
                    for c in contents]

        try:
            image_tokens, image_s = await submit_images(engine, card, request, list(images), image_positions, SCORE,
                                                        queue="score:image", prompts=ImagePrompts(item_texts, wrap))
        except BaseException as exc:  # a bad image: the texts already queued must not wait on it
            request.fail(exc if isinstance(exc, Exception) else asyncio.CancelledError())
            request.future.exception()
            raise
        tokens, tokenize_s = tokens + image_tokens, tokenize_s + image_s
    return tokens, tokenize_s


def _instruction(prompt: Mapping[str, Any], instruction: str | None) -> str:
    """The instruction a yes/no prompt carries: the request's, else the card's (mxbai-rerank v2 formats
    it as a line of its own, and only when there is one)."""
    instr = instruction if instruction is not None else prompt["instruction"]
    if instr and prompt.get("instruction_format"):
        instr = prompt["instruction_format"].format(instruction=instr)
    return instr or ""


async def _submit_media_query(engine: TaskContext, card, request, query_text: str, query_media: Any,
                              instruction: str | None, images: Sequence[Any],
                              item_texts: Sequence[str | None]) -> tuple[int, float]:
    """Queue Qwen3-VL-Reranker's pairs of an image or video query (its text after it) and documents:
    every pair is an item holding the query's image or video, in the query's place of the card's
    prompt, and an image or video document's after it, in the document's place (its text after it)."""
    prompt = yes_no_options(card)
    instr = _instruction(prompt, instruction)
    image_content, _ = await engine.with_tokenizer(card, _image_content)

    def wrap_at(position: int, content: str, others: tuple[str | None, ...]) -> str:
        # others: the document's image (None) or video content, where it has one
        document = "".join(other or image_content for other in others) + (item_texts[position] or "")
        return prompt["prefix"] + prompt["template"].format(instruction=instr, query=content,
                                                            document=document) + prompt["suffix"]

    query_field = "query.video" if isinstance(query_media, v.VideoItem) else "query.image"
    count = len(item_texts)
    pairs = [query_media if images[i] is None else (query_media, images[i]) for i in range(count)]
    fields = [query_field if images[i] is None else (query_field, f"items[{i}].{item_kind(images[i])}")
              for i in range(count)]
    return await submit_images(engine, card, request, pairs, list(range(count)), SCORE, queue="score:image",
                               fields=fields, prompts=ImagePrompts([query_text or None] * count, wrap_at=wrap_at))


def _image_content(inputs) -> str:
    return inputs.image_content


async def _tokenize_yes_no(engine: TaskContext, card, prompt: Mapping[str, Any], fill: Mapping[str, str],
                           texts: list[str], whole: bool):
    """The text pairs' prompts as ids: prefix, template and suffix each tokenised on its own (`whole`:
    three strings; else each a list of parts, mxbai-rerank v2's)."""
    if whole:
        texts_in = [prompt["template"].format(**fill, document=t) for t in texts]
        return await engine.tokenize(card, "encode_wrapped", texts_in, prefix=prompt["prefix"],
                                     suffix=prompt["suffix"])
    parts_in = [[part.format(**fill, document=t) for part in _parts(prompt["template"])] for t in texts]
    return await engine.tokenize(card, "encode_wrapped_parts", parts_in, prefix=_parts(prompt["prefix"]),
                                 suffix=_parts(prompt["suffix"]), first_share=prompt.get("query_share"))


def _parts(value: str | Sequence[str]) -> list[str]:
    """A yes/no prompt's prefix or suffix as its parts (a plain string is one part)."""
    return [value] if isinstance(value, str) else list(value)


def rank(ids: list[str], scores: Sequence[float], top_k: int | None) -> list[ScoredItem]:
    """Best first; ties keep request order (a stable sort)."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    if top_k is not None:
        order = order[:top_k]
    return [ScoredItem(id=ids[i], index=i, score=float(scores[i]), rank=r) for r, i in enumerate(order)]
