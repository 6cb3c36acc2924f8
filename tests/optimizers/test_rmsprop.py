"""RMSprop: the Keras 3 update rule against float64 NumPy, and convergence."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp
from tapefit.optimizers import schedules


def rmsprop_reference(rho: float = 0.9, momentum: float = 0.0, epsilon: float = 1e-7, centered: bool = False):
    def step(w, g, state, lr, t):
        v = rho * state.get("velocity", np.zeros_like(w)) + (1 - rho) * g * g
        state["velocity"] = v
        if centered:
            mg = rho * state.get("average_gradient", np.zeros_like(w)) + (1 - rho) * g
            state["average_gradient"] = mg
            denominator = v - mg * mg + epsilon
        else:
            denominator = v + epsilon
        increment = lr * g / np.sqrt(denominator)
        if momentum > 0:
            state["momentum"] = momentum * state.get("momentum", np.zeros_like(w)) + increment
            return w - state["momentum"]
        return w - increment

    return step


HYPER = {
    "defaults": {},
    "rho_epsilon": {"rho": 0.5, "epsilon": 1e-2},
    "momentum": {"momentum": 0.9},
    "centered": {"centered": True},
    "centered_momentum": {"centered": True, "momentum": 0.5},
}


@pytest.mark.parametrize("hyper", HYPER.values(), ids=HYPER.keys())
def test_matches_formula(check_steps, hyper):
    check_steps(tp.optimizers.RMSprop(0.1, **hyper), rmsprop_reference(**hyper), lambda step: 0.1)


def test_common_options(check_steps, common_option):
    options, lr_at = common_option(0.1)
    optimizer = tp.optimizers.RMSprop(momentum=0.5, centered=True, **options)
    check_steps(optimizer, rmsprop_reference(momentum=0.5, centered=True), lr_at, options)


def test_defaults_match_keras():
    opt = tp.optimizers.RMSprop()
    assert (opt.learning_rate, opt.rho, opt.momentum, opt.epsilon, opt.centered) == (
        0.001,
        0.9,
        0.0,
        1e-7,
        False,
    )
    assert opt.get_slot_names() == ["velocity"]
    assert tp.optimizers.RMSprop(momentum=0.1, centered=True).get_slot_names() == [
        "velocity",
        "momentum",
        "average_gradient",
    ]


# A constant rate leaves RMSprop hopping about the minimum at the scale of the rate: decay it.
@pytest.mark.parametrize(
    "make, max_steps",
    [
        (lambda: tp.optimizers.RMSprop(schedules.ExponentialDecay(0.005, 500, 0.1), momentum=0.9), 800),
        (
            lambda: tp.optimizers.RMSprop(
                schedules.ExponentialDecay(0.005, 500, 0.1), momentum=0.9, centered=True
            ),
            800,
        ),
    ],
    ids=["momentum", "centered"],
)
def test_minimizes_rosenbrock(rosenbrock, make, max_steps):
    rosenbrock(make(), max_steps)


@pytest.mark.parametrize(
    "make, max_steps",
    [
        (lambda: tp.optimizers.RMSprop(schedules.ExponentialDecay(0.05, 50, 0.5)), 400),
        (lambda: tp.optimizers.RMSprop(schedules.ExponentialDecay(0.01, 50, 0.5), momentum=0.9), 300),
        (lambda: tp.optimizers.RMSprop(schedules.ExponentialDecay(0.05, 50, 0.5), centered=True), 400),
    ],
    ids=["plain", "momentum", "centered"],
)
def test_minimizes_linear_regression(linear_regression, make, max_steps):
    linear_regression(make(), max_steps)
