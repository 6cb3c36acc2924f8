"""Reductions (``tapefit/core/ops/reduce.py``): values against NumPy for every axis form,
gradients against finite differences, TensorFlow's tie and integer rules, axis errors."""

import inspect
import warnings

import numpy as np
import pytest

import tapefit as tp
from tapefit.core.testing import check_gradients

RNG = np.random.default_rng(0)
# distinct values away from 0: max/min have no ties, prod no zeros
X = RNG.permutation(np.linspace(0.5, 1.7, 24)).reshape(2, 3, 4)

AXES = [None, 0, 1, -1, [0, 2], (1,), [-1, 0], [0, 1, 2]]

REDUCERS = {
    "reduce_sum": (tp.reduce_sum, np.sum),
    "reduce_mean": (tp.reduce_mean, np.mean),
    "reduce_max": (tp.reduce_max, np.max),
    "reduce_min": (tp.reduce_min, np.min),
    "reduce_prod": (tp.reduce_prod, np.prod),
    "reduce_logsumexp": (
        tp.reduce_logsumexp,
        lambda a, axis, keepdims: np.log(np.sum(np.exp(a), axis=axis, keepdims=keepdims)),
    ),
}


def np_axis(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def grad(f, x):
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    return tape.gradient(y, x)


# -- values ------------------------------------------------------------------------------


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("name", list(REDUCERS))
def test_reduction_values_against_numpy(name, axis, keepdims):
    op, ref = REDUCERS[name]
    x = X.astype(np.float32)
    out = op(tp.constant(x), axis=axis, keepdims=keepdims)
    want = ref(x.astype(np.float64), axis=np_axis(axis), keepdims=keepdims)
    assert out.dtype == np.float32
    assert out.shape == np.shape(want)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5)


@pytest.mark.parametrize("name", list(REDUCERS))
def test_reductions_accept_positional_axis_and_tensor_axis(name):
    op, ref = REDUCERS[name]
    np.testing.assert_allclose(op(X, 1).numpy(), ref(X, axis=1, keepdims=False), rtol=1e-12)
    np.testing.assert_allclose(
        op(X, tp.constant([0, 2])).numpy(), ref(X, axis=(0, 2), keepdims=False), rtol=1e-12
    )


@pytest.mark.parametrize("axis", [None, 0, -1, [0, 1]])
@pytest.mark.parametrize("name", ["reduce_any", "reduce_all"])
def test_any_all(name, axis):
    b = RNG.random((3, 4)) < 0.5
    b[0] = True
    b[1] = False
    ref = np.any if name == "reduce_any" else np.all
    for keepdims in (False, True):
        out = getattr(tp, name)(tp.constant(b), axis=axis, keepdims=keepdims)
        assert out.dtype == np.bool_
        np.testing.assert_array_equal(out.numpy(), ref(b, axis=np_axis(axis), keepdims=keepdims))


@pytest.mark.parametrize("name", ["reduce_any", "reduce_all"])
def test_any_all_need_bool(name):
    with pytest.raises(TypeError, match=r"bool.*float32"):
        getattr(tp, name)(tp.constant([1.0, 0.0]))


def test_integer_reductions_keep_their_dtype():
    x = tp.constant([[1, -2, 3], [4, 5, -7]])
    assert tp.reduce_sum(x).dtype == np.int32 and int(tp.reduce_sum(x)) == 4
    assert tp.reduce_prod(x, 1).numpy().tolist() == [-6, -140]
    assert tp.reduce_max(x, 0).numpy().tolist() == [4, 5, 3]
    assert tp.reduce_min(x).dtype == np.int32


def test_integer_mean_rounds_toward_zero_as_tensorflow():
    x = tp.constant([[1, 2], [-1, -2], [3, 4]])
    out = tp.reduce_mean(x, axis=1)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out.numpy(), [1, -1, 3])  # 3/2, -3/2, 7/2 truncated
    assert int(tp.reduce_mean(tp.constant([-1, -2]))) == -1


def test_bool_sum_counts():
    out = tp.reduce_sum(tp.constant([True, False, True]))
    assert out.dtype == np.int32 and int(out) == 2


def test_reducing_a_scalar_over_all_axes():
    x = tp.constant(3.0)
    for op in (tp.reduce_sum, tp.reduce_mean, tp.reduce_max, tp.reduce_prod, tp.reduce_logsumexp):
        out = op(x)
        assert out.shape == () and float(out) == pytest.approx(3.0)


def test_float16_mean_does_not_overflow_where_the_mean_fits():
    # float16 tops out at 65504: the sum overflows, the mean must not (as in TF and Keras)
    x = tp.constant(np.full((300, 300), 1000.0, np.float16))
    for axis in (None, [0, 1], 0):
        out = tp.reduce_mean(x, axis=axis)
        assert out.dtype == np.float16
        np.testing.assert_array_equal(out.numpy(), np.full(out.shape, 1000.0, np.float16))


