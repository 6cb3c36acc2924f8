"""Adam: the Keras 3 update rule against float64 NumPy, and convergence."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp
from tapefit.optimizers import schedules


def adam_reference(beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-7, amsgrad: bool = False):
    def step(w, g, state, lr, t):
        m = state.get("momentum", np.zeros_like(w))
        v = state.get("velocity", np.zeros_like(w))
        m = m + (1 - beta_1) * (g - m)
        v = v + (1 - beta_2) * (g * g - v)
        state["momentum"], state["velocity"] = m, v
        if amsgrad:
            v = np.maximum(state.get("velocity_hat", np.zeros_like(w)), v)
            state["velocity_hat"] = v
        alpha = lr * np.sqrt(1 - beta_2**t) / (1 - beta_1**t)
        return w - alpha * m / (np.sqrt(v) + epsilon)

    return step


HYPER = {
    "defaults": {},
    "betas_epsilon": {"beta_1": 0.5, "beta_2": 0.8, "epsilon": 1e-2},
    "amsgrad": {"amsgrad": True, "beta_2": 0.5},
}


@pytest.mark.parametrize("hyper", HYPER.values(), ids=HYPER.keys())
def test_matches_formula(check_steps, hyper):
    states = check_steps(tp.optimizers.Adam(0.1, **hyper), adam_reference(**hyper), lambda step: 0.1)
    if hyper.get("amsgrad"):  # the max must have mattered, or the test shows nothing
        assert np.any(states[0]["velocity_hat"] > states[0]["velocity"] * (1 + 1e-3))


def test_common_options(check_steps, common_option):
    options, lr_at = common_option(0.1)
    check_steps(tp.optimizers.Adam(**options), adam_reference(), lr_at, options)


def test_defaults_match_keras():
    opt = tp.optimizers.Adam()
    config = opt.get_config()
    assert (config["learning_rate"], config["beta_1"], config["beta_2"], config["epsilon"]) == (
        0.001,
        0.9,
        0.999,
        1e-7,
    )
    assert config["amsgrad"] is False and opt.name == "adam"
    assert opt.get_slot_names() == ["momentum", "velocity"]
    assert tp.optimizers.Adam(amsgrad=True).get_slot_names() == ["momentum", "velocity", "velocity_hat"]


@pytest.mark.parametrize("name, value", [("beta_1", 1.0), ("beta_2", -0.1), ("epsilon", -1e-8)])
def test_hyperparameter_out_of_range(name, value):
    with pytest.raises(ValueError, match=f"`{name}` must be in"):
        tp.optimizers.Adam(**{name: value})


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float16, 2e-3)])
def test_other_float_dtypes_keep_their_dtype(dtype, rtol):
    w = tp.Variable(np.array([1.0, -2.0], dtype))
    opt = tp.optimizers.Adam(0.1)
    g = np.array([0.5, 0.25], dtype)
    opt.apply_gradients([(g, w)])
    assert w.dtype == dtype and opt.get_slot(w, "velocity").dtype == dtype
    expected = adam_reference()(np.array([1.0, -2.0]), g.astype(np.float64), {}, 0.1, 1)
    np.testing.assert_allclose(w.numpy().astype(np.float64), expected, rtol=rtol)


@pytest.mark.parametrize(
    "make, max_steps",
    [(lambda: tp.optimizers.Adam(0.05), 2000), (lambda: tp.optimizers.Adam(0.1, amsgrad=True), 2000)],
    ids=["adam", "amsgrad"],
)
def test_minimizes_rosenbrock(rosenbrock, make, max_steps):
    rosenbrock(make(), max_steps)


@pytest.mark.parametrize(
    "make, max_steps",
    [
        (lambda: tp.optimizers.Adam(0.05), 300),
        (lambda: tp.optimizers.Adam(schedules.ExponentialDecay(0.1, 100, 0.5), amsgrad=True), 300),
    ],
    ids=["adam", "amsgrad_with_schedule"],
)
def test_minimizes_linear_regression(linear_regression, make, max_steps):
    linear_regression(make(), max_steps)
