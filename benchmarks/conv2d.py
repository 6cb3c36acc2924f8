"""Conv2D forward + backward: tapefit on a tape against plain-NumPy reference code.

The case is a first conv layer on MNIST-sized images: batch 64, 28x28x1 -> 32 filters
3x3, stride 1, SAME padding, float32. tapefit records ``tp.nn.conv2d`` on a tape and
asks for the gradient of ``sum(y * dy)`` with respect to the input and the filters.
The two NumPy references compute the same three results (output, input gradient,
filter gradient) with no framework at all:

* ``im2col + matmul``: copy the windows into a (N*H*W, 9*C) matrix, one matmul forward,
  one for the filter gradient, one plus a scatter-add of the 9 taps for the input gradient;
* ``sliding_window_view + einsum``: ``np.einsum`` over the strided window view forward
  and for the filter gradient, the same scatter-add for the input gradient.

Prints the median milliseconds of each and the ratio tapefit / reference. No asserts.

    python benchmarks/conv2d.py [--batch 64] [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

import tapefit as tp


def _padded(x: np.ndarray) -> np.ndarray:
    return np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))  # SAME for a 3x3 filter at stride 1


def _input_grad_from_columns(dcols: np.ndarray, x_shape: tuple[int, ...]) -> np.ndarray:
    """Adds the (N, H, W, 3, 3, C) window gradients back into the padded image, then crops it."""
    n, h, w, c = x_shape
    dxp = np.zeros((n, h + 2, w + 2, c), dcols.dtype)
    for i in range(3):
        for j in range(3):
            dxp[:, i : i + h, j : j + w] += dcols[:, :, :, i, j]
    return dxp[:, 1:-1, 1:-1]


def numpy_im2col(x: np.ndarray, w: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, ...]:
    n, h, wd, c = x.shape
    o = w.shape[3]
    windows = sliding_window_view(_padded(x), (3, 3), axis=(1, 2))  # N, H, W, C, 3, 3
    cols = windows.transpose(0, 1, 2, 4, 5, 3).reshape(-1, 9 * c)
    w2 = w.reshape(9 * c, o)
    y = (cols @ w2).reshape(n, h, wd, o)
    dy2 = dy.reshape(-1, o)
    dw = (cols.T @ dy2).reshape(w.shape)
    dx = _input_grad_from_columns((dy2 @ w2.T).reshape(n, h, wd, 3, 3, c), x.shape)
    return y, dx, dw


def numpy_einsum(x: np.ndarray, w: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, ...]:
    windows = sliding_window_view(_padded(x), (3, 3), axis=(1, 2))  # N, H, W, C, 3, 3
    y = np.einsum("nhwcij,ijco->nhwo", windows, w, optimize=True)
    dw = np.einsum("nhwcij,nhwo->ijco", windows, dy, optimize=True)
    dx = _input_grad_from_columns(np.einsum("nhwo,ijco->nhwijc", dy, w, optimize=True), x.shape)
    return y, dx, dw


def tapefit_conv(x: tp.Tensor, w: tp.Variable, dy: tp.Tensor) -> tuple[np.ndarray, ...]:
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = tp.nn.conv2d(x, w, 1, "SAME")
    dx, dw = tape.gradient(y, [x, w], output_gradients=dy)
    return y.numpy(), dx.numpy(), dw.numpy()


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, 28, 28, 1)).astype(np.float32)
    w = (rng.standard_normal((3, 3, 1, 32)) * 0.3).astype(np.float32)
    dy = rng.standard_normal((args.batch, 28, 28, 32)).astype(np.float32)
    xt, wv, dyt = tp.constant(x), tp.Variable(w), tp.constant(dy)

    # All three compute the same output and gradients (checked once, not timed).
    reference = numpy_im2col(x, w, dy)
    for name, got in (("einsum", numpy_einsum(x, w, dy)), ("tapefit", tapefit_conv(xt, wv, dyt))):
        worst = max(float(np.max(np.abs(a - b))) for a, b in zip(got, reference))
        print(f"max |{name} - im2col| over output and gradients: {worst:.2e}")

    print(
        f"Conv2D 3x3 SAME, {args.batch}x28x28x1 -> 32, float32, forward + backward (median of {args.repeats}):"
    )
    t_tapefit = median_ms(lambda: tapefit_conv(xt, wv, dyt), args.repeats)
    print(f"  tapefit (tape, grads for input and filters)   {t_tapefit:8.2f} ms")
    for name, fn in (
        ("numpy im2col + matmul", numpy_im2col),
        ("numpy sliding_window_view + einsum", numpy_einsum),
    ):
        t = median_ms(lambda fn=fn: fn(x, w, dy), args.repeats)
        print(f"  {name:<44}  {t:8.2f} ms   tapefit / this = {t_tapefit / t:.2f}")


if __name__ == "__main__":
    main()
