"""Elementwise math (``tapefit/core/ops/math.py``): values against NumPy, gradients against
finite differences, TensorFlow's tie and dtype rules."""

import warnings

import numpy as np
import pytest

import tapefit as tp
from tapefit.core.ops import math as math_ops
from tapefit.core.testing import check_gradients

RNG = np.random.default_rng(0)
# Away from 0, ties and integer ratios, so every op below is smooth at these points.
X = RNG.uniform(0.5, 2.0, (3, 4))
Y = RNG.uniform(0.5, 2.0, (3, 4)) + np.where(RNG.random((3, 4)) < 0.5, 0.1, -0.1)

BINARY = {
    "add": (tp.add, np.add),
    "subtract": (tp.subtract, np.subtract),
    "multiply": (tp.multiply, np.multiply),
    "divide": (tp.divide, np.divide),
    "floordiv": (tp.math.floordiv, np.floor_divide),
    "floormod": (tp.math.floormod, np.mod),
    "pow": (tp.pow, np.power),
    "maximum": (tp.maximum, np.maximum),
    "minimum": (tp.minimum, np.minimum),
}
SMOOTH_BINARY = ["add", "subtract", "multiply", "divide", "floormod", "pow", "maximum", "minimum"]

UNARY = {
    "negative": (tp.negative, np.negative),
    "abs": (tp.abs, np.abs),
    "sign": (tp.sign, np.sign),
    "square": (tp.square, np.square),
    "floor": (tp.floor, np.floor),
    "exp": (tp.exp, np.exp),
    "log": (tp.log, np.log),
    "log1p": (tp.log1p, np.log1p),
    "sqrt": (tp.sqrt, np.sqrt),
    "sin": (tp.sin, np.sin),
    "cos": (tp.cos, np.cos),
    "tanh": (tp.tanh, np.tanh),
    "sigmoid": (tp.sigmoid, lambda a: 1 / (1 + np.exp(-a))),
    "identity": (tp.identity, lambda a: a),
    "stop_gradient": (tp.stop_gradient, lambda a: a),
}
SMOOTH_UNARY = [
    "negative",
    "abs",
    "square",
    "exp",
    "log",
    "log1p",
    "sqrt",
    "sin",
    "cos",
    "tanh",
    "sigmoid",
    "identity",
]
FLOAT_ONLY = ["floor", "exp", "log", "log1p", "sqrt", "sin", "cos", "tanh", "sigmoid"]

COMPARISONS = {
    "less": (tp.math.less, np.less),
    "less_equal": (tp.math.less_equal, np.less_equal),
    "greater": (tp.math.greater, np.greater),
    "greater_equal": (tp.math.greater_equal, np.greater_equal),
    "equal": (tp.math.equal, np.equal),
    "not_equal": (tp.math.not_equal, np.not_equal),
}


def grad(f, *xs):
    """Tape gradients of ``f(*xs)`` with respect to every ``xs`` (watched)."""
    with tp.GradientTape() as tape:
        tape.watch(list(xs))
        y = f(*xs)
    return tape.gradient(y, list(xs))


