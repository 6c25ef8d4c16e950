"""The extract mode of document models inside the engine: what admission charges a page (encoder
positions plus prompt and max_new_tokens), that image items are refused by text models by name, and
that a cancelled call's sequences leave the running decode batch at the next step with their cache
rows freed and the pool's charge back to the weights, while another call in the same batch goes on
to the same answer it gets alone. (Answers against transformers: tests/server/test_docextract_http.py.)"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import time

import numpy as np
import pytest
from PIL import Image

from donut_fixtures import tiny_donut, tiny_donut_processor
from sie_engine import Catalog, Engine, ModelCard, WeightsSource
from sie_engine.admission import upper_bound_tokens
from sie_engine.errors import DeadlineExceeded, InvalidRequest
from sie_engine.tasks.extract import mode_of, refuse_images
from sie_engine.tasks.generate import generated_tokens

CORD = "naver-clova-ix/donut-base-finetuned-cord-v2"
ENDLESS = "tiny/endless"


def _png(seed: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (40, 30, 3), dtype=np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def test_admission_charges_each_page_its_prompt_and_max_new_tokens():
    card = Catalog.builtin().get(CORD)
    fields = {"items": [{"image": b"x"}, {"document": b"%PDF-", "pages": [1, 2]}], "max_new_tokens": 40}
    per_page = len("<s_cord-v2>") + 40
    assert generated_tokens(card, fields) == per_page
    assert upper_bound_tokens(fields, card.max_seq_len, image_tokens=100, document_pages=64,
                              generated_tokens=per_page) == 3 * (100 + per_page)
    # not asked for (or not valid): the card's bound, what the request may generate at most
    assert generated_tokens(card, {"items": []}) == len("<s_cord-v2>") + card.options["generate"]["max_new_tokens"]
    assert generated_tokens(card, {"max_new_tokens": 10**6}) == generated_tokens(card, {})
    docvqa = Catalog.builtin().get("naver-clova-ix/donut-base-finetuned-docvqa")
    assert generated_tokens(docvqa, {"prompt": "what is the total?", "max_new_tokens": 5}) == (
        len("<s_docvqa><s_question>{prompt}</s_question><s_answer>") + len("what is the total?") + 5)
    text_model = Catalog.builtin().get("urchade/gliner_small-v2.1")
    assert generated_tokens(text_model, fields) == 0


def test_a_text_model_refuses_image_and_document_items_by_name():
    card = ModelCard(id="gliner", weights=WeightsSource(path="/nowhere"), outputs=("extract",))
    _, chosen = mode_of(card)
    with pytest.raises(InvalidRequest, match=r"items\[1\] is a document, but model 'gliner' is a GLiNER"):
        refuse_images(card, chosen, {"items": ["text", {"document": b"%PDF-"}]})
    refuse_images(card, chosen, {"items": ["text", {"text": "more"}]})


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-donut")
    tiny_donut(root, decoder={"max_position_embeddings": 512})
    tiny_donut_processor(root)
    base = Catalog.builtin().get(CORD)
    endless = dataclasses.replace(base, id=ENDLESS, weights=WeightsSource(path=str(root)), max_seq_len=512, options={
        "generate": {"task_prompt": "<s_cord-v2>", "max_new_tokens": 500,
                     "generation": {"bad_words_ids": [[2], [3]]}}})  # EOS banned: every sequence runs its length
    with Engine(Catalog([endless]), device="cpu") as engine:
        yield engine


def test_cancelled_call_leaves_the_batch_and_frees_its_cache(engine):
    alone = engine.extract_sync(ENDLESS, [{"image": _png(1)}], max_new_tokens=30).items[0]
    weights = engine.model_info(ENDLESS).memory_bytes

    async def scenario():
        worker = await engine.decode_worker(engine.card(ENDLESS))
        long = asyncio.ensure_future(engine.extract(ENDLESS, [{"image": _png(0)}] * 4, max_new_tokens=500))
        short = asyncio.ensure_future(engine.extract(ENDLESS, [{"image": _png(1)}], max_new_tokens=30))
        # both calls' sequences in the running batch, and the pool charged for them: the worker charges
        # once the step that admitted them is back on the loop, after the rows appear in the cache
        deadline = time.monotonic() + 60
        while (len(worker.decode.cache.lengths) < 5 or engine.model_info(ENDLESS).memory_bytes <= weights) \
                and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        held = engine.model_info(ENDLESS).memory_bytes
        assert not long.done()
        long.cancel()
        answer = await short  # the other call goes on in the batch the cancelled one left
        while not worker.idle:
            await asyncio.sleep(0.01)
        return worker, held, answer

    worker, held, answer = asyncio.run(scenario())
    assert held > weights  # the pool charged the running sequences' cache beside the weights
    assert answer.items[0] == alone  # the same answer as alone
    assert worker.decode.cache.rows == 0 and worker.decode.cache.nbytes() == 0 and worker.jobs == 0
    assert engine.model_info(ENDLESS).memory_bytes == weights


def test_warm_up_runs_a_document_model_on_blank_pages(engine):
    """A preloaded document model is warmed up before readiness (server/app.py) like any other: the
    warm-up's fields are pages and a few tokens, not texts and labels it would refuse."""
    assert asyncio.run(engine.warm_up(ENDLESS)) > 0
    assert engine.scheduler.admission.throughput.measured(ENDLESS)


def test_pages_whose_deadline_passed_are_not_decoded(engine):
    with pytest.raises(DeadlineExceeded, match="deadline passed"):
        engine.extract_sync(ENDLESS, [{"image": _png(2)}], max_new_tokens=5, timeout=1e-9)


def test_decode_steps_go_on_after_the_inference_threads_die(engine):
    """The scheduler's watchdog replaces inference threads that are gone; decode steps run through
    the same owner, so generation goes on on the replacement with the same answer."""
    alone = engine.extract_sync(ENDLESS, [{"image": _png(3)}], max_new_tokens=8).items[0]
    restarts = engine.scheduler.restarts
    engine._infer_pool.shutdown(wait=True)  # the inference threads are gone
    again = engine.extract_sync(ENDLESS, [{"image": _png(3)}], max_new_tokens=8, timeout=60).items[0]
    assert again == alone
    assert engine.scheduler.restarts == restarts + 1