def test_float16_mean_gradient_over_more_elements_than_float16_can_count():
    # 90000 is inf in float16, so dy / count was 0; 1 / 90000 is a float16 (subnormal) number
    x = tp.constant(np.ones((300, 300), np.float16))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tp.GradientTape() as tape:
            tape.watch(x)
            y = tp.reduce_mean(x)
        grad = tape.gradient(y, x)
    assert grad.dtype == np.float16
    np.testing.assert_allclose(grad.numpy().astype(np.float64), 1 / 90000, rtol=1e-2)


def test_mean_of_empty_is_nan_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(float(tp.reduce_mean(tp.zeros([0]))))


def test_max_of_empty_is_a_clear_error():
    with pytest.raises(ValueError, match=r"empty.*\(0,\)"):
        tp.reduce_max(tp.zeros([0]))


# -- gradients ---------------------------------------------------------------------------


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", [None, 0, -1, [0, 2]])
@pytest.mark.parametrize("name", list(REDUCERS))
def test_reduction_gradients(name, axis, keepdims):
    op = REDUCERS[name][0]
    order = 1 if name in ("reduce_max", "reduce_min") else 2
    check_gradients(lambda a: op(a, axis=axis, keepdims=keepdims), X, order=order)


def test_reduce_max_ties_share_the_gradient_equally():
    x = tp.constant([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    np.testing.assert_allclose(
        grad(lambda a: tp.reduce_max(a, axis=1), x).numpy(), [[0, 0.5, 0.5], [1 / 3] * 3]
    )
    np.testing.assert_allclose(grad(tp.reduce_max, x).numpy(), [[0, 0.5, 0.5], [0, 0, 0]])
    np.testing.assert_allclose(grad(lambda a: tp.reduce_min(a, axis=0), x).numpy(), [[1, 0, 0], [0, 1, 1]])
    np.testing.assert_allclose(grad(tp.reduce_min, x).numpy(), [[1, 0, 0], [0, 0, 0]])


@pytest.mark.parametrize(
    "x",
    [
        [[2.0, 0.0, 3.0], [1.5, -2.0, 0.5]],  # one zero in a row
        [[0.0, 4.0, 0.0], [1.5, -2.0, 0.5]],  # two zeros in a row
        [[0.0, 0.0, 0.0], [0.0, 1.0, 2.0]],  # all zeros / one zero
    ],
)
def test_reduce_prod_gradient_is_exact_with_zeros(x):
    x = np.array(x)
    g = grad(lambda a: tp.reduce_prod(a, axis=1), tp.constant(x)).numpy()
    want = np.array([[np.prod(np.delete(row, j)) for j in range(len(row))] for row in x])
    np.testing.assert_array_equal(g, want)
    check_gradients(lambda a: tp.reduce_prod(a, axis=1), x)
    check_gradients(tp.reduce_prod, x)


def test_reduce_prod_second_order_without_zeros():
    check_gradients(lambda a: tp.reduce_prod(a, axis=[0, 2], keepdims=True), X - 1.1, order=2)


def test_reduce_logsumexp_is_stable_at_1000():
    x = tp.constant([[1000.0, 1000.0], [-1000.0, -1000.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = tp.reduce_logsumexp(x, axis=1)
        g = grad(lambda a: tp.reduce_logsumexp(a, axis=1), x)
    np.testing.assert_allclose(out.numpy(), [1000 + np.log(2), -1000 + np.log(2)], rtol=1e-6)
    np.testing.assert_allclose(g.numpy(), [[0.5, 0.5], [0.5, 0.5]])
    assert float(tp.reduce_logsumexp(tp.constant([1000.0, 0.0]))) == pytest.approx(1000.0)
    check_gradients(lambda a: tp.reduce_logsumexp(a, axis=0), [1000.0, 999.0], order=2)


def test_reduce_logsumexp_of_minus_inf():
    out = tp.reduce_logsumexp(tp.constant([-np.inf, -np.inf]))
    assert float(out) == -np.inf


def test_reduce_logsumexp_needs_floats():
    with pytest.raises(TypeError, match=r"reduce_logsumexp.*int32"):
        tp.reduce_logsumexp(tp.constant([1, 2]))


# -- argmax / argmin ---------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1, None])
@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin(name, axis):
    out = getattr(tp, name)(X, axis=axis)
    want = getattr(np, name)(X, axis=0 if axis is None else axis)  # None means 0, as TF 2
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out.numpy(), want)


def test_argmax_ties_take_the_first_and_output_type():
    x = tp.constant([[1.0, 3.0, 3.0], [2.0, 2.0, 1.0]])
    out = tp.argmax(x, axis=1, output_type=tp.int32)
    assert out.dtype == np.int32 and out.numpy().tolist() == [1, 0]
    assert tp.argmin(x, axis=0).numpy().tolist() == [0, 1, 1]


def test_argmax_has_no_gradient():
    x = tp.constant([1.0, 3.0])
    assert grad(lambda a: tp.cast(tp.argmax(a), tp.float32), x) is None


def test_argmax_errors():
    with pytest.raises(ValueError, match=r"axis 2 .*rank 2"):
        tp.argmax(tp.zeros([2, 3]), axis=2)
    with pytest.raises(TypeError, match="axis"):
        tp.argmax(tp.zeros([2, 3]), axis=[0, 1])
    with pytest.raises(ValueError, match="empty"):
        tp.argmax(tp.zeros([0, 3]), axis=0)
    with pytest.raises(TypeError, match="output_type"):
        tp.argmax(tp.zeros([2]), output_type=tp.float32)


# -- norm --------------------------------------------------------------------------------

VECTOR_ORDS = ["euclidean", 2, 1, np.inf, 3, 0.5]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", [None, 0, -1])
@pytest.mark.parametrize("ord", VECTOR_ORDS)
def test_vector_norms(ord, axis, keepdims):
    x = (X - 1.1).astype(np.float32)
    out = tp.norm(x, ord=ord, axis=axis, keepdims=keepdims)
    np_ord = None if ord == "euclidean" else ord
    flat = x.reshape(-1) if axis is None else x
    want = np.linalg.norm(flat.astype(np.float64), ord=np_ord, axis=0 if axis is None else axis)
    if keepdims:
        want = np.reshape(want, [1 if axis is None or i == axis % 3 else n for i, n in enumerate(x.shape)])
    assert out.dtype == np.float32 and out.shape == np.shape(want)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5)


@pytest.mark.parametrize("ord", VECTOR_ORDS)
def test_vector_norm_gradients(ord):
    order = 1 if ord in (1, np.inf) else 2
    check_gradients(lambda a: tp.norm(a, ord=ord, axis=-1), X - 1.1, order=order)


@pytest.mark.parametrize("axis", [[0, 1], [1, 2], [-1, -2], (2, 0)])
@pytest.mark.parametrize("ord", ["fro", "euclidean", 1, np.inf])
def test_matrix_norms_over_axis_pairs(ord, axis):
    x = X - 1.1
    out = tp.norm(x, ord=ord, axis=axis)
    np_ord = "fro" if ord == "euclidean" else ord
    np.testing.assert_allclose(out.numpy(), np.linalg.norm(x, ord=np_ord, axis=tuple(axis)), rtol=1e-12)
    kept = tp.norm(x, ord=ord, axis=axis, keepdims=True)
    assert kept.shape == tuple(1 if i in {a % 3 for a in axis} else n for i, n in enumerate(x.shape))
    check_gradients(lambda a: tp.norm(a, ord=ord, axis=axis), x)


def test_norm_condition_works_in_a_python_while_loop():
    b = tp.constant([1.0, 1.0])
    steps = 0
    while tp.norm(b) < 1000:
        b = b * 2.0
        steps += 1
    assert steps == 10  # |b| = 2^k sqrt 2 first exceeds 1000 at k = 10


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"ord": -1}, ValueError, "ord"),
        ({"ord": 0}, ValueError, "ord"),
        ({"ord": "nuc"}, ValueError, "ord"),
        ({"ord": 2, "axis": [0, 1]}, ValueError, "spectral"),
        ({"ord": 1, "axis": [1, 1]}, ValueError, "two different axes"),
        ({"axis": 3}, ValueError, "axis 3 .*rank 3"),
    ],
)
def test_norm_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        tp.norm(X, **kwargs)


