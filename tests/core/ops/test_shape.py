"""Shape, indexing and gathering ops (``tapefit/core/ops/shape.py``): values against NumPy,
gradients against finite differences (first and second order), and the errors for bad input.

Second-order checks use a smooth function of the op's output (``sin``), so that the
gradient op itself (a scatter, a slice, a fold) must be differentiable.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tapefit as tp

check = tp.testing.check_gradients
RNG = np.random.default_rng(7)


def _x(*shape: int) -> np.ndarray:
    return RNG.normal(size=shape)


def _grad(f, x):
    """The tape gradient of ``sum(f(x))`` at ``x`` (a float64 constant)."""
    x = tp.constant(x)
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = tp.reduce_sum(f(x))
    return tape.gradient(y, x).numpy()


# -- reshape, expand_dims, squeeze, transpose, broadcast_to ------------------------


@pytest.mark.parametrize("shape", [(6, 2), [-1], (3, -1, 2), (2, 2, 3), [12]])
def test_reshape(shape):
    x = _x(3, 4)
    np.testing.assert_array_equal(tp.reshape(x, shape).numpy(), x.reshape(shape))
    check(lambda x: tp.sin(tp.reshape(x, shape)), x, order=2)


def test_reshape_takes_an_integer_tensor_shape():
    x = _x(2, 3)
    assert tp.reshape(x, tp.constant([3, 2])).shape == (3, 2)


@pytest.mark.parametrize("shape", [[5], [-1, -1], [-2, -6], [-1, 5], [2.0, 6.0]])
def test_reshape_rejects_bad_shapes(shape):
    with pytest.raises((ValueError, TypeError), match=r"reshape"):
        tp.reshape(_x(3, 4), shape)


def test_expand_dims_and_squeeze_name_a_non_int_axis():
    x = _x(2, 1)
    with pytest.raises(TypeError, match=r"expand_dims: axis must be an int, got 1\.0"):
        tp.expand_dims(x, 1.0)
    with pytest.raises(TypeError, match=r"squeeze: axis must be None, an int or a list of ints, got 1\.0"):
        tp.squeeze(x, 1.0)
    with pytest.raises(TypeError, match=r"squeeze: axis must be an int, got 1\.0"):
        tp.squeeze(x, [1.0])
    assert tp.squeeze(x, (1,)).shape == (2,)


def test_concat_and_stack_take_python_data_in_the_tensors_dtype():
    # weak typing, as in binary ops: the list adopts float64 instead of clashing as float32
    x = tp.constant([[1.0, 2.0]], tp.float64)
    for out in (
        tp.concat([x, [[3.0, 4.0]]], 0),
        tp.concat([[[3.0, 4.0]], x], 0),
        tp.stack([x, [[3.0, 4.0]]]),
    ):
        assert out.dtype == np.float64
    np.testing.assert_array_equal(tp.concat([[[0.0, 0.0]], x], 0).numpy(), [[0.0, 0.0], [1.0, 2.0]])
    with pytest.raises(TypeError, match=r"float64.*float32"):
        tp.concat([x, np.zeros((1, 2), np.float32)], 0)  # arrays keep their dtype


def test_reshape_error_names_the_shapes():
    with pytest.raises(ValueError, match=re.escape("shape (3, 4) (12 elements) to [5]")):
        tp.reshape(_x(3, 4), [5])


def test_reshape_and_broadcast_to_of_a_variable_to_its_own_shape_give_a_tensor():
    # Not the variable itself: that would be a live alias that later assigns change.
    v = tp.Variable([1.0, 2.0])
    with tp.GradientTape() as tape:
        same = tp.reshape(v, [2])
        spread = tp.broadcast_to(v, (2,))
        y = tp.reduce_sum(same * 3.0 + spread)
    assert type(same) is tp.Tensor and type(spread) is tp.Tensor
    v.assign([5.0, 5.0])
    np.testing.assert_array_equal(same.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(spread.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(tape.gradient(y, v).numpy(), [4.0, 4.0])


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_expand_dims(axis):
    x = _x(2, 3)
    np.testing.assert_array_equal(tp.expand_dims(x, axis).numpy(), np.expand_dims(x, axis))
    check(lambda x: tp.sin(tp.expand_dims(x, axis)), x, order=2)


@pytest.mark.parametrize("axis", [3, -4])
def test_expand_dims_axis_out_of_range(axis):
    with pytest.raises(ValueError, match=re.escape("(2, 3)")):
        tp.expand_dims(_x(2, 3), axis)


@pytest.mark.parametrize("axis", [None, 0, -1, [0, 2], (2,)])
def test_squeeze(axis):
    x = _x(1, 3, 1)
    expected = np.squeeze(x, axis=None if axis is None else tuple(np.atleast_1d(axis)))
    np.testing.assert_array_equal(tp.squeeze(x, axis).numpy(), expected)
    check(lambda x: tp.sin(tp.squeeze(x, axis)), x, order=2)


@pytest.mark.parametrize("axis", [1, 3, -4, [0, 5]])
def test_squeeze_rejects_bad_axes(axis):
    # axis 3 of a rank-3 tensor used to wrap around to axis 0 and squeeze it silently.
    with pytest.raises(ValueError, match=r"squeeze: axis"):
        tp.squeeze(_x(1, 3, 1), axis)


@pytest.mark.parametrize("perm", [None, [1, 0, 2], [2, 0, 1], [-1, 0, 1], (0, 1, 2)])
def test_transpose(perm):
    x = _x(2, 3, 4)
    np.testing.assert_array_equal(tp.transpose(x, perm).numpy(), np.transpose(x, perm))
    check(lambda x: tp.sin(tp.transpose(x, perm)), x, order=2)


@pytest.mark.parametrize("perm", [[0, 3, 1], [0, 1], [0, 0, 1], [0, 1, 2, 3]])
def test_transpose_rejects_bad_perms(perm):
    # [0, 3, 1] used to pass as [0, 0, 1] after a modulo, then fail in NumPy or permute wrongly.
    with pytest.raises(ValueError, match=re.escape(f"transpose: perm {perm} is not a permutation")):
        tp.transpose(_x(2, 3, 4), perm)


@pytest.mark.parametrize(
    ("shape", "target"), [((3,), (2, 3)), ((2, 1), (2, 4)), ((1, 1), (3, 2, 5)), ((), (2,))]
)
def test_broadcast_to(shape, target):
    x = _x(*shape)
    np.testing.assert_array_equal(tp.broadcast_to(x, target).numpy(), np.broadcast_to(x, target))
    check(lambda x: tp.sin(tp.broadcast_to(x, target)), x, order=2)


def test_broadcast_to_sums_the_gradient():
    np.testing.assert_array_equal(
        _grad(lambda x: tp.broadcast_to(x, (4, 2, 3)), _x(2, 1)), np.full((2, 1), 12.0)
    )


@pytest.mark.parametrize(("shape", "target"), [((3,), (4,)), ((2, 3), (3,)), ((2, 3), (2, 6))])
def test_broadcast_to_rejects_incompatible_shapes(shape, target):
    with pytest.raises(
        ValueError, match=re.escape(f"shape {shape} cannot be broadcast to shape {list(target)}")
    ):
        tp.broadcast_to(_x(*shape), target)


# -- concat, stack, unstack, split --------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis):
    a, b = _x(2, 3), _x(2, 3)
    np.testing.assert_array_equal(tp.concat([a, b, a], axis).numpy(), np.concatenate([a, b, a], axis))
    check(lambda a, b: tp.sin(tp.concat([a, b, a], axis)), a, b, order=2)


def test_concat_of_different_lengths():
    a, b = _x(1, 3), _x(4, 3)
    np.testing.assert_array_equal(tp.concat([a, b], 0).numpy(), np.concatenate([a, b]))
    check(lambda a, b: tp.sin(tp.concat([a, b], 0)), a, b)


def test_concat_errors_name_the_shapes():
    with pytest.raises(
        ValueError, match=re.escape("shapes (2, 3), (2, 4) must match in every axis but axis 0")
    ):
        tp.concat([_x(2, 3), _x(2, 4)], 0)
    with pytest.raises(ValueError, match=re.escape("(2, 3), (2, 3, 1)")):
        tp.concat([_x(2, 3), _x(2, 3, 1)], 0)
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        tp.concat([_x(2, 3), _x(2, 3)], 2)
    with pytest.raises(TypeError, match="cannot mix dtypes float64, float32"):
        tp.concat([_x(2), tp.ones([2])], 0)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack_and_unstack(axis):
    a, b = _x(2, 3), _x(2, 3)
    stacked = tp.stack([a, b], axis)
    np.testing.assert_array_equal(stacked.numpy(), np.stack([a, b], axis))
    parts = tp.unstack(stacked, axis=axis)
    assert len(parts) == 2
    np.testing.assert_array_equal(parts[1].numpy(), b)
    check(lambda a, b: tp.sin(tp.stack([a, b], axis)), a, b, order=2)
    check(lambda s: tp.sin(tp.unstack(s, axis=axis)[1]), stacked.numpy(), order=2)


def test_stack_rejects_different_shapes():
    with pytest.raises(ValueError, match=re.escape("[(2,), (3,)]")):
        tp.stack([_x(2), _x(3)])


def test_unstack_of_an_empty_axis_is_an_empty_list():
    assert tp.unstack(np.zeros((0, 3))) == []


@pytest.mark.parametrize("splits", [3, [1, 2, 3], [2, -1, 1], tp.constant(2), tp.constant([4, 2])])
def test_split(splits):
    x = _x(6, 2)
    parts = tp.split(x, splits)
    if isinstance(splits, tp.Tensor):
        splits = splits.numpy().tolist()
    if isinstance(splits, list):
        sizes = [6 - (sum(splits) + 1) if n == -1 else n for n in splits]
        expected = np.split(x, np.cumsum(sizes)[:-1])
    else:
        expected = np.split(x, splits)
    assert len(parts) == len(expected)
    for got, want in zip(parts, expected):
        np.testing.assert_array_equal(got.numpy(), want)
    # Only one part used: the others get zero gradient.
    check(lambda x: tp.sin(tp.split(x, splits)[-1]), x, order=2)


@pytest.mark.parametrize("splits", [4, 0, [1, 2], [3, 4], [-1, -1], []])
def test_split_rejects_bad_sizes(splits):
    with pytest.raises(ValueError, match=re.escape("(6, 2)")):
        tp.split(_x(6, 2), splits)


# -- tile ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "multiples"),
    [((2, 3), [2, 1]), ((2, 3), [3, 2]), ((3,), [1]), ((2, 1, 2), [1, 3, 2]), ((), [])],
)
def test_tile(shape, multiples):
    x = _x(*shape)
    np.testing.assert_array_equal(tp.tile(x, multiples).numpy(), np.tile(x, multiples))
    check(lambda x: tp.sin(tp.tile(x, multiples)), x, order=2)


def test_tile_gradient_counts_the_copies():
    np.testing.assert_array_equal(_grad(lambda x: tp.tile(x, [2, 3]), _x(2, 2)), np.full((2, 2), 6.0))
    np.testing.assert_array_equal(_grad(lambda x: tp.tile(x, [0, 3]), _x(2, 2)), np.zeros((2, 2)))


@pytest.mark.parametrize("multiples", [[2], [2, 1, 1], [2, -1]])
def test_tile_rejects_bad_multiples(multiples):
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"tile: multiples {multiples} must have one non-negative entry per axis of shape (2, 3)"
        ),
    ):
        tp.tile(_x(2, 3), multiples)


# -- pad ----------------------------------------------------------------------------

PADDINGS = [[[1, 2], [0, 1]], [[0, 0], [2, 2]], [[2, 1], [3, 0]]]


@pytest.mark.parametrize("paddings", PADDINGS)
@pytest.mark.parametrize("mode", ["CONSTANT", "REFLECT", "SYMMETRIC", "reflect"])
def test_pad(mode, paddings):
    x = _x(3, 4)
    np.testing.assert_array_equal(tp.pad(x, paddings, mode).numpy(), np.pad(x, paddings, mode=mode.lower()))
    check(lambda x: tp.sin(tp.pad(x, paddings, mode)), x, order=2)


def test_pad_constant_values_and_dtype():
    x = tp.constant([[1, 2], [3, 4]])
    out = tp.pad(x, [[1, 0], [0, 1]], constant_values=9)
    assert out.dtype == tp.int32
    np.testing.assert_array_equal(out.numpy(), [[9, 9, 9], [1, 2, 9], [3, 4, 9]])
    f = tp.pad(tp.ones([1]), tp.constant([[2, 1]]), constant_values=-0.5)
    np.testing.assert_array_equal(f.numpy(), np.array([-0.5, -0.5, 1, -0.5], np.float32))


def test_pad_mirror_gradient_adds_up_the_copies():
    # REFLECT of [a, b, c] by (2, 2) is [c, b, a, b, c, b, a]: a twice, b three times, c twice.
    np.testing.assert_array_equal(_grad(lambda x: tp.pad(x, [[2, 2]], "REFLECT"), _x(3)), [2.0, 3.0, 2.0])
    # SYMMETRIC by (2, 1) is [b, a, a, b, c, c].
    np.testing.assert_array_equal(_grad(lambda x: tp.pad(x, [[2, 1]], "SYMMETRIC"), _x(3)), [2.0, 2.0, 2.0])


def test_pad_errors():
    x = _x(3, 4)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "paddings must have shape (2, 2), one [before, after] pair per axis of shape (3, 4); got shape (1, 2)"
        ),
    ):
        tp.pad(x, [[1, 1]])
    with pytest.raises(ValueError, match="non-negative"):
        tp.pad(x, [[1, 1], [-1, 0]])
    with pytest.raises(
        ValueError,
        match=re.escape(
            "REFLECT paddings [3, 0] are too large for axis 0 of shape (3, 4) (at most 2 per side)"
        ),
    ):
        tp.pad(x, [[3, 0], [0, 0]], "REFLECT")
    with pytest.raises(ValueError, match=re.escape("SYMMETRIC paddings [0, 5] are too large for axis 1")):
        tp.pad(x, [[0, 0], [0, 5]], "SYMMETRIC")
    with pytest.raises(ValueError, match="mode must be one of CONSTANT, REFLECT, SYMMETRIC, got 'wrap'"):
        tp.pad(x, [[0, 0], [0, 1]], "wrap")
    with pytest.raises(TypeError, match=re.escape("cannot convert 0.5 to a tensor of dtype int32")):
        tp.pad(tp.constant([1, 2]), [[1, 1]], constant_values=0.5)
    with pytest.raises(TypeError, match="cannot mix dtypes float64, float32"):
        tp.pad(x, [[0, 0], [0, 1]], constant_values=tp.constant(1.0))


def test_pad_reflect_at_the_limit_matches_numpy():
    x = _x(3, 2)
    np.testing.assert_array_equal(
        tp.pad(x, [[2, 2], [1, 1]], "REFLECT").numpy(), np.pad(x, [[2, 2], [1, 1]], "reflect")
    )
    np.testing.assert_array_equal(
        tp.pad(x, [[3, 3], [2, 2]], "SYMMETRIC").numpy(), np.pad(x, [[3, 3], [2, 2]], "symmetric")
    )
    check(lambda x: tp.sin(tp.pad(x, [[3, 3], [2, 2]], "SYMMETRIC")), x, order=2)


# -- gather -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("axis", "indices"),
    [(0, [2, 0, 2]), (1, [[3, 0], [1, 1]]), (-1, [0, 0, 3, 1]), (-2, 1), (2, np.array([1, 0], np.int64))],
)
def test_gather(axis, indices):
    x = _x(3, 2, 4) if axis != 1 else _x(3, 4, 2)
    np.testing.assert_array_equal(tp.gather(x, indices, axis=axis).numpy(), np.take(x, indices, axis=axis))
    check(lambda x: tp.sin(tp.gather(x, indices, axis=axis)), x, order=2)


def _batched_gather(params: np.ndarray, indices: np.ndarray, axis: int, batch_dims: int) -> np.ndarray:
    """TF's batched gather written as loops over the batch axes (the reference)."""
    if batch_dims == 0:
        return np.take(params, indices, axis=axis)
    return np.stack([_batched_gather(p, i, axis - 1, batch_dims - 1) for p, i in zip(params, indices)])


