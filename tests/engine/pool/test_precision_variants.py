"""A precision is a property of the call, not a model: the variant it is served by is keyed by
(model, precision) in the engine (sie_engine/variants.py), loaded and queued under its own name
(batches never mix precisions) with the base model's tokenizer, and is no catalog entry, so a
request cannot name `<id>@<precision>` as a model, before or after the variant exists."""

from __future__ import annotations

import dataclasses

import pytest

from engine_fixtures import Recorder, make_engine, tiny_cards
from sie_engine import ModelCard, WeightsSource
from sie_engine.errors import ModelNotFound
from sie_engine.variants import PrecisionVariants, variant_name


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    with make_engine(tiny_cards(tmp_path_factory.mktemp("variants"), names=("a",)), Recorder()) as engine:
        yield engine


def test_a_variant_is_not_a_model_a_request_can_name(engine):
    with pytest.raises(ModelNotFound):
        engine.encode_sync("tiny/a@bfloat16", ["x"])
    engine.encode_sync("tiny/a", ["x"], precision="bfloat16")  # the variant exists now
    assert engine.catalog.get("tiny/a@bfloat16") is None and "tiny/a@bfloat16" not in engine.catalog
    with pytest.raises(ModelNotFound):
        engine.encode_sync("tiny/a@bfloat16", ["x"])
    # the pool keeps it by its name, beside the base model, which the call's precision reached
    assert engine.pool.resident("tiny/a@bfloat16") is not None
    assert engine.pool.card("tiny/a@bfloat16").dtype == "bfloat16"


def test_variants_are_keyed_by_model_and_precision():
    variants = PrecisionVariants()
    card = ModelCard(id="tiny/v", weights=WeightsSource(path="/nonexistent"), max_seq_len=128, dtype="float32")
    half = variants.of(card, "float16")
    assert half.id == variant_name(card.id, "float16") == f"{card.id}@float16" and half.dtype == "float16"
    assert variants.of(card, "float16") is half  # made once per (model, precision)
    assert variants.of(card, "bfloat16") is not half and variants.of(card, "float32") is card
    assert variants.get(half.id) is half and variants.get(card.id) is None
    assert variants.base_of(half.id) == card.id and variants.base_of(card.id) == card.id
    replaced = dataclasses.replace(card, max_seq_len=64)  # the catalog's card replaced: a new variant
    remade = variants.of(replaced, "float16")
    assert remade is not half and remade.max_seq_len == 64 and variants.get(half.id) is remade