def test_norm_needs_floats():
    with pytest.raises(TypeError, match=r"norm.*int32"):
        tp.norm(tp.constant([3, 4]))


# -- axis errors -------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(REDUCERS))
@pytest.mark.parametrize(
    "axis, error, match",
    [
        (3, ValueError, "axis 3 is out of range for a tensor of rank 3"),
        (-4, ValueError, "axis -4 is out of range"),
        ([0, 5], ValueError, "axis 5"),
        (1.5, TypeError, "axis must be"),
        ("a", TypeError, "axis must be"),
        ([0, 1.0], TypeError, "axis must be"),
    ],
)
def test_bad_axis_is_a_clear_error(name, axis, error, match):
    with pytest.raises(error, match=match):
        REDUCERS[name][0](X, axis=axis)


def test_axis_zero_of_a_scalar_is_out_of_range():
    with pytest.raises(ValueError, match="rank 0"):
        tp.reduce_sum(tp.constant(1.0), axis=0)


@pytest.mark.parametrize(
    "name",
    ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_logsumexp"],
)
def test_reductions_default_to_all_axes_without_keepdims(name):
    # The public contract: reductions take axis=None, keepdims=False (TensorFlow's defaults)
    parameters = inspect.signature(getattr(tp, name)).parameters
    assert [(p.name, p.default) for p in list(parameters.values())[1:3]] == [
        ("axis", None),
        ("keepdims", False),
    ]
    assert getattr(tp.math, name) is getattr(tp, name)