# -- values and dtypes -----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_values_and_dtype(name, dtype):
    op, ref = BINARY[name]
    x, y = X.astype(dtype), Y.astype(dtype)
    out = op(tp.constant(x), tp.constant(y))
    assert isinstance(out, tp.Tensor)
    assert out.dtype == dtype and out.shape == (3, 4)
    np.testing.assert_allclose(out.numpy(), ref(x, y), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_values_and_dtype(name, dtype):
    op, ref = UNARY[name]
    x = (X - 1.2).astype(dtype) if name not in ("log", "sqrt") else X.astype(dtype)
    out = op(tp.constant(x))
    assert out.dtype == dtype and out.shape == x.shape
    np.testing.assert_allclose(out.numpy(), ref(x.astype(np.float64)), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["add", "multiply", "divide", "pow", "maximum"])
def test_binary_float16_stays_float16(name):
    out = BINARY[name][0](tp.constant([1.5, 2.0], tp.float16), 2.0)
    assert out.dtype == np.float16


# -- gradients -------------------------------------------------------------------------


@pytest.mark.parametrize("name", SMOOTH_BINARY)
def test_binary_gradients(name):
    check_gradients(BINARY[name][0], X, Y, order=2)


@pytest.mark.parametrize("name", SMOOTH_UNARY)
def test_unary_gradients(name):
    x = X - 1.2 if name in ("negative", "abs", "square", "sin", "cos", "tanh", "sigmoid", "identity") else X
    check_gradients(UNARY[name][0], x, order=2)


@pytest.mark.parametrize("op", [tp.sign, tp.floor, tp.math.floordiv])
def test_piecewise_constant_ops_have_zero_or_no_gradient(op):
    x = tp.constant([-1.3, 0.4, 2.6])
    args = (x,) if op is not tp.math.floordiv else (x, tp.constant([2.0, 2.0, 2.0]))
    grads = grad(op, *args)
    for g in grads:
        assert g is None or np.all(g.numpy() == 0)
    check_gradients(op, *args)


def test_floordiv_and_floor_gradients_are_none_as_in_tensorflow():
    x, y = tp.constant([3.5, -1.2]), tp.constant([2.0, 2.0])
    assert grad(tp.math.floordiv, x, y) == [None, None]
    assert grad(tp.floor, x) == [None]


def test_sign_gradient_is_zeros():
    (g,) = grad(tp.sign, tp.constant([-2.0, 0.0, 3.0]))
    np.testing.assert_array_equal(g.numpy(), [0.0, 0.0, 0.0])


def test_abs_gradient_at_zero_is_zero():
    (g,) = grad(tp.abs, tp.constant([-2.0, 0.0, 3.0]))
    np.testing.assert_array_equal(g.numpy(), [-1.0, 0.0, 1.0])


def test_maximum_ties_send_the_gradient_to_x():
    x, y = tp.constant([1.0, 2.0, 3.0]), tp.constant([1.0, 0.0, 5.0])
    gx, gy = grad(tp.maximum, x, y)
    np.testing.assert_array_equal(gx.numpy(), [1.0, 1.0, 0.0])
    np.testing.assert_array_equal(gy.numpy(), [0.0, 0.0, 1.0])


def test_minimum_ties_send_the_gradient_to_x():
    x, y = tp.constant([1.0, 2.0, 3.0]), tp.constant([1.0, 5.0, 0.0])
    gx, gy = grad(tp.minimum, x, y)
    np.testing.assert_array_equal(gx.numpy(), [1.0, 1.0, 0.0])
    np.testing.assert_array_equal(gy.numpy(), [0.0, 0.0, 1.0])


def test_pow_gradient_wrt_exponent_is_zero_where_base_is_not_positive():
    x, y = tp.constant([-2.0, 0.0, 3.0]), tp.constant([2.0, 2.0, 2.0])
    gx, gy = grad(tp.pow, x, y)
    np.testing.assert_allclose(gx.numpy(), [-4.0, 0.0, 6.0])
    np.testing.assert_allclose(gy.numpy(), [0.0, 0.0, 9.0 * np.log(3.0)], rtol=1e-6)
    assert np.all(np.isfinite(gy.numpy()))


def test_pow_gradient_with_scalar_exponent_and_second_order():
    check_gradients(lambda a: a**3.0, X - 1.2, order=2)
    check_gradients(lambda a: 2.0**a, X, order=2)


def test_sigmoid_is_stable_at_plus_minus_1000():
    x = tp.constant([-1000.0, -20.0, 0.0, 20.0, 1000.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (g,) = grad(tp.sigmoid, x)
        out = tp.sigmoid(x).numpy()
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out[[0, 2, 4]], [0.0, 0.5, 1.0])
    # full relative precision on the small side: 1 / (1 + e^20), not 0.5 - 0.5 tanh(10)
    np.testing.assert_allclose(out[1], 1 / (1 + np.exp(20.0)), rtol=1e-6)
    assert np.all(np.isfinite(g.numpy()))
    # out (1 - out) as TF: at +20 the float32 output is exactly 1, so that side rounds to 0
    np.testing.assert_allclose(
        g.numpy(), [0.0, np.exp(-20.0), 0.25, np.exp(-20.0), 0.0], rtol=1e-5, atol=1e-8
    )
    assert g.numpy()[1] > 0


def test_log_of_sigmoid_keeps_its_value_for_negative_inputs():
    x = np.array([-30.0, -80.0], np.float32)
    np.testing.assert_allclose(tp.log(tp.sigmoid(x)).numpy(), x, rtol=1e-5)


# -- cast, where, clip, identity, stop_gradient, add_n ----------------------------------


def test_add_n_takes_python_data_in_the_tensors_dtype():
    x = tp.constant([1.0, 2.0], tp.float16)
    out = tp.add_n([x, [1.0, 1.0], x])
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out.numpy(), [3.0, 5.0])
    with pytest.raises(TypeError, match="int32"):
        tp.add_n([tp.constant([1, 2]), [0.5, 0.5]])


def test_cast_values():
    x = tp.constant([-1.7, 0.0, 2.9])
    np.testing.assert_array_equal(tp.cast(x, tp.int32).numpy(), [-1, 0, 2])
    assert tp.cast(x, tp.int32).dtype == np.int32
    np.testing.assert_array_equal(tp.cast(x, tp.bool).numpy(), [True, False, True])
    assert tp.cast(tp.constant([True, False]), tp.float32).numpy().tolist() == [1.0, 0.0]
    assert tp.cast(x, "float64").dtype == np.float64
    assert tp.cast(x, tp.float32) is x  # already that dtype: no op, as TF


def test_cast_of_a_variable_to_its_own_dtype_gives_a_tensor():
    v = tp.Variable([1.0, 2.0])
    with tp.GradientTape() as tape:
        x = tp.cast(v, tp.float32)
        y = tp.reduce_sum(x * x)
    assert type(x) is tp.Tensor
    v.assign_add([1.0, 1.0])
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(tape.gradient(y, v).numpy(), [2.0, 4.0])


def test_cast_gradient_flows_between_floats_and_keeps_the_source_dtype():
    x = tp.constant([1.0, 2.0, 3.0])
    (g,) = grad(lambda a: tp.cast(a, tp.float64) * tp.constant([1.0, 2.0, 3.0], tp.float64), x)
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g.numpy(), [1.0, 2.0, 3.0])
    (g,) = grad(lambda a: tp.cast(tp.cast(a, tp.float16), tp.float32) * 2.0, x)
    np.testing.assert_array_equal(g.numpy(), [2.0, 2.0, 2.0])