@pytest.mark.parametrize(
    ("params_shape", "indices_shape", "axis", "batch_dims"),
    [
        ((2, 5), (2, 3), 1, 1),
        ((2, 5, 3), (2, 4), None, 1),
        ((2, 3, 5, 2), (2, 4), 2, 1),
        ((2, 3, 4), (2, 3, 2), -1, -1),
        ((2, 3, 4, 2), (2, 3, 2, 2), 2, 2),
        ((2, 3, 4), (2, 2, 2), 2, 1),
    ],
)
def test_gather_batch_dims(params_shape, indices_shape, axis, batch_dims):
    x = _x(*params_shape)
    b = batch_dims % len(indices_shape)
    a = b if axis is None else axis % len(params_shape)
    indices = RNG.integers(0, params_shape[a], size=indices_shape)
    expected = _batched_gather(x, indices, a, b)
    got = tp.gather(x, indices, axis=axis, batch_dims=batch_dims)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got.numpy(), expected)
    check(lambda x: tp.sin(tp.gather(x, indices, axis=axis, batch_dims=batch_dims)), x, order=2)


def test_gather_repeated_indices_accumulate_on_a_variable():
    table = tp.Variable(np.arange(6.0).reshape(3, 2))
    with tp.GradientTape() as tape:
        y = tp.reduce_sum(tp.gather(table, [2, 0, 2, 2]))
    np.testing.assert_array_equal(tape.gradient(y, table).numpy(), [[1, 1], [0, 0], [3, 3]])


