"""Document reading with a generative model (Donut, Florence-2): the `extract` task's mode for a
card whose outputs include `generate` (tasks/extract.py picks it).

Each image item, and each page of a document item, is one sequence: its pixels are prepared on the
image threads (the checkpoint's processor), the decoder prompt on the tokenizer pool (the card's
`task_prompt`, the request's `prompt` in its `{prompt}`), and the model's decode worker
(generation/worker.py) reads them in its running batch, off the event loop. A page's answer is the
text as the model emits it, its parsed JSON (`data`) and, where the model gives boxes, `regions`.

What the request may ask: `prompt` where the card's prompt has a place for it (and then it is
required), `max_new_tokens` up to the card's bound (its default). A card whose prompt is `{task}`
(Florence-2's) is prompted by task: the request's `task` token is required, its `prompt` the text
input of the tasks that take one; the model's encoder reads that prompt beside the image. Labels
and text items are refused: a document model reads pages and answers in its own terms.
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sie_contract.values import Page, Region

from .. import validation as v
from ..card import ModelCard
from ..documents import expand_documents
from ..errors import DeadlineExceeded, InvalidRequest
from ..generation.head import generate_options
from ..generation.worker import Done, Job
from ..image_pool import on_image_threads
from ..types import ExtractedItem, ExtractResult, Timings
from .context import Call, TaskContext
from .extract import ExtractMode

# Pages prepared per step: each step's pixels are handed to the decode worker at once, so the first
# pages decode while later ones are still being rendered and preprocessed.
PAGE_CHUNK = 8


def card_generation(card: ModelCard) -> tuple[str, int]:
    """The card's decoder prompt and max_new_tokens bound (options.generate)."""
    prompt, bound, _ = generate_options((card.options or {}).get("generate") or {}, card.id)
    return prompt, bound


def generated_tokens(card: ModelCard, fields: Mapping[str, Any]) -> int:
    """Admission's charge per page beside its encoder positions: the decoder prompt plus the
    max_new_tokens asked for (the card's bound when not asked for); 0 for a model that does not
    generate. An invalid value is charged the card's bound (it is refused before any work)."""
    if "generate" not in card.outputs:
        return 0
    task_prompt, bound = card_generation(card)
    asked = fields.get("max_new_tokens")
    new = asked if isinstance(asked, int) and 0 < asked <= bound else bound
    prompt = fields.get("prompt")
    return len(task_prompt) + (len(prompt.encode()) if isinstance(prompt, str) else 0) + new


def _check_fields(card: ModelCard, fields: Mapping[str, Any]) -> tuple[str, int | None]:
    """The prompt (text) and max_new_tokens asked for (None: not asked), or a 400 saying what to send."""
    task_prompt, bound = card_generation(card)
    text = _by_task(card, fields) if "{task}" in task_prompt else _in_task_prompt(card, task_prompt, fields)
    max_new = fields.get("max_new_tokens")
    if max_new is not None and max_new > bound:
        raise InvalidRequest(f"max_new_tokens must be at most {bound} for model {card.id!r} (its card's bound)",
                             field="max_new_tokens")
    return text, max_new


def _in_task_prompt(card: ModelCard, task_prompt: str, fields: Mapping[str, Any]) -> str:
    """A card with its own task prompt (Donut's): the request's prompt in its `{prompt}`, if it has one."""
    if fields.get("task") is not None:
        raise InvalidRequest(f"task does not apply: model {card.id!r} reads pages with its own task prompt "
                             f"{task_prompt!r}; task is for models prompted by task (Florence-2)", field="task")
    prompt = fields.get("prompt")
    takes_prompt = "{prompt}" in task_prompt
    if prompt is not None and not takes_prompt:
        raise InvalidRequest(f"prompt does not apply: model {card.id!r} reads pages with its own task prompt "
                             f"{task_prompt!r}; send no prompt (DocVQA models take a question as prompt)",
                             field="prompt")
    if takes_prompt and prompt is None:
        what = "the question" if task_prompt != "{prompt}" else "the task prompt"
        raise InvalidRequest(f"prompt is required: model {card.id!r} is prompted with {what} "
                             f"({task_prompt!r})", field="prompt")
    return _as_processor_rewrites(card, task_prompt.replace("{prompt}", prompt or ""))


def _as_processor_rewrites(card: ModelCard, text: str) -> str:
    """A card's own prompt as its family's processor rewrites every prompt it is given, where it does
    (Florence2Processor's task tokens: a `<DocVQA>` question holding one is rewritten as the reference
    rewrites it), or a 400 where that processor refuses it."""
    module = TASK_PROMPTS.get(card.family or "")
    rewrite = getattr(importlib.import_module(module), "construct_prompt", None) if module else None
    if rewrite is None:
        return text
    try:
        rewritten: str = rewrite(text)
    except ValueError as exc:
        raise InvalidRequest(f"prompt: {exc}", field="prompt") from None
    return rewritten


# The families whose cards are prompted by task (`options.generate.task_prompt: "{task}"`): the module
# whose `TASKS` are the task tokens, whose `DEFAULT_TASK` is a request's that names none (None: task is
# required) and whose `task_prompt(task, text)` builds the processor's prompt (raising ValueError, naming
# what the task takes). Read before the model loads: a bad task costs no load.
TASK_PROMPTS = {"florence2": "sie_engine.models.florence2.tasks", "glm_ocr": "sie_engine.models.glm_ocr.tasks",
                "paddleocr_vl": "sie_engine.models.paddleocr_vl.tasks"}


