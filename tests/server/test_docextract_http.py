"""Donut through `POST /v1/extract` on a real `sie-server serve`: the built-in Donut cards (cord-v2,
docvqa, rvlcdip) served on one tiny random Donut (tests/helpers/donut_fixtures.py), plus a beam card
and a card that never stops early. Every answer (text and token2json data) equals transformers'
`generate` + Donut's post-processing + `DonutProcessor.token2json` on the same weights, over JSON,
msgpack and the client (sync, async, embedded); pages of one request and of concurrent requests
share the running decode batch and each equals its page decoded alone; a PDF answers per page;
unsupported combinations are 400s; a flood of long generations is refused with 429 while one runs,
and a client that disconnects takes its sequences out of the decode batch and frees their cache.
A tiny random Florence-2 (tests/helpers/florence2_fixtures.py) is served on the same server as a
card-less directory (`--model`): its answers to `<OCR>`, `<OD>` and `<CAPTION_TO_PHRASE_GROUNDING>`
(text, data and regions in each image's pixels) equal transformers' `generate` +
`post_process_generation` on the same weights, over JSON and through the client; so does the built-in
HuggingFaceM4/Florence-2-DocVQA card on the same weights (its `<DocVQA>` question)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import re
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import msgpack
import pytest
import torch
import yaml
from PIL import Image

from donut_fixtures import tiny_donut, tiny_donut_processor
from florence2_fixtures import GENERATION, tiny_florence2
from image_fixtures import encode_image, noise_page
from pdf_fixtures import make_pdf, reference_render
from published_model_facts import PUBLISHED
from server_fixtures import start_server
from sie_client import AsyncSIEClient, SIEClient
from sie_engine import Catalog, Engine, WeightsSource

CORD, DOCVQA, RVLCDIP = (f"naver-clova-ix/donut-base-finetuned-{t}" for t in ("cord-v2", "docvqa", "rvlcdip"))
BEAMS, ENDLESS = "tiny/donut-beams", "tiny/donut-endless"
FLORENCE = "tiny/florence2"  # a card-less directory: the family's local card
FLORENCE_DOCVQA = "HuggingFaceM4/Florence-2-DocVQA"  # the built-in card, on the tiny Florence-2's weights
UNK = 3  # the tiny tokenizer's <unk> (Donut's cards ban it, as its documented generate call does)
POSITIONS = 1024  # the tiny decoder's positions: room for the endless card's long generations
NEW = 12  # max_new_tokens of the equality checks (the tiny decoder rarely stops before)
QUESTION = "what is the total ?"


_page = noise_page


def _png(image: Image.Image) -> bytes:
    return encode_image(image, "PNG")


# wide (rotated by align_long_axis), tall (resized, thumbnailed), small (padded only)
PAGES = [_page(90, 40, 0), _page(50, 120, 1), _page(20, 30, 2)]
PNGS = [_png(p) for p in PAGES]


def _cards(root: Path) -> list[dict]:
    """The built-in Donut cards on the tiny weights, a beam-search variant and one whose EOS is banned."""
    builtin = Catalog.builtin()
    cards = [dataclasses.replace(builtin.get(i), weights=WeightsSource(path=str(root))).to_dict()
             for i in (CORD, DOCVQA, RVLCDIP)]
    beams = {**cards[0], "id": BEAMS, "options": {"generate": {**cards[0]["options"]["generate"],
                                                               "generation": {"ban_unk": True, "num_beams": 3}}}}
    endless = {**cards[0], "id": ENDLESS, "max_seq_len": POSITIONS,
               "options": {"generate": {"task_prompt": "<s_cord-v2>", "max_new_tokens": 1000,
                                        "generation": {"bad_words_ids": [[2], [UNK]]}}}}
    return [*cards, beams, endless]


@pytest.fixture(scope="module")
def donut(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-donut")
    reference = tiny_donut(root, decoder={"max_position_embeddings": POSITIONS})
    processor = tiny_donut_processor(root)
    cards = tmp_path_factory.mktemp("donut-cards")
    for i, card in enumerate(_cards(root)):
        (cards / f"card{i}.yaml").write_text(yaml.safe_dump(card))
    return root, reference, processor, cards


@pytest.fixture(scope="module")
def florence(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-florence2")
    model, processor = tiny_florence2(root)
    cards = tmp_path_factory.mktemp("florence2-cards")
    builtin = Catalog.builtin().get(FLORENCE_DOCVQA)
    # its prompt as published; a bound within the tiny decoder's 128 positions
    options = {"generate": {**builtin.options["generate"], "max_new_tokens": 100}}
    docvqa = dataclasses.replace(builtin, weights=WeightsSource(path=str(root)), options=options)
    (cards / "docvqa.yaml").write_text(yaml.safe_dump(docvqa.to_dict()))
    return root, model, processor, cards


@pytest.fixture(scope="module")
def server(donut, florence, tmp_path_factory):
    # a short wait bound: the flood test's long generation holds far more than 5 s of work
    process = start_server("--models", str(donut[3]), "--models", str(florence[3]), "--model",
                           f"{FLORENCE}={florence[0]}", "--max-queue-wait", "5",
                           log_dir=tmp_path_factory.mktemp("sie-server"))
    try:
        yield process
    finally:
        process.stop()


_references: dict[tuple, tuple[str, object]] = {}


def reference(donut, page: Image.Image, prompt: str, **generate) -> tuple[str, object]:
    """transformers' generate on the page alone, then Donut's documented post-processing and token2json
    (one torch thread: a tiny model's generate on a busy 2-core box spends 15x the CPU on two)."""
    key = (page.tobytes(), page.size, prompt, tuple(sorted(generate.items())))
    if key not in _references:
        _references[key] = _reference(donut, page, prompt, **generate)
    return _references[key]


def _reference(donut, page: Image.Image, prompt: str, **generate) -> tuple[str, object]:
    _, model, processor, _ = donut
    pixels = processor(images=page, return_tensors="pt").pixel_values
    ids = processor.tokenizer(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            out = model.generate(pixel_values=pixels, decoder_input_ids=ids, bad_words_ids=[[UNK]], **generate)
    finally:
        torch.set_num_threads(threads)
    sequence = processor.batch_decode(out)[0]
    sequence = sequence.replace(processor.tokenizer.eos_token, "").replace(processor.tokenizer.pad_token, "")
    sequence = re.sub(r"<.*?>", "", sequence, count=1).strip()
    return sequence, processor.token2json(sequence)


def answers(items: list[dict]) -> list[tuple[str, object]]:
    return [(item["text"], item["data"]) for item in items]


def test_pages_in_one_json_request_equal_transformers_each_alone(server, donut):
    body = {"items": [{"image": base64.b64encode(p).decode()} for p in PNGS], "max_new_tokens": NEW}
    response = httpx.post(f"{server.url}/v1/extract/{CORD}", json=body, timeout=60)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert [item["id"] for item in answer["items"]] == ["0", "1", "2"]
    assert answers(answer["items"]) == [reference(donut, p, "<s_cord-v2>", max_new_tokens=NEW) for p in PAGES]
    assert all("entities" not in item and "regions" not in item for item in answer["items"])
    assert answer["usage"]["tokens"] > 0


def test_docvqa_question_over_msgpack_and_beam_search(server, donut):
    body = msgpack.packb({"items": [{"image": p, "id": f"p{i}"} for i, p in enumerate(PNGS[:2])],
                          "prompt": QUESTION, "max_new_tokens": NEW}, use_bin_type=True)
    response = httpx.post(f"{server.url}/v1/extract/{DOCVQA}", content=body, timeout=60,
                          headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"})
    assert response.status_code == 200, response.text
    items = msgpack.unpackb(response.content, raw=False)["items"]
    prompt = f"<s_docvqa><s_question>{QUESTION}</s_question><s_answer>"
    assert answers(items) == [reference(donut, p, prompt, max_new_tokens=NEW) for p in PAGES[:2]]
    assert [item["id"] for item in items] == ["p0", "p1"]

    beamed = httpx.post(f"{server.url}/v1/extract/{BEAMS}", timeout=60,
                        json={"items": [{"image": base64.b64encode(p).decode()} for p in PNGS], "max_new_tokens": NEW})
    assert beamed.status_code == 200, beamed.text
    expected = [reference(donut, p, "<s_cord-v2>", max_new_tokens=NEW, num_beams=3) for p in PAGES]
    assert answers(beamed.json()["items"]) == expected


def test_concurrent_requests_share_the_batch_and_each_equals_its_page_alone(server, donut):
    jobs = [(CORD, 0, NEW), (CORD, 1, NEW), (CORD, 2, NEW), (CORD, 0, 8), (CORD, 1, 5), (CORD, 2, 8)]  # all at once
    results: dict[int, list] = {}
    # the model loaded and measured first: six requests at a cold model are admitted about one batch at a time
    warm = {"items": [{"image": base64.b64encode(PNGS[0]).decode()}], "max_new_tokens": 1}
    assert httpx.post(f"{server.url}/v1/extract/{CORD}", json=warm, timeout=60).status_code == 200

    def send(k: int, model: str, page: int, new: int) -> None:
        body = {"items": [{"image": base64.b64encode(PNGS[page]).decode()}], "max_new_tokens": new}
        results[k] = httpx.post(f"{server.url}/v1/extract/{model}", json=body, timeout=60).json()["items"]

    threads = [threading.Thread(target=send, args=(k, *job)) for k, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, (_, page, new) in enumerate(jobs):
        assert answers(results[k]) == [reference(donut, PAGES[page], "<s_cord-v2>", max_new_tokens=new)]


def test_client_sync_async_and_embedded(server, donut, tmp_path):
    path = tmp_path / "page.png"
    path.write_bytes(PNGS[0])
    items = [{"image": path}, {"image": PAGES[1], "id": "pil"}, PNGS[2]]
    expected = [reference(donut, p, "<s_rvlcdip>", max_new_tokens=7) for p in PAGES]  # the card's bound
    for encoding in ("json", "msgpack"):
        with SIEClient(server.url, encoding=encoding) as client:
            result = client.extract(RVLCDIP, items)
        assert [(item.text, item.data) for item in result.items] == expected
        assert result.items[1].id == "pil" and result.items[0].entities == []

    async def run_async():
        async with AsyncSIEClient(server.url) as client:
            return await client.extract(DOCVQA, [PNGS[0]], prompt=QUESTION, max_new_tokens=NEW)

    got = asyncio.run(run_async())
    prompt = f"<s_docvqa><s_question>{QUESTION}</s_question><s_answer>"
    assert [(item.text, item.data) for item in got.items] == [reference(donut, PAGES[0], prompt, max_new_tokens=NEW)]

    catalog = Catalog.builtin()
    with Engine(Catalog([dataclasses.replace(catalog.get(CORD), weights=WeightsSource(path=str(donut[0])))]),
                device="cpu") as engine, SIEClient(engine=engine) as embedded:
        result = embedded.extract(CORD, [PNGS[1]], max_new_tokens=NEW)
    assert [(item.text, item.data) for item in result.items] == [reference(donut, PAGES[1], "<s_cord-v2>",
                                                                           max_new_tokens=NEW)]


def test_a_pdf_answers_per_page(server, donut):
    pdf = make_pdf([(200, 300), (300, 200)], seed=4)
    body = {"items": [{"image": base64.b64encode(PNGS[2]).decode()},
                      {"id": "doc", "document": base64.b64encode(pdf).decode(), "dpi": 72}], "max_new_tokens": NEW}
    response = httpx.post(f"{server.url}/v1/extract/{CORD}", json=body, timeout=60)
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert [item["id"] for item in items] == ["0", "doc", "doc"]
    assert "page" not in items[0]
    assert [(item["page"]["item"], item["page"]["number"], item["page"]["width_px"]) for item in items[1:]] == [
        (1, 1, 200), (1, 2, 300)]
    rendered = [reference_render(pdf, n, 1.0) for n in (1, 2)]  # 72 dpi: one pixel per point
    assert answers(items) == [reference(donut, p, "<s_cord-v2>", max_new_tokens=NEW)
                              for p in [PAGES[2], *rendered]]

    # the OpenAPI document describes the image and document items and the answer's text, data and page
    import jsonschema

    spec = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    operation = spec["paths"]["/v1/extract/{model}"]["post"]
    request_schema = operation["requestBody"]["content"]["application/json"]["schema"]
    answer_schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
    for schema, value in ((request_schema, body), (answer_schema, response.json())):
        jsonschema.validate(value, {**schema, "components": spec["components"]}, cls=jsonschema.Draft202012Validator)
    with pytest.raises(jsonschema.ValidationError):  # regions are documented, not free-form
        broken = {**response.json(), "items": [{**items[0], "regions": [{"box": "x"}]}]}
        jsonschema.validate(broken, {**answer_schema, "components": spec["components"]},
                            cls=jsonschema.Draft202012Validator)


_florence_references: dict[tuple, tuple[str, dict]] = {}


def florence_reference(florence, image: Image.Image, task: str, prompt: str | None) -> tuple[str, dict]:
    """transformers' Florence2Processor + generate (the checkpoint's generation config: 3 beams) +
    post_process_generation on the image alone: (the text without <s>, </s> and <pad>, the answer dict)."""
    key = (image.tobytes(), image.size, task, prompt)
    if key not in _florence_references:
        _, model, processor, _ = florence
        inputs = processor(text=task + (prompt or ""), images=image, return_tensors="pt")
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with torch.no_grad():
                out = model.generate(**inputs, max_new_tokens=NEW)
        finally:
            torch.set_num_threads(threads)
        decoded = processor.batch_decode(out, skip_special_tokens=False)[0]
        text = processor.batch_decode(out, skip_special_tokens=True)[0].strip()
        _florence_references[key] = text, processor.post_process_generation(decoded, task=task,
                                                                            image_size=image.size)
    return _florence_references[key]


def _expected_regions(task: str, answer: dict) -> list[dict] | None:
    """transformers' answer as SIE's regions: boxes with their labels (none for a text task)."""
    if task == "<OCR>":
        return None
    value = answer[task]
    return [{"label": label, "box": box} for box, label in zip(value["bboxes"], value["labels"], strict=True)]


FLORENCE_TASKS = [("<OCR>", None), ("<OD>", None), ("<CAPTION_TO_PHRASE_GROUNDING>", "a red car and a blue sign")]


def test_florence2_tasks_over_json_equal_transformers(server, florence):
    boxes = 0
    for task, prompt in FLORENCE_TASKS:
        body = {"items": [{"image": base64.b64encode(p).decode()} for p in PNGS[:2]], "task": task,
                "max_new_tokens": NEW, **({"prompt": prompt} if prompt else {})}
        response = httpx.post(f"{server.url}/v1/extract/{FLORENCE}", json=body, timeout=60)
        assert response.status_code == 200, response.text
        for item, page in zip(response.json()["items"], PAGES[:2], strict=True):
            text, answer = florence_reference(florence, page, task, prompt)
            assert item["data"] == answer, task
            assert item["text"] == (answer[task] if task == "<OCR>" else text), task
            assert item.get("regions") == _expected_regions(task, answer), task
            boxes += len(item.get("regions") or [])
    assert boxes > 0, "the tiny model boxes something: regions are compared, not only empty lists"
    # the fixture's generation config is Florence-2's published one (the cards leave it unchanged)
    assert PUBLISHED["microsoft/Florence-2-base"].generation.items() <= GENERATION.items()


def test_florence2_through_the_client_sync_async_and_embedded(server, florence):
    task, prompt = FLORENCE_TASKS[2]
    expected = [florence_reference(florence, p, task, prompt) for p in PAGES[:2]]

    def check(result) -> None:
        assert [item.data for item in result.items] == [answer for _, answer in expected]
        assert [[(r.label, r.box) for r in item.regions] for item in result.items] == [
            [(r["label"], r["box"]) for r in _expected_regions(task, answer)] for _, answer in expected]

    with SIEClient(server.url, encoding="msgpack") as client:
        check(client.extract(FLORENCE, [{"image": PAGES[0]}, PNGS[1]], task=task, prompt=prompt, max_new_tokens=NEW))

    async def run_async():
        async with AsyncSIEClient(server.url) as client:
            return await client.extract(FLORENCE, [PNGS[0], PNGS[1]], task=task, prompt=prompt, max_new_tokens=NEW)

    check(asyncio.run(run_async()))

    from sie_engine.local_card import card_from_local_dir

    with Engine(Catalog([card_from_local_dir(FLORENCE, florence[0])]), device="cpu") as engine, \
            SIEClient(engine=engine) as embedded:
        result = embedded.extract(FLORENCE, [PNGS[0]], task="<OD>", max_new_tokens=NEW)
    assert result.items[0].data == florence_reference(florence, PAGES[0], "<OD>", None)[1]


def test_florence2_docvqa_answers_the_question_as_its_recipe_does(server, florence):
    """HuggingFaceM4/Florence-2-DocVQA's recipe: "<DocVQA>" + the question as the processor's text,
    generate with the checkpoint's config, post_process_generation(task="<DocVQA>"), a pure-text answer."""
    body = {"items": [{"image": base64.b64encode(p).decode()} for p in PNGS[:2]], "prompt": QUESTION,
            "max_new_tokens": NEW}
    response = httpx.post(f"{server.url}/v1/extract/{FLORENCE_DOCVQA}", json=body, timeout=60)
    assert response.status_code == 200, response.text
    answers = [florence_reference(florence, page, "<DocVQA>", QUESTION)[1] for page in PAGES[:2]]
    for item, answer in zip(response.json()["items"], answers, strict=True):
        assert item["data"] == answer and item["text"] == answer["<DocVQA>"]
        assert item.get("regions") is None
    assert any(answer["<DocVQA>"] for answer in answers), "the tiny decoder says something: texts are compared"
    # the question is the processor's text: one holding a task token is refused as Florence2Processor refuses it
    response = httpx.post(f"{server.url}/v1/extract/{FLORENCE_DOCVQA}", timeout=60,
                          json={**body, "prompt": "what is <OCR> here?"})
    assert response.status_code == 400 and "<OCR> should be the only content" in response.text, response.text


IMAGE = {"image": base64.b64encode(PNGS[0]).decode()}


@pytest.mark.parametrize("model, body, field, words", [
    (CORD, {"items": [IMAGE], "labels": ["total"]}, "labels", "labels does not apply"),
    (CORD, {"items": ["a text"]}, "items[0].text", "reads page images"),
    (CORD, {"items": [IMAGE], "prompt": "hello"}, "prompt", "prompt does not apply"),
    (DOCVQA, {"items": [IMAGE]}, "prompt", "prompt is required"),
    (CORD, {"items": [IMAGE], "max_new_tokens": 768}, "max_new_tokens", "at most 767"),
    (CORD, {"items": [IMAGE], "threshold": 0.5}, "threshold", "applies to"),
    (CORD, {"items": [{"image": "bm90IGFuIGltYWdl"}]}, "items[0].image", "not an image"),
    (CORD, {"items": [IMAGE], "task": "<OD>"}, "task", "task does not apply"),
    (FLORENCE, {"items": [IMAGE], "task": "<NOPE>"}, "task", "unknown task '<NOPE>'"),
    (FLORENCE, {"items": [IMAGE]}, "task", "<OCR>, <OCR_WITH_REGION>, <CAPTION>"),
    (FLORENCE, {"items": [IMAGE], "task": "<OD>", "prompt": "a car"}, "prompt", "takes no text input"),
    (FLORENCE, {"items": [IMAGE], "task": "<CAPTION_TO_PHRASE_GROUNDING>"}, "prompt", "needs a text input"),
    (FLORENCE, {"items": [IMAGE], "task": "<OCR>", "labels": ["car"]}, "labels", "labels does not apply"),
    (FLORENCE_DOCVQA, {"items": [IMAGE]}, "prompt", "prompt is required"),
    (FLORENCE_DOCVQA, {"items": [IMAGE], "task": "<OCR>", "prompt": "what?"}, "task", "task does not apply"),
])
def test_unsupported_combinations_are_400s(server, model, body, field, words):
    response = httpx.post(f"{server.url}/v1/extract/{model}", json=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert words in error["message"] and error.get("field", field) == field, error


def _memory(server, model: str) -> int:
    return int(httpx.get(f"{server.url}/v1/models/{model}", timeout=10).json()["memory_bytes"])


def _until(condition, what: str, seconds: float = 60.0) -> None:
    """Wait for the server's own state (polled), never a fixed sleep."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_flood_is_refused_and_a_disconnected_client_frees_its_cache(server):
    warm = httpx.post(f"{server.url}/v1/extract/{ENDLESS}", json={"items": [IMAGE], "max_new_tokens": 20}, timeout=60)
    assert warm.status_code == 200, warm.text  # loaded, and its decode rate measured
    assert len(warm.json()["items"][0]["text"].split()) >= 10  # EOS banned: it runs to its length
    weights = _memory(server, ENDLESS)

    # 256 pages of up to 1,000 tokens each: far more than 5 s of work at any rate this model decodes
    body = json.dumps({"items": [IMAGE] * 256, "max_new_tokens": 1000}).encode()
    where = urlparse(server.url)
    flood = socket.create_connection((where.hostname, where.port))
    try:
        flood.sendall(b"POST /v1/extract/" + ENDLESS.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
                      + body)
        _until(lambda: _memory(server, ENDLESS) > weights, "the flood's sequences to hold cache")
        refused = httpx.post(f"{server.url}/v1/extract/{ENDLESS}", json={"items": [IMAGE], "max_new_tokens": 1000},
                             timeout=60)
        assert refused.status_code == 429, refused.text
        assert float(refused.headers["Retry-After"]) >= 1
    finally:
        flood.close()  # the client goes away mid-generation
    _until(lambda: _memory(server, ENDLESS) == weights, "the disconnected client's cache to be freed")
    again = httpx.post(f"{server.url}/v1/extract/{ENDLESS}", json={"items": [IMAGE], "max_new_tokens": 20}, timeout=60)
    assert again.status_code == 200 and again.json()["items"] == warm.json()["items"]
