"""``Tensor``, ``Variable``, ``constant``/``convert_to_tensor`` and the dtype rules."""

import numpy as np
import pytest

import tapefit as tp
from tapefit.core.testing import check_gradients


def grad(f, *xs):
    with tp.GradientTape() as tape:
        tape.watch(list(xs))
        y = f(*xs)
    return tape.gradient(y, list(xs))


# -- Tensor: the value and its Python protocol ----------------------------------------------


def test_numpy_is_a_read_only_view_with_the_values():
    t = tp.constant([[1.0, 2.0], [3.0, 4.0]])
    a = t.numpy()
    assert isinstance(a, np.ndarray) and a.dtype == np.float32
    np.testing.assert_array_equal(a, [[1, 2], [3, 4]])
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[0, 0] = 10.0
    assert np.shares_memory(a, t.numpy())  # a view, no copy


def test_shape_dtype_ndim_len_size():
    t = tp.constant(np.zeros((2, 3, 4), np.float32))
    assert t.shape == (2, 3, 4) and all(type(n) is int for n in t.shape)
    assert t.dtype == np.float32 and isinstance(t.dtype, np.dtype)
    assert t.ndim == 3 and len(t) == 2 and t.size == 24
    s = tp.constant(1.0)
    assert s.shape == () and s.ndim == 0
    with pytest.raises(TypeError, match="scalar"):
        len(s)


def test_iteration_goes_over_the_first_axis():
    t = tp.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    rows = list(t)
    assert len(rows) == 3 and all(isinstance(r, tp.Tensor) for r in rows)
    assert [r.numpy().tolist() for r in rows] == [[1, 2], [3, 4], [5, 6]]
    with pytest.raises(TypeError, match="scalar"):
        iter(tp.constant(1.0)).__next__()


def test_iteration_is_differentiable():
    (g,) = grad(
        lambda a: sum(row * float(i + 1) for i, row in enumerate(a)), tp.constant([[1.0, 2.0], [3.0, 4.0]])
    )
    np.testing.assert_array_equal(g.numpy(), [[1.0, 1.0], [2.0, 2.0]])


