"""Hugging Face's `InferenceClient(base_url=".../hf/<model>")` `zero_shot_classification` and
`text_classification` against a real `sie-server serve` with a tiny random NLI cross-encoder and a
tiny random GLiClass model: the client's own request and parsers, each score equal to SIE's own
`/v1/extract` on the same server, and refusals raised as the client's HTTP errors with the
message the server wrote."""

from __future__ import annotations

import httpx
import pytest
import yaml
from test_zeroshot_nli import _bert_nli

from gliclass_models import make_gliclass
from sie_server.launch import start_server

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