def test_cast_gradient_stops_at_integers():
    x = tp.constant([1.5, 2.5])
    (g,) = grad(lambda a: tp.cast(tp.cast(a, tp.int32), tp.float32) * a, x)
    np.testing.assert_array_equal(g.numpy(), [1.0, 2.0])  # only the direct path counts
    (g,) = grad(lambda a: tp.cast(tp.cast(a, tp.int32), tp.float32), x)
    assert g is None


def test_cast_second_order_between_floats():
    x = tp.constant([1.5, -2.0], tp.float64)
    with tp.GradientTape() as outer:
        outer.watch(x)
        with tp.GradientTape() as inner:
            inner.watch(x)
            y = tp.cast(x, tp.float32) ** 3
        dx = inner.gradient(y, x)  # 3 x^2, back in float64
    assert dx.dtype == np.float64
    np.testing.assert_allclose(dx.numpy(), [6.75, 12.0])
    np.testing.assert_allclose(outer.gradient(dx, x).numpy(), [9.0, -12.0])  # 6 x


def test_where_selects_and_broadcasts():
    cond = np.array([[True], [False], [True]])
    x = RNG.standard_normal(4).astype(np.float32)
    out = tp.where(cond, x, 0.5)
    assert out.shape == (3, 4) and out.dtype == np.float32
    np.testing.assert_array_equal(out.numpy(), np.where(cond, x, np.float32(0.5)))


def test_where_gradients_with_broadcasting():
    cond = tp.constant([[True], [False], [True]])
    check_gradients(lambda a, b: tp.where(cond, a, b), RNG.standard_normal(4), 0.3, order=2)
    check_gradients(
        lambda a, b: tp.where(cond, a, b), RNG.standard_normal((3, 1)), RNG.standard_normal((1, 4))
    )
    gx, gy = grad(lambda a, b: tp.where(cond, a, b), tp.constant([1.0, 2.0]), tp.constant(0.0))
    np.testing.assert_array_equal(gx.numpy(), [2.0, 2.0])  # two true rows
    np.testing.assert_array_equal(gy.numpy(), 2.0)  # one false row of two


def test_where_with_only_a_condition_gives_int64_coordinates():
    out = tp.where(tp.constant([[True, False], [False, True]]))
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out.numpy(), [[0, 0], [1, 1]])


def test_where_errors():
    with pytest.raises(TypeError, match="bool"):
        tp.where(tp.constant([1.0, 0.0]), 1.0, 2.0)
    with pytest.raises(ValueError, match="both"):
        tp.where(tp.constant([True]), 1.0)
    with pytest.raises(TypeError, match=r"float32.*float64|float64.*float32"):
        tp.where(tp.constant([True]), tp.constant([1.0]), tp.constant([1.0], tp.float64))