def test_gather_second_order_of_a_smooth_function():
    x = tp.constant(_x(4))
    idx = [1, 3, 1]
    with tp.GradientTape() as outer:
        outer.watch(x)
        with tp.GradientTape() as inner:
            inner.watch(x)
            y = tp.reduce_sum(tp.gather(x, idx) ** 3)
        g = inner.gradient(y, x)
        gg = tp.reduce_sum(g * g)
    counts = np.array([0, 2, 0, 1])
    # g = 3 c x^2, so d(sum g^2)/dx = 2 g * 6 c x = 36 c^2 x^3
    np.testing.assert_allclose(outer.gradient(gg, x).numpy(), 36 * counts**2 * x.numpy() ** 3)


def test_gather_errors():
    x = _x(3, 4)
    with pytest.raises(
        IndexError,
        match=re.escape("gather: index 3 is out of range [0, 3) for axis 0 of params of shape (3, 4)"),
    ):
        tp.gather(x, [0, 3])
    with pytest.raises(IndexError, match=re.escape("index -1 is out of range [0, 4)")):
        tp.gather(x, [-1], axis=1)
    with pytest.raises(TypeError, match="indices must be an integer tensor, got dtype float32"):
        tp.gather(x, [0.0, 1.0])
    with pytest.raises(ValueError, match=re.escape("axis 2 is out of range for params of shape (3, 4)")):
        tp.gather(x, [0], axis=2)
    with pytest.raises(ValueError, match=re.escape("axis (0) must not be less than batch_dims (1)")):
        tp.gather(x, [[0], [1], [2]], axis=0, batch_dims=1)
    with pytest.raises(
        ValueError, match=re.escape("(batch) axes of params (3, 4) and indices (2, 1) must match")
    ):
        tp.gather(x, [[0], [1]], axis=1, batch_dims=1)
    with pytest.raises(ValueError, match=re.escape("batch_dims=2 is out of range")):
        tp.gather(x, [0], batch_dims=2)


