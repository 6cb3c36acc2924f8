"""The fast first-order backward (nothing records it) against the recorded one, op by op.

``tape.gradient`` runs the gradient functions in a lean walk on ndarrays when no other tape
records and no ``tp.function`` traces; under a recording outer tape it builds the
differentiable backward instead. Both must give the same bits, for every registered op.
The ``*Grad`` ops appear in the forward of a case that is itself a gradient (a nested tape),
so their own first-order gradients are compared too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import tapefit as tp
from tapefit.core.ops.reduce import cumsum, unsorted_segment_sum
from tapefit.core.registry import _GRADIENTS
from tapefit.core.tape import GradientTape

RNG = np.random.default_rng(26)


def _x(*shape: int, low: float = -1.5, high: float = 1.5) -> np.ndarray:
    return RNG.uniform(low, high, shape).astype(np.float32)


def _pos(*shape: int) -> np.ndarray:
    return _x(*shape, low=0.5, high=2.0)


def _grad_of(f: Callable[..., Any]) -> Callable[..., Any]:
    """A case whose forward is ``f``'s gradient (so the ``*Grad`` ops are recorded), weighted."""

    def g(*xs: Any) -> Any:
        with tp.GradientTape() as inner:
            inner.watch(list(xs))
            y = f(*xs)
        grads = inner.gradient(y, list(xs))
        return tp.add_n([tp.reduce_sum(tp.square(d) * 0.5 + d) for d in grads if d is not None])

    return g


def _lstm(z: Any, c: Any) -> Any:
    h, c2 = tp.core.ops.recurrent.lstm_cell(z, c)
    return h * 1.5 + c2 * c2


def _lstm_sequence(x: Any, kernel: Any, recurrent: Any, bias: Any, h0: Any, c0: Any) -> Any:
    out, h, c = tp.core.ops.lstm_sequence.lstm_sequence(x, kernel, recurrent, bias, h0, c0)
    return tp.reduce_sum(out * out) + tp.reduce_sum(h * 1.5 + c * c)


def _lstm_sequence_args() -> list[np.ndarray]:
    return [_x(2, 3, 2), _x(2, 8), _x(2, 8), _x(8), _x(2, 2), _x(2, 2)]


def _gru_sequence(x: Any, kernel: Any, recurrent: Any, bias: Any, h0: Any) -> Any:
    mask = np.array([[True, False, True], [True, True, False]])
    out, h = tp.core.ops.gru_sequence.gru_sequence(x, kernel, recurrent, bias, h0, mask)
    return tp.reduce_sum(out * out) + tp.reduce_sum(h * 1.5)


def _gru_sequence_args() -> list[np.ndarray]:
    return [_x(2, 3, 2), _x(2, 6), _x(2, 6), _x(2, 6), _x(2, 2)]


def _gru(xw: Any, hw: Any, h: Any) -> Any:
    out, gates = tp.core.ops.recurrent.gru_cell(xw, hw, h)
    return tp.reduce_sum(out * out) + tp.reduce_sum(gates * 0.5)


def _rnn(xw: Any, h: Any, kernel: Any) -> Any:
    return tp.square(tp.core.ops.recurrent.rnn_cell(xw, h, kernel))


def _spd(n: int) -> np.ndarray:
    """A symmetric positive definite matrix (the Cholesky factor's input)."""
    a = _x(n, n)
    return (a @ a.T + n * np.eye(n)).astype(a.dtype)


def _select(x: Any, y: Any) -> Any:
    return tp.where(x > 0, x, y * 2.0)


