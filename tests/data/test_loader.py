"""The batch loader: coverage, seeded shuffling, drop_last, state, structure, errors."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp
from tapefit.data.loader import BatchLoader


def data(n=10):
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    return x, np.arange(n)


def epoch_labels(loader):
    return [yb.tolist() for _, yb in loader]


def test_every_sample_once_per_epoch_last_partial_batch_kept():
    x, y = data(10)
    loader = BatchLoader(x, y, batch_size=4, seed=1)
    assert len(loader) == loader.num_batches == 3
    batches = epoch_labels(loader)
    assert [len(b) for b in batches] == [4, 4, 2]
    assert sorted(label for batch in batches for label in batch) == list(range(10))
    for xb, yb in loader:
        np.testing.assert_array_equal(xb, x[yb])  # x and y stay paired


def test_drop_last():
    x, y = data(10)
    loader = BatchLoader(x, y, batch_size=4, drop_last=True, seed=1)
    assert len(loader) == 2
    assert [len(b) for b in epoch_labels(loader)] == [4, 4]
    assert len(BatchLoader(x, y, batch_size=5, drop_last=True)) == 2  # an exact fit drops nothing
    with pytest.raises(ValueError, match="leaves no batch of the 10 samples"):
        BatchLoader(x, y, batch_size=11, drop_last=True)


def test_shuffling_is_seeded_and_new_every_epoch():
    x, y = data(50)
    a, b = BatchLoader(x, y, batch_size=50, seed=7), BatchLoader(x, y, batch_size=50, seed=7)
    first_a, first_b = epoch_labels(a), epoch_labels(b)
    assert first_a == first_b
    assert first_a[0] != list(range(50))
    assert epoch_labels(a) != first_a  # a new order the next epoch
    assert epoch_labels(BatchLoader(x, y, batch_size=50, seed=8)) != first_a


def test_a_negative_seed_is_a_seed():
    x, y = data(30)
    first = epoch_labels(BatchLoader(x, y, batch_size=30, seed=-2))
    assert first == epoch_labels(BatchLoader(x, y, batch_size=30, seed=-2))
    assert first != epoch_labels(BatchLoader(x, y, batch_size=30, seed=2))


def test_global_seed_fixes_the_default_seed():
    x, y = data(30)
    tp.random.set_seed(3)
    first = epoch_labels(BatchLoader(x, y, batch_size=30))
    tp.random.set_seed(3)
    assert epoch_labels(BatchLoader(x, y, batch_size=30)) == first


def test_no_shuffle_keeps_the_order_and_draws_nothing():
    x, y = data(10)
    tp.random.set_seed(0)
    state = tp.random.get_state()
    loader = BatchLoader(x, y, batch_size=3, shuffle=False)
    assert tp.random.get_state() == state
    assert [label for batch in epoch_labels(loader) for label in batch] == list(range(10))
    assert loader.epoch_order() is None


def test_state_round_trip_repeats_the_orders():
    x, y = data(20)
    loader = BatchLoader(x, y, batch_size=5, seed=2)
    loader.epoch_order()
    state = loader.get_state()
    expected = [loader.epoch_order() for _ in range(2)]
    other = BatchLoader(x, y, batch_size=5, seed=99)
    other.set_state(state)
    for order in expected:
        np.testing.assert_array_equal(other.epoch_order(), order)


def test_batch_by_index_in_a_given_order():
    x, y = data(10)
    loader = BatchLoader(x, y, batch_size=4, seed=0)
    order = loader.epoch_order()
    xb, yb = loader.batch(order, 2)
    np.testing.assert_array_equal(yb, order[8:])
    np.testing.assert_array_equal(xb, x[order[8:]])


def test_structured_inputs_and_x_only():
    x, y = data(6)
    loader = BatchLoader({"a": x, "b": y * 2}, [y, y + 1], batch_size=4, shuffle=False)
    xb, yb = next(iter(loader))
    assert set(xb) == {"a", "b"} and isinstance(yb, list)
    np.testing.assert_array_equal(xb["b"], 2 * yb[0])
    np.testing.assert_array_equal(yb[1], yb[0] + 1)
    only_x = BatchLoader(tp.constant(x), batch_size=4, shuffle=False)
    np.testing.assert_array_equal(next(iter(only_x)), x[:4])


def test_errors_name_the_problem():
    x, y = data(10)
    with pytest.raises(ValueError, match=r"same number of samples.*\(10, 2\).*\(9,\)"):
        BatchLoader(x, y[:9])
    with pytest.raises(ValueError, match=r"batch_size must be a positive integer, got 2\.5"):
        BatchLoader(x, y, batch_size=2.5)
    with pytest.raises(ValueError, match="x has no samples"):
        BatchLoader(x[:0], y[:0])
    with pytest.raises(ValueError, match="x must have a batch"):
        BatchLoader(np.float32(1.0))
    with pytest.raises(TypeError, match="x must be a numeric array"):
        BatchLoader(np.array([object(), object()]))
