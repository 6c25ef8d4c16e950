"""`sie-mcp`, SIE's models as MCP tools, driven by the `mcp` SDK's own client against a real
`sie-server` on loopback (started with an API key): over stdio (`ClientSession` on
`stdio_client`, a `sie-mcp` subprocess) and streamable HTTP (`streamable_http_client` to a
`sie-mcp --transport streamable-http` subprocess).

Served: the real default MiniLM (embed), a tiny BERT cross-encoder (rerank), a tiny GLiNER
(entities), a tiny BERT NLI classifier (classify) and a tiny GLiREL chaining that GLiNER
(relations), built as tests/engine/tasks/test_zeroshot_nli.py and test_glirel.py do.
Checked: the tools and their schemas follow what SIE serves; each tool answers what
`sie_client` gets from SIE for the same call; bad arguments, unknown models, SIE's own 4xx
and an unreachable SIE are tool errors (`isError`) after which the next call works; the API
key reaches SIE (from `--api-key` / `SIE_API_KEY`, or the caller's Bearer token over HTTP).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import pytest
import yaml
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from test_gliner_deberta import tiny_deberta
from test_gliner_extract import LABELS, TEXTS
from test_gliner_extract import build_reference as build_gliner
from test_glirel import RELATIONS, VARIANTS, build_glirel
from test_import_graph import imports_of
from test_score_http import DOCS, QUERY
from test_zeroshot_nli import _bert_nli

from checkout import REPO
from server_fixtures import DEFAULT_MODEL, start_server
from sie_client import RetryPolicy, SIEClient
from tiny_models import make_tiny_bert

API_KEY = "mcp-test-key"
SIE_MCP = str(Path(sys.executable).with_name("sie-mcp"))
TEST_MODELS = {  # id -> (outputs, description)
    "test/cross-encoder": (["score"], "A tiny cross-encoder reranker."),
    "test/gliner": (["extract"], "A tiny GLiNER: entities of any type."),
    "test/nli": (["zeroshot"], "A tiny NLI classifier: any candidate labels."),
    "test/glirel": (["relations"], "A tiny GLiREL: relations between entities."),
}
CLASSES = ["politics", "technology", "travel"]
ENTITY_LABELS = ["person", "location", "organization"]


@pytest.fixture(scope="module")
def sie(tmp_path_factory):
    """A `sie-server` with the test models and an API key, and `sie_client` on it."""
    tmp = tmp_path_factory.mktemp("mcp")
    roots = {model_id: tmp / model_id.split("/")[1] for model_id in TEST_MODELS}
    cards = tmp / "cards"
    cards.mkdir()
    for model_id, (outputs, description) in TEST_MODELS.items():
        (cards / f"{model_id.split('/')[1]}.yaml").write_text(yaml.safe_dump({
            "id": model_id, "weights": {"path": str(roots[model_id])}, "outputs": outputs, "max_seq_len": 128,
            "max_batch_tokens": 2048, "description": description}))
    # The server starts while the models are built (it reads a card's weights on first use,
    # after this fixture): the two together are most of this module's time.
    with ThreadPoolExecutor(1) as pool:
        starting = pool.submit(start_server, "--models", str(cards), "--preload", DEFAULT_MODEL, "--device", "cpu",
                               "--api-key", API_KEY, log_dir=tmp)
        try:
            # a one-logit sequence classifier is a cross-encoder; its head spread so the documents' scores differ
            _bert_nli(roots["test/cross-encoder"], {0: "LABEL_0"}, seed=5)
            _bert_nli(roots["test/nli"])
            build_glirel(roots["test/glirel"], tiny_deberta("v3", tmp / "deberta", seed=1), 0,
                         **VARIANTS["both-first"])
            build_gliner(roots["test/gliner"], make_tiny_bert(tmp / "bert", seed=3), seed=4, hidden_size=32,
                         max_width=6)
        finally:
            process = starting.result()
    client = SIEClient(process.url, api_key=API_KEY)
    try:
        yield process, client
    finally:
        client.close()
        process.stop()


def wait_for_line(path: Path, needle: str, process: subprocess.Popen, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in path.read_text().splitlines():
            if needle in line:
                return line
        if process.poll() is not None:
            raise RuntimeError(f"sie-mcp exited with {process.returncode}:\n{path.read_text()}")
        time.sleep(0.1)
    raise TimeoutError(f"sie-mcp did not say {needle!r}:\n{path.read_text()}")


@pytest.fixture(scope="module")
def mcp_http(sie, tmp_path_factory):
    """`sie-mcp` on streamable HTTP, holding no API key of its own, restricted by `--models`;
    yields its endpoint URL."""
    server, _ = sie
    log = tmp_path_factory.mktemp("sie-mcp") / "stderr.txt"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [SIE_MCP, "--transport", "streamable-http", "--port", "0", "--url", server.url,
             "--models", f"test/*,{DEFAULT_MODEL}", "--api-key", ""], stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        line = wait_for_line(log, "MCP over streamable HTTP at", process)
        yield line.rsplit(" ", 1)[1]
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
    assert "Traceback" not in log.read_text(), log.read_text()


@contextlib.asynccontextmanager
async def stdio_session(*args: str, env: dict[str, str] | None = None):
    params = StdioServerParameters(command=SIE_MCP, args=list(args), env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def http_session(url: str, api_key: str | None = None):
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http, \
            streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict:
    """A tool's answer; its text content is the same object as its structured content."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