CASES: list[tuple[str, Callable[..., Any], list[np.ndarray]]] = [
    ("arith", lambda x, y: (x + y) * (x - y) / (y + 3.0) - tp.negative(x), [_x(3, 4), _x(4)]),
    ("pow", lambda x, y: tp.pow(x, y) + x**2.0, [_pos(3, 4), _x(3, 4)]),
    ("floormod", lambda x, y: tp.floormod(x, y), [_x(3, 4), _pos(3, 4)]),
    ("max_min", lambda x, y: tp.maximum(x, y) * tp.minimum(x, 0.3), [_x(3, 4), _x(3, 4)]),
    ("unary", lambda x: tp.abs(x) * tp.sign(x) + tp.exp(x) + tp.sin(x) * tp.cos(x) + tp.tanh(x), [_x(5)]),
    ("positive", lambda x: tp.log(x) + tp.log1p(x) + tp.sqrt(x) + tp.square(x) + tp.sigmoid(x), [_pos(5)]),
    ("cast_identity", lambda x: tp.cast(tp.cast(x, tp.float64) * 2.0, tp.float32) + tp.identity(x), [_x(4)]),
    ("select_addn", lambda x, y: tp.add_n([_select(x, y), x, y]), [_x(3, 3), _x(3, 3)]),
    ("matmul", lambda a, b: tp.matmul(a, b, transpose_b=True), [_x(3, 4), _x(5, 4)]),
    ("einsum", lambda a, b: tp.einsum("ij,jk->ik", a, b), [_x(3, 4), _x(4, 2)]),
    (
        "square_matrices",
        lambda a, b: tp.linalg.inv(a) * tp.linalg.det(a) + tp.linalg.solve(a, b) + tp.linalg.cholesky(a),
        [_spd(3), _x(3, 3)],
    ),
    (
        "dense",
        lambda x, w, b: tp.nn.relu(tp.core.ops.nn.dense(x, w, b, relu=True) - 0.1),
        [_x(4, 3), _x(3, 5), _x(5)],
    ),
    (
        "reductions",
        lambda x: tp.reduce_sum(x, 0) * tp.reduce_mean(x, 0) + tp.reduce_max(x, 0) - tp.reduce_min(x, 0),
        [_x(4, 3)],
    ),
    ("prod", lambda x: tp.reduce_prod(x, axis=1), [_x(3, 4)]),
    (
        "shape",
        lambda x: tp.transpose(tp.reshape(x, [4, 3])) * tp.expand_dims(tp.squeeze(x[:1]), 0),
        [_x(3, 4)],
    ),
    ("broadcast_tile", lambda x: tp.broadcast_to(x, [2, 3]) * tp.tile(x, [2, 1]), [_x(1, 3)]),
    (
        "concat_stack",
        lambda x, y: tp.stack([tp.concat([x, y], axis=0), tp.concat([y, x], axis=0)], axis=1),
        [_x(2, 3), _x(2, 3)],
    ),
    (
        "split_unstack",
        lambda x: tp.add_n(tp.split(x, 2, axis=1)) * tp.unstack(x, axis=1)[0][:, None],
        [_x(3, 4)],
    ),
    (
        "pad",
        lambda x: tp.pad(x, [[1, 0], [0, 2]]) + tp.pad(x, [[1, 1], [1, 1]], mode="REFLECT")[:4, :5],
        [_x(3, 3)],
    ),
    ("gather_getitem", lambda x: tp.gather(x, [2, 0, 2], axis=1) + x[:, ::2][:, :1], [_x(3, 4)]),
    (
        "cumsum_segment_sum",
        lambda x: cumsum(x, 1, reverse=True) * unsorted_segment_sum(x, [2, -1, 0], 3) + cumsum(x, 0),
        [_x(3, 4)],
    ),
    (
        "softmax",
        lambda x, m: tp.nn.softmax(x) * tp.nn.log_softmax(x) + tp.core.ops.nn.masked_softmax(x, m > 0),
        [_x(3, 5), _x(3, 5)],
    ),
    (
        "activations",
        lambda x: (
            tp.nn.leaky_relu(x)
            + tp.nn.elu(x)
            + tp.nn.erf(x)
            + tp.nn.gelu(x)
            + tp.nn.gelu(x, approximate=True)
            + tp.nn.softplus(x)
        ),
        [_x(6)],
    ),
    (
        "xent",
        lambda z, p: (
            tp.nn.softmax_cross_entropy_with_logits(tp.nn.softmax(p), z)
            + tp.nn.sparse_softmax_cross_entropy_with_logits(tp.constant([1, 0, 4]), z)
            + tp.reduce_sum(tp.nn.sigmoid_cross_entropy_with_logits(tp.sigmoid(p), z), 1)
        ),
        [_x(3, 5), _x(3, 5)],
    ),
    (
        "conv_pool",
        lambda x, w: (
            tp.nn.avg_pool2d(tp.nn.conv2d(x, w, 1, "SAME"), 2, 2, "VALID")
            + tp.nn.max_pool2d(tp.nn.conv2d(x, w, 1, "SAME"), 2, 2, "SAME")
        ),
        [_x(2, 4, 4, 2), _x(3, 3, 2, 3)],
    ),
    (
        "conv_transpose_depthwise",
        lambda x, v, w: tp.nn.depthwise_conv2d(
            tp.nn.conv2d_transpose(x, v, (2, 8, 8, 2), 2, "SAME"), w, 1, "SAME"
        ),
        [_x(2, 4, 4, 3), _x(3, 3, 2, 3), _x(3, 3, 2, 2)],
    ),
    ("lstm", _lstm, [_x(2, 12), _x(2, 3)]),
    ("lstm_sequence", _lstm_sequence, _lstm_sequence_args()),
    ("gru", _gru, [_x(2, 9), _x(2, 9), _x(2, 3)]),
    ("gru_sequence", _gru_sequence, _gru_sequence_args()),
    ("rnn", _rnn, [_x(2, 3), _x(2, 3), _x(3, 3)]),
    # second-order forwards: the backward ops of the first-order gradients are recorded
    (
        "grad_activations",
        _grad_of(
            lambda x: (
                tp.nn.relu(x) * x
                + tp.nn.leaky_relu(x) * x
                + tp.nn.elu(x) * x
                + tp.tanh(x) * x
                + tp.sigmoid(x) * x
            )
        ),
        [_x(6)],
    ),
    ("grad_softmax", _grad_of(lambda x: tp.nn.softmax(x) * x), [_x(3, 4)]),
    (
        "grad_gather_getitem_pad",
        _grad_of(
            lambda x: (
                tp.gather(x, [1, 1, 0], axis=0) * x
                + tp.reduce_sum(x[1:] * x[1:])
                + tp.reduce_sum(tp.pad(x, [[1, 1], [0, 0]], mode="SYMMETRIC") ** 2.0)
            )
        ),
        [_x(3, 2)],
    ),
    (
        "grad_conv_pool",
        _grad_of(
            lambda x, w: tp.square(tp.nn.avg_pool2d(tp.square(tp.nn.conv2d(x, w, 1, "VALID")), 2, 1, "VALID"))
        ),
        [_x(1, 4, 4, 1), _x(2, 2, 1, 2)],
    ),
    (
        "grad_depthwise",
        _grad_of(lambda x, w: tp.square(tp.nn.depthwise_conv2d(x, w, 1, "VALID"))),
        [_x(1, 4, 4, 2), _x(2, 2, 2, 2)],
    ),
    ("grad_lstm", _grad_of(_lstm), [_x(2, 8), _x(2, 2)]),
    ("grad_lstm_sequence", _grad_of(_lstm_sequence), _lstm_sequence_args()),
    ("grad_gru_sequence", _grad_of(_gru_sequence), _gru_sequence_args()),
    ("grad_gru", _grad_of(_gru), [_x(2, 6), _x(2, 6), _x(2, 2)]),
    ("grad_rnn", _grad_of(_rnn), [_x(2, 2), _x(2, 2), _x(2, 2)]),
    ("grad_prod", _grad_of(lambda x: tp.reduce_prod(x, axis=0) ** 2.0), [_x(3, 2)]),
]


