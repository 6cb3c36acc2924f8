"""The op registry: ``@tp.primitive``, ``@tp.register_gradient`` and ``tp.not_differentiable``."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tapefit as tp

_counter = itertools.count()


def _unique(name: str) -> str:
    """A fresh op name: the registry is global, and a test may run twice in one process."""
    return f"RegistryTest{name}{next(_counter)}"


def test_primitive_gets_ndarrays_and_returns_tensors():
    seen = []

    @tp.primitive(_unique("Seen"))
    def scaled(x, y, factor=1.0):
        seen.append((type(x), type(y), x.dtype, y.dtype, factor))
        return (x + y) * factor

    out = scaled(tp.constant([1.0, 2.0]), [3.0, 4.0], factor=2.0)
    assert isinstance(out, tp.Tensor)
    np.testing.assert_array_equal(out.numpy(), [8.0, 12.0])
    assert seen == [(np.ndarray, np.ndarray, np.dtype("float32"), np.dtype("float32"), 2.0)]
    assert scaled.__name__ == "scaled"


def test_primitive_with_several_outputs_returns_a_tuple_of_tensors():
    @tp.primitive(_unique("Split"))
    def split_sign(x):
        return np.maximum(x, 0), np.minimum(x, 0)

    pos, neg = split_sign(tp.constant([-1.0, 2.0]))
    assert isinstance(pos, tp.Tensor) and isinstance(neg, tp.Tensor)
    np.testing.assert_array_equal(pos.numpy(), [0.0, 2.0])
    np.testing.assert_array_equal(neg.numpy(), [-1.0, 0.0])


def test_gradient_sees_inputs_outputs_and_attrs_of_the_forward_pass():
    name = _unique("AffinePower")
    seen = {}

    @tp.primitive(name)
    def affine_power(x, shift, power=2):
        return (x + shift) ** power

    @tp.register_gradient(name)
    def _grad(op, dy):
        x, shift = op.inputs
        (out,) = op.outputs
        seen.update(
            type=op.type,
            x=x.numpy().copy(),
            shift=shift.numpy().copy(),
            out=out.numpy().copy(),
            attrs=dict(op.attrs),
            needs=op.needs_grad,
            kinds=(type(x), type(out)),
        )
        power = op.attrs["power"]
        dx = dy * power * (x + shift) ** (power - 1)
        return dx, dx

    x = tp.Variable([1.0, 2.0])
    shift = tp.constant([0.5, 0.5])
    with tp.GradientTape() as tape:
        y = affine_power(x, shift, power=3)
    grad = tape.gradient(y, x)
    np.testing.assert_allclose(grad.numpy(), 3 * np.array([1.5, 2.5]) ** 2, rtol=1e-6)
    assert seen["type"] == name
    np.testing.assert_array_equal(seen["x"], [1.0, 2.0])
    np.testing.assert_array_equal(seen["shift"], [0.5, 0.5])
    np.testing.assert_array_equal(seen["out"], [1.5**3, 2.5**3])
    assert seen["attrs"] == {"power": 3}
    assert seen["needs"] == (True, False)
    assert seen["kinds"] == (tp.Tensor, tp.Tensor)


def test_attrs_hold_the_defaults_of_keyword_parameters_not_given():
    name = _unique("Defaults")
    attrs = []

    @tp.primitive(name)
    def scaled(x, scale=2.0, *, offset=0.0):
        return x * scale + offset

    @tp.register_gradient(name)
    def _grad(op, dy):
        attrs.append(dict(op.attrs))
        return dy * op.attrs["scale"]

    x = tp.Variable([1.0])
    with tp.GradientTape(persistent=True) as tape:
        plain = scaled(x)
        given = scaled(x, offset=1.0, scale=5.0)
    np.testing.assert_array_equal(tape.gradient(plain, x).numpy(), [2.0])
    np.testing.assert_array_equal(tape.gradient(given, x).numpy(), [5.0])
    assert attrs == [{"scale": 2.0, "offset": 0.0}, {"scale": 5.0, "offset": 1.0}]


def test_gradient_of_an_op_with_several_outputs_gets_zeros_for_unused_outputs():
    name = _unique("SplitGrad")
    upstream = []

    @tp.primitive(name)
    def halves(x):
        return x * 2, x * 3

    @tp.register_gradient(name)
    def _grad(op, d_double, d_triple):
        upstream.append((d_double.numpy().copy(), d_triple.numpy().copy()))
        return d_double * 2.0 + d_triple * 3.0

    x = tp.Variable([1.0, 2.0])
    with tp.GradientTape() as tape:
        double, _ = halves(x)
    np.testing.assert_array_equal(tape.gradient(double, x).numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(upstream[0][0], [1.0, 1.0])
    np.testing.assert_array_equal(upstream[0][1], [0.0, 0.0])


def test_broadcasting_in_a_user_op_is_undone_by_the_tape():
    name = _unique("BroadcastAdd")

    @tp.primitive(name)
    def badd(x, y):
        return x + y

    @tp.register_gradient(name)
    def _grad(op, dy):
        return dy, dy  # full-shape gradients; the tape sums them back

    x = tp.Variable(np.ones((3, 4), np.float32))
    b = tp.Variable(np.ones((4,), np.float32))
    c = tp.Variable(np.ones((3, 1), np.float32))
    with tp.GradientTape() as tape:
        y = badd(badd(x, b), c)
    gx, gb, gc = tape.gradient(y, [x, b, c])
    assert (gx.shape, gb.shape, gc.shape) == ((3, 4), (4,), (3, 1))
    np.testing.assert_array_equal(gb.numpy(), np.full(4, 3.0))
    np.testing.assert_array_equal(gc.numpy(), np.full((3, 1), 4.0))


def test_user_gradient_of_the_wrong_shape_is_named():
    name = _unique("BadShape")

    @tp.primitive(name)
    def total(x):
        return np.sum(x, keepdims=True)

    @tp.register_gradient(name)
    def _grad(op, dy):
        return tp.ones((5,))

    x = tp.Variable([1.0, 2.0, 3.0])
    with tp.GradientTape() as tape:
        y = total(x)
    with pytest.raises(ValueError) as info:
        tape.gradient(y, x)
    assert str(info.value) == (
        f"the gradient function of '{name}' returned shape (5,) for input 0, whose shape is (3,)"
    )


def test_user_gradient_with_the_wrong_count_is_named():
    name = _unique("BadCount")

    @tp.primitive(name)
    def mul(x, y):
        return x * y

    @tp.register_gradient(name)
    def _grad(op, dy):
        return dy

    x = tp.Variable(2.0)
    with tp.GradientTape() as tape:
        y = mul(x, 3.0)
    with pytest.raises(ValueError) as info:
        tape.gradient(y, x)
    assert str(info.value) == f"the gradient function of '{name}' returned 1 gradients for 2 inputs"


def test_registering_a_gradient_twice_is_an_error():
    name = _unique("Twice")

    @tp.register_gradient(name)
    def _first(op, dy):
        return dy

    with pytest.raises(KeyError) as info:

        @tp.register_gradient(name)
        def _second(op, dy):
            return dy

    assert info.value.args == (f"a gradient for op '{name}' is already registered",)


def test_not_differentiable_and_a_gradient_exclude_each_other():
    name = _unique("Both")
    tp.not_differentiable(name)
    with pytest.raises(KeyError) as info:
        tp.register_gradient(name)(lambda op, dy: dy)
    assert info.value.args == (f"a gradient for op '{name}' is already registered",)

    other = _unique("Both")
    tp.register_gradient(other)(lambda op, dy: dy)
    with pytest.raises(KeyError) as info:
        tp.not_differentiable(other)
    assert info.value.args == (f"op '{other}' already has a registered gradient",)


def test_register_gradient_needs_a_name():
    with pytest.raises(TypeError) as info:
        tp.register_gradient(lambda op, dy: dy)
    assert str(info.value).startswith("register_gradient needs an op name (a string), got <function")


def test_not_differentiable_op_gives_none_without_error():
    name = _unique("Rounded")

    @tp.primitive(name)
    def rounded(x):
        return np.round(x)

    tp.not_differentiable(name)
    x = tp.Variable([0.4, 1.6])
    with tp.GradientTape(persistent=True) as tape:
        y = rounded(x) * x
    # only the direct path through the product remains: d(round(x) x)/dx = round(x)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), [0.0, 2.0])
    with tp.GradientTape() as tape:
        z = rounded(x) * 2.0
    assert tape.gradient(z, x) is None


def test_op_without_gradient_raises_lookup_error_naming_it():
    name = _unique("Missing")

    @tp.primitive(name)
    def double(x):
        return x * 2

    x = tp.Variable(1.0)
    with tp.GradientTape() as tape:
        y = double(x)
    with pytest.raises(LookupError) as info:
        tape.gradient(y, x)
    assert str(info.value) == f"gradient registry has no entry for: {name}"


def test_op_without_gradient_off_the_path_is_fine():
    name = _unique("OffPath")

    @tp.primitive(name)
    def double(x):
        return x * 2

    x = tp.Variable(1.0)
    with tp.GradientTape() as tape:
        _ = double(x)
        y = x * 5.0
    assert tape.gradient(y, x).numpy() == 5.0


_LOGCOSH = _unique("LogCosh")


@tp.primitive(_LOGCOSH)
def _logcosh(x, scale=1.0):
    return scale * np.log(np.cosh(x))


@tp.register_gradient(_LOGCOSH)
def _logcosh_grad(op, dy):
    (x,) = op.inputs
    return dy * op.attrs["scale"] * tp.tanh(x)  # tapefit ops: differentiable again


def test_user_op_gradient_passes_check_gradients():
    x = np.array([[-1.5, 0.2, 0.7], [2.0, -0.3, 1.1]])
    tp.testing.check_gradients(_logcosh, x, order=1)
    tp.testing.check_gradients(lambda v: _logcosh(v, scale=2.5), x, order=2)
    x = tp.Variable(x)
    with tp.GradientTape() as tape:
        y = _logcosh(x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), np.tanh(x.numpy()), rtol=1e-12)


def test_forward_op_name_finds_an_op_by_its_forward_function():
    from tapefit.core import tensor as tensor_module
    from tapefit.core.ops import nn as nn_ops
    from tapefit.core.registry import OpDef, forward_op_name

    def twice(x):
        return x * 2

    assert forward_op_name(twice) is None
    name = _unique("Twice")
    OpDef(name, twice)
    assert forward_op_name(twice) == name
    assert forward_op_name(nn_ops._dense) == "Dense"  # a built-in op
    assert forward_op_name(np.add) == "Add"  # a lean binary op's forward is the ufunc

    cube_name = _unique("Cube")

    @tp.primitive(cube_name)
    def cube(x):
        return x**3

    seen = []  # what an exporter's trace sees: the forward function, and the name read from it

    class Recorder:
        def op(self, forward, inputs, attrs, outputs):
            seen.append(forward_op_name(forward))

    tensor_module._traces.append(Recorder())
    try:
        cube(tp.constant([1.0, 2.0]))
    finally:
        tensor_module._traces.clear()
    assert seen == [cube_name]
