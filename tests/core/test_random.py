"""Seeded randomness (``tapefit/core/random.py``): repeatable programs, op seeds, dtypes, state."""

import json

import numpy as np
import pytest

import tapefit as tp


def program():
    """A small 'program' drawing from both distributions, with and without op seeds."""
    return [
        tp.random.normal([3]).numpy(),
        tp.random.uniform([2, 2]).numpy(),
        tp.random.normal([2], seed=7).numpy(),
        tp.random.uniform([4], 0, 10, dtype=tp.int32).numpy(),
    ]


def same(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a, b))


def test_dtype_none_means_float32():
    assert tp.random.normal([2], dtype=None).dtype == np.float32
    assert tp.random.uniform([2], dtype=None).dtype == np.float32


def test_same_global_seed_gives_the_same_numbers():
    tp.random.set_seed(123)
    first = program()
    tp.random.set_seed(123)
    assert same(first, program())
    tp.random.set_seed(124)
    assert not same(first, program())


def test_later_draws_differ_from_earlier_ones():
    tp.random.set_seed(0)
    a, b = tp.random.normal([4]), tp.random.normal([4])
    assert not np.array_equal(a.numpy(), b.numpy())


def test_op_seed_gives_a_stream_independent_of_other_draws():
    tp.random.set_seed(5)
    alone = [tp.random.normal([3], seed=11).numpy(), tp.random.normal([3], seed=11).numpy()]
    tp.random.set_seed(5)
    tp.random.normal([100])  # unseeded draws in between do not shift the seeded op
    tp.random.uniform([7])
    mixed = [tp.random.normal([3], seed=11).numpy(), tp.random.normal([3], seed=11).numpy()]
    assert same(alone, mixed)
    # as in TF eager: calling the same seeded op again gives new numbers
    assert not np.array_equal(alone[0], alone[1])


def test_op_seed_depends_on_the_global_seed_and_differs_between_op_seeds():
    tp.random.set_seed(1)
    a = tp.random.normal([3], seed=2).numpy()
    b = tp.random.normal([3], seed=3).numpy()
    tp.random.set_seed(99)
    c = tp.random.normal([3], seed=2).numpy()
    assert not np.array_equal(a, b) and not np.array_equal(a, c)


@pytest.mark.parametrize("dtype", [tp.float16, tp.float32, tp.float64])
def test_float_dtypes_and_default_float32(dtype):
    tp.random.set_seed(0)
    assert tp.random.normal([2]).dtype == np.float32 and tp.random.uniform([2]).dtype == np.float32
    assert tp.random.normal([2, 3], dtype=dtype).dtype == dtype
    out = tp.random.uniform([2, 3], dtype=dtype)
    assert out.dtype == dtype and out.shape == (2, 3)


@pytest.mark.parametrize("dtype", [tp.int32, tp.int64])
def test_integer_uniform_needs_maxval_and_stays_in_range(dtype):
    with pytest.raises(ValueError, match="maxval"):
        tp.random.uniform([3], dtype=dtype)
    tp.random.set_seed(0)
    out = tp.random.uniform([1000], minval=-2, maxval=3, dtype=dtype)
    assert out.dtype == dtype
    assert set(np.unique(out.numpy()).tolist()) == {-2, -1, 0, 1, 2}  # maxval excluded


def test_integer_uniform_needs_minval_below_maxval():
    with pytest.raises(ValueError, match="minval < maxval"):
        tp.random.uniform([3], minval=5, maxval=5, dtype=tp.int32)


def test_distribution_parameters():
    tp.random.set_seed(0)
    n = tp.random.normal([20000], mean=2.0, stddev=3.0).numpy()
    assert abs(n.mean() - 2.0) < 0.1 and abs(n.std() - 3.0) < 0.1
    u = tp.random.uniform([20000], minval=-2.0, maxval=5.0).numpy()
    assert u.min() >= -2.0 and u.max() < 5.0
    assert abs(u.mean() - 1.5) < 0.1
    t = tp.random.normal([3], mean=tp.constant(10.0), stddev=tp.constant(0.0))
    np.testing.assert_array_equal(t.numpy(), [10.0, 10.0, 10.0])


def test_bad_arguments_are_clear_errors():
    with pytest.raises(TypeError, match="floating"):
        tp.random.normal([2], dtype=tp.int32)
    with pytest.raises(TypeError, match="floating"):
        tp.random.uniform([2], dtype=tp.bool)
    with pytest.raises(ValueError, match="negative"):
        tp.random.normal([-1])
    with pytest.raises(TypeError, match="list of ints"):
        tp.random.uniform([1.5])
    with pytest.raises(TypeError, match="mean"):
        tp.random.normal([2], mean="zero")


def test_parameters_that_do_not_fit_the_shape_are_clear_errors():
    for draw in (
        lambda: tp.random.normal([2], mean=np.zeros(3)),
        lambda: tp.random.normal([2], stddev=np.ones((2, 2))),  # would silently give shape (2, 2)
        lambda: tp.random.uniform([2], maxval=np.ones(3)),
    ):
        with pytest.raises(ValueError, match=r"random\.(normal|uniform): .* shape \(2,\)"):
            draw()
    assert tp.random.normal([2, 3], mean=np.arange(3.0)).shape == (2, 3)  # broadcasting is fine


def test_set_seed_none_clears_the_global_seed_as_tf():
    tp.random.set_seed(None)
    assert tp.random.get_state()["seed"] is None
    assert tp.random.normal([2]).shape == (2,)
    tp.random.set_seed(5)
    first = tp.random.normal([3], seed=1).numpy()
    tp.random.set_seed(None)
    tp.random.set_seed(5)
    np.testing.assert_array_equal(tp.random.normal([3], seed=1).numpy(), first)


def test_seeds_must_be_ints():
    for bad in (1.5, "1"):
        with pytest.raises(TypeError, match="seed must be an int"):
            tp.random.set_seed(bad)
        with pytest.raises(TypeError, match="seed must be an int"):
            tp.random.normal([2], seed=bad)
        with pytest.raises(TypeError, match="seed must be an int"):
            tp.nn.dropout(tp.ones([2]), 0.5, seed=bad)
    tp.random.set_seed(-7)  # int64 seeds, negative ones too, as in TF
    first = tp.random.uniform([2], seed=-1).numpy()
    tp.random.set_seed(-7)
    np.testing.assert_array_equal(tp.random.uniform([2], seed=-1).numpy(), first)
    tp.random.set_seed(np.int64(3))
    assert tp.random.normal([2], seed=tp.constant(4)).shape == (2,)


def test_get_state_set_state_round_trip():
    tp.random.set_seed(42)
    tp.random.normal([5])
    tp.random.normal([2], seed=3)
    state = tp.random.get_state()
    json.dumps(state)  # plain data, fit for a checkpoint
    expected = program()
    tp.random.set_seed(1000)  # disturb everything
    program()
    tp.random.set_state(state)
    assert same(expected, program())
    tp.random.set_state(json.loads(json.dumps(state)))
    assert same(expected, program())


def test_set_state_restores_op_seed_streams_created_later_too():
    tp.random.set_seed(8)
    state = tp.random.get_state()
    first = tp.random.normal([3], seed=21).numpy()
    tp.random.set_seed(9)
    tp.random.set_state(state)
    assert np.array_equal(first, tp.random.normal([3], seed=21).numpy())


def test_importable_by_its_dotted_name_as_tp_nn_and_tp_math_are():
    from tapefit.random import normal, set_seed

    assert (normal, set_seed) == (tp.random.normal, tp.random.set_seed)
