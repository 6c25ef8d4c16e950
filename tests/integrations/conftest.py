"""Fixtures the adapter tests share: the tiny ColBERT cards, the tiny cross-encoder and one SIE
server serving both. They are built once per test process (session scope), so the Qdrant and
LanceDB modules that a worker runs one after the other use one server instead of starting two;
the models are seeded, so every module sees the same weights either way."""

from __future__ import annotations

import pytest

from integration_recall import RERANKER, sie_server, tiny_colbert_cards, tiny_cross_encoder


@pytest.fixture(scope="session")
def colbert_cards(tmp_path_factory):
    return tiny_colbert_cards(tmp_path_factory.mktemp("colbert"))


@pytest.fixture(scope="session")
def reranker_dir(tmp_path_factory):
    return tiny_cross_encoder(tmp_path_factory.mktemp("cross-encoder"))


@pytest.fixture(scope="session")
def sie_url(colbert_cards, reranker_dir):
    """A real sie-server with the ColBERT cards and the cross-encoder (as RERANKER)."""
    with sie_server("--models", str(colbert_cards), "--model", f"{RERANKER}={reranker_dir}") as url:
        yield url
