"""Hugging Face's `InferenceClient(base_url=".../hf/<model>")` `zero_shot_classification` and
`text_classification` against a real `sie-server serve` with a tiny random NLI cross-encoder and a
tiny random GLiClass model: the client's own request and parsers, each score equal to SIE's own
`/v1/extract` on the same server, and refusals raised as the client's HTTP errors with the
message the server wrote."""

from __future__ import annotations

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_zeroshot_nli import _bert_nli

from gliclass_models import make_gliclass
from router_fixtures import start_router
from server_fixtures import start_server

NLI = "test/nli"
GLICLASS = "test/gliclass"
TEXT = "The new graphics card renders games at twice the frame rate."
LABELS = ["games", "politics", "hardware"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("compat-hf")
    cards = base / "cards"
    cards.mkdir()
    (cards / "gliclass.yaml").write_text(yaml.safe_dump({
        "id": GLICLASS, "weights": {"path": str(make_gliclass(base / "gliclass", backbone="bert", prompt_first=True))},
        "outputs": ["gliclass"], "max_seq_len": 128, "max_batch_tokens": 1024,
        "options": {"gliclass": {"max_labels": 8}}}))
    process = start_server("--model", f"{NLI}={_bert_nli(base / 'nli')}", "--models", str(cards),
                           "--device", "cpu", log_dir=base)
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(autouse=True)
def online(monkeypatch):
    """The suite runs with HF_HUB_OFFLINE=1 (no hub downloads), which also blocks requests to a local URL."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


def extract(url: str, model: str, labels: list[str], **fields) -> list[dict]:
    """SIE's own /v1/extract classifications of TEXT, best first."""
    answer = httpx.post(f"{url}/v1/extract/{model}", json={"items": [TEXT], "labels": labels, **fields}, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()["items"][0]["classifications"]


def as_pairs(elements) -> list[tuple[str, float]]:
    return [(e.label, round(e.score, 5)) for e in elements]


def expected(classes: list[dict]) -> list[tuple[str, float]]:
    return [(c["label"], round(c["score"], 5)) for c in classes]


@pytest.mark.parametrize("model", [NLI, GLICLASS])
def test_zero_shot_classification(server, model):
    from huggingface_hub import InferenceClient

    client = InferenceClient(base_url=f"{server.url}/hf/{model}")
    for multi_label in (False, True):
        answer = client.zero_shot_classification(TEXT, candidate_labels=LABELS, multi_label=multi_label)
        assert as_pairs(answer) == expected(extract(server.url, model, LABELS, multi_label=multi_label))
    single = client.zero_shot_classification(TEXT, candidate_labels=LABELS)
    if model == NLI:  # transformers' pipeline: single-label scores sum to 1
        assert sum(e.score for e in single) == pytest.approx(1.0, abs=1e-5)
        template = "This text is about {}."
        answer = client.zero_shot_classification(TEXT, candidate_labels=LABELS, hypothesis_template=template)
        assert as_pairs(answer) == expected(extract(server.url, model, LABELS, hypothesis_template=template))


@pytest.mark.parametrize("model", [NLI, GLICLASS])
def test_text_classification_with_the_labels_in_the_url(server, model):
    from huggingface_hub import InferenceClient

    client = InferenceClient(base_url=f"{server.url}/hf/{model}?labels={','.join(LABELS)}")
    answer = client.text_classification(TEXT)
    assert as_pairs(answer) == expected(extract(server.url, model, LABELS))
    top = client.text_classification(TEXT, top_k=2, function_to_apply="sigmoid")
    assert as_pairs(top) == expected(extract(server.url, model, LABELS, multi_label=True, top_k=2))
    repeated = InferenceClient(base_url=f"{server.url}/hf/{model}?labels=games&labels=politics")
    assert {e.label for e in repeated.text_classification(TEXT)} == {"games", "politics"}


def test_refusals_reach_the_client_with_the_servers_message(server):
    from huggingface_hub import InferenceClient
    from huggingface_hub.errors import HfHubHTTPError

    with pytest.raises(HfHubHTTPError) as no_labels:
        InferenceClient(base_url=f"{server.url}/hf/{NLI}").text_classification(TEXT)
    assert no_labels.value.response.status_code == 400 and "?labels=" in str(no_labels.value)
    with pytest.raises(HfHubHTTPError) as logits:
        InferenceClient(base_url=f"{server.url}/hf/{NLI}?labels=a,b").text_classification(TEXT,
                                                                                           function_to_apply="none")
    assert "logits" in str(logits.value)
    with pytest.raises(HfHubHTTPError) as unknown:
        InferenceClient(base_url=f"{server.url}/hf/no/such-model").zero_shot_classification(TEXT, ["a", "b"])
    assert unknown.value.response.status_code == 404
    with pytest.raises(HfHubHTTPError) as no_candidates:
        InferenceClient(base_url=f"{server.url}/hf/{NLI}").zero_shot_classification(TEXT, [])
    assert no_candidates.value.response.status_code == 400
    answer = httpx.post(f"{server.url}/hf/{NLI}", json={"inputs": TEXT, "parameters": {"candidate_labels": ["a"],
                                                                                       "typo": 1}}, timeout=60)
    assert answer.status_code == 400 and set(answer.json()) == {"error"}


# ---- fuzz: never a 5xx, every error in the Inference API's shape ---------------------------------
ANY = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from([2**63, 1e308, "", " ", "{}", "{} {}",
                                                                             "softmax", "none"]),
              st.text(max_size=8)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
VALID = [  # (path, body)
    (f"/hf/{NLI}", {"inputs": TEXT, "parameters": {"candidate_labels": LABELS, "multi_label": True,
                                                   "hypothesis_template": "It is about {}."}}),
    (f"/hf/{GLICLASS}", {"inputs": TEXT, "parameters": {"candidate_labels": LABELS}}),
    (f"/hf/{NLI}?labels=a,b", {"inputs": TEXT, "parameters": {"top_k": 1, "function_to_apply": "sigmoid"}}),
    (f"/hf/{GLICLASS}?labels=a&hypothesis_template=x", {"inputs": TEXT}),
]


@st.composite
def mutated(draw, value):
    """`value` with some of its nodes replaced by anything, a field dropped or one added."""
    if draw(st.integers(0, 4)) == 0:
        return draw(ANY)
    if isinstance(value, dict):
        value = {k: draw(mutated(v)) if draw(st.booleans()) else v for k, v in value.items()
                 if draw(st.integers(0, 5))}
        if draw(st.integers(0, 5)) == 0:
            value[draw(st.sampled_from(["candidate_labels", "top_k", "x"]))] = draw(ANY)
        return value
    if isinstance(value, list):
        return [draw(mutated(v)) for v in value] + draw(st.lists(ANY, max_size=2))
    return value


def test_fuzzed_requests_get_4xx_in_the_inference_apis_shape(server):
    statuses: dict[int, int] = {}

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(route=st.sampled_from(VALID), data=st.data())
    def send(route, data):
        path, valid = route
        body = data.draw(mutated(valid))
        answer = httpx.post(f"{server.url}{path}", json=body, timeout=60)
        statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
        assert answer.status_code < 500, (path, body, answer.text)
        if answer.status_code >= 400:
            assert set(answer.json()) == {"error"}, (path, body, answer.text)

    send()
    assert statuses.get(200, 0) >= 5 and sum(v for k, v in statuses.items() if k >= 400) >= 40, statuses
    assert "Traceback" not in server.log_text()


def test_the_router_routes_hf_classification_by_model(server, tmp_path_factory):
    from huggingface_hub import InferenceClient

    router = start_router([f"--worker={server.url}", "--poll-interval=0.2"], tmp_path_factory.mktemp("router"))
    try:
        answer = InferenceClient(base_url=f"{router.url}/hf/{NLI}").zero_shot_classification(TEXT, LABELS)
        assert as_pairs(answer) == expected(extract(server.url, NLI, LABELS))
        labelled = InferenceClient(base_url=f"{router.url}/hf/{GLICLASS}?labels={','.join(LABELS)}")
        assert as_pairs(labelled.text_classification(TEXT)) == expected(extract(server.url, GLICLASS, LABELS))
    finally:
        router.stop()
