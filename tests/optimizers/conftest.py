"""Shared checks for the optimizer tests: a float64 NumPy reference run, clipping and schedules.

Each optimizer's test file gives its update rule as ``reference(w, g, state, lr, t)`` in
float64 (``state`` holds the slots by their names); ``check_steps`` runs the optimizer on
small float32 variables with fixed gradients and compares variables and slots after each step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import tapefit as tp
from tapefit.optimizers import schedules

# Gradient sizes per step: clipping bites on the large ones, not on the small ones, and
# the drop after the second step lets AMSGrad's max(v_hat, v) differ from v.
SCALES = (2.0, 1.5, 0.2, 0.1, 1.0, 0.05)
SHAPES = ((3,), (2, 2))


def reference_clip(
    grads: list[np.ndarray],
    clipnorm: float | None = None,
    clipvalue: float | None = None,
    global_clipnorm: float | None = None,
) -> list[np.ndarray]:
    """Keras' clipping, written out in float64."""
    if clipnorm is not None:
        return [g * clipnorm / max(np.sqrt(np.sum(g * g)), clipnorm) for g in grads]
    if global_clipnorm is not None:
        norm = np.sqrt(sum(np.sum(g * g) for g in grads))
        return [g * global_clipnorm / max(norm, global_clipnorm) for g in grads]
    if clipvalue is not None:
        return [np.minimum(np.maximum(g, -clipvalue), clipvalue) for g in grads]
    return grads


Reference = Callable[[np.ndarray, np.ndarray, dict, float, int], np.ndarray]


def run_check_steps(
    optimizer: tp.optimizers.Optimizer,
    reference: Reference,
    lr_at: Callable[[int], float],
    options: dict[str, Any] | None = None,
    steps: int = len(SCALES),
) -> list[dict[str, np.ndarray]]:
    """Runs ``steps`` updates and compares with ``reference`` after each; returns the reference states.

    ``lr_at(step)`` is the learning rate of the 0-based step; ``options`` the common options
    (``weight_decay``, ``clipnorm``, ``clipvalue``, ``global_clipnorm``) the optimizer was built with.
    """
    options = options or {}
    rng = np.random.default_rng(42)
    start = [rng.normal(size=s).astype(np.float32) for s in SHAPES]
    variables = [tp.Variable(w, name=f"w{i}") for i, w in enumerate(start)]
    expected = [w.astype(np.float64) for w in start]
    states: list[dict[str, np.ndarray]] = [{} for _ in SHAPES]
    for step in range(steps):
        grads32 = [(SCALES[step] * rng.normal(size=s)).astype(np.float32) for s in SHAPES]
        optimizer.apply_gradients(zip([tp.constant(g) for g in grads32], variables))
        lr = lr_at(step)
        grads = reference_clip(
            [g.astype(np.float64) for g in grads32],
            options.get("clipnorm"),
            options.get("clipvalue"),
            options.get("global_clipnorm"),
        )
        decay = options.get("weight_decay")
        if decay:
            expected = [w - lr * decay * w for w in expected]
        expected = [reference(w, g, st, lr, step + 1) for w, g, st in zip(expected, grads, states)]
        for i, (v, w) in enumerate(zip(variables, expected)):
            assert v.dtype == np.float32
            np.testing.assert_allclose(
                v.numpy(), w, rtol=1e-5, atol=1e-6, err_msg=f"w{i} after step {step + 1}"
            )
            for name, value in states[i].items():
                slot = optimizer.get_slot(v, name)
                assert slot.dtype == np.float32, name
                np.testing.assert_allclose(
                    slot.numpy(),
                    value,
                    rtol=1e-5,
                    atol=1e-6,
                    err_msg=f"slot {name} of w{i} after step {step + 1}",
                )
    assert int(optimizer.iterations) == steps
    return states


@pytest.fixture
def check_steps() -> Callable[..., list[dict[str, np.ndarray]]]:
    """``check_steps(optimizer, reference, lr_at, options=None, steps=6)``, see ``run_check_steps``."""
    return run_check_steps


def _exponential(lr: float) -> tuple[dict[str, Any], Callable[[int], float]]:
    return {"learning_rate": schedules.ExponentialDecay(lr, 2, 0.5)}, lambda step: lr * 0.5 ** (step / 2)


