"""``@tp.custom_gradient``: functions that supply their own gradient, as ``tf.custom_gradient``."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import tapefit as tp


@tp.custom_gradient
def _square_with_scaled_gradient(x):
    # the forward is x^2, the gradient deliberately 10 dy: proves the tape uses grad_fn
    def grad(dy):
        return dy * 10.0

    return x * x, grad


def test_single_input_uses_grad_fn():
    x = tp.constant([1.0, 2.0])
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = _square_with_scaled_gradient(x)
    np.testing.assert_array_equal(y.numpy(), [1.0, 4.0])
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [10.0, 10.0])


def test_without_a_tape_it_returns_the_value():
    y = _square_with_scaled_gradient(tp.constant(3.0))
    assert isinstance(y, tp.Tensor) and y.numpy() == 9.0


def test_grad_fn_receives_the_upstream_gradient():
    x = tp.Variable(2.0)
    with tp.GradientTape() as tape:
        y = _square_with_scaled_gradient(x) * 3.0
    assert tape.gradient(y, x).numpy() == 30.0


def test_multiple_inputs():
    @tp.custom_gradient
    def product(x, y):
        def grad(dy):
            return dy * y, dy * x * 2.0  # the second one deliberately doubled

        return x * y, grad

    x = tp.Variable(3.0)
    y = tp.Variable(5.0)
    with tp.GradientTape() as tape:
        z = product(x, y)
    assert z.numpy() == 15.0
    gx, gy = tape.gradient(z, [x, y])
    assert (gx.numpy(), gy.numpy()) == (5.0, 6.0)


def test_python_numbers_as_inputs_are_converted():
    @tp.custom_gradient
    def scale(x, factor):
        def grad(dy):
            return dy * factor, None

        return x * factor, grad

    x = tp.Variable(3.0)
    with tp.GradientTape() as tape:
        y = scale(x, 4.0)
    assert tape.gradient(y, x).numpy() == 4.0


def test_several_outputs_give_grad_fn_one_upstream_gradient_each():
    @tp.custom_gradient
    def split_scale(x):
        def grad(d_double, d_triple):
            return d_double * 2.0 + d_triple * 3.0

        return (x * 2.0, x * 3.0), grad

    x = tp.Variable([1.0, 2.0])
    with tp.GradientTape(persistent=True) as tape:
        double, triple = split_scale(x)
    np.testing.assert_array_equal(double.numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(tape.gradient(triple, x).numpy(), [3.0, 3.0])
    np.testing.assert_array_equal(tape.gradient([double, triple], x).numpy(), [5.0, 5.0])


def test_wrong_number_of_gradients_is_an_error():
    @tp.custom_gradient
    def product(x, y):
        def grad(dy):
            return dy * y

        return x * y, grad

    x = tp.Variable(3.0)
    with tp.GradientTape() as tape:
        z = product(x, tp.constant(2.0))
    with pytest.raises(ValueError) as info:
        tape.gradient(z, x)
    assert str(info.value) == "@custom_gradient function 'product': grad_fn returned 1 gradients for 2 inputs"


def test_a_function_that_does_not_return_a_grad_fn_is_a_type_error_with_or_without_a_tape():
    @tp.custom_gradient
    def forgot(x):
        return x * 2.0  # not (y, grad_fn)

    x = tp.constant([1.0, 2.0])
    # Without the check, no tape would silently give y[0] and a tape a bare indexing error.
    message = "@custom_gradient function 'forgot' must return (outputs, grad_fn), got a Tensor"
    with pytest.raises(TypeError) as info:
        forgot(x)
    assert str(info.value) == message
    with tp.GradientTape() as tape:
        tape.watch(x)
        with pytest.raises(TypeError) as info:
            forgot(x)
    assert str(info.value) == message


@tp.custom_gradient
def _log1pexp(x):
    e = tp.exp(x)

    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))

    return tp.log(1 + e), grad


def test_log1pexp_has_a_finite_gradient_where_the_naive_one_is_nan():
    x = tp.constant(100.0)
    with np.errstate(over="ignore", invalid="ignore"):
        with tp.GradientTape() as tape:
            tape.watch(x)
            naive = tp.log(1 + tp.exp(x))
        assert np.isnan(tape.gradient(naive, x).numpy())

        with tp.GradientTape() as tape:
            tape.watch(x)
            y = _log1pexp(x)
        grad = tape.gradient(y, x)
    assert grad.numpy() == 1.0
    assert grad.dtype == tp.float32

    x = tp.constant([-2.0, 0.0, 3.0], dtype=tp.float64)
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = _log1pexp(x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), 1 / (1 + np.exp(-x.numpy())), rtol=1e-12)


@tp.custom_gradient
def _cube(x):
    def grad(dy):
        return dy * 3.0 * x * x  # tapefit ops: an outer tape differentiates this again

    return x * x * x, grad


def test_second_order_through_a_grad_fn_built_from_tapefit_ops():
    x = tp.Variable(2.0)
    with tp.GradientTape() as outer:
        with tp.GradientTape() as inner:
            y = _cube(x)
        dy = inner.gradient(y, x)
    assert dy.numpy() == 12.0
    assert outer.gradient(dy, x).numpy() == 12.0  # 6 x
    tp.testing.check_gradients(_cube, np.array([0.5, -1.5, 2.0]), order=2)


def test_second_order_through_a_nested_custom_gradient():
    # sin whose first derivative is itself a custom-gradient op: d2 = -sin, given by hand
    @tp.custom_gradient
    def cos_with_custom_gradient(x):
        def grad(dy):
            return -dy * tp.sin(x) * 2.0  # deliberately doubled: shows this rule is used

        return tp.cos(x), grad

    @tp.custom_gradient
    def sin_(x):
        def grad(dy):
            return dy * cos_with_custom_gradient(x)

        return tp.sin(x), grad

    x = tp.Variable(0.7, dtype=tp.float64)
    with tp.GradientTape() as outer:
        with tp.GradientTape() as inner:
            y = sin_(x)
        d1 = inner.gradient(y, x)
    d2 = outer.gradient(d1, x)
    np.testing.assert_allclose(d1.numpy(), np.cos(0.7), rtol=1e-15)
    np.testing.assert_allclose(d2.numpy(), -2 * np.sin(0.7), rtol=1e-15)


def test_variables_form_gets_input_and_variable_gradients():
    w = tp.Variable(2.0, name="w")
    received = []

    @tp.custom_gradient
    def scale_by_w(x):
        def grad(dy, variables=None):
            received.append(variables)
            # deliberately scaled by 10 so that the test sees grad_fn was used
            return dy * w * 10.0, [dy * x * 10.0]

        return x * w, grad

    x = tp.Variable(3.0, name="x")
    with tp.GradientTape() as tape:
        y = scale_by_w(x)
    assert y.numpy() == 6.0
    gx, gw = tape.gradient(y, [x, w])
    assert (gx.numpy(), gw.numpy()) == (20.0, 30.0)
    assert len(received) == 1 and len(received[0]) == 1 and received[0][0] is w
    assert [v.name for v in tape.watched_variables()] == ["x", "w"]


def test_reading_variables_without_a_variables_argument_is_a_type_error():
    w = tp.Variable(2.0, name="w")

    @tp.custom_gradient
    def scale_by_w(x):
        def grad(dy):
            return dy * w

        return x * w, grad

    with tp.GradientTape() as tape:
        tape.watch(tp.constant(1.0))
        with pytest.raises(TypeError) as info:
            scale_by_w(tp.constant(3.0))
    assert str(info.value) == (
        "@custom_gradient function 'scale_by_w' reads Variables (w), so its grad_fn must accept a "
        "keyword argument 'variables'"
    )


def test_grad_fn_with_keyword_arguments_gets_the_variables():
    w = tp.Variable(2.0, name="w")

    @tp.custom_gradient
    def scale_by_w(x):
        def grad(dy, **kwargs):
            (variable,) = kwargs["variables"]
            return dy * variable, [dy * x]

        return x * w, grad

    x = tp.constant(3.0)
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = scale_by_w(x)
    gx, gw = tape.gradient(y, [x, w])
    assert (gx.numpy(), gw.numpy()) == (2.0, 3.0)


def test_variables_passed_as_inputs_are_inputs_not_captured_variables():
    @tp.custom_gradient
    def product(x, y):
        def grad(dy):
            return dy * y, dy * x

        return x * y, grad

    a = tp.Variable(3.0, name="a")
    b = tp.Variable(4.0, name="b")
    with tp.GradientTape() as tape:
        z = product(a, b)
    ga, gb = tape.gradient(z, [a, b])
    assert (ga.numpy(), gb.numpy()) == (4.0, 3.0)


def test_non_persistent_tape_frees_what_grad_fn_captured_after_gradient():
    captured = []

    @tp.custom_gradient
    def exp_(x):
        e = tp.exp(x)
        captured.append(weakref.ref(e._value))

        def grad(dy):
            return dy * e  # the closure holds a forward value

        return e, grad

    x = tp.Variable(np.linspace(0.0, 1.0, 100))
    with tp.GradientTape() as tape:
        y = tp.reduce_sum(exp_(x) * 2.0)
    gc.collect()
    assert captured[0]() is not None
    grad = tape.gradient(y, x)
    del y
    gc.collect()
    assert captured[0]() is None
    np.testing.assert_allclose(grad.numpy(), 2 * np.exp(x.numpy()), rtol=1e-12)


class _ScaledGradient:
    """A method with a custom gradient, as in a layer: ``self`` is bound, not an input."""

    def __init__(self, factor):
        self.factor = factor

    @tp.custom_gradient
    def __call__(self, x):
        def grad(dy):
            return dy * self.factor

        return x * 1.0, grad


def test_a_method_binds_self_and_differentiates_its_other_arguments():
    layer = _ScaledGradient(7.0)
    x = tp.Variable(2.0)
    with tp.GradientTape() as tape:
        y = layer(x)
    assert y.numpy() == 2.0
    assert tape.gradient(y, x).numpy() == 7.0
    assert layer(tp.constant(3.0)).numpy() == 3.0  # without a tape too
    assert layer.__call__.__name__ == "__call__"
