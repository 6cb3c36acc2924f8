"""matmul, tensordot and einsum (``tapefit/core/ops/linalg.py``): values against NumPy,
gradients against finite differences to second order, and the errors for bad input.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tapefit as tp

check = tp.testing.check_gradients
RNG = np.random.default_rng(11)


def _x(*shape: int) -> np.ndarray:
    return RNG.normal(size=shape)


# -- the issue's examples -----------------------------------------------------------


def test_issue_example_matmul_of_transpose():
    x = tp.constant([[1.0], [2.0], [3.0], [4.0]])
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = 2 * tp.matmul(tp.transpose(x), x)
    assert y.shape == (1, 1)
    assert float(y) == 60.0
    grad = tape.gradient(y, x)
    assert grad.dtype == tp.float32
    np.testing.assert_array_equal(grad.numpy(), 4 * x.numpy())


def test_issue_example_tensordot():
    x = tp.constant([1.0, -2.0, 3.0, 0.5])
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = 2 * tp.tensordot(x, x, axes=1)
    assert y.shape == ()
    np.testing.assert_allclose(float(y), 2 * np.dot(x.numpy(), x.numpy()))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), 4 * x.numpy())


# -- matmul -------------------------------------------------------------------------


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul_transposes(transpose_a, transpose_b):
    a = _x(3, 2) if transpose_a else _x(2, 3)
    b = _x(4, 3) if transpose_b else _x(3, 4)
    expected = (a.T if transpose_a else a) @ (b.T if transpose_b else b)
    got = tp.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
    np.testing.assert_allclose(got.numpy(), expected)
    check(lambda a, b: tp.matmul(a, b, transpose_a, transpose_b), a, b, order=2)


@pytest.mark.parametrize(
    ("shape_a", "shape_b"),
    [((2, 2, 3), (2, 3, 2)), ((2, 1, 2, 3), (3, 3, 2)), ((2, 3), (2, 3, 1)), ((1, 2, 3), (2, 3, 2))],
)
def test_matmul_batched_and_broadcast(shape_a, shape_b):
    a, b = _x(*shape_a), _x(*shape_b)
    np.testing.assert_allclose(tp.matmul(a, b).numpy(), np.matmul(a, b))
    # The broadcast batch axes are summed back to each input's shape.
    check(lambda a, b: tp.sin(tp.matmul(a, b)), a, b, order=2)


def test_matmul_batched_with_transposes():
    a, b = _x(2, 3, 2), _x(1, 4, 3)
    expected = np.matmul(np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2))
    np.testing.assert_allclose(tp.matmul(a, b, transpose_a=True, transpose_b=True).numpy(), expected)
    check(lambda a, b: tp.matmul(a, b, transpose_a=True, transpose_b=True) ** 2, a, b, order=2)


def test_matmul_operator_and_lists():
    a = tp.constant([[1.0, 2.0], [3.0, 4.0]], tp.float64)
    out = a @ [[1.0], [1.0]]
    assert out.dtype == tp.float64  # the list takes the tensor's dtype
    np.testing.assert_array_equal(out.numpy(), [[3.0], [7.0]])
    np.testing.assert_array_equal((np.eye(2) @ a).numpy(), a.numpy())


def test_matmul_of_variables():
    w = tp.Variable([[1.0, 2.0], [3.0, 4.0]])
    x = tp.constant([[1.0, 1.0]])
    with tp.GradientTape() as tape:
        y = tp.reduce_sum(tp.matmul(x, w))
    np.testing.assert_array_equal(tape.gradient(y, w).numpy(), np.ones((2, 2)))


def test_matmul_errors_name_the_shapes():
    with pytest.raises(ValueError, match=re.escape("rank >= 2, got shapes (3,) and (3, 2)")):
        tp.matmul(_x(3), _x(3, 2))
    with pytest.raises(
        ValueError,
        match=re.escape("inner dimensions differ (3 vs 2): a has shape (2, 3), b has shape (2, 3)"),
    ):
        tp.matmul(_x(2, 3), _x(2, 3))
    with pytest.raises(ValueError, match=re.escape("b has shape (3, 2) (transposed)")):
        tp.matmul(_x(2, 3), _x(3, 2), transpose_b=True)
    with pytest.raises(
        ValueError,
        match=re.escape("batch dimensions do not broadcast: a has shape (2, 2, 3), b has shape (3, 3, 2)"),
    ):
        tp.matmul(_x(2, 2, 3), _x(3, 3, 2))
    with pytest.raises(TypeError, match="cannot mix dtypes float32, float64"):
        tp.matmul(tp.ones([2, 2]), _x(2, 2))


# -- tensordot ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape_a", "shape_b", "axes"),
    [
        ((2, 3), (3, 4), 1),
        ((2, 3, 4), (3, 4, 2), 2),
        ((2, 3), (4,), 0),
        ((3,), (3,), 1),
        ((2, 3, 4), (4, 2), [[0, 2], [1, 0]]),
        ((2, 3, 4), (3, 5), [1, 0]),
        ((2, 3, 4), (4, 3), [[-1, -2], [0, 1]]),
        ((3, 2), (3, 2), [[0, 1], [0, 1]]),
        ((), (2, 3), 0),
    ],
)
def test_tensordot(shape_a, shape_b, axes):
    a, b = _x(*shape_a), _x(*shape_b)
    expected = np.tensordot(a, b, axes)
    got = tp.tensordot(a, b, axes)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got.numpy(), expected)
    check(lambda a, b: tp.sin(tp.tensordot(a, b, axes)), a, b, order=2)


def test_tensordot_with_an_empty_contraction():
    out = tp.tensordot(np.zeros((2, 0)), np.zeros((0, 3)), 1)
    np.testing.assert_array_equal(out.numpy(), np.zeros((2, 3)))


def test_tensordot_errors():
    a, b = _x(2, 3), _x(3, 4)
    with pytest.raises(ValueError, match=re.escape("axes=3 does not fit shapes (2, 3) and (3, 4)")):
        tp.tensordot(a, b, 3)
    with pytest.raises(
        ValueError, match=re.escape("axes [0] of shape (2, 3) and axes [0] of shape (3, 4) do not match")
    ):
        tp.tensordot(a, b, [[0], [0]])
    # Axis 2 of a rank-2 tensor used to wrap around to axis 0.
    with pytest.raises(
        ValueError, match=re.escape("axis 2 is out of range for a (shape (2, 3)), a tensor of rank 2")
    ):
        tp.tensordot(a, b, [[2], [0]])
    with pytest.raises(ValueError, match="repeat an axis"):
        tp.tensordot(_x(3, 3), _x(3, 3), [[0, 0], [0, 1]])
    with pytest.raises(ValueError, match="pair"):
        tp.tensordot(a, b, [[1], [0], [0]])
    with pytest.raises(TypeError, match="axes must be"):
        tp.tensordot(a, b, 1.0)


# -- einsum -------------------------------------------------------------------------

EINSUM_CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),  # implicit output: ik
    ("ba,ac", [(2, 3), (3, 4)]),  # implicit output is sorted: bc
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
    ("i,i->", [(4,), (4,)]),
    ("i,j->ij", [(3,), (2,)]),
    ("ij->ji", [(2, 3)]),
    ("ij->", [(2, 3)]),
    ("ij->j", [(2, 3)]),
    ("ij,k->ik", [(2, 3), (4,)]),  # j and k summed away in one operand each
    ("ij,jk,k->i", [(2, 3), (3, 4), (4,)]),
    ("ij,ij,ij->ij", [(2, 3), (2, 3), (2, 3)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(3, 3)]),
    ("iji->j", [(3, 2, 3)]),
    ("ii,i->i", [(3, 3), (3,)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (3, 2)]),
    ("...ij,...jk->...ik", [(2, 1, 2, 3), (3, 3, 2)]),  # "..." axes of size 1 broadcast
    ("...i,...i", [(1, 3), (4, 3)]),
    ("i...->...", [(2, 3, 2)]),
    ("...,...->...", [(2, 3), (3,)]),
    ("a...b,b->...a", [(2, 3, 4), (4,)]),
    ("Ab,bC->AC", [(2, 3), (3, 2)]),
    ("i j , j k -> i k", [(2, 3), (3, 2)]),
    ("ij,ij->", [(0, 3), (0, 3)]),
]


@pytest.mark.parametrize(("equation", "shapes"), EINSUM_CASES)
def test_einsum(equation, shapes):
    operands = [_x(*s) for s in shapes]
    expected = np.einsum(equation.replace(" ", ""), *operands)
    got = tp.einsum(equation, *operands)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-12)
    check(lambda *xs: tp.sin(tp.einsum(equation, *xs)), *operands, order=2)


def test_einsum_of_one_tensor_twice():
    x = tp.constant([1.0, 2.0, 3.0])
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = tp.einsum("i,i->", x, x)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), 2 * x.numpy())


def test_einsum_trace_gradient_is_the_identity():
    x = tp.constant(_x(3, 3))
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = tp.einsum("ii", x)
    np.testing.assert_allclose(float(y), np.trace(x.numpy()))
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), np.eye(3))


def test_einsum_third_order():
    check(lambda a, b: tp.einsum("ij,jk->ik", a, b) ** 3, _x(2, 2), _x(2, 2), order=3)


def test_einsum_dtypes():
    ints = tp.einsum("ij,j->i", tp.constant([[1, 2], [3, 4]]), [1, 1])
    assert ints.dtype == tp.int32
    np.testing.assert_array_equal(ints.numpy(), [3, 7])
    assert tp.einsum("i,i", tp.ones([2]), [1.0, 2.0]).dtype == tp.float32
    with pytest.raises(TypeError, match="cannot mix dtypes float32, float64"):
        tp.einsum("i,i", tp.ones([2]), np.ones(2))


@pytest.mark.parametrize(
    ("equation", "shapes", "message"),
    [
        ("ij,jk->ik", [(2, 3)], "has 2 operand subscripts but 1 tensors were given (shapes (2, 3))"),
        (
            "ij,jk->ik",
            [(2, 3), (4, 5)],
            "label 'j' has size 3 in operand 0 (shape (2, 3)) but size 4 in operand 1 (shape (4, 5))",
        ),
        ("ij,jk->ik", [(2, 1), (3, 4)], "label 'j' has size 1 in operand 0 (shape (2, 1)) but size 3"),
        ("ijk->i", [(2, 3)], "operand 0 has shape (2, 3) (rank 2), but its subscript 'ijk' names 3 axes"),
        ("ii->i", [(2, 3)], "label 'i' has size 2 in operand 0 (shape (2, 3)) but size 3 in operand 0"),
        ("...ij->...ij", [(3,)], "operand 0 has shape (3,) (rank 1), but its subscript '...ij' names 2 axes"),
        (
            "...i,...i->...i",
            [(2, 3), (4, 3)],
            "the '...' axes do not broadcast: size 2 in operand 0 (shape (2, 3)) but size 4 in operand 1",
        ),
        ("ij->ik", [(2, 3)], "output label 'k' appears in no input"),
        ("ij->ii", [(2, 3)], "output label 'i' appears more than once"),
        ("...ij->ij", [(4, 2, 3)], "the output must contain '...' too"),
        ("i1->i", [(2, 3)], "invalid subscript character '1'"),
        ("i......->i", [(2, 3)], "'...' appears more than once"),
        ("i->i->i", [(2,)], "more than one '->'"),
    ],
)
def test_einsum_errors(equation, shapes, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        tp.einsum(equation, *[_x(*s) for s in shapes])


def test_einsum_needs_an_equation_and_inputs():
    with pytest.raises(TypeError, match="equation string"):
        tp.einsum(_x(2), _x(2))
    with pytest.raises(ValueError, match="at least one input"):
        tp.einsum("i->i")


def test_einsum_keeps_its_inputs_for_the_gradient_but_not_its_output():
    import gc
    import weakref

    a, b = tp.constant(np.ones((2, 3))), tp.constant(np.ones((3, 4)))
    with tp.GradientTape() as tape:
        tape.watch([a, b])
        y = tp.einsum("ij,jk->ik", a, b)
        loss = tp.reduce_sum(y)
    output = weakref.ref(y._value)
    del y
    gc.collect()
    assert output() is None  # the gradient is built from the inputs only
    np.testing.assert_array_equal(tape.gradient(loss, a).numpy(), np.full((2, 3), 4.0))