# -- one_hot ------------------------------------------------------------------------


def test_one_hot_defaults_and_out_of_range():
    out = tp.one_hot([0, 2, -1, 3, 1], 3)
    assert out.dtype == tp.float32
    np.testing.assert_array_equal(out.numpy(), [[1, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0], [0, 1, 0]])


@pytest.mark.parametrize("axis", [None, -1, 0, 1, 2])
def test_one_hot_axis(axis):
    indices = np.array([[0, 3], [2, 1]])
    expected = np.moveaxis(np.eye(4)[indices], -1, 2 if axis in (None, -1) else axis)
    out = tp.one_hot(indices, 4, axis=axis)
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out.numpy(), expected)


def test_one_hot_values_and_dtypes():
    ints = tp.one_hot([1, 0], 2, on_value=5, off_value=-1)
    assert ints.dtype == tp.int32
    np.testing.assert_array_equal(ints.numpy(), [[-1, 5], [5, -1]])
    assert tp.one_hot([1], 2, on_value=2.0).dtype == tp.float32
    assert tp.one_hot([1], 2, dtype=tp.float64).dtype == tp.float64
    assert tp.one_hot([1], 2, on_value=tp.constant(1.0, tp.float64)).dtype == tp.float64
    flags = tp.one_hot(tp.constant([1], tp.int64), 3, on_value=True, off_value=False)
    np.testing.assert_array_equal(flags.numpy(), [[False, True, False]])


