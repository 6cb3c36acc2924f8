"""Broadcasting in binary ops: values and gradients over every pair of shapes (as HIPS
autograd tests them), plus property tests that gradients come back summed to each input's shape."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

import tapefit as tp
from tapefit.core.testing import check_gradients

SHAPES = [(), (4,), (3, 4), (1, 4), (3, 1)]
PAIRS = list(itertools.product(SHAPES, SHAPES))

# name: (op, NumPy forward, d/dx, d/dy) with positive inputs away from ties.
OPS = {
    "add": (tp.add, np.add, lambda x, y: np.ones_like(x * y), lambda x, y: np.ones_like(x * y)),
    "subtract": (
        tp.subtract,
        np.subtract,
        lambda x, y: np.ones_like(x * y),
        lambda x, y: -np.ones_like(x * y),
    ),
    "multiply": (tp.multiply, np.multiply, lambda x, y: y + 0 * x, lambda x, y: x + 0 * y),
    "divide": (tp.divide, np.divide, lambda x, y: 1 / y + 0 * x, lambda x, y: -x / y**2),
    "pow": (tp.pow, np.power, lambda x, y: y * x ** (y - 1), lambda x, y: x**y * np.log(x)),
    "maximum": (tp.maximum, np.maximum, lambda x, y: (x >= y) + 0.0, lambda x, y: (x < y) + 0.0),
    "minimum": (tp.minimum, np.minimum, lambda x, y: (x <= y) + 0.0, lambda x, y: (x > y) + 0.0),
    "floormod": (tp.math.floormod, np.mod, lambda x, y: np.ones_like(x * y), lambda x, y: -np.floor(x / y)),
}


def _values(shape, seed):
    rng = np.random.default_rng(seed)
    # distinct values in [0.5, 2]: no ties between x and y, no integer x / y
    return rng.permutation(np.linspace(0.5, 2.0, int(np.prod(shape)) + 2))[: int(np.prod(shape))].reshape(
        shape
    ) + (0.013 * seed)


def unbroadcast(g, shape):
    """NumPy reference: sum ``g`` over the axes broadcasting added to ``shape``."""
    g = np.sum(g, axis=tuple(range(g.ndim - len(shape))))
    return np.sum(g, axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True).reshape(shape)


@pytest.mark.parametrize("shape_x, shape_y", PAIRS)
@pytest.mark.parametrize("name", list(OPS))
def test_binary_op_gradients_over_shape_pairs(name, shape_x, shape_y):
    op, forward = OPS[name][:2]
    x, y = _values(shape_x, 1), _values(shape_y, 2)
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    out = op(tp.constant(x32), tp.constant(y32))
    assert out.shape == np.broadcast_shapes(shape_x, shape_y)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), forward(x32, y32), rtol=1e-6)
    check_gradients(op, x, y)


@pytest.mark.parametrize(
    "shape_x, shape_y", [((), (3, 4)), ((3, 1), (1, 4)), ((4,), (3, 1)), ((1, 4), (3, 4))]
)
@pytest.mark.parametrize("name", ["multiply", "divide", "pow"])
def test_binary_op_second_order_gradients_with_broadcasting(name, shape_x, shape_y):
    check_gradients(OPS[name][0], _values(shape_x, 1), _values(shape_y, 2), order=2)


@pytest.mark.parametrize("shape_x, shape_y", PAIRS)
def test_where_gradients_over_shape_pairs(shape_x, shape_y):
    cond = tp.constant(
        np.array([[True, False, True, True], [False, False, True, False], [True, True, False, True]])
    )
    check_gradients(lambda a, b: tp.where(cond, a, b), _values(shape_x, 1), _values(shape_y, 2))


def test_incompatible_shapes_are_a_clear_error():
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(3,\)"):
        tp.add(tp.zeros([3, 4]), tp.zeros([3]))


@settings(max_examples=30, deadline=None)
@given(
    shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=1, max_side=3),
    name=st.sampled_from(list(OPS)),
    seed=st.integers(0, 2**16),
)
def test_gradient_has_the_input_shape_and_equals_numpy_summed_upstream(shapes, name, seed):
    op, _, dfdx, dfdy = OPS[name]
    shape_x, shape_y = shapes.input_shapes
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.5, 2.0, shape_x)
    y = rng.uniform(0.5, 2.0, shape_y) + 0.001  # no ties with x
    upstream = rng.standard_normal(shapes.result_shape)
    tx, ty = tp.constant(x, tp.float64), tp.constant(y, tp.float64)
    with tp.GradientTape() as tape:
        tape.watch([tx, ty])
        out = op(tx, ty)
    assert out.shape == shapes.result_shape
    gx, gy = tape.gradient(out, [tx, ty], output_gradients=tp.constant(upstream))
    assert gx.shape == shape_x and gy.shape == shape_y
    assert gx.dtype == np.float64 and gy.dtype == np.float64
    np.testing.assert_allclose(
        gx.numpy(), unbroadcast(upstream * dfdx(x, y), shape_x), rtol=1e-10, atol=1e-12
    )
    np.testing.assert_allclose(
        gy.numpy(), unbroadcast(upstream * dfdy(x, y), shape_y), rtol=1e-10, atol=1e-12
    )


@settings(max_examples=30, deadline=None)
@given(shapes=mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, min_side=1, max_side=3))
def test_where_gradients_are_summed_to_each_input_shape(shapes):
    shape_c, shape_x, shape_y = shapes.input_shapes
    rng = np.random.default_rng(0)
    cond = rng.random(shape_c) < 0.5
    upstream = rng.standard_normal(shapes.result_shape).astype(np.float32)
    tx, ty = tp.ones(shape_x), tp.ones(shape_y)
    with tp.GradientTape() as tape:
        tape.watch([tx, ty])
        out = tp.where(tp.constant(cond), tx, ty)
    assert out.shape == shapes.result_shape
    gx, gy = tape.gradient(out, [tx, ty], output_gradients=tp.constant(upstream))
    assert gx.shape == shape_x and gy.shape == shape_y
    full_cond = np.broadcast_to(cond, shapes.result_shape)
    np.testing.assert_allclose(
        gx.numpy(), unbroadcast(np.where(full_cond, upstream, 0), shape_x), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        gy.numpy(), unbroadcast(np.where(full_cond, 0, upstream), shape_y), rtol=1e-5, atol=1e-6
    )


@settings(max_examples=30, deadline=None)
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=1, max_side=3))
def test_operators_with_python_scalars_and_arrays_broadcast_like_numpy(shapes):
    shape_x, shape_y = shapes.input_shapes
    x = np.full(shape_x, 1.5, np.float32)
    y = np.full(shape_y, 0.5, np.float32)
    for out, want in [
        (tp.constant(x) + y, x + y),
        (y * tp.constant(x), y * x),
        (tp.constant(x) - 2.0, x - 2.0),
    ]:
        assert isinstance(out, tp.Tensor)
        assert out.shape == np.shape(want) and out.dtype == np.float32
        np.testing.assert_allclose(out.numpy(), want)
