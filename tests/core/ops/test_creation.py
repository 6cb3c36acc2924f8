"""Creation ops (``tapefit/core/ops/creation.py``): shapes, values and TensorFlow's dtypes."""

import numpy as np
import pytest

import tapefit as tp


@pytest.mark.parametrize("shape", [[2, 3], (4,), 3, [], (), [0, 2], tp.constant([2, 1])])
@pytest.mark.parametrize("name, value", [("zeros", 0.0), ("ones", 1.0)])
def test_zeros_ones_shapes_and_default_float32(name, value, shape):
    out = getattr(tp, name)(shape)
    want = np.full(np.asarray(shape).tolist() if isinstance(shape, tp.Tensor) else shape, value, np.float32)
    assert isinstance(out, tp.Tensor)
    assert out.dtype == np.float32 and out.shape == want.shape
    np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("dtype", [tp.float16, tp.float64, tp.int32, tp.int64, tp.bool])
def test_zeros_ones_dtype(dtype):
    assert tp.zeros([2], dtype).dtype == dtype
    assert tp.ones([2], dtype=dtype).dtype == dtype
    assert tp.ones([2], dtype).numpy().tolist() == np.ones(2, dtype).tolist()


def test_dtype_none_means_the_float32_default():
    # As Keras 3's ops: None is the default dtype, never NumPy's float64.
    assert tp.zeros([2], None).dtype == np.float32
    assert tp.ones([2], dtype=None).dtype == np.float32
    assert tp.eye(2, dtype=None).dtype == np.float32
    assert tp.zeros_like(tp.ones([2], tp.float16), dtype=None).dtype == np.float16


@pytest.mark.parametrize(
    "shape, error, match",
    [
        ([2, -1], ValueError, "negative"),
        ([2.5], TypeError, "list of ints"),
        ("ab", TypeError, "list of ints"),
        (tp.constant([2.0]), TypeError, "float32"),
    ],
)
@pytest.mark.parametrize("fn", [tp.zeros, tp.ones, lambda s: tp.fill(s, 1.0)])
def test_bad_shapes_are_clear_errors(fn, shape, error, match):
    with pytest.raises(error, match=match):
        fn(shape)


def test_bad_dtype_is_a_clear_error():
    with pytest.raises(TypeError, match="not a dtype"):
        tp.zeros([2], "floaty")


@pytest.mark.parametrize(
    "like, dtype",
    [
        ([1.0, 2.0], np.float32),
        ([[1, 2, 3]], np.int32),
        (np.zeros((2, 2), np.float64), np.float64),
        ([True], np.bool_),
    ],
)
def test_zeros_like_ones_like_keep_shape_and_dtype(like, dtype):
    for fn, value in [(tp.zeros_like, 0), (tp.ones_like, 1)]:
        out = fn(like)
        assert out.dtype == dtype and out.shape == np.shape(like)
        np.testing.assert_array_equal(out.numpy(), np.full(np.shape(like), value, dtype))


def test_zeros_like_of_tensors_and_variables_with_dtype():
    v = tp.Variable([[1.0, 2.0]])
    assert type(tp.zeros_like(v)) is tp.Tensor
    out = tp.ones_like(v, dtype=tp.int32)
    assert out.dtype == np.int32 and out.shape == (1, 2)
    assert tp.zeros_like(tp.constant(3.0)).shape == ()


def test_creation_ops_are_constants_on_a_tape():
    x = tp.constant([1.0, 2.0])
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = tp.reduce_sum(tp.zeros_like(x) + tp.ones_like(x))
    assert tape.gradient(y, x) is None


@pytest.mark.parametrize(
    "value, dtype",
    [
        (3, np.int32),
        (2.5, np.float32),
        (True, np.bool_),
        (np.float64(1.5), np.float64),
        (tp.constant(7, tp.int64), np.int64),
    ],
)
def test_fill_takes_the_value_dtype(value, dtype):
    out = tp.fill([2, 3], value)
    assert out.dtype == dtype and out.shape == (2, 3)
    np.testing.assert_array_equal(out.numpy(), np.full((2, 3), np.asarray(value), dtype))


def test_fill_needs_a_scalar():
    with pytest.raises(ValueError, match=r"scalar.*\(2,\)"):
        tp.fill([2], [1.0, 2.0])


def test_eye():
    out = tp.eye(3)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out.numpy(), np.eye(3))
    rect = tp.eye(2, 4, dtype=tp.int32)
    assert rect.dtype == np.int32
    np.testing.assert_array_equal(rect.numpy(), np.eye(2, 4))
    batch = tp.eye(2, batch_shape=[3, 1])
    assert batch.shape == (3, 1, 2, 2)
    np.testing.assert_array_equal(batch.numpy()[2, 0], np.eye(2))
    assert tp.eye(0).shape == (0, 0)
    with pytest.raises(ValueError, match="negative"):
        tp.eye(-1)


@pytest.mark.parametrize(
    "args, kwargs, want, dtype",
    [
        ((5,), {}, [0, 1, 2, 3, 4], np.int32),
        ((2, 5), {}, [2, 3, 4], np.int32),
        ((1, 10, 3), {}, [1, 4, 7], np.int32),
        ((5, 0, -2), {}, [5, 3, 1], np.int32),
        ((0,), {}, [], np.int32),
        ((3.0,), {}, [0.0, 1.0, 2.0], np.float32),
        ((0, 1, 0.25), {}, [0.0, 0.25, 0.5, 0.75], np.float32),
        ((0, 0.3, 0.1), {}, [0.0, 0.1, 0.2], np.float32),  # not 4 elements from float rounding
        ((3,), {"dtype": tp.float64}, [0.0, 1.0, 2.0], np.float64),
        ((np.int64(3),), {}, [0, 1, 2], np.int64),
        ((0, np.float64(1.0), 0.5), {}, [0.0, 0.5], np.float64),  # the widest argument dtype
        ((tp.constant(3),), {}, [0, 1, 2], np.int32),
        ((), {"start": 1, "limit": 4}, [1, 2, 3], np.int32),
        ((0, 2.5, 1), {"dtype": tp.int32}, [0, 1], np.int32),  # arguments converted first, as TF
    ],
)
def test_range(args, kwargs, want, dtype):
    out = tp.range(*args, **kwargs)
    assert out.dtype == dtype
    np.testing.assert_allclose(out.numpy(), np.array(want, dtype), rtol=1e-7)


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        ((0, 3, 0), {}, ValueError, "delta must not be 0"),
        ((0, 1, 0.5), {"dtype": tp.int32}, ValueError, "delta must not be 0"),
        ((5, 0), {}, ValueError, "start 5 and limit 0"),
        ((0, 5, -1), {}, ValueError, "sign of delta"),
        ((True,), {}, TypeError, "int or float"),
        (("a",), {}, TypeError, "cannot convert"),
        (([1, 2],), {}, TypeError, "scalar"),
        ((3,), {"dtype": tp.bool}, TypeError, "dtype"),
    ],
)
def test_range_errors(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        tp.range(*args, **kwargs)