def test_listed_op_signatures_keep_their_defaults():
    # The reference documents these signatures; positional order and defaults as in TensorFlow
    def defaults(fn):
        return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]

    assert defaults(tp.matmul) == [
        ("a", inspect.Parameter.empty),
        ("b", inspect.Parameter.empty),
        ("transpose_a", False),
        ("transpose_b", False),
    ]
    assert defaults(tp.norm)[1:4] == [("ord", "euclidean"), ("axis", None), ("keepdims", False)]
    assert defaults(tp.transpose)[1:] == [("perm", None)]
    assert [name for name, _ in defaults(tp.tensordot)] == ["a", "b", "axes"]


# -- cumsum and unsorted_segment_sum (internal: the metrics' counts) ----------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_values_and_gradients(axis, reverse):
    from tapefit.core.ops.reduce import cumsum

    expected = np.flip(np.cumsum(np.flip(X, axis), axis), axis) if reverse else np.cumsum(X, axis)
    np.testing.assert_allclose(cumsum(X, axis, reverse=reverse).numpy(), expected, rtol=1e-12)
    check_gradients(lambda x: cumsum(x, axis, reverse=reverse), X, order=2)


def test_cumsum_keeps_integer_dtypes_and_refuses_bools_and_scalars():
    from tapefit.core.ops.reduce import cumsum

    assert cumsum(np.array([1, 2, 3], np.int32)).numpy().tolist() == [1, 3, 6]
    assert cumsum(np.array([1, 2, 3], np.int32)).dtype == np.int32
    with pytest.raises(TypeError, match="cumsum needs a numeric tensor, got bool"):
        cumsum(np.array([True, False]))
    with pytest.raises(ValueError, match="rank >= 1"):
        cumsum(np.float32(1.0))


def test_unsorted_segment_sum_adds_in_order_and_drops_negative_ids():
    from tapefit.core.ops.reduce import unsorted_segment_sum

    ids = np.array([2, -1, 0, 2])
    data = RNG.normal(size=(4, 3))
    out = unsorted_segment_sum(data, ids, 4).numpy()
    np.testing.assert_array_equal(out, [data[2], np.zeros(3), data[0] + data[3], np.zeros(3)])
    # elementwise ids (the bincount path) give each element's sum, in float64
    flat_ids = np.array([[0, 1, -1], [1, 1, 0], [0, 0, 0], [2, -1, 1]])
    out = unsorted_segment_sum(data, flat_ids, 3).numpy()
    for s in range(3):
        assert out[s] == data[flat_ids == s].sum()
    ints = unsorted_segment_sum(np.array([1, 2, 3], np.int32), np.array([1, 1, 0]), 2)
    assert ints.dtype == np.int32 and ints.numpy().tolist() == [3, 3]


def test_unsorted_segment_sum_gradients():
    from tapefit.core.ops.reduce import unsorted_segment_sum

    data = RNG.normal(size=(4, 3))
    check_gradients(lambda x: unsorted_segment_sum(x, np.array([2, -1, 0, 2]), 3), data, order=2)
    ids = np.array([[0, 1, -1], [1, 1, 0], [0, 0, 0], [2, -1, 1]])
    check_gradients(lambda x: unsorted_segment_sum(x, ids, 3), data, order=2)


def test_unsorted_segment_sum_errors_name_the_problem():
    from tapefit.core.ops.reduce import unsorted_segment_sum

    with pytest.raises(IndexError, match="segment id 3 is out of range: there are 3 segments"):
        unsorted_segment_sum(np.ones(2), np.array([0, 3]), 3)
    with pytest.raises(ValueError, match=r"segment_ids of shape \(3,\) do not lead data of shape \(2,\)"):
        unsorted_segment_sum(np.ones(2), np.array([0, 1, 1]), 3)
    with pytest.raises(TypeError, match="segment_ids must be integers"):
        unsorted_segment_sum(np.ones(2), np.array([0.0, 1.0]), 3)


def test_unsorted_segment_sum_checks_the_ids_of_every_replay():
    from tapefit.core.ops.reduce import unsorted_segment_sum

    summed = tp.function(lambda data, ids: unsorted_segment_sum(data, ids, 3))
    for _ in range(3):
        np.testing.assert_array_equal(summed(np.ones(2), np.array([0, 2])).numpy(), [1.0, 0.0, 1.0])
    with pytest.raises(IndexError, match="segment id 5 is out of range"):
        summed(np.ones(2), np.array([0, 5]))