def _piecewise(lr: float) -> tuple[dict[str, Any], Callable[[int], float]]:
    def lr_at(step: int) -> float:
        return lr if step <= 1 else lr / 2 if step <= 3 else lr / 10

    return {
        "learning_rate": {
            "type": "piecewise_constant_decay",
            "boundaries": [1, 3],
            "values": [lr, lr / 2, lr / 10],
        }
    }, lr_at


def _fixed(options: dict[str, Any]) -> Callable[[float], tuple[dict[str, Any], Callable[[int], float]]]:
    return lambda lr: ({"learning_rate": lr, **options}, lambda step: lr)


COMMON_OPTIONS = {
    "weight_decay": _fixed({"weight_decay": 0.05}),
    "clipnorm": _fixed({"clipnorm": 1.0}),
    "clipvalue": _fixed({"clipvalue": 0.5}),
    "global_clipnorm": _fixed({"global_clipnorm": 1.5}),
    "exponential_decay_schedule": _exponential,
    "piecewise_schedule_config": _piecewise,
}


@pytest.fixture(params=sorted(COMMON_OPTIONS))
def common_option(
    request: pytest.FixtureRequest,
) -> Callable[[float], tuple[dict[str, Any], Callable[[int], float]]]:
    """Per option of the base class: ``make(lr) -> (constructor kwargs, lr_at)``."""
    return COMMON_OPTIONS[request.param]


def _rosenbrock_grad(p: np.ndarray) -> np.ndarray:
    """Gradient of (1 - x)**2 + 100 (y - x**2)**2, written out: thousands of steps must stay cheap."""
    x, y = p
    return np.array([-2 * (1 - x) - 400 * x * (y - x * x), 200 * (y - x * x)])


def run_rosenbrock(optimizer: tp.optimizers.Optimizer, max_steps: int, tol: float = 1e-3) -> int:
    """Minimizes Rosenbrock from (-1.5, 2); asserts it gets within ``tol`` of (1, 1) in ``max_steps``
    and stays there for 20 more steps. Returns the steps taken."""
    p = tp.Variable(np.array([-1.5, 2.0]), name="p")  # float64
    for step in range(1, max_steps + 1):
        optimizer.apply_gradients([(_rosenbrock_grad(p.numpy()), p)])
        if np.max(np.abs(p.numpy() - 1.0)) < tol:
            break
    else:
        pytest.fail(f"not within {tol} of (1, 1) after {max_steps} steps: at {p.numpy()}")
    for _ in range(20):
        optimizer.apply_gradients([(_rosenbrock_grad(p.numpy()), p)])
    np.testing.assert_allclose(p.numpy(), [1.0, 1.0], atol=tol)
    return step


def run_linear_regression(optimizer: tp.optimizers.Optimizer, max_steps: int, tol: float = 1e-3) -> int:
    """Fits y = X w + b (noise-free, so the minimum is the true w, b) through the tape with
    ``minimize``; asserts it gets within ``tol`` in ``max_steps`` and stays for 10 more."""
    rng = np.random.default_rng(0)
    x_data = rng.normal(size=(64, 3)).astype(np.float32)
    w_true, b_true = np.array([1.5, -2.0, 0.5], np.float32), np.float32(0.3)
    x, y = tp.constant(x_data), tp.constant(x_data @ w_true + b_true)
    w, b = tp.Variable(tp.zeros((3, 1)), name="w"), tp.Variable(0.0, name="b")

    def loss() -> tp.Tensor:
        return tp.reduce_mean(tp.square(tp.reshape(x @ w, (-1,)) + b - y))

    def error() -> float:
        return max(np.max(np.abs(w.numpy()[:, 0] - w_true)), abs(float(b) - b_true))

    for step in range(1, max_steps + 1):
        optimizer.minimize(loss, [w, b])
        if error() < tol:
            break
    else:
        pytest.fail(
            f"not within {tol} of the solution after {max_steps} steps: w={w.numpy()[:, 0]}, b={float(b)}"
        )
    for _ in range(10):
        optimizer.minimize(loss, [w, b])
    assert error() < tol
    return step


@pytest.fixture
def rosenbrock() -> Callable[..., int]:
    """``rosenbrock(optimizer, max_steps, tol=1e-3)``, see ``run_rosenbrock``."""
    return run_rosenbrock


@pytest.fixture
def linear_regression() -> Callable[..., int]:
    """``linear_regression(optimizer, max_steps, tol=1e-3)``, see ``run_linear_regression``."""
    return run_linear_regression
