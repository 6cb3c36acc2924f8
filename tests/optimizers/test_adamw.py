"""AdamW: decoupled weight decay, then the Adam step, against float64 NumPy; convergence."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp


def adamw_reference(weight_decay: float = 0.004, beta_1: float = 0.9, beta_2: float = 0.999, amsgrad=False):
    def step(w, g, state, lr, t):
        w = w - lr * weight_decay * w
        m = state.get("momentum", np.zeros_like(w)) * beta_1 + (1 - beta_1) * g
        v = state.get("velocity", np.zeros_like(w)) * beta_2 + (1 - beta_2) * g * g
        state["momentum"], state["velocity"] = m, v
        if amsgrad:
            v = state["velocity_hat"] = np.maximum(state.get("velocity_hat", 0.0), v)
        m_hat, v_hat = m / (1 - beta_1**t), v / (1 - beta_2**t)  # the textbook form of the same step
        return w - lr * m_hat / (np.sqrt(v_hat) + 1e-7 / np.sqrt(1 - beta_2**t))

    return step


HYPER = {
    "default_decay": {},
    "strong_decay": {"weight_decay": 0.1},
    "amsgrad": {"weight_decay": 0.1, "amsgrad": True, "beta_2": 0.5},
}


@pytest.mark.parametrize("hyper", HYPER.values(), ids=HYPER.keys())
def test_matches_formula(check_steps, hyper):
    check_steps(tp.optimizers.AdamW(0.1, **hyper), adamw_reference(**hyper), lambda step: 0.1)


def test_common_options(check_steps, common_option):
    options, lr_at = common_option(0.1)
    optimizer = tp.optimizers.AdamW(**options)
    decay = options.pop("weight_decay", 0.004)  # the reference applies AdamW's own decay
    check_steps(optimizer, adamw_reference(decay), lr_at, options)


def test_defaults_and_required_decay():
    opt = tp.optimizers.AdamW()
    assert (opt.learning_rate, opt.weight_decay, opt.beta_1, opt.beta_2, opt.epsilon) == (
        0.001,
        0.004,
        0.9,
        0.999,
        1e-7,
    )
    assert opt.name == "adamw"
    with pytest.raises(ValueError, match="weight_decay"):
        tp.optimizers.AdamW(weight_decay=None)


def test_exclude_from_weight_decay():
    kernel, bias, other = (
        tp.Variable([1.0, 2.0], name="kernel"),
        tp.Variable([1.0], name="dense/bias"),
        tp.Variable([3.0]),
    )
    opt = tp.optimizers.AdamW(0.1, weight_decay=0.5)
    opt.exclude_from_weight_decay(var_list=[other], var_names=["bias"])
    zero = [np.zeros(2, np.float32), np.zeros(1, np.float32), np.zeros(1, np.float32)]
    opt.apply_gradients(zip(zero, [kernel, bias, other]))  # zero gradients: only the decay moves weights
    np.testing.assert_allclose(kernel.numpy(), [0.95, 1.9])
    np.testing.assert_array_equal(bias.numpy(), [1.0])
    np.testing.assert_array_equal(other.numpy(), [3.0])


def test_minimizes_rosenbrock(rosenbrock):
    # Decoupled decay moves the minimum by about lr * weight_decay; keep it below the tolerance.
    rosenbrock(tp.optimizers.AdamW(0.05, weight_decay=1e-5), 2000)


def test_minimizes_linear_regression(linear_regression):
    linear_regression(tp.optimizers.AdamW(0.05, weight_decay=1e-5), 300)
