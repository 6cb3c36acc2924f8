"""An LSTM layer's forward and backward pass: tapefit against a handwritten NumPy LSTM.

Batch 32, 50 steps, 64 inputs, 128 units, float32; the loss is the sum of the squared outputs
of every step. The NumPy LSTM is written as an expert would (the input projection of all steps
in one product, the four gates in one recurrent product per step, backpropagation through
time by hand) and is checked to give tapefit's gradients. PyTorch's ``nn.LSTM`` (the same
weights, checked to give the same loss) runs as a reference when installed, after the
tapefit/NumPy rounds, against tapefit directly. Within each phase the two systems alternate
in a new seeded order every round; each ratio is the median of the per-round ratios.

    python benchmarks/lstm_step.py [--pairs 15]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable

import numpy as np

import tapefit as tp

# PyTorch's OpenMP threads spin after each op by default and take the cores the next system in
# the alternation needs; passive waiting is fair to it (as in python -m benchmarks).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

BATCH, STEPS, FEATURES, UNITS = 32, 50, 64, 128


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def numpy_lstm(
    x: np.ndarray, kernel: np.ndarray, recurrent: np.ndarray, bias: np.ndarray
) -> list[np.ndarray]:
    """Forward and backward by hand; returns the gradients of (x, kernel, recurrent, bias)."""
    batch, steps, features = x.shape
    units = recurrent.shape[0]
    xw = (x.reshape(-1, features) @ kernel).reshape(batch, steps, 4 * units) + bias
    hs = np.zeros((steps + 1, batch, units), np.float32)
    cs = np.zeros((steps + 1, batch, units), np.float32)
    gates = np.empty((steps, batch, 4 * units), np.float32)
    for t in range(steps):
        z = xw[:, t] + hs[t] @ recurrent
        z[:, : 2 * units] = sigmoid(z[:, : 2 * units])
        z[:, 2 * units : 3 * units] = np.tanh(z[:, 2 * units : 3 * units])
        z[:, 3 * units :] = sigmoid(z[:, 3 * units :])
        gates[t] = z
        i, f, g, o = z[:, :units], z[:, units : 2 * units], z[:, 2 * units : 3 * units], z[:, 3 * units :]
        cs[t + 1] = f * cs[t] + i * g
        hs[t + 1] = o * np.tanh(cs[t + 1])
    dz = np.empty((steps, batch, 4 * units), np.float32)
    dh_next = np.zeros((batch, units), np.float32)
    dc_next = np.zeros((batch, units), np.float32)
    d_recurrent = np.zeros_like(recurrent)
    for t in range(steps - 1, -1, -1):
        i, f, g, o = np.split(gates[t], 4, axis=1)
        dh = 2.0 * hs[t + 1] + dh_next
        tanh_c = np.tanh(cs[t + 1])
        dc = dh * o * (1.0 - tanh_c**2) + dc_next
        dz[t, :, :units] = dc * g * i * (1.0 - i)
        dz[t, :, units : 2 * units] = dc * cs[t] * f * (1.0 - f)
        dz[t, :, 2 * units : 3 * units] = dc * i * (1.0 - g**2)
        dz[t, :, 3 * units :] = dh * tanh_c * o * (1.0 - o)
        d_recurrent += hs[t].T @ dz[t]
        dh_next = dz[t] @ recurrent.T
        dc_next = dc * f
    flat_dz = dz.transpose(1, 0, 2).reshape(-1, 4 * units)
    d_kernel = x.reshape(-1, features).T @ flat_dz
    dx = (flat_dz @ kernel.T).reshape(batch, steps, features)
    return [dx, d_kernel, d_recurrent, flat_dz.sum(axis=0)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=15, help="rounds of each phase (default 15)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, STEPS, FEATURES), dtype=np.float32) * np.float32(0.5)
    tp.random.set_seed(0)
    layer = tp.layers.LSTM(UNITS, return_sequences=True)
    layer(tp.constant(x))
    weights = [v.numpy() for v in (layer.kernel, layer.recurrent_kernel, layer.bias)]
    xv = tp.Variable(x)

    def tapefit_step() -> list[tp.Tensor]:
        with tp.GradientTape() as tape:
            loss = tp.reduce_sum(tp.square(layer(xv)))
        return tape.gradient(loss, [xv, layer.kernel, layer.recurrent_kernel, layer.bias])

    mine = numpy_lstm(x, *weights)
    for ours, theirs, name in zip(tapefit_step(), mine, ("x", "kernel", "recurrent_kernel", "bias")):
        np.testing.assert_allclose(ours.numpy(), theirs, rtol=2e-3, atol=2e-3, err_msg=name)

    def numpy_step() -> None:
        numpy_lstm(x, *weights)

    # PyTorch's thread pool slows whatever runs after it in the same process (measured here:
    # tapefit / NumPy 1.2x alone, 1.4-1.6x with PyTorch in the rotation), so the target pair
    # runs first, alone. PyTorch then alternates with tapefit itself: a ratio through the NumPy
    # LSTM took in the drift between the two phases (NumPy's time moved 30% between them).
    times = alternate({"tapefit": tapefit_step, "numpy": numpy_step}, args.pairs)
    report(times, "tapefit", "numpy", " (target <= 1.5)")
    torch_step = make_torch_step(x, weights, float(tp.reduce_sum(tp.square(layer(xv)))))
    if torch_step is None:
        print("torch: skipped (not installed; pip install 'tapefit[bench]')")
        return
    report(alternate({"tapefit": tapefit_step, "torch": torch_step}, args.pairs), "tapefit", "torch", "")


def make_torch_step(x: np.ndarray, weights: list[np.ndarray], loss: float) -> Callable[[], object] | None:
    """``torch.nn.LSTM``'s forward and backward on ``x`` with the layer's ``weights`` (Keras's
    gate order is PyTorch's; ``bias_hh`` is zero), checked to give tapefit's ``loss``; ``None``
    without PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    kernel, recurrent, bias = weights
    module = torch.nn.LSTM(FEATURES, UNITS, batch_first=True)
    with torch.no_grad():
        module.weight_ih_l0.copy_(torch.from_numpy(kernel.T.copy()))
        module.weight_hh_l0.copy_(torch.from_numpy(recurrent.T.copy()))
        module.bias_ih_l0.copy_(torch.from_numpy(bias))
        module.bias_hh_l0.zero_()
    xt = torch.from_numpy(x.copy()).requires_grad_()

    def torch_step() -> object:
        out, _ = module(xt)
        total = (out**2).sum()
        total.backward()
        module.zero_grad(set_to_none=True)
        xt.grad = None
        return total.detach()

    np.testing.assert_allclose(float(torch_step()), loss, rtol=1e-4, err_msg="torch's loss")
    return torch_step


def alternate(fns: dict[str, Callable[[], object]], pairs: int) -> dict[str, list[float]]:
    """Seconds per call of each function, the functions taking turns, in a new (seeded) order
    each round, so that what one leaves behind does not always fall on the same other."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    names, order = list(fns), random.Random(0)
    for _ in range(pairs):
        order.shuffle(names)
        for name in names:
            start = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - start)
    return times


def report(times: dict[str, list[float]], a: str, b: str, target: str) -> float:
    for name in (a, b):
        print(f"{name:8s} {statistics.median(times[name]) * 1e3:8.1f} ms per forward + backward")
    ratio = statistics.median(x / y for x, y in zip(times[a], times[b]))
    print(f"{a} / {b}: {ratio:.2f}x (median of per-round ratios){target}")
    return ratio


if __name__ == "__main__":
    main()