def test_one_hot_errors():
    with pytest.raises(TypeError, match="indices must be an integer tensor, got dtype float32"):
        tp.one_hot([0.0], 2)
    with pytest.raises(ValueError, match="depth must be non-negative"):
        tp.one_hot([0], -1)
    with pytest.raises(
        ValueError, match=re.escape("axis must be -1 or in [0, 1] for indices of shape (2,), got 2")
    ):
        tp.one_hot([0, 1], 3, axis=2)
    with pytest.raises(TypeError, match="on_value has dtype float64, but the output dtype is float32"):
        tp.one_hot([0], 2, on_value=np.float64(1), dtype=tp.float32)
    with pytest.raises(TypeError, match=r"on_value \(int32\) and off_value \(float32\) dtypes differ"):
        tp.one_hot([0], 2, on_value=1, off_value=0.0)


def test_one_hot_is_not_differentiable():
    x = tp.constant(_x(3))
    with tp.GradientTape() as tape:
        tape.watch(x)
        hot = tp.one_hot(tp.cast(x > 0, tp.int32), 2)
        y = tp.reduce_sum(hot * 2.0)
    assert tape.gradient(y, x) is None


# -- getitem ------------------------------------------------------------------------

KEYS = [
    1,
    -1,
    (0, 2),
    (-1, -2),
    slice(1, None),
    slice(None, None, -1),
    (slice(None), slice(None, None, 2)),
    (slice(3, 0, -2), -1),
    None,
    (None, 1),
    Ellipsis,
    (Ellipsis, 1),
    (1, Ellipsis, None),
    [0, 2],
    [2, 2, 0, 2],
    (slice(None), [3, 0, 3]),
    ([0, 0, 2], [1, 1, 3]),
    np.array([[0, 1], [1, 0]]),
]


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_getitem(key):
    x = _x(3, 4)
    np.testing.assert_array_equal(tp.constant(x)[key].numpy(), x[key])
    check(lambda x: tp.sin(x[key]), x, order=2)


