"""An Engine on its caller's loop (`Engine(loop=...)`, as sie-server runs it, issue 27) answers
exactly as one on a loop of its own, for short queries and for longer
documents; calls that would block its loop are refused with a message saying what
to do instead, and `aclose()` ends it."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from engine_fixtures import Recorder, make_engine, tiny_cards

SHORT = ["a short query", "another one"]
# longer documents, several to a request
LONG = [f"document {i} about shared event loops and the tokenizer pool " * 3 for i in range(12)]


@pytest.fixture(scope="module")
def cards(tmp_path_factory):
    return tiny_cards(tmp_path_factory.mktemp("shared"), names=("a",))


@pytest.fixture(scope="module")
def expected(cards):
    engine = make_engine(cards, Recorder())  # its own loop thread
    try:
        return {tuple(texts): engine.encode_sync("tiny/a", texts) for texts in (SHORT, LONG)}
    finally:
        engine.close()


async def test_an_engine_on_the_callers_loop_answers_as_one_on_its_own(cards, expected):
    engine = make_engine(cards, Recorder(), loop=asyncio.get_running_loop())
    try:
        for texts in (SHORT, LONG):
            got = await engine.encode("tiny/a", texts)
            want = expected[tuple(texts)]
            assert got.tokens == want.tokens and len(got.items) == len(texts)
            for a, b in zip(got.items, want.items):
                np.testing.assert_allclose(a.dense, b.dense, atol=1e-6)
        with pytest.raises(RuntimeError, match="await"):
            engine.encode_sync("tiny/a", SHORT)
        with pytest.raises(RuntimeError, match="aclose"):
            engine.close()
    finally:
        await engine.aclose()
    await engine.aclose()  # idempotent


def test_a_shared_loop_must_be_the_running_one(cards):
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(ValueError, match="built on that loop"):
            make_engine(cards, Recorder(), loop=loop)
    finally:
        loop.close()