async def refused(session: ClientSession, tool: str, **arguments: Any) -> str:
    """The message of a tool error."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    assert result.structured_content is None and len(result.content) == 1
    return result.content[0].text


def served_by_kind(client: SIEClient, allowed=lambda model_id: True) -> dict[str, list[str]]:
    """What each tool's `model` enum must be: SIE's models of that kind whose weights can load."""
    models = [m for m in client.models() if m.weights != "unavailable" and allowed(m.id)]
    kinds = {
        "embed": lambda m: "dense" in m.outputs and "text" in m.modalities,
        "rerank": lambda m: "score" in m.tasks,
        "extract_entities": lambda m: "extract" in m.outputs or "gliner2" in m.outputs,
        "classify": lambda m: "zeroshot" in m.outputs or "gliclass" in m.outputs,
        "extract_relations": lambda m: "relations" in m.outputs or "gliner2" in m.outputs,
    }
    return {name: [m.id for m in models if serves(m)] for name, serves in kinds.items()}


def spans(entities) -> list[dict]:
    return [{"text": e.text, "label": e.label, "score": e.score, "start": e.start, "end": e.end} for e in entities]


async def test_stdio_tools_follow_the_served_models_and_answer_as_sie_does(sie):
    server, client = sie
    # the defaults: SIE_URL and SIE_API_KEY, every served model
    async with stdio_session(env={"SIE_URL": server.url, "SIE_API_KEY": API_KEY}) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        expected = served_by_kind(client)
        assert set(tools) == {name for name, ids in expected.items() if ids} == \
            {"embed", "rerank", "extract_entities", "classify", "extract_relations"}
        for name, tool in tools.items():
            schema = tool.input_schema
            assert schema["type"] == "object" and schema["additionalProperties"] is False
            assert schema["properties"]["model"]["enum"] == expected[name], name
            assert "model" not in schema["required"]
            assert tool.output_schema["type"] == "object" and tool.annotations.read_only_hint
        # each model's own description reaches the agent, in the tool that takes it
        for model_id, (_, text) in TEST_MODELS.items():
            assert any(f"{model_id} (" in t.description and text in t.description for t in tools.values()), model_id
        assert tools["embed"].input_schema["properties"]["model"]["default"] == DEFAULT_MODEL  # loaded, and local
        assert tools["embed"].input_schema["required"] == ["texts"]
        assert tools["extract_relations"].input_schema["properties"]["entity_model"]["enum"] == \
            expected["extract_entities"]
        labels = tools["classify"].input_schema["properties"]["labels"]
        assert labels["minItems"] == 1 and labels["items"] == {"type": "string", "minLength": 1}

        # embed: the width and the cosine similarities; the vectors (equal to SIE's) only when asked
        texts = ["pip installs Python packages", "apt installs Debian packages", "Football is a sport"]
        summary = await call(session, "embed", texts=texts)
        assert summary["model"] == DEFAULT_MODEL and summary["dims"] == 384 and summary["count"] == 3
        assert "vectors" not in summary
        full = await call(session, "embed", texts=texts, is_query=True, include_vectors=True)
        vectors = client.encode(DEFAULT_MODEL, texts, is_query=True).dense_matrix()
        np.testing.assert_array_equal(np.asarray(full["vectors"], dtype=np.float32), vectors)
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        np.testing.assert_allclose(summary["cosine_similarity"], unit @ unit.T, atol=1e-4)
        assert summary["cosine_similarity"][0][1] > summary["cosine_similarity"][0][2]
        assert full["tokens"] > 0

        # rerank: SIE's scores, best first, with each document's position and text
        ranked = await call(session, "rerank", model="test/cross-encoder", query=QUERY, documents=DOCS, top_k=3)
        reference = client.score("test/cross-encoder", QUERY, DOCS, top_k=3)
        assert [(r["index"], r["rank"], r["score"]) for r in ranked["results"]] == \
            [(s.index, s.rank, s.score) for s in reference.scores]
        assert [r["document"] for r in ranked["results"]] == [DOCS[s.index] for s in reference.scores]
        assert len({r["score"] for r in ranked["results"]}) == 3

        # entities: SIE's spans per text (the model defaults to the only entity model served)
        found = await call(session, "extract_entities", texts=TEXTS, labels=LABELS, threshold=0.3, flat=False)
        reference = client.extract("test/gliner", TEXTS, LABELS, threshold=0.3, flat=False)
        assert found["model"] == "test/gliner"
        assert [item["entities"] for item in found["items"]] == [spans(item.entities) for item in reference.items]
        assert sum(len(item["entities"]) for item in found["items"]) >= 3
        assert [item["index"] for item in found["items"]] == list(range(len(TEXTS)))

        # classify: SIE's labels and scores, best first, and the best one
        headlines = ["The senate passed the budget.", "A new phone chip doubles battery life.",
                     "Cheap flights to Rome."]
        classes = await call(session, "classify", model="test/nli", texts=headlines, labels=CLASSES, multi_label=True)
        reference = client.extract("test/nli", headlines, CLASSES, multi_label=True)
        assert [[(c["label"], c["score"]) for c in item["classifications"]] for item in classes["items"]] == \
            [[(c.label, c.score) for c in item.classifications] for item in reference.items]
        assert [item["label"] for item in classes["items"]] == \
            [item.classifications[0].label for item in reference.items]
        kept = await call(session, "classify", model="test/nli", texts=headlines[:1], labels=CLASSES, top_k=1,
                          hypothesis_template="The topic is {}.")
        reference = client.extract("test/nli", headlines[:1], CLASSES, top_k=1, hypothesis_template="The topic is {}.")
        assert [(c["label"], c["score"]) for c in kept["items"][0]["classifications"]] == \
            [(c.label, c.score) for c in reference.items[0].classifications]

        # relations: the GLiREL with the GLiNER finding the entities first (the default entity model)
        documents = ["Barack Obama was born in Hawaii and worked with Google in Mountain View.",
                     "Ada Lovelace met Charles Babbage in London."]
        triples = await call(session, "extract_relations", model="test/glirel", texts=documents,
                             relation_labels=RELATIONS, entity_labels=ENTITY_LABELS, threshold=0.0,
                             entity_threshold=0.3)
        reference = client.extract("test/glirel", documents, RELATIONS, threshold=0.0, entity_model="test/gliner",
                                   entity_labels=ENTITY_LABELS, entity_threshold=0.3)
        assert [[(r["head"], r["relation"], r["tail"], r["score"]) for r in item["relations"]]
                for item in triples["items"]] == \
            [[(spans([r.head])[0], r.relation, spans([r.tail])[0], r.score) for r in item.relations]
             for item in reference.items]
        assert [item["entities"] for item in triples["items"]] == [spans(item.entities) for item in reference.items]
        assert sum(len(item["relations"]) for item in triples["items"]) >= 2


async def test_http_tools_follow_models_and_the_callers_key_reaches_sie(sie, mcp_http):
    server, client = sie
    allowed = served_by_kind(client, lambda model_id: model_id.startswith("test/") or model_id == DEFAULT_MODEL)
    async with http_session(mcp_http, API_KEY) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert {name: t.input_schema["properties"]["model"]["enum"] for name, t in tools.items()} == allowed
        assert allowed["classify"] == ["test/nli"] and allowed["embed"] == [DEFAULT_MODEL]
        answer = await call(session, "rerank", query=QUERY, documents=DOCS)
        assert answer["model"] == "test/cross-encoder"
        assert [r["index"] for r in answer["results"]] == \
            [s.index for s in client.score("test/cross-encoder", QUERY, DOCS).scores]
    # this sie-mcp holds no key: a caller without one (or with a wrong one) is refused by SIE, and says so
    for key in (None, "wrong-key"):
        async with http_session(mcp_http, key) as session:
            message = await refused(session, "embed", texts=["hello"])
            assert "401" in message and "API key" in message, message
            # its tools are still listed (all five, any model id), saying why SIE's models are not
            tools = (await session.list_tools()).tools
            assert [t.name for t in tools] == ["embed", "rerank", "extract_entities", "classify", "extract_relations"]
            assert "401" in tools[0].description and "enum" not in tools[0].input_schema["properties"]["model"]
    # and the SIE server itself refuses the keyless call
    with SIEClient(server.url, api_key="") as keyless, pytest.raises(Exception, match="401"):
        keyless.encode(DEFAULT_MODEL, ["hello"])


@pytest.mark.parametrize("tool, arguments, expected", [
    ("embed", {"texts": []}, "texts: [] should be non-empty"),
    ("embed", {"texts": "hello"}, "texts: 'hello' is not of type 'array'"),
    ("embed", {"texts": ["hello"], "colour": "red"}, "Additional properties are not allowed ('colour'"),
    ("embed", {"texts": ["hello"], "model": "test/nli"}, "unknown model 'test/nli' for embed; its models: "
                                                         f"{DEFAULT_MODEL}"),
    ("classify", {"texts": ["hi"], "labels": ["a"], "model": "nope/none"}, "unknown model 'nope/none' for classify"),
    ("rerank", {"documents": ["a"]}, "arguments: 'query' is a required property"),
    ("rerank", {"query": "q", "documents": ["a"], "top_k": 0}, "top_k: 0 is less than the minimum of 1"),
    ("extract_entities", {"texts": ["Ada"], "labels": ["person"], "threshold": 2},
     "threshold: 2 is greater than the maximum of 1"),
    ("extract_entities", {"texts": ["Ada"], "labels": ["person", "person"]}, "labels: ['person', 'person'] has "
                                                                           "non-unique elements"),
    ("classify", {"texts": ["hi"], "labels": ["a", "b"], "hypothesis_template": "no slot"},
     "hypothesis_template: 'no slot' does not match"),
    ("extract_relations", {"texts": ["Ada met Bob."], "relation_labels": ["met"]},
     "'entity_labels' is a required property"),
    ("no_such_tool", {}, "no tool 'no_such_tool'; the tools are embed, rerank"),
])
async def test_bad_arguments_are_tool_errors_and_the_next_call_works(sie, mcp_http, tool, arguments, expected):
    async with http_session(mcp_http, API_KEY) as session:
        message = await refused(session, tool, **arguments)
        assert expected in message, message
        assert (await call(session, "embed", texts=["still serving"]))["dims"] == 384


async def test_sies_own_refusals_are_tool_errors_with_its_code_and_message(sie, mcp_http):
    server, client = sie
    long_labels = [f"a rather long entity label number {i} that fills the window" for i in range(12)]
    with pytest.raises(Exception) as direct:
        client.extract("test/gliner", ["Ada Lovelace"], long_labels)
    async with http_session(mcp_http, API_KEY) as session:
        message = await refused(session, "extract_entities", texts=["Ada Lovelace"], labels=long_labels)
        assert message.startswith("SIE refused the call (400 invalid_request): ")
        assert direct.value.message in message
        assert (await call(session, "extract_entities", texts=["Ada Lovelace"], labels=["person"]))["items"]


def test_many_models_share_a_tools_description_budget():
    """The built-in catalog, online, has ninety-odd text embedders: the embed tool's description
    (in the agent's context every turn) cuts their descriptions shorter, never below 80 characters."""
    from sie_mcp.catalog import ServedModel
    from sie_mcp.tools import EMBED, description

    few = [ServedModel(id=f"org/model-{i}", tasks=("encode",), outputs=("dense",), description="word " * 100,
                       dense_dims=384, max_seq_len=512) for i in range(3)]
    text = description(EMBED, few)
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(lines) == 3 and all(len(line.split(": ", 1)[1]) == 300 for line in lines)  # MAX_DESCRIPTION
    assert lines[0].startswith("- org/model-0 (384 dims, up to 512 tokens): word word")
    many = few * 40
    text = description(EMBED, many)
    lines = [line for line in text.splitlines() if line.startswith("- ")]
    assert len(lines) == 120 and all(line.endswith("…") and len(line.split(": ", 1)[1]) == 80 for line in lines)


def test_sie_errors_read_as_what_to_do():
    """What the 429 / 503 a real overload gives (tests/server/test_overload.py) reads as, after the retries."""
    from sie_client import SIEError
    from sie_mcp.server import sie_error_text

    assert sie_error_text(SIEError(429, "overloaded", "the queue is full", 2.0)) == \
        "SIE is busy (429 overloaded): the queue is full; try again in 2 s"
    assert sie_error_text(SIEError(503, "not_ready", "starting", None)) == \
        "SIE is busy (503 not_ready): starting; try again later"
    assert sie_error_text(SIEError(503, "model_load_failed", "weights not found", None, retryable=False)) == \
        "SIE refused the call (503 model_load_failed): weights not found"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_an_unreachable_sie_is_a_tool_error_and_the_server_keeps_serving():
    from sie_mcp import SIETools, build_server

    url = f"http://127.0.0.1:{closed_port()}"
    tools = SIETools(url, retry=RetryPolicy(max_attempts=1))
    try:
        async with Client(build_server(tools)) as session:
            listed = (await session.list_tools()).tools
            assert len(listed) == 5 and "cannot reach SIE" in listed[0].description
            for _ in range(2):  # answered twice: the server did not stop
                result = await session.call_tool("embed", {"texts": ["hello"]})
                assert result.is_error and f"cannot reach SIE at {url}" in result.content[0].text
    finally:
        await tools.close()


async def test_a_relation_model_without_an_entity_model_says_so(sie):
    """`--models` leaving the GLiREL without the GLiNER it chains: the call says what is missing."""
    from sie_mcp import SIETools, build_server

    server, _ = sie
    tools = SIETools(server.url, api_key=API_KEY, models=["test/glirel"])
    try:
        async with Client(build_server(tools)) as session:
            listed = {t.name: t for t in (await session.list_tools()).tools}
            assert list(listed) == ["extract_relations"]
            assert "entity_model" not in listed["extract_relations"].input_schema["properties"]
            result = await session.call_tool("extract_relations", {
                "texts": ["Ada met Bob."], "relation_labels": ["met"], "entity_labels": ["person"]})
            assert result.is_error and result.content[0].text == (
                "invalid arguments for extract_relations: test/glirel reads relations between entities an entity "
                "model finds first, and no entity model (GLiNER) is served (or sie-mcp's --models leaves none)")
    finally:
        await tools.close()


def test_sie_mcp_imports_neither_the_engine_nor_the_server():
    """It is a client of SIE's HTTP API: sie_client and the SDK only (sie_client imports no
    engine but for its embedded mode, as tests/project/test_import_graph.py checks)."""
    folder = REPO / "integrations" / "sie_mcp"
    for path in folder.glob("*.py"):
        name = "sie_mcp" if path.stem == "__init__" else f"sie_mcp.{path.stem}"
        imported = imports_of(name, path, {"sie_engine", "sie_server", "sie_client", "sie_client.embedded", "torch"})
        assert imported <= {"sie_client"}, (path.name, imported)