def _fast(f: Callable[..., Any], xs: list[tp.Tensor]) -> tuple[list[Any], set[str]]:
    with tp.GradientTape() as tape:
        tape.watch(xs)
        y = f(*xs)
    types = {op.type for op in tape._entries}
    assert tape._unrecorded()
    return tape.gradient(y, xs), types


def _recorded(f: Callable[..., Any], xs: list[tp.Tensor]) -> list[Any]:
    with tp.GradientTape(persistent=True) as outer:  # records the inner backward
        outer.watch(xs)
        with tp.GradientTape() as tape:
            tape.watch(xs)
            y = f(*xs)
        assert not tape._unrecorded()
        grads = tape.gradient(y, xs)
    assert outer._entries  # the backward was recorded, so it went the differentiable way
    return grads


def _bits(g: Any) -> bytes | None:
    return None if g is None else (g.numpy().dtype.str, g.shape, g.numpy().tobytes())  # type: ignore[return-value]


@pytest.mark.parametrize("name, f, arrays", CASES, ids=[c[0] for c in CASES])
def test_fast_backward_gives_the_recorded_backwards_bits(name: str, f: Any, arrays: list[np.ndarray]) -> None:
    xs = [tp.constant(a) for a in arrays]
    fast, _ = _fast(f, xs)
    recorded = _recorded(f, xs)
    assert any(g is not None for g in fast)
    for k, (a, b) in enumerate(zip(fast, recorded)):
        assert _bits(a) == _bits(b), f"{name}: input {k}"


