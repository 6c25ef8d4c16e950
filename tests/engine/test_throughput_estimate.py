"""Admission's tokens/s per model (sie_engine/admission.py `Throughput`) from the batches it has
seen: a small batch is a loose lower bound, a full batch the measure, a decode step the
generating model's own rate.

The regression: CI once refused a Qdrant upload to the tiny ColBERT, 429 "the queue holds about
178 s of work, more than the 30 s this server admits", because the model's only measure was one
short probe text whose batch had taken tens of milliseconds on a busy box, about 200 tokens/s.
"""

from __future__ import annotations

import pytest

from sie_engine.admission import EWMA_WEIGHT, PRIOR_FLOPS, Throughput, WaitAdmission
from sie_engine.errors import Overloaded

MODEL = "test/colbert"
PARAMS = 5e6  # a tiny model: the prior is 40,000 tokens/s on the CPU
PRIOR = PRIOR_FLOPS["cpu"] / (2 * PARAMS)
BUDGET = 8192  # its batch budget (tokens)


def throughput() -> Throughput:
    return Throughput("cpu", lambda model_id: PARAMS)


def test_a_slow_small_batch_is_read_as_all_fixed_cost_up_to_the_prior():
    rates = throughput()
    assert rates.rate(MODEL) == pytest.approx(PRIOR) and not rates.measured(MODEL)
    rates.observe(MODEL, 10, 0.5, full=False, budget=BUDGET)  # one short text in half a second
    assert rates.measured(MODEL)  # the cold allowance of a preloaded model ends here
    assert rates.rate(MODEL) == pytest.approx(BUDGET / 2 / 0.5)  # not 10 / 0.5
    rates.observe(MODEL, 10, 0.01, full=False, budget=BUDGET)  # faster: all fixed cost would pass the prior
    assert rates.rate(MODEL) == pytest.approx(PRIOR)


def test_a_small_batch_faster_than_the_prior_is_taken_as_it_is():
    rates = throughput()
    rates.observe(MODEL, 4000, 0.05, full=False, budget=BUDGET)
    assert rates.rate(MODEL) == pytest.approx(80_000)


def test_the_first_full_batch_replaces_the_guess_and_later_ones_average():
    rates = throughput()
    rates.observe(MODEL, 10, 0.001, full=False, budget=BUDGET)
    rates.observe(MODEL, 8000, 1.0, budget=BUDGET)
    assert rates.rate(MODEL) == pytest.approx(8000)
    rates.observe(MODEL, 8000, 0.5, budget=BUDGET)
    assert rates.rate(MODEL) == pytest.approx((1 - EWMA_WEIGHT) * 8000 + EWMA_WEIGHT * 16000)


def test_after_a_full_batch_a_small_one_only_raises_the_rate():
    rates = throughput()
    rates.observe(MODEL, 8000, 1.0, budget=BUDGET)
    rates.observe(MODEL, 10, 1.0, full=False, budget=BUDGET)  # a stall: says nothing of full batches
    assert rates.rate(MODEL) == pytest.approx(8000)
    rates.observe(MODEL, 3000, 0.25, full=False, budget=BUDGET)
    assert rates.rate(MODEL) == pytest.approx(12000)


def test_side_by_side_batches_add_up():
    rates = throughput()
    rates.observe(MODEL, 8000, 2.0, side_by_side=2, budget=BUDGET)
    assert rates.rate(MODEL) == pytest.approx(8000)


def test_a_decode_step_is_the_generating_models_rate_before_its_image_batches_guesses():
    """Decoding is far slower per token than the model's size says: its steps decide, not an image
    batch read as all fixed cost."""
    rates = throughput()
    rates.observe(MODEL, 2, 0.1, full=False, budget=BUDGET)  # a page through the vision tower
    rates.observe(MODEL, 16, 0.4, full=False)  # a decode step of 16 rows
    rates.observe(MODEL, 8, 0.4, full=False)  # a slower one does not lower it
    assert rates.rate(MODEL) == pytest.approx(40)


def test_an_upload_after_a_slow_probe_is_admitted():
    """The CI case: a probe text measured the model on a busy box, then an upload of a few thousand
    tokens comes; at 200 tokens/s it held 178 s of work and was refused."""
    rates = throughput()
    admission = WaitAdmission(30.0, rates)
    rates.observe(MODEL, 10, 0.05, full=False, budget=BUDGET)
    first = admission.admit(MODEL, 12_000, {})
    second = admission.admit(MODEL, 12_000, {MODEL: 12_000})
    first.release()
    second.release()


def test_what_a_measured_rate_cannot_serve_in_time_is_still_refused():
    rates = throughput()
    admission = WaitAdmission(30.0, rates)
    rates.observe(MODEL, 8000, 1.0, budget=BUDGET)  # 8,000 tokens/s, measured
    with pytest.raises(Overloaded):
        admission.admit(MODEL, 8000, {MODEL: 300_000})
