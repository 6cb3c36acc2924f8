"""The fused dense op (``layers.Dense``'s hot path): value and gradients, twice."""

import numpy as np
import pytest

import tapefit as tp
from tapefit.core.ops.nn import dense

check = tp.testing.check_gradients
rng = np.random.default_rng(0)
X = rng.standard_normal((5, 4))
W = rng.standard_normal((4, 3))
B = rng.standard_normal(3)


@pytest.mark.parametrize("relu", [False, True])
def test_dense_value(relu):
    x, w, b = (tp.constant(a.astype(np.float32)) for a in (X, W, B))
    want = X.astype(np.float32) @ W.astype(np.float32) + B.astype(np.float32)
    if relu:
        want = np.maximum(want, 0)
    np.testing.assert_allclose(dense(x, w, b, relu=relu).numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        dense(x, w, relu=relu).numpy(), np.maximum(X @ W, 0) if relu else X @ W, rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("order", [1, 2])
def test_dense_gradients(relu, order):
    check(lambda x, w, b: dense(x, w, b, relu=relu), X, W, B, order=order)
    check(lambda x, w: dense(x, w, relu=relu), X, W, order=order)


def test_dense_gradient_skips_unwatched_inputs():
    x = tp.constant(X.astype(np.float32))
    w = tp.Variable(W.astype(np.float32))
    with tp.GradientTape() as tape:
        y = dense(x, w, relu=True)
    (op,) = tape._entries
    assert op.needs_grad == (False, True)
    assert tape.gradient(y, [x, w])[0] is None


def test_dense_layer_matches_the_unfused_ops():
    layer = tp.layers.Dense(3, activation="relu")
    x = tp.constant(X.astype(np.float32))
    with tp.GradientTape(persistent=True) as tape:
        tape.watch(x)
        fused = layer(x)
        plain = tp.nn.relu(tp.matmul(x, layer.kernel) + layer.bias)
    assert tape._entries[0].type == "Dense"
    np.testing.assert_allclose(fused.numpy(), plain.numpy(), rtol=1e-6)
    for a, b in zip(
        tape.gradient(fused, [x, layer.kernel, layer.bias]),
        tape.gradient(plain, [x, layer.kernel, layer.bias]),
    ):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