def test_the_cases_cover_every_registered_gradient() -> None:
    seen: set[str] = set()
    for _, f, arrays in CASES:
        seen |= _fast(f, [tp.constant(a) for a in arrays])[1]
    builtin = {name for name, fn in _GRADIENTS.items() if fn.__module__.startswith("tapefit.")}
    assert builtin - seen == set()


def test_persistent_tape_recording_its_own_backward_takes_the_recorded_walk() -> None:
    x = tp.constant(_x(4))
    with tp.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tp.reduce_sum(tp.tanh(x) * x)
        assert not tape._unrecorded()
        dx = tape.gradient(y, x)
        ddx_sum = tp.reduce_sum(dx)
    assert tape._unrecorded()
    ddx = tape.gradient(ddx_sum, x)
    assert ddx is not None and _bits(tape.gradient(y, x)) == _bits(dx)


def test_fast_walk_never_writes_into_an_upstream_gradient_or_a_shared_array() -> None:
    x = tp.constant(_x(3))
    seed = tp.constant(np.ones(3, np.float32))
    before = seed.numpy().copy()
    with GradientTape() as tape:
        tape.watch(x)
        a = tp.identity(x)
        y = a + a + a  # three contributions to a: the first sum is new, the next goes into it
    (dx,) = tape.gradient([y], [x], output_gradients=[seed])
    np.testing.assert_array_equal(seed.numpy(), before)
    np.testing.assert_array_equal(dx.numpy(), 3 * before)


def test_the_walk_skips_planning_only_when_every_watched_tensor_is_a_source() -> None:
    a = _x(3)
    x, w = tp.constant(a), tp.Variable(a + 1.0)
    with GradientTape(persistent=True) as tape:
        tape.watch(x)
        side = tp.exp(x)  # recorded, but not on the way to y
        y = tp.reduce_sum(tp.sin(x) * w)
    every = tape._plan([y], [x, w], set())
    assert every[0] is tape._entries and every[1] == tape._watched
    only_x = tape._plan([y], [x], set())  # w is watched but not asked for: the plan prunes
    assert only_x[0] is not tape._entries and w._id not in only_x[1]
    dx, dw = tape.gradient(y, [x, w])
    np.testing.assert_allclose(dx.numpy(), np.cos(a) * w.numpy(), rtol=1e-6)
    np.testing.assert_allclose(dw.numpy(), np.sin(a), rtol=1e-6)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), dx.numpy(), rtol=0)
    assert tape.gradient(y, [x, w], stop_gradients=[side])[0] is not None


def test_a_source_only_another_tape_watched_gets_its_gradient_whatever_else_is_asked() -> None:
    v, u = tp.Variable(np.array([1.0, 2.0])), tp.constant(np.array([3.0, 5.0]))
    with GradientTape(persistent=True) as outer:
        with GradientTape(watch_accessed_variables=False) as inner:
            inner.watch(u)
            loss = tp.reduce_sum(u * v)
    alone = outer.gradient(loss, u)
    dv, du = outer.gradient(loss, [v, u])  # every tensor outer watched is a source here
    np.testing.assert_array_equal(du.numpy(), alone.numpy())
    np.testing.assert_array_equal(dv.numpy(), [3.0, 5.0])


def test_a_gradient_function_may_return_a_namedtuple() -> None:
    import collections

    pair = collections.namedtuple("pair", "dx dy")

    @tp.primitive("NamedTupleMul")
    def times(x, y):
        return x * y

    @tp.register_gradient("NamedTupleMul")
    def _times_grad(op, dz):
        x, y = op.inputs
        return pair(dz * y, dz * x)

    x, y = tp.constant(np.array([2.0])), tp.constant(np.array([7.0]))
    with GradientTape() as tape:
        tape.watch([x, y])
        z = times(x, y)
    dx, dy = tape.gradient(z, [x, y])
    assert (dx.numpy().item(), dy.numpy().item()) == (7.0, 2.0)