def test_getitem_repeated_indices_accumulate():
    np.testing.assert_array_equal(_grad(lambda x: x[[2, 2, 0, 2]], _x(3)), [1.0, 0.0, 3.0])
    np.testing.assert_array_equal(
        _grad(lambda x: x[[0, 0, 1], [1, 1, 1]], _x(2, 2)), [[0.0, 2.0], [0.0, 1.0]]
    )


def test_getitem_with_tensor_indices_and_masks():
    x = _x(3, 4)
    t = tp.constant(x)
    np.testing.assert_array_equal(t[tp.constant([2, 0])].numpy(), x[[2, 0]])
    np.testing.assert_array_equal(t[tp.constant(1)].numpy(), x[1])
    mask = x > 0
    np.testing.assert_array_equal(t[tp.constant(mask)].numpy(), x[mask])
    np.testing.assert_array_equal(_grad(lambda v: v[mask], x), mask.astype(float))
    check(lambda v: tp.sin(v[tp.constant(mask)]), x, order=2)
    assert t[[]].shape == (0, 4)


def test_getitem_errors_name_the_shape():
    t = tp.constant(_x(3, 4))
    with pytest.raises(IndexError, match=re.escape("input shapes (3, 4)")):
        t[3]
    with pytest.raises(IndexError, match=re.escape("input shapes (3, 4)")):
        t[:, [0, 4]]
    with pytest.raises(IndexError, match=re.escape("input shapes (3, 4)")):
        t[tp.constant([0.0])]


def test_getitem_of_a_variable_is_recorded():
    v = tp.Variable([1.0, 2.0, 3.0])
    with tp.GradientTape() as tape:
        y = v[0] * v[2] + v[-1]
    np.testing.assert_array_equal(tape.gradient(y, v).numpy(), [3.0, 0.0, 2.0])


# -- properties ---------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    data=st.data(),
)
def test_tile_and_transpose_match_numpy(shape, data):
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    multiples = data.draw(st.lists(st.integers(0, 3), min_size=len(shape), max_size=len(shape)))
    perm = data.draw(st.permutations(range(len(shape))))
    np.testing.assert_array_equal(tp.tile(x, multiples).numpy(), np.tile(x, multiples))
    np.testing.assert_array_equal(tp.transpose(x, perm).numpy(), np.transpose(x, perm))
    # The tile gradient of sum() counts each element's copies.
    np.testing.assert_array_equal(
        _grad(lambda v: tp.tile(v, multiples), x), np.full(shape, np.prod(multiples))
    )