def test_clip_by_value_values_and_gradients():
    x = np.array([-2.0, 0.3, 0.9, 3.0])
    out = tp.clip_by_value(tp.constant(x, tp.float32), -1.0, 1.0)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out.numpy(), np.clip(x, -1, 1).astype(np.float32))
    (g,) = grad(lambda a: tp.clip_by_value(a, -1.0, 1.0), tp.constant(x))
    np.testing.assert_array_equal(g.numpy(), [0.0, 1.0, 1.0, 0.0])
    check_gradients(lambda a: tp.clip_by_value(a, -1.0, 1.0), x, order=2)
    # tensor bounds get the gradient where they clip
    check_gradients(lambda a, lo, hi: tp.clip_by_value(a, lo, hi), x, -1.0, 1.0)


def test_clip_by_value_keeps_integers():
    out = tp.clip_by_value(tp.constant([-5, 0, 7]), 0, 3)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out.numpy(), [0, 0, 3])


def test_identity_is_a_new_tensor_with_gradient():
    x = tp.constant([1.0, 2.0])
    y = tp.identity(x)
    assert y is not x and y.numpy().tolist() == [1.0, 2.0]
    (g,) = grad(lambda a: tp.identity(a) * 3.0, x)
    np.testing.assert_array_equal(g.numpy(), [3.0, 3.0])


def test_stop_gradient_blocks_gradient_but_keeps_value():
    x = tp.constant([1.0, 2.0])
    assert tp.stop_gradient(x).numpy().tolist() == [1.0, 2.0]
    assert grad(tp.stop_gradient, x) == [None]
    (g,) = grad(lambda a: a * tp.stop_gradient(a), x)
    np.testing.assert_array_equal(g.numpy(), [1.0, 2.0])  # d(a * c)/da = c


def test_add_n_values_gradients_and_errors():
    a, b = X.astype(np.float32), Y.astype(np.float32)
    out = tp.add_n([a, b, tp.constant(a)])
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), a + b + a, rtol=1e-6)
    check_gradients(lambda p, q: tp.add_n([p, q, p]), X, Y, order=2)
    assert tp.add_n([tp.constant([1, 2])]).dtype == np.int32
    with pytest.raises(ValueError, match="at least one"):
        tp.add_n([])
    with pytest.raises(ValueError, match=r"\(2,\).*\(3,\)|\(3,\).*\(2,\)"):
        tp.add_n([tp.zeros([2]), tp.zeros([3])])
    with pytest.raises(TypeError, match=r"float32.*float64|float64.*float32"):
        tp.add_n([tp.zeros([2]), tp.zeros([2], tp.float64)])


# -- integers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["add", "subtract", "multiply", "floordiv", "floormod", "pow", "maximum", "minimum"]
)
def test_integer_binary_ops_stay_int32(name):
    op, ref = BINARY[name]
    x, y = np.array([-7, 7, 5, 2], np.int32), np.array([2, -2, 3, 3], np.int32)
    if name == "pow":
        x, y = np.array([-3, 2, 5, 0], np.int32), np.array([3, 2, 1, 0], np.int32)
    out = op(tp.constant(x), tp.constant(y))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out.numpy(), ref(x, y))
    assert op(tp.constant(x), 2).dtype == np.int32  # Python ints adopt the tensor's dtype


def test_integer_floordiv_and_floormod_follow_python_signs():
    x, y = [-7, 7, -7, 7], [2, -2, -2, 2]
    np.testing.assert_array_equal((tp.constant(x) // tp.constant(y)).numpy(), [a // b for a, b in zip(x, y)])
    np.testing.assert_array_equal((tp.constant(x) % tp.constant(y)).numpy(), [a % b for a, b in zip(x, y)])
    np.testing.assert_allclose(
        tp.math.floormod(tp.constant([-7.5, 7.5]), 2.0).numpy(), [(-7.5) % 2.0, 7.5 % 2.0]
    )


@pytest.mark.parametrize("op", [tp.math.floordiv, tp.math.floormod])
def test_integer_division_by_zero_raises_instead_of_giving_zero(op):
    with pytest.raises(ZeroDivisionError, match="integer division by zero"):
        op(tp.constant([4, 5]), tp.constant([2, 0]))


@pytest.mark.parametrize("dtype", [tp.int32, tp.int64])
def test_integer_division_gives_float64_as_tensorflow(dtype):
    out = tp.divide(tp.constant([1, 2, 3], dtype), tp.constant([2, 2, 2], dtype))
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out.numpy(), [0.5, 1.0, 1.5])
    assert (tp.constant([1, 2], dtype) / 2).dtype == np.float64


@pytest.mark.parametrize("name", ["negative", "abs", "sign", "square"])
def test_integer_unary_ops_stay_int32(name):
    op, ref = UNARY[name]
    x = np.array([-3, 0, 4], np.int32)
    out = op(tp.constant(x))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out.numpy(), ref(x))


