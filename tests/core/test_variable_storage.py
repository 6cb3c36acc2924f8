"""Variable.assign* write in place only when nothing else holds the array (docs/architecture.md)."""

import gc
import weakref

import numpy as np

import tapefit as tp


def test_assign_writes_in_place_when_the_variable_is_the_only_holder():
    v = tp.Variable(np.ones(3, np.float32))
    # A weak reference: an id() could match a new array at the freed one's address.
    storage = weakref.ref(v._value)
    v.assign_sub(tp.constant([1.0, 1.0, 1.0]))
    v.assign_add([2.0, 2.0, 2.0])
    v.assign(np.full(3, 5.0, np.float32))
    assert v._value is storage()
    np.testing.assert_array_equal(v.numpy(), [5.0, 5.0, 5.0])


def test_assign_never_changes_a_value_a_live_tape_saved():
    v = tp.Variable([3.0, 3.0])
    with tp.GradientTape() as tape:
        y = v * v
    v.assign([100.0, 100.0])
    v.assign_add([1.0, 1.0])
    np.testing.assert_array_equal(tape.gradient(y, v).numpy(), [6.0, 6.0])
    np.testing.assert_array_equal(y.numpy(), [9.0, 9.0])


def test_assign_never_changes_views_or_arrays_handed_out():
    v = tp.Variable([1.0, 2.0])
    alias = tp.identity(v)
    view = tp.reshape(v, [2, 1])
    array = np.asarray(v)
    copy = v.numpy()
    v.assign_sub([1.0, 1.0])
    np.testing.assert_array_equal(alias.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(view.numpy(), [[1.0], [2.0]])
    np.testing.assert_array_equal(array, [1.0, 2.0])
    copy[0] = 42.0  # numpy() is a copy: writing to it leaves the variable alone
    np.testing.assert_array_equal(v.numpy(), [0.0, 1.0])


def test_in_place_again_once_the_tape_is_gone():
    v = tp.Variable([1.0, 2.0])
    with tp.GradientTape() as tape:
        y = tp.reduce_sum(v * v)
    tape.gradient(y, v)
    del tape, y
    gc.collect()
    storage = weakref.ref(v._value)
    v.assign_add([1.0, 1.0])
    assert v._value is storage()


def test_a_variable_made_from_a_read_only_view_can_still_be_assigned():
    t = tp.constant([1.0, 2.0])
    v = tp.Variable(tp.constant(np.asarray(t)))  # np.asarray(t) is a read-only view
    del t
    v.assign_add([1.0, 1.0])
    v.assign([0.0, 0.0])
    np.testing.assert_array_equal(v.numpy(), [0.0, 0.0])


def test_tensors_do_not_change_when_their_source_array_is_written():
    source = np.array([1.0, 2.0], np.float32)
    t = tp.constant(source)
    r = tp.reshape(source, [2, 1])
    x = tp.Variable(2.0)
    with tp.GradientTape() as tape:
        y = tp.reduce_sum(x * source)
    source[:] = 100.0
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(r.numpy(), [[1.0], [2.0]])
    assert float(tape.gradient(y, x)) == 3.0


def test_a_variable_made_from_a_view_never_writes_into_the_array_it_views():
    # The view is the variable's only holder, yet its memory belongs to another tensor.
    x = tp.constant([1.0, 2.0, 3.0])
    v = tp.Variable(x[0:2])
    v.assign_add([10.0, 10.0])
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(v.numpy(), [11.0, 12.0])
    a = tp.Variable([1.0, 2.0, 3.0])
    b = tp.Variable(tp.reshape(a, [3, 1])[1:])
    b.assign([[0.0], [0.0]])
    b.assign_sub([[1.0], [1.0]])
    np.testing.assert_array_equal(a.numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(b.numpy(), [[-1.0], [-1.0]])


def test_assigning_a_view_never_lets_later_assigns_write_into_its_source():
    x = tp.constant([[1.0, 2.0], [3.0, 4.0]])
    v = tp.Variable([0.0, 0.0])
    held = tp.identity(v)  # v's array is shared, so assign swaps in the value given
    v.assign(x[1])  # the slice tensor dies here; v is left holding a view of x's array
    del held
    v.assign_add([1.0, 1.0])
    np.testing.assert_array_equal(x.numpy(), [[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(v.numpy(), [4.0, 5.0])
