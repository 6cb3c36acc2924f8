"""SGD: the Keras 3 update rule against float64 NumPy, and convergence."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp


def sgd_reference(momentum: float = 0.0, nesterov: bool = False):
    def step(w, g, state, lr, t):
        if not momentum:
            return w - lr * g
        m = momentum * state.get("momentum", np.zeros_like(w)) - lr * g
        state["momentum"] = m
        return w + (momentum * m - lr * g if nesterov else m)

    return step


@pytest.mark.parametrize(
    "hyper",
    [{}, {"momentum": 0.9}, {"momentum": 0.5, "nesterov": True}],
    ids=["plain", "momentum", "nesterov"],
)
def test_matches_formula(check_steps, hyper):
    optimizer = tp.optimizers.SGD(0.1, **hyper)
    states = check_steps(optimizer, sgd_reference(**hyper), lambda step: 0.1)
    assert bool(states[0]) == bool(hyper)  # the momentum slot exists exactly when momentum > 0


def test_common_options(check_steps, common_option):
    options, lr_at = common_option(0.1)
    optimizer = tp.optimizers.SGD(momentum=0.9, **options)
    check_steps(optimizer, sgd_reference(0.9), lr_at, options)


def test_defaults_match_keras():
    opt = tp.optimizers.SGD()
    assert (opt.learning_rate, opt.momentum, opt.nesterov, opt.name) == (0.01, 0.0, False, "SGD")
    assert opt.get_slot_names() == []
    assert tp.optimizers.SGD(momentum=0.5).get_slot_names() == ["momentum"]


@pytest.mark.parametrize("momentum", [-0.1, 1.5])
def test_momentum_out_of_range(momentum):
    with pytest.raises(ValueError, match=r"`momentum` must be in \[0, 1\]"):
        tp.optimizers.SGD(momentum=momentum)


@pytest.mark.parametrize(
    "make, max_steps",
    [
        (lambda: tp.optimizers.SGD(1e-3, momentum=0.9), 2500),
        (lambda: tp.optimizers.SGD(1e-3, momentum=0.9, nesterov=True), 2500),
    ],
    ids=["momentum", "nesterov"],
)
def test_minimizes_rosenbrock(rosenbrock, make, max_steps):
    rosenbrock(make(), max_steps)


@pytest.mark.parametrize(
    "make, max_steps",
    [
        (lambda: tp.optimizers.SGD(0.1), 150),
        (lambda: tp.optimizers.SGD(0.05, momentum=0.9), 300),
        (lambda: tp.optimizers.SGD(0.05, momentum=0.9, nesterov=True), 200),
    ],
    ids=["plain", "momentum", "nesterov"],
)
def test_minimizes_linear_regression(linear_regression, make, max_steps):
    linear_regression(make(), max_steps)