@pytest.mark.parametrize("name", FLOAT_ONLY)
def test_float_only_ops_reject_integers_clearly(name):
    op = UNARY[name][0]
    with pytest.raises(TypeError, match=r"int32.*tp\.cast"):
        op(tp.constant([1, 2]))


def test_python_float_into_an_integer_op_is_an_error():
    with pytest.raises(TypeError, match="int32"):
        tp.constant([1, 2]) + 1.5
    with pytest.raises(ValueError, match="int32"):
        tp.constant([1, 2]) + 2**40  # would silently wrap around


# -- comparisons and logical ops ---------------------------------------------------------


@pytest.mark.parametrize("name", list(COMPARISONS))
def test_comparisons_values_broadcasting_and_no_gradient(name):
    op, ref = COMPARISONS[name]
    x = np.array([[1.0, 2.0, 3.0]], np.float32)
    y = np.array([[2.0], [3.0]], np.float32)
    out = op(tp.constant(x), tp.constant(y))
    assert out.dtype == np.bool_ and out.shape == (2, 3)
    np.testing.assert_array_equal(out.numpy(), ref(x, y))
    np.testing.assert_array_equal(op(tp.constant(x), 2.0).numpy(), ref(x, 2.0))
    np.testing.assert_array_equal(op(tp.constant([1, 2, 3]), 2).numpy(), ref(np.array([1, 2, 3]), 2))
    (g,) = grad(lambda a: tp.cast(op(a, 2.0), tp.float32) * 1.0, tp.constant(x))
    assert g is None


def test_comparison_operators_match_functions():
    x = tp.constant([1.0, 2.0, 3.0])
    for got, want in [
        (x < 2.0, [True, False, False]),
        (x <= 2.0, [True, True, False]),
        (x > 2.0, [False, False, True]),
        (x >= 2.0, [False, True, True]),
        (x == 2.0, [False, True, False]),
        (x != 2.0, [True, False, True]),
    ]:
        assert isinstance(got, tp.Tensor)
        assert got.numpy().tolist() == want


def test_logical_ops():
    a = tp.constant([True, True, False, False])
    b = tp.constant([True, False, True, False])
    assert tp.math.logical_and(a, b).numpy().tolist() == [True, False, False, False]
    assert tp.math.logical_or(a, b).numpy().tolist() == [True, True, True, False]
    assert tp.math.logical_not(a).numpy().tolist() == [False, False, True, True]
    assert (a & b).numpy().tolist() == [True, False, False, False]
    assert (a | b).numpy().tolist() == [True, True, True, False]
    assert (~a).numpy().tolist() == [False, False, True, True]
    assert tp.math.logical_and(a, True).dtype == np.bool_


@pytest.mark.parametrize(
    "call",
    [
        lambda: tp.math.logical_and(tp.constant([1.0]), tp.constant([0.0])),
        lambda: tp.math.logical_or(tp.constant([1, 0]), tp.constant([0, 0])),
        lambda: tp.math.logical_not(tp.constant([1.0])),
    ],
)
def test_logical_ops_need_bool(call):
    with pytest.raises(TypeError, match="bool"):
        call()


# -- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(BINARY))
def test_mixing_float32_and_float64_names_both_and_suggests_cast(name):
    op = BINARY[name][0]
    with pytest.raises(TypeError, match=r"float32.*float64.*tp\.cast|float64.*float32.*tp\.cast"):
        op(tp.constant([1.0]), tp.constant([1.0], tp.float64))


@pytest.mark.parametrize("name", list(BINARY))
def test_incompatible_shapes_name_both_shapes(name):
    op = BINARY[name][0]
    with pytest.raises(ValueError, match=r"\(3,\).*\(4,\)"):
        op(tp.ones([3]), tp.ones([4]))


# -- names -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", math_ops.__all__)
def test_every_math_op_is_reachable_as_tp_and_tp_math(name):
    assert getattr(tp.math, name) is getattr(tp, name)


@pytest.mark.parametrize(
    "call",
    [
        lambda: tp.constant([True]) + tp.constant([False]),
        lambda: tp.constant([True]) * True,
        lambda: tp.maximum(tp.constant([True]), tp.constant([False])),
        lambda: -tp.constant([True]),
        lambda: tp.abs(tp.constant([True])),
        lambda: tp.square(tp.constant([True])),
    ],
)
def test_arithmetic_on_bool_tensors_is_a_type_error_as_in_tensorflow(call):
    with pytest.raises(TypeError, match="bool"):
        call()
