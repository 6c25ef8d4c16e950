"""The engine's boundary: a call is resolved once into a `Call` handed to the task, a precision is
a property of the call (its own resident model and queue, the base model's tokenizer, no catalog
entry), and the pre-admission a server makes before reading a body travels as an explicit handle."""

from __future__ import annotations

import numpy as np
import pytest

from engine_fixtures import Recorder, make_engine, tiny_cards
from sie_contract import Field, Task, register, unregister
from sie_contract.schemas import answer, obj, ref
from sie_engine.errors import InvalidRequest, Overloaded

SEEN: list = []  # the calls the probe task was handed


async def probe(engine, call):
    """A task that records the call it is handed and encodes through it."""
    SEEN.append(call)
    return await engine.run_within(call, "encode", call.card.id, {"items": call.fields["items"]})


PROBE = Task(name="probe", summary="records its call", fields=(Field("items", ref("Items"), required=True),
                                                              Field("precision", {"type": "string"})),
             served_by=("dense",), implementation=f"{__name__}:probe", answer_schema=answer("items", obj({})))


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    with make_engine(tiny_cards(tmp_path_factory.mktemp("call"), names=("a",)), Recorder()) as engine:
        yield engine


def test_precision_is_a_property_of_the_call_not_a_catalog_entry(engine):
    full = engine.encode_sync("tiny/a", ["a text", "another"])
    half = engine.encode_sync("tiny/a", ["a text", "another"], precision="bfloat16")
    assert [m.id for m in engine.models()] == ["tiny/a"] and len(engine.catalog) == 1
    assert "tiny/a@bfloat16" not in engine.catalog
    # its own resident model (batches never mix precisions), sharing the base model's tokenizer
    base, variant = engine.pool.resident("tiny/a"), engine.pool.resident("tiny/a@bfloat16")
    assert variant is not None and variant is not base and variant.dtype != base.dtype
    assert variant.tokenizer is base.tokenizer
    got = np.stack([i.dense for i in half.items])
    want = np.stack([i.dense for i in full.items])
    cosine = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cosine.min() > 0.99
    with pytest.raises(InvalidRequest) as caught:
        engine.encode_sync("tiny/a", ["x"], precision="fp8")
    assert caught.value.field == "precision"


def test_a_task_gets_one_resolved_call(engine):
    register(PROBE)
    try:
        SEEN.clear()
        result = engine.run_sync("probe", "tiny/a", ["one", "two"], precision="bfloat16", timeout=30.0)
        (call,) = SEEN
        assert call.task == "probe" and call.card.id == "tiny/a@bfloat16" and call.precision == "bfloat16"
        assert call.fields == {"items": ["one", "two"], "precision": "bfloat16"}
        assert call.reservation is not None and 0 < call.remaining() <= 30.0
        assert len(result.items) == 2  # run_within: the same model's encode, inside this call
    finally:
        unregister("probe")


def test_pre_admission_is_an_explicit_handle(tmp_path):
    with make_engine(tiny_cards(tmp_path, names=("a",)), Recorder(), max_queue_wait_s=1.0) as engine:
        handle = engine.refuse_if_overloaded()
        pending = engine.scheduler.admission.pending
        assert pending.count == 1
        engine.run_sync("encode", "tiny/a", ["x"], pre_admitted=handle)
        assert pending.count == 0  # admission decided: the handle is released
        engine.pre_admission_done(handle)  # and the server's release at the end is idempotent
        engine.pre_admission_done(None)
        assert pending.count == 0
        other = engine.refuse_if_overloaded()
        engine.pre_admission_done(other)  # a request that never reached the engine (a bad body)
        assert pending.count == 0
        assert engine.max_queue_wait_s == 1.0
        # the pre-check refuses on the last computed wait, before any body is read
        engine.scheduler.wait_s = 1e6  # seconds of queued work
        with pytest.raises(Overloaded):
            engine.refuse_if_overloaded()
        assert pending.count == 0