def test_bool_float_int_of_one_element_tensors():
    assert bool(tp.constant(1.0)) is True and bool(tp.constant([[0.0]])) is False
    assert float(tp.constant([2.5])) == 2.5 and type(float(tp.constant(2.5))) is float
    assert int(tp.constant(2.7)) == 2 and int(tp.constant([[7]])) == 7
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        bool(tp.constant([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        float(tp.constant([1.0, 2.0]))


def test_python_control_flow_on_tensors():
    x = tp.constant(3.0)
    if x > 0.0:
        branch = "positive"
    else:
        branch = "not positive"
    assert branch == "positive"
    b = tp.constant([1.0, 1.0])
    steps = 0
    while tp.norm(b) < 1000:
        b = b * 2.0
        steps += 1
    assert steps == 10


def test_integer_tensors_index_python_sequences():
    assert [10, 20, 30][tp.constant(1)] == 20
    with pytest.raises(TypeError, match="integer"):
        [10, 20, 30][tp.constant(1.0)]


def test_repr_format():
    assert (
        repr(tp.constant([1.0, 2.0]))
        == "<tp.Tensor shape=(2,) dtype=float32 numpy=array([1., 2.], dtype=float32)>"
    )
    assert repr(tp.constant([1, 2])).startswith("<tp.Tensor shape=(2,) dtype=int32 numpy=array([1, 2]")
    assert repr(tp.constant(3.0, tp.float64)) == "<tp.Tensor shape=() dtype=float64 numpy=3.0>"
    assert (
        repr(tp.constant(0.1)) == "<tp.Tensor shape=() dtype=float32 numpy=0.1>"
    )  # TensorFlow's scalar form
    assert repr(tp.Variable(True, name="flag")) == "<tp.Variable 'flag' shape=() dtype=bool, numpy=True>"
    v = tp.Variable([1.0], name="w")
    assert repr(v).startswith("<tp.Variable 'w' shape=(1,) dtype=float32")


def test_format_spec_formats_the_value_as_tf_does():
    # the training-loop idiom print(f"loss {loss:.4f}") must work on a tensor
    assert f"{tp.constant(1.23456):.2f}" == "1.23"
    assert f"{tp.Variable([[2.5]]):>6.1f}" == "   2.5"
    assert f"{tp.constant(7):03d}" == "007"
    x = tp.constant([1.0, 2.0])
    assert f"{x}" == str(x)
    with pytest.raises(TypeError, match=r"one element.*\(2,\)"):
        f"{x:.2f}"


def test_np_asarray_gives_the_values_read_only():
    t = tp.constant([1.0, 2.0])
    a = np.asarray(t)
    assert a.dtype == np.float32 and a.tolist() == [1.0, 2.0]
    with pytest.raises(ValueError):
        a[0] = 5.0  # writing through it would change an immutable tensor
    assert t.numpy().tolist() == [1.0, 2.0]
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    c = np.array(t)  # an explicit copy is the user's own
    c[0] = 5.0
    assert t.numpy().tolist() == [1.0, 2.0]


def test_tensors_are_unhashable_variables_hashable():
    with pytest.raises(TypeError, match="unhashable"):
        hash(tp.constant(1.0))
    v = tp.Variable(1.0)
    assert {v: 1}[v] == 1


# -- operators ------------------------------------------------------------------------------

X = np.array([[1.5, 2.0], [3.0, 0.5]], np.float32)
Y = np.array([[0.5, 1.5], [2.0, 2.5]], np.float32)

OPERATORS = {
    "+": (lambda a, b: a + b, np.add),
    "-": (lambda a, b: a - b, np.subtract),
    "*": (lambda a, b: a * b, np.multiply),
    "/": (lambda a, b: a / b, np.divide),
    "//": (lambda a, b: a // b, np.floor_divide),
    "%": (lambda a, b: a % b, np.mod),
    "**": (lambda a, b: a**b, np.power),
    "@": (lambda a, b: a @ b, np.matmul),
}


@pytest.mark.parametrize("symbol", list(OPERATORS))
def test_binary_operators_between_tensors(symbol):
    f, ref = OPERATORS[symbol]
    out = f(tp.constant(X), tp.constant(Y))
    assert isinstance(out, tp.Tensor) and out.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), ref(X, Y), rtol=1e-6)


@pytest.mark.parametrize("symbol", [s for s in OPERATORS if s != "@"])
def test_operators_with_python_scalars_on_either_side(symbol):
    f, ref = OPERATORS[symbol]
    x = tp.constant(X)
    left, right = f(2.0, x), f(x, 2.0)
    assert isinstance(left, tp.Tensor) and isinstance(right, tp.Tensor)
    assert left.dtype == right.dtype == np.float32
    np.testing.assert_allclose(left.numpy(), ref(np.float32(2.0), X), rtol=1e-6)
    np.testing.assert_allclose(right.numpy(), ref(X, np.float32(2.0)), rtol=1e-6)
    np.testing.assert_allclose(f(2, x).numpy(), ref(np.float32(2), X), rtol=1e-6)  # Python int too


@pytest.mark.parametrize(
    "symbol, kind",
    [(s, "ndarray") for s in OPERATORS] + [(s, "numpy scalar") for s in OPERATORS if s != "@"],
)
def test_ndarray_or_numpy_scalar_on_the_left_gives_a_recorded_tensor(symbol, kind):
    f, ref = OPERATORS[symbol]
    left = Y if kind == "ndarray" else np.float32(2.0)
    x = tp.constant(X)
    with tp.GradientTape() as tape:
        tape.watch(x)
        out = f(left, x)
    assert isinstance(out, tp.Tensor)
    np.testing.assert_allclose(out.numpy(), ref(left, X), rtol=1e-6)
    g = tape.gradient(out, x)
    if symbol == "//":
        assert g is None  # floordiv has no gradient
    else:
        assert g is not None and g.shape == X.shape


def test_operator_gradients():
    check_gradients(lambda a, b: (a + b) * (a - b) / b + a**b - (a @ b) % 1.7, X, Y, order=2)
    check_gradients(lambda a: 3.0 / a + 2.0**a - 1.0 * a + np.array([[1.0, 2.0], [3.0, 4.0]]) @ a, X, order=2)


def test_unary_operators():
    x = tp.constant([-1.5, 2.0])
    assert (-x).numpy().tolist() == [1.5, -2.0]
    assert abs(x).numpy().tolist() == [1.5, 2.0]
    gneg, gabs = grad(lambda a: -a, x)[0], grad(abs, x)[0]
    assert gneg.numpy().tolist() == [-1.0, -1.0] and gabs.numpy().tolist() == [-1.0, 1.0]


def test_comparison_operators_return_bool_tensors_also_reflected():
    x = tp.constant([1.0, 2.0, 3.0])
    arr = np.array([2.0, 2.0, 2.0], np.float32)
    for out, want in [
        (x < arr, [True, False, False]),
        (arr < x, [False, False, True]),
        (np.float32(2.0) >= x, [True, True, False]),
        (2.0 == x, [False, True, False]),
        (x != tp.constant([1.0, 0.0, 3.0]), [False, True, False]),
    ]:
        assert isinstance(out, tp.Tensor) and out.dtype == np.bool_
        assert out.numpy().tolist() == want


def test_equality_with_unrelated_objects_is_plain_python():
    x = tp.constant([1.0])
    assert (x == None) is False  # noqa: E711
    assert (x != "a") is True


@pytest.mark.parametrize(
    "index",
    [1, -1, slice(0, 2), (slice(None), 0), (Ellipsis, 1), [0, 2, 0], np.array([2, 1]), (1, [0, 1, 1])],
)
def test_getitem_values_and_gradients(index):
    x = np.arange(12.0).reshape(3, 4) / 10
    out = tp.constant(x)[index]
    np.testing.assert_array_equal(out.numpy(), x[index])
    check_gradients(lambda a: a[index], x, order=2)


def test_repeated_integer_array_indices_accumulate_gradient():
    (g,) = grad(lambda a: a[[0, 0, 2]], tp.constant([1.0, 2.0, 3.0]))
    assert g.numpy().tolist() == [2.0, 0.0, 1.0]


# -- dtype rules ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, dtype",
    [
        (1.0, np.float32),
        ([1.0, 2.0], np.float32),
        ([[1.0], [2.0]], np.float32),
        ([1, 2.5], np.float32),
        (1, np.int32),
        ([1, 2], np.int32),
        (range(3), np.int32),
        (2**40, np.int64),
        (True, np.bool_),
        ([True, False], np.bool_),
        (np.arange(3), np.int64),
        (np.zeros(2, np.float64), np.float64),
        (np.zeros(2, np.float16), np.float16),
        (np.float64(1.0), np.float64),
        (np.int32(1), np.int32),
    ],
)
@pytest.mark.parametrize("convert", [tp.constant, tp.convert_to_tensor])
def test_conversion_dtype_rules(convert, value, dtype):
    t = convert(value)
    assert t.dtype == dtype
    np.testing.assert_array_equal(t.numpy(), np.asarray(list(value) if isinstance(value, range) else value))


@pytest.mark.parametrize("convert", [tp.constant, tp.convert_to_tensor])
def test_dtype_argument_converts(convert):
    assert convert([1, 2], dtype=tp.float32).dtype == np.float32
    assert convert(np.arange(3), dtype=tp.int32).dtype == np.int32
    assert convert(1.0, dtype="float64").dtype == np.float64
    assert convert([1.0, 2.0], dtype=tp.int32).numpy().tolist() == [1, 2]  # whole numbers are fine


@pytest.mark.parametrize(
    "value",
    [[1.5], 2.5, np.array([1.5]), np.float64(0.5)],
)
def test_fractional_float_data_into_an_int_tensor_is_an_error(value):
    with pytest.raises(TypeError, match="int32"):
        tp.constant(value, dtype=tp.int32)


def test_out_of_range_int_data_is_an_error():
    with pytest.raises(ValueError, match="int32"):
        tp.constant(2**40, dtype=tp.int32)
    with pytest.raises(ValueError, match="int32"):
        tp.constant([1, 2]) * 2**33


def test_convert_to_tensor_returns_tensors_as_they_are_and_reads_variables():
    t = tp.constant([1.0])
    assert tp.convert_to_tensor(t) is t
    # A Variable gives a Tensor of its value now, as in TF: an assign later leaves it as it is,
    # and gradients still reach the Variable.
    v = tp.Variable([1.0, 2.0])
    with tp.GradientTape() as tape:
        read = tp.convert_to_tensor(v)
        loss = tp.reduce_sum(read * read)
    assert type(read) is tp.Tensor
    v.assign([5.0, 5.0])
    np.testing.assert_array_equal(read.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(tape.gradient(loss, v).numpy(), [2.0, 4.0])
    with pytest.raises(TypeError, match=r"float64.*float32|float32.*float64"):
        tp.convert_to_tensor(t, dtype=tp.float64)


@pytest.mark.parametrize("bad", ["text", None, {"a": 1}, object()])
def test_unconvertible_values_are_a_type_error(bad):
    with pytest.raises(TypeError, match="cannot convert"):
        tp.constant(bad)


def test_ragged_lists_are_a_value_error():
    with pytest.raises(ValueError, match="cannot convert"):
        tp.constant([[1.0], [1.0, 2.0]])


def test_lists_holding_tensors_are_packed_with_recorded_ops_as_tf_autopacking():
    # tp.reduce_sum([loss_a, loss_b]) must keep the gradient, as tf.reduce_sum does
    w = tp.Variable([1.0, 2.0])
    b = tp.Variable(3.0)
    with tp.GradientTape(persistent=True) as tape:
        total = tp.reduce_sum([tp.reduce_sum(w * w), b * b])
        packed = tp.convert_to_tensor([[b, 1.0], [2.0, b * 2.0]])
        scaled = w * [b, 2.0]
    assert total.numpy() == 14.0
    gw, gb = tape.gradient(total, [w, b])
    np.testing.assert_array_equal(gw.numpy(), [2.0, 4.0])
    assert gb.numpy() == 6.0
    assert packed.dtype == np.float32 and packed.shape == (2, 2)
    np.testing.assert_array_equal(packed.numpy(), [[3.0, 1.0], [2.0, 6.0]])
    assert tape.gradient(packed, b).numpy() == 3.0
    np.testing.assert_array_equal(scaled.numpy(), [3.0, 4.0])
    assert tape.gradient(scaled, b).numpy() == 1.0


def test_packed_lists_take_their_tensors_dtype_and_constant_stays_a_constant():
    x = tp.constant(1.5, tp.float64)
    assert tp.convert_to_tensor([x, 2.0]).dtype == np.float64
    with pytest.raises(TypeError, match=r"float64.*float32|float32.*float64"):
        tp.convert_to_tensor([x, tp.constant(1.0)])
    with pytest.raises(TypeError, match="requested dtype float32"):
        tp.convert_to_tensor([x], dtype=tp.float32)
    v = tp.Variable(2.0)
    with tp.GradientTape() as tape:
        c = tp.constant([v, v])  # tf.constant is a constant: no gradient flows through it
        y = tp.reduce_sum(c * v)
    assert tape.gradient(y, v).numpy() == 4.0


def test_dtype_names_are_numpy_dtypes():
    for name, want in [
        ("float16", np.float16),
        ("float32", np.float32),
        ("float64", np.float64),
        ("int32", np.int32),
        ("int64", np.int64),
        ("bool", np.bool_),
    ]:
        d = getattr(tp, name)
        assert isinstance(d, np.dtype) and d == want


@pytest.mark.parametrize("symbol", list(OPERATORS))
def test_mixing_float32_and_float64_names_both_and_suggests_cast(symbol):
    f = OPERATORS[symbol][0]
    a, b = tp.constant(X), tp.constant(Y.astype(np.float64))
    for left, right in [(a, b), (b, a), (a, Y.astype(np.float64))]:
        with pytest.raises(TypeError) as info:
            f(left, right)
        message = str(info.value)
        assert "float32" in message and "float64" in message and "tp.cast" in message


def test_mixing_int_and_float_tensors_is_an_error():
    with pytest.raises(TypeError, match=r"float32.*int32|int32.*float32"):
        tp.constant([1.0]) + tp.constant([1])


@pytest.mark.parametrize("dtype", [tp.float16, tp.float32, tp.float64])
def test_python_scalars_are_weakly_typed(dtype):
    x = tp.constant([1.0, 2.0], dtype)
    for out in (x + 1.5, 1.5 * x, x - 1, 2**x, x / 3):
        assert out.dtype == dtype
    assert (tp.constant([1, 2], tp.int64) + 3).dtype == np.int64
    assert (x + [1.0, 2.0]).dtype == dtype  # lists are weak too


def test_python_float_data_into_an_integer_op_is_an_error():
    with pytest.raises(TypeError, match="int32"):
        tp.constant([1, 2]) + 0.5
    with pytest.raises(TypeError, match="int32"):
        tp.constant([1, 2]) * [1.5, 2.0]


# -- Variable -------------------------------------------------------------------------------


def test_assign_methods_change_the_value_and_return_the_variable():
    v = tp.Variable([1.0, 2.0])
    assert v.assign([3.0, 4.0]) is v
    assert v.numpy().tolist() == [3.0, 4.0]
    assert v.assign_add(tp.constant([1.0, 1.0])) is v
    assert v.numpy().tolist() == [4.0, 5.0]
    assert v.assign_sub(np.array([0.5, 0.5], np.float32)) is v
    assert v.numpy().tolist() == [3.5, 4.5]
    assert v.assign_add([1, 1]).numpy().tolist() == [4.5, 5.5]  # Python data adopts the dtype


@pytest.mark.parametrize("method", ["assign", "assign_add", "assign_sub"])
def test_assign_shape_mismatch_names_both_shapes(method):
    v = tp.Variable([[1.0, 2.0]], name="w")
    with pytest.raises(ValueError, match=r"\(1, 2\).*\(2,\)"):
        getattr(v, method)([1.0, 2.0])
    assert v.numpy().tolist() == [[1.0, 2.0]]


@pytest.mark.parametrize("method", ["assign", "assign_add", "assign_sub"])
def test_assign_dtype_mismatch_names_both_dtypes(method):
    v = tp.Variable([1.0, 2.0])
    with pytest.raises(ValueError, match=r"float32.*float64"):
        getattr(v, method)(tp.constant([1.0, 2.0], tp.float64))
    with pytest.raises(ValueError, match=r"float32.*int64"):
        getattr(v, method)(np.array([1, 2]))


def test_int_variable_refuses_float_data():
    v = tp.Variable([1, 2])
    assert v.dtype == np.int32
    with pytest.raises(TypeError, match="int32"):
        v.assign([1.5, 2.0])


def test_trainable_and_name():
    v = tp.Variable(1.0)
    assert v.trainable is True and v.name == "Variable"
    w = tp.Variable(1.0, trainable=False, name="moving_mean")
    assert w.trainable is False and w.name == "moving_mean"


def test_variable_numpy_is_a_copy():
    v = tp.Variable([1.0, 2.0])
    a = v.numpy()
    a[0] = 100.0
    assert v.numpy().tolist() == [1.0, 2.0]
    v.assign([3.0, 4.0])
    assert a.tolist() == [100.0, 2.0]


def test_np_asarray_of_a_variable_is_not_a_live_alias():
    v = tp.Variable([1.0, 2.0])
    a = np.asarray(v)
    v.assign([3.0, 4.0])
    v.assign_add([1.0, 1.0])
    assert a.tolist() == [1.0, 2.0]


def test_arithmetic_on_a_variable_gives_a_tensor():
    v = tp.Variable([1.0, 2.0])
    x = v
    x = x + 1
    assert type(x) is tp.Tensor and not isinstance(x, tp.Variable)
    assert x.numpy().tolist() == [2.0, 3.0]
    assert v.numpy().tolist() == [1.0, 2.0]
    for out in (v * v, -v, v[0], tp.exp(v), np.float32(2.0) * v):
        assert type(out) is tp.Tensor


def test_variable_behaves_as_a_tensor():
    v = tp.Variable([[1.0, 2.0], [3.0, 4.0]], name="m")
    assert v.shape == (2, 2) and v.dtype == np.float32 and v.ndim == 2 and len(v) == 2
    assert float(tp.Variable(2.5)) == 2.5 and bool(tp.Variable([1.0]) > 0)
    np.testing.assert_array_equal(np.asarray(v), [[1, 2], [3, 4]])
    with tp.GradientTape() as tape:
        y = tp.reduce_sum(v * v)
    np.testing.assert_array_equal(tape.gradient(y, v).numpy(), [[2, 4], [6, 8]])


def test_assignment_never_changes_a_value_a_live_tape_saved():
    v = tp.Variable([1.0, 2.0])
    with tp.GradientTape() as tape:
        y = tp.reduce_sum(v * v)
    v.assign([10.0, 20.0])
    v.assign_add([1.0, 1.0])
    assert tape.gradient(y, v).numpy().tolist() == [2.0, 4.0]


@pytest.mark.parametrize(
    "initial, dtype, values",
    [
        (3.0, np.float32, 3.0),
        (3, np.int32, 3),
        ([[1.0, 2.0], [3.0, 4.0]], np.float32, [[1, 2], [3, 4]]),
        ([1, 2], np.int32, [1, 2]),
        (range(1, 4), np.int32, [1, 2, 3]),
        (np.array([1.0, 2.0]), np.float64, [1.0, 2.0]),
        (tp.constant([1.0, 2.0]), np.float32, [1.0, 2.0]),
        (lambda: [1.0, 2.0], np.float32, [1.0, 2.0]),
        (lambda: np.ones(2, np.float16), np.float16, [1.0, 1.0]),
    ],
)
def test_initial_value_forms(initial, dtype, values):
    v = tp.Variable(initial)
    assert v.dtype == dtype
    np.testing.assert_array_equal(v.numpy(), values)


def test_initial_ndarray_and_tensor_are_not_aliased():
    a = np.array([1.0, 2.0], np.float32)
    v = tp.Variable(a)
    a[0] = 100.0
    assert v.numpy().tolist() == [1.0, 2.0]
    v.assign_add([1.0, 1.0])
    assert a.tolist() == [100.0, 2.0]
    t = tp.constant([1.0, 2.0])
    w = tp.Variable(t)
    w.assign_add([1.0, 1.0])
    assert t.numpy().tolist() == [1.0, 2.0]


def test_variable_dtype_argument_converts():
    assert tp.Variable([1, 2], dtype=tp.float32).dtype == np.float32
    assert tp.Variable(lambda: [1, 2], dtype=tp.float64).dtype == np.float64
    assert tp.Variable(np.zeros(2), dtype=tp.float32).dtype == np.float32


def test_numpy_scalars_are_weak_like_the_python_numbers_they_hold():
    x = tp.constant([1.0, 2.0])
    assert (x * np.sqrt(2.0)).dtype == np.float32  # np.float64 scalar
    assert (np.float64(2.0) * x).dtype == np.float32
    assert (tp.constant([1, 2]) + np.int64(3)).dtype == np.int32
    with pytest.raises(TypeError, match="int32"):
        tp.constant([1, 2]) * np.float64(0.5)
    with pytest.raises(TypeError, match=r"float64.*float32|float32.*float64"):
        x * np.array([2.0, 3.0])  # arrays keep their dtype


def test_str_shows_float32_precision_and_variables_as_variables():
    assert str(tp.constant(0.5204999)) == "tp.Tensor(0.5204999, shape=(), dtype=float32)"
    assert str(tp.Variable(1.5, name="v")).startswith("<tp.Variable 'v' shape=() dtype=float32")


def test_the_operators_declared_for_type_checkers_are_the_ones_bound_at_import():
    # Tensor declares its operators under TYPE_CHECKING (tapefit.core.operators binds them), so
    # that pyright and mypy accept `x * y` in users' code; the two lists must not drift apart.
    import ast
    import inspect

    from tapefit.core import operators, tensor

    tree = ast.parse(inspect.getsource(tensor))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Tensor"]
    (block,) = [n for n in cls.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    declared = {n.name for n in block.body if isinstance(n, ast.FunctionDef)}
    bound = {f"__{name}__" for name in operators._BINARY} | {f"__r{name}__" for name in operators._BINARY}
    bound |= {"__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__neg__", "__abs__", "__invert__"}
    bound.add("__getitem__")
    assert declared == bound
    for name in declared:
        assert getattr(tp.Tensor, name) is not getattr(object, name, None), name