def _by_task(card: ModelCard, fields: Mapping[str, Any]) -> str:
    """A card prompted by task (Florence-2's, GLM-OCR's): the request's `task` and its text input
    (`prompt`, for the tasks that take one) -> the prompt text, or a 400 naming the field and the tasks."""
    module = TASK_PROMPTS.get(card.family or "")
    if module is None:
        raise InvalidRequest(f"model {card.id!r}: its card's task prompt {{task}} is for the families "
                             f"{', '.join(TASK_PROMPTS)}, not {card.family!r}", field="task")
    tasks = importlib.import_module(module)
    task, prompt = fields.get("task"), fields.get("prompt")
    if task is None:
        task = tasks.DEFAULT_TASK
    if task not in tasks.TASKS:
        what = "task is required" if task is None else f"unknown task {task!r}"
        raise InvalidRequest(f"{what}: model {card.id!r} reads images by task token; send task as one of "
                             f"{', '.join(tasks.TASKS)}", field="task")
    try:
        text: str = tasks.task_prompt(task, prompt)
    except ValueError as exc:
        raise InvalidRequest(f"prompt: {exc}", field="prompt") from None
    return text


def _refuse_texts(card: ModelCard, texts: Sequence[str | None]) -> None:
    for i, text in enumerate(texts):
        if text is not None:
            raise InvalidRequest(f"items[{i}] is a text, but model {card.id!r} reads page images: send "
                                 "{image} or {document} items (PDF)", field=f"items[{i}].text")


async def run(engine: TaskContext, call: Call) -> ExtractResult:
    card, fields = call.card, call.fields
    ids, texts, images = v.parse_encode_items(fields["items"], engine.limits)
    _refuse_texts(card, texts)
    prompt_text, max_new = _check_fields(card, fields)
    pages: list[Page | None] = [None] * len(ids)
    paths = [f"items[{i}].image" for i in range(len(ids))]
    prepare_s = 0.0
    if any(isinstance(image, v.DocumentItem) for image in images):
        expanded = await expand_documents(ids, texts, images, engine.limits)
        ids, images, pages, paths, prepare_s = (expanded.ids, expanded.images, expanded.pages, expanded.fields,
                                                expanded.seconds)
    worker = await engine.decode_worker(card)
    head = worker.head
    prompt, tokenize_s = await engine.with_tokenizer(card, _prompt_ids, prompt_text)
    if head.encoder_prompt_tokens is not None and len(prompt) > head.encoder_prompt_tokens:
        raise InvalidRequest(f"the prompt ({len(prompt)} tokens) exceeds the {head.encoder_prompt_tokens} tokens "
                             f"model {card.id!r}'s encoder reads beside an image; shorten it", field="prompt")
    # they hold prompt (and a vision-language model's page) and answer
    room = head.model.decoder_positions - len(head.decoder_prompt(prompt)) - head.page_prompt_tokens
    if room < 1 or (max_new is not None and max_new > room):
        page = f", a page's {head.page_prompt_tokens} image tokens" if head.page_prompt_tokens else ""
        raise InvalidRequest(f"the prompt ({len(prompt)} tokens{page}) plus max_new_tokens ({max_new or 1}) exceed "
                             f"model {card.id!r}'s {head.model.decoder_positions} decoder positions; shorten the "
                             "prompt or lower max_new_tokens", field="prompt")
    # not asked for: the card's bound, within what the prompt leaves (a DocVQA question takes some)
    settings = head.settings(max_new if max_new is not None else min(head.max_new_tokens, room))
    inputs, _ = await engine.with_tokenizer(card, _itself)
    limits = engine.limits
    pending: list[asyncio.Future[list[Done]]] = []
    try:
        for start in range(0, len(images), PAGE_CHUNK):
            chunk = range(start, min(start + PAGE_CHUNK, len(images)))
            (pixels, sizes), seconds = await on_image_threads(inputs.images.encode_images_sized,
                                                              [images[i] for i in chunk], [paths[i] for i in chunk],
                                                              limits)
            prepare_s += seconds
            if call.deadline is not None and call.remaining() == 0:  # as the scheduler drops queued work
                raise DeadlineExceeded("the request's deadline passed before its work ran")
            jobs = [Job(values, prompt, settings, task=fields.get("task"), size=size)
                    for values, size in zip(pixels, sizes, strict=True)]
            pending.append(asyncio.ensure_future(worker.generate(jobs)))
        done = [d for part in await asyncio.gather(*pending) for d in part]
    except BaseException:
        for future in pending:
            future.cancel()  # their jobs leave the decode batch, their cache freed
        raise
    items = [ExtractedItem(id=item_id, entities=None, text=d.answer.text, data=d.answer.data,
                           regions=None if d.answer.regions is None else [Region(**r) for r in d.answer.regions],
                           page=page)
             for item_id, d, page in zip(ids, done, pages, strict=True)]
    tokens = sum(len(prompt) + len(d.result.tokens) for d in done)
    return ExtractResult(card.id, items, tokens, Timings(tokenize=tokenize_s + prepare_s,
                                                         total=time.monotonic() - call.started))


def _prompt_ids(inputs: Any, text: str) -> list[int]:
    ids: list[int] = inputs.prompt_ids(text)
    return ids


def _itself(inputs: Any) -> Any:
    return inputs


MODE = ExtractMode(
    kind="a document model", family="document", labels="(none)",
    fields=frozenset({"task", "prompt", "max_new_tokens"}), answers=frozenset({"text", "data", "regions"}), run=run,
    example="naver-clova-ix/donut-base-finetuned-docvqa", takes_labels=False,
    own_labels="what it reads on each page image or PDF page", takes_images=True,
)
