"""Cohere's embed API v2 (`POST /v2/embed`) through the real `cohere.ClientV2` against a real
`sie-server serve`: texts in query and document mode, every embedding type computed from the
float vector as Cohere documents it, Matryoshka `output_dimension`, images and single-part
`inputs` on a tiny random CLIP, and refusals in Cohere's error shape (the client's own error
classes). Each vector is compared with SIE's own /v1/encode on the same server."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compat_fixtures import ASYM, DOCS, MATRYOSHKA, QUERY, encode, start_compat_server
from image_fixtures import make_tiny_clip, sample_images
from router_fixtures import start_router

CLIP = "test/clip"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("compat-cohere")
    clip = make_tiny_clip(base / "clip-model")
    process = start_compat_server(base, "--model", f"{CLIP}={clip}")
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def client(server):
    import cohere

    return cohere.ClientV2(api_key="unused", base_url=server.url, max_retries=0)


def data_uri(data: bytes, kind: str) -> str:
    return f"data:image/{kind};base64," + base64.b64encode(data).decode("ascii")


def close(a, b, atol: float = 1e-5) -> None:
    np.testing.assert_allclose(np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32), atol=atol)


def test_texts_in_query_and_document_mode(server, client):
    query = client.embed(model=ASYM, input_type="search_query", texts=[QUERY])
    close(query.embeddings.float_, encode(server.url, ASYM, [QUERY], is_query=True))
    assert query.texts == [QUERY] and query.response_type == "embeddings_by_type" and query.id
    documents = client.embed(model=ASYM, input_type="search_document", texts=DOCS)
    close(documents.embeddings.float_, encode(server.url, ASYM, DOCS))
    for kind in ("classification", "clustering"):  # the card's document prompt (cards carry two prompts)
        answer = client.embed(model=ASYM, input_type=kind, texts=DOCS[:1])
        close(answer.embeddings.float_, documents.embeddings.float_[:1])
    assert query.meta.billed_units.input_tokens > 0


def test_every_embedding_type_follows_from_the_float_vector(server, client):
    answer = client.embed(model=ASYM, input_type="search_document", texts=DOCS,
                          embedding_types=["float", "int8", "uint8", "binary", "ubinary", "base64"])
    floats = encode(server.url, ASYM, DOCS)
    kinds = answer.embeddings
    close(kinds.float_, floats)
    ubinary = np.packbits(floats > 0, axis=1).astype(int)
    assert np.array_equal(kinds.ubinary, ubinary) and len(kinds.ubinary[0]) == floats.shape[1] // 8
    assert np.array_equal(kinds.binary, ubinary - 128)
    int8 = np.array(kinds.int8)
    assert int8.min() >= -128 and int8.max() <= 127 and np.array_equal(np.array(kinds.uint8), int8 + 128)
    assert np.abs(int8).max(axis=1).tolist() == [127] * len(DOCS)  # each vector fills the range
    cosine = (int8 * floats).sum(1) / np.linalg.norm(int8, axis=1) / np.linalg.norm(floats, axis=1)
    assert cosine.min() > 0.999
    decoded = [np.frombuffer(base64.b64decode(s), dtype="<f4") for s in kinds.base64]
    close(decoded, floats)
    only = client.embed(model=ASYM, input_type="search_document", texts=DOCS[:1], embedding_types=["int8"])
    assert only.embeddings.float_ is None and only.embeddings.int8 == kinds.int8[:1]  # batch-independent


def test_output_dimension_only_where_the_model_has_matryoshka_sizes(server, client):
    import cohere

    short = client.embed(model=MATRYOSHKA, input_type="search_document", texts=DOCS[:2], output_dimension=64)
    close(short.embeddings.float_, encode(server.url, MATRYOSHKA, DOCS[:2], dims=64, normalize=True))
    with pytest.raises(cohere.BadRequestError) as refused:
        client.embed(model=ASYM, input_type="search_document", texts=DOCS[:1], output_dimension=64)
    assert "Matryoshka" in refused.value.body["message"]


def test_images_and_inputs_on_an_image_model(server, client):
    pictures = sample_images()
    uris = [data_uri(pictures["png_rgb"], "png"), data_uri(pictures["jpeg_rgb"], "jpeg")]
    reference = httpx.post(f"{server.url}/v1/encode/{CLIP}", timeout=60, json={
        "items": [{"image": uri} for uri in uris] + [{"text": "a cat"}]}).json()["items"]
    vectors = [item["dense"] for item in reference]
    images = client.embed(model=CLIP, input_type="image", images=uris)
    close(images.embeddings.float_, vectors[:2])
    assert images.meta.billed_units.images == 2
    mixed = client.embed(model=CLIP, input_type="search_query", inputs=[
        {"content": [{"type": "text", "text": "a cat"}]},
        {"content": [{"type": "image_url", "image_url": {"url": uris[0]}}]}])
    close(mixed.embeddings.float_, [vectors[2], vectors[0]])


def test_refusals_in_cohere_shape(server, client):
    import cohere

    long_text = "word " * 2000
    with pytest.raises(cohere.BadRequestError) as fused:
        client.embed(model=CLIP, input_type="search_query", inputs=[{"content": [
            {"type": "text", "text": "a cat"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,"}}]}])
    assert "one text or one image" in fused.value.body["message"]
    with pytest.raises(cohere.BadRequestError) as too_long:
        client.embed(model=ASYM, input_type="search_document", texts=[long_text], truncate="NONE")
    assert "window" in too_long.value.body["message"]
    cut = client.embed(model=ASYM, input_type="search_document", texts=[long_text], truncate="END")
    assert len(cut.embeddings.float_[0]) == 384
    with pytest.raises(cohere.BadRequestError):
        client.embed(model=ASYM, input_type="search_document", texts=[long_text], truncate="START")
    with pytest.raises(cohere.BadRequestError) as images_on_text_model:
        client.embed(model=ASYM, input_type="image", images=[data_uri(sample_images()["png_rgb"], "png")])
    assert "image" in images_on_text_model.value.body["message"]
    with pytest.raises(cohere.BadRequestError):
        client.embed(model=ASYM, input_type="search_document", texts=DOCS[:1], max_tokens=8)
    with pytest.raises(cohere.NotFoundError):
        client.embed(model="no/such-model", input_type="search_query", texts=[QUERY])
    answer = httpx.post(f"{server.url}/v2/embed", json={"model": ASYM, "texts": [QUERY], "typo": 1}, timeout=60)
    assert answer.status_code == 400 and set(answer.json()) == {"message"}


# ---- fuzz: never a 5xx, every error in Cohere's shape -----------------------------------------
ODD = [2**63, 1e308, "", " ", "END", "START", "image", "float", "data:image/png;base64,"]
ANY = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(ODD), st.text(max_size=8)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
VALID = [
    {"model": ASYM, "input_type": "search_query", "texts": ["a"], "embedding_types": ["float", "int8"],
     "truncate": "END"},
    {"model": MATRYOSHKA, "input_type": "search_document", "texts": ["a", "b"], "output_dimension": 64,
     "max_tokens": 512, "priority": 0},
    {"model": CLIP, "input_type": "search_query", "inputs": [{"content": [{"type": "text", "text": "a"}]}]},
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
            value[draw(st.sampled_from(["images", "inputs", "texts", "embedding_types", "x"]))] = draw(ANY)
        return value
    if isinstance(value, list):
        return [draw(mutated(v)) for v in value] + draw(st.lists(ANY, max_size=2))
    return value


def test_fuzzed_requests_get_4xx_in_cohere_shape(server):
    statuses: dict[int, int] = {}

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(body=st.sampled_from(VALID).flatmap(mutated))
    def send(body):
        answer = httpx.post(f"{server.url}/v2/embed", json=body, timeout=60)
        statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
        assert answer.status_code < 500, (body, answer.text)
        if answer.status_code >= 400:
            assert set(answer.json()) == {"message"}, (body, answer.text)

    send()
    assert statuses.get(200, 0) >= 5 and sum(v for k, v in statuses.items() if k >= 400) >= 50, statuses
    assert "Traceback" not in server.log_text()


def test_the_router_routes_cohere_embed_by_model(server, client, tmp_path_factory):
    import cohere

    router = start_router([f"--worker={server.url}", "--poll-interval=0.2"], tmp_path_factory.mktemp("router"))
    try:
        through = cohere.ClientV2(api_key="unused", base_url=router.url, max_retries=0)
        answer = through.embed(model=ASYM, input_type="search_query", texts=[QUERY], embedding_types=["float"])
        close(answer.embeddings.float_, encode(server.url, ASYM, [QUERY], is_query=True))
    finally:
        router.stop()
