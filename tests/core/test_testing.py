"""``tp.testing.check_gradients``: passes on right gradients, shows the worst mismatch on wrong ones."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import tapefit as tp

_counter = itertools.count()
MISMATCH = re.compile(
    r"^(?P<label>[a-z-]+) gradient mismatch \(atol=(?P<atol>\S+), rtol=(?P<rtol>\S+)\); worst at "
    r"argument (?P<arg>\d+) at index (?P<index>\([\d, ]*\)): tape (?P<tape>\S+), "
    r"finite differences (?P<numeric>\S+)$"
)


def _unique(name: str) -> str:
    return f"TestingTest{name}{next(_counter)}"


def _square_with_gradient_factor(factor: float):
    """x^2 whose registered gradient is ``factor * x`` (right for factor 2)."""
    name = _unique("Square")

    @tp.primitive(name)
    def square(x):
        return x * x

    @tp.register_gradient(name)
    def _grad(op, dy):
        return dy * factor * op.inputs[0]

    return square


def _square_with_wrong_second_derivative():
    """x^2 whose first derivative 2x is right, but the derivative of that is 3, not 2."""
    double_name = _unique("Double")

    @tp.primitive(double_name)
    def double(x):
        return 2 * x

    @tp.register_gradient(double_name)
    def _double_grad(op, dy):
        return dy * 3.0

    name = _unique("Square2")

    @tp.primitive(name)
    def square(x):
        return x * x

    @tp.register_gradient(name)
    def _grad(op, dy):
        return dy * double(op.inputs[0])

    return square


def _parse(error: AssertionError) -> dict[str, str]:
    match = MISMATCH.match(str(error))
    assert match is not None, str(error)
    return match.groupdict()


def test_passes_on_correct_gradients_first_and_second_order():
    x = np.array([[0.3, -1.2], [2.0, 0.5]])
    w = np.array([[1.0, -0.5, 0.2], [0.3, 0.8, -1.1]])
    tp.testing.check_gradients(lambda a, b: tp.tanh(tp.matmul(a, b)), x, w, order=2)
    tp.testing.check_gradients(_square_with_gradient_factor(2.0), x, order=2)


def test_int_and_none_arguments_are_passed_through():
    seen = []

    def f(x, n, flag):
        seen.append((n, flag))
        return x**n

    tp.testing.check_gradients(f, [0.5, 1.5], 3, None, order=2)
    assert set(seen) == {(3, None)}


def test_every_output_of_f_is_checked():
    wrong = _square_with_gradient_factor(3.0)
    with pytest.raises(AssertionError):
        tp.testing.check_gradients(lambda x: (tp.sin(x), wrong(x)), [0.5, 1.5])


def test_wrong_first_order_gradient_shows_the_worst_mismatch():
    wrong = _square_with_gradient_factor(3.0)
    with pytest.raises(AssertionError) as info:
        # the error is proportional to x, so index 2 is the worst whatever the output weights
        tp.testing.check_gradients(wrong, np.array([0.1, 0.2, 10.0]))
    found = _parse(info.value)
    assert found["label"] == "first-order"
    assert (found["atol"], found["rtol"]) == ("1e-05", "0.0001")
    assert (found["arg"], found["index"]) == ("0", "(2,)")
    # the tape says 3 x w, finite differences 2 x w (w: the checker's output weight)
    np.testing.assert_allclose(float(found["tape"]) / float(found["numeric"]), 1.5, rtol=1e-6)


def test_wrong_gradient_of_the_second_argument_names_it():
    name = _unique("Mul")

    @tp.primitive(name)
    def mul(x, y):
        return x * y

    @tp.register_gradient(name)
    def _grad(op, dy):
        x, y = op.inputs
        return dy * y, dy * x * 2.0  # the second one is wrong

    with pytest.raises(AssertionError) as info:
        tp.testing.check_gradients(mul, np.array([1.0, 2.0]), np.array([[3.0], [4.0], [5.0]]))
    found = _parse(info.value)
    assert found["arg"] == "1"
    assert found["index"] in {"(0, 0)", "(1, 0)", "(2, 0)"}


def test_wrong_second_order_gradient_is_caught_at_order_2_only():
    square = _square_with_wrong_second_derivative()
    x = np.array([0.5, -1.0, 2.0])
    tp.testing.check_gradients(square, x, order=1)
    with pytest.raises(AssertionError) as info:
        tp.testing.check_gradients(square, x, order=2)
    found = _parse(info.value)
    assert found["label"] == "second-order"
    assert found["arg"] == "0"
    np.testing.assert_allclose(float(found["tape"]) / float(found["numeric"]), 1.5, rtol=1e-6)


def test_tolerances_are_honoured():
    slightly_wrong = _square_with_gradient_factor(2.0 + 1e-3)
    x = np.array([1.0, 2.0])
    tp.testing.check_gradients(slightly_wrong, x, rtol=1e-2)
    with pytest.raises(AssertionError) as info:
        tp.testing.check_gradients(slightly_wrong, x)
    assert _parse(info.value)["rtol"] == "0.0001"


def test_a_non_finite_tape_gradient_is_a_mismatch():
    name = _unique("NanGrad")

    @tp.primitive(name)
    def ident(x):
        return x.copy()

    @tp.register_gradient(name)
    def _grad(op, dy):
        return dy * np.nan

    with pytest.raises(AssertionError) as info:
        tp.testing.check_gradients(ident, [1.0, 2.0])
    assert _parse(info.value)["tape"] == "nan"


def test_bad_calls_are_named():
    with pytest.raises(ValueError) as info:
        tp.testing.check_gradients(lambda n: tp.constant(float(n)), 3)
    assert str(info.value) == "check_gradients: no floating-point argument to differentiate"
    with pytest.raises(TypeError) as info:
        tp.testing.check_gradients(lambda x: np.sin(np.asarray(x)), [1.0])
    assert str(info.value) == "check_gradients: f must return Tensors, got ndarray"


def test_finite_differences_that_hit_nan_are_a_mismatch():
    # sqrt at 1e-8 with eps 1e-6: x - eps < 0 gives NaN, so the check cannot pass
    with np.errstate(invalid="ignore"), pytest.raises(AssertionError) as info:
        tp.testing.check_gradients(tp.sqrt, [1e-8, 4.0])
    found = _parse(info.value)
    assert (found["index"], found["numeric"]) == ("(0,)", "nan")
    tp.testing.check_gradients(tp.sqrt, [4.0, 9.0])


def test_importable_by_its_dotted_name_as_tp_nn_and_tp_math_are():
    from tapefit.testing import check_gradients as imported

    assert imported is tp.testing.check_gradients


@pytest.mark.parametrize("order", [0, -1, 1.5, True])
def test_an_order_that_would_check_nothing_is_refused(order):
    # order=0 ran no comparison at all, so a check with it could never fail
    with pytest.raises(ValueError, match=f"check_gradients: order must be an int >= 1, got {order!r}"):
        tp.testing.check_gradients(lambda x: x * 2.0, [1.0], order=order)
