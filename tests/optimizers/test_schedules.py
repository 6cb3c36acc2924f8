"""Learning-rate schedules: Keras 3's formulas at chosen steps, configs and errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import tapefit as tp
from tapefit.optimizers import schedules

STEPS = [0, 1, 5, 10, 15, 20, 35]


@pytest.mark.parametrize("staircase", [False, True])
def test_exponential_decay(staircase):
    s = schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5, staircase=staircase)
    for step in STEPS:
        p = step // 10 if staircase else step / 10
        assert s(step) == pytest.approx(0.1 * 0.5**p, rel=1e-12), step


def test_piecewise_constant_decay_boundaries_are_inclusive_on_the_left_interval():
    s = schedules.PiecewiseConstantDecay([10, 20], [1.0, 0.5, 0.1])
    expected = {0: 1.0, 10: 1.0, 11: 0.5, 20: 0.5, 21: 0.1, 1000: 0.1}
    assert {step: s(step) for step in expected} == expected


def test_cosine_decay():
    s = schedules.CosineDecay(0.2, decay_steps=20, alpha=0.1)
    for step in STEPS:
        fraction = min(step, 20) / 20
        expected = 0.2 * (0.9 * 0.5 * (1 + math.cos(math.pi * fraction)) + 0.1)
        assert s(step) == pytest.approx(expected, rel=1e-12), step
    assert s(0) == pytest.approx(0.2) and s(1000) == pytest.approx(0.02)


def test_cosine_decay_with_warmup():
    s = schedules.CosineDecay(0.0, decay_steps=20, warmup_target=0.4, warmup_steps=10)
    for step in STEPS:
        if step < 10:
            expected = 0.4 * step / 10
        else:
            fraction = (min(step, 30) - 10) / 20
            expected = 0.4 * 0.5 * (1 + math.cos(math.pi * fraction))
        assert s(step) == pytest.approx(expected, rel=1e-12, abs=1e-15), step
    assert s(10) == pytest.approx(0.4)


@pytest.mark.parametrize("power", [1.0, 0.5, 2.0])
def test_polynomial_decay(power):
    s = schedules.PolynomialDecay(0.1, decay_steps=20, end_learning_rate=0.01, power=power)
    for step in STEPS:
        expected = 0.09 * (1 - min(step, 20) / 20) ** power + 0.01
        assert s(step) == pytest.approx(expected, rel=1e-12), step


def test_polynomial_decay_cycle():
    s = schedules.PolynomialDecay(0.1, decay_steps=10, end_learning_rate=0.0, cycle=True)
    # Steps 0..10 decay over 10 steps; 11..20 over 20 (the next multiple); 25 over 30.
    expected = {0: 0.1, 5: 0.05, 10: 0.0, 15: 0.1 * (1 - 15 / 20), 20: 0.0, 25: 0.1 * (1 - 25 / 30)}
    for step, value in expected.items():
        assert s(step) == pytest.approx(value, abs=1e-15), step


def test_steps_may_be_tensors_and_numpy_scalars():
    s = schedules.ExponentialDecay(1.0, 2, 0.5)
    assert s(tp.Variable(np.int64(4), trainable=False)) == s(np.int64(4)) == s(4) == 0.25
    opt = tp.optimizers.SGD(s)
    assert s(opt.iterations) == 1.0
    with pytest.raises(TypeError, match="step must be a number"):
        s("4")


SCHEDULES = [
    schedules.ExponentialDecay(0.1, 10, 0.9, staircase=True),
    schedules.PiecewiseConstantDecay([5, 10], [0.3, 0.2, 0.1]),
    schedules.CosineDecay(0.1, 100, alpha=0.05, warmup_target=0.5, warmup_steps=7),
    schedules.PolynomialDecay(0.1, 50, 0.001, power=2.0, cycle=True),
]


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: type(s).__name__)
def test_config_round_trips(schedule):
    config = json.loads(json.dumps(schedules.serialize(schedule)))
    assert config["type"] in {
        "exponential_decay",
        "piecewise_constant_decay",
        "cosine_decay",
        "polynomial_decay",
    }
    again = schedules.get(config)
    assert type(again) is type(schedule)
    assert [again(s) for s in range(0, 120, 7)] == [schedule(s) for s in range(0, 120, 7)]
    assert type(schedule).from_config(schedule.get_config()).get_config() == schedule.get_config()
    assert schedules.get(schedule) is schedule


def test_config_accepts_class_names_and_keras_form():
    assert isinstance(
        schedules.get({"type": "CosineDecay", "initial_learning_rate": 0.1, "decay_steps": 5}),
        schedules.CosineDecay,
    )
    keras_form = {
        "class_name": "ExponentialDecay",
        "config": {"initial_learning_rate": 1.0, "decay_steps": 1, "decay_rate": 0.5},
    }
    assert schedules.get(keras_form)(2) == 0.25
    path = {
        "type": "tapefit.optimizers.schedules:PolynomialDecay",
        "initial_learning_rate": 1.0,
        "decay_steps": 4,
    }
    assert isinstance(schedules.get(path), schedules.PolynomialDecay)


@pytest.mark.parametrize(
    "config, message",
    [
        (
            {"type": "cosine"},
            "unknown learning-rate schedule 'cosine'; known: cosine_decay, exponential_decay",
        ),
        ({"initial_learning_rate": 0.1}, "needs a 'type' key"),
        (
            {"type": "cosine_decay", "initial_learning_rate": 0.1, "decay_steps": 5, "warmup": 3},
            "'warmup'.*it accepts",
        ),
        ({"type": "no.such.module:Thing"}, "'no.such.module:Thing' does not import: ModuleNotFoundError"),
    ],
)
def test_config_errors(config, message):
    with pytest.raises(ValueError, match=message):
        schedules.get(config)


def test_get_rejects_other_types():
    with pytest.raises(TypeError, match="known types: cosine_decay"):
        schedules.get("cosine_decay")


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: schedules.ExponentialDecay(0.1, 0, 0.5), r"`decay_steps` must be in \(0, inf\]"),
        (lambda: schedules.CosineDecay(0.1, -5), r"`decay_steps` must be in \(0, inf\]"),
        (lambda: schedules.PolynomialDecay(0.1, 0), r"`decay_steps` must be in \(0, inf\]"),
        (lambda: schedules.PiecewiseConstantDecay([1, 2], [0.1, 0.2]), "one more entry than `boundaries`"),
        (lambda: schedules.PiecewiseConstantDecay([2, 1], [0.1, 0.2, 0.3]), "non-decreasing"),
        (lambda: schedules.CosineDecay(0.1, 5, warmup_steps=-1), "`warmup_steps` must be in"),
    ],
)
def test_bad_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make()
