"""Adagrad: the Keras 3 update rule against float64 NumPy, and convergence."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp


def adagrad_reference(initial_accumulator_value: float = 0.1, epsilon: float = 1e-7):
    def step(w, g, state, lr, t):
        acc = state.get("accumulator", np.full_like(w, initial_accumulator_value)) + g * g
        state["accumulator"] = acc
        return w - lr * g / np.sqrt(acc + epsilon)

    return step


HYPER = {
    "defaults": {},
    "accumulator_epsilon": {"initial_accumulator_value": 1.0, "epsilon": 1e-2},
    "zero_accumulator": {"initial_accumulator_value": 0.0},
}


@pytest.mark.parametrize("hyper", HYPER.values(), ids=HYPER.keys())
def test_matches_formula(check_steps, hyper):
    check_steps(tp.optimizers.Adagrad(0.1, **hyper), adagrad_reference(**hyper), lambda step: 0.1)


def test_common_options(check_steps, common_option):
    options, lr_at = common_option(0.1)
    check_steps(tp.optimizers.Adagrad(**options), adagrad_reference(), lr_at, options)


def test_defaults_match_keras():
    opt = tp.optimizers.Adagrad()
    assert (opt.learning_rate, opt.initial_accumulator_value, opt.epsilon, opt.name) == (
        0.001,
        0.1,
        1e-7,
        "adagrad",
    )
    w = tp.Variable([1.0, 2.0])
    opt.build([w])
    np.testing.assert_array_equal(opt.get_slot(w, "accumulator").numpy(), np.full(2, 0.1, np.float32))


def test_negative_accumulator_rejected():
    with pytest.raises(ValueError, match="initial_accumulator_value"):
        tp.optimizers.Adagrad(initial_accumulator_value=-1.0)


def test_minimizes_rosenbrock(rosenbrock):
    # The huge first gradients (~1900) fill the accumulator and slow Adagrad down for good;
    # clipping them keeps the steps reasonable.
    rosenbrock(tp.optimizers.Adagrad(1.0, clipnorm=10.0), 14000)


def test_minimizes_linear_regression(linear_regression):
    linear_regression(tp.optimizers.Adagrad(0.5), 150)
