"""The whole-sequence LSTM op (TensorFlow's ``BlockLSTM``, cuDNN's RNN in tapefit's terms).

``lstm_sequence`` runs every time step of an LSTM layer as one recorded op (``LSTMSequence``)
and its backward pass, backpropagation through time, as one more (``LSTMSequenceGrad``). The
input projection of all steps is one product; each step does one recurrent product and its
gate arithmetic into preallocated arrays; the backward pass gets the gradients of the kernel,
the recurrent kernel, the bias and the inputs from a few products over all steps after its loop.

Inside, the arrays are laid out so that every step's work is on contiguous blocks: the gates
are kept transposed, ``(4*units, batch)`` per step, in the order ``i, f, o, g`` (the three
sigmoid gates side by side), and each step multiplies one weight matrix (kernel, bias and
recurrent kernel side by side) by its input, its row of ones and the previous state stacked.
The op's extra outputs carry that state to the gradient op: they are working arrays, not
results, and take no gradient.

``LSTMSequenceGrad`` is differentiated by running the sequence in per-step tapefit ops
(``lstm_cell``) and their gradient under a tape, so second and higher derivatives hold.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tapefit.core.ops.linalg import matmul
from tapefit.core.ops.recurrent import lstm_cell
from tapefit.core.ops.shape import reshape, stack, unstack
from tapefit.core.ops.workspace import empty
from tapefit.core.record import Op
from tapefit.core.registry import OpDef, execute, register_gradient
from tapefit.core.tensor import Tensor, as_tensor

__all__ = ["lstm_sequence"]


def _internal_order(units: int) -> np.ndarray:
    """Keras's gate columns ``i, f, g, o`` in the internal order ``i, f, o, g`` (its own inverse)."""
    return np.concatenate(
        [np.arange(2 * units), np.arange(3 * units, 4 * units), np.arange(2 * units, 3 * units)]
    )


def _lstm_sequence(
    x: np.ndarray, kernel: np.ndarray, recurrent: np.ndarray, bias: np.ndarray, h0: np.ndarray, c0: np.ndarray
) -> tuple[np.ndarray, ...]:
    batch, steps, features = x.shape
    units = h0.shape[-1]
    order = _internal_order(units)
    # Each step's product input, one column block per step: x_t, a row of ones (the bias) and
    # h_{t-1}, so one product gives the pre-activations and the backward pass finds every
    # weight's gradient in one product too. Step t writes h_t into block t + 1.
    stacked = empty((features + 1 + units, steps + 1, batch), x.dtype)
    stacked[:features, :steps] = x.transpose(2, 1, 0)
    stacked[features, :steps] = 1
    stacked[features + 1 :, 0] = h0.T
    weights = empty((4 * units, features + 1 + units), x.dtype)
    weights[:, :features] = kernel.T[order]
    weights[:, features] = bias[order]
    weights[:, features + 1 :] = recurrent.T[order]
    weights[: 3 * units] *= -1  # the sigmoid gates then need exp(z), not exp(-z)
    gates = empty((steps, 4 * units, batch), x.dtype)
    cs = empty((steps + 1, units, batch), x.dtype)
    cs[0] = c0.T
    work = empty((units, batch), x.dtype)
    with np.errstate(over="ignore"):  # exp overflows to inf, whose sigmoid is the right 0
        for t in range(steps):
            z = gates[t]
            np.matmul(weights, stacked[:, t], out=z)
            sig = z[: 3 * units]
            np.exp(sig, out=sig)
            sig += 1
            np.reciprocal(sig, out=sig)
            np.tanh(z[3 * units :], out=z[3 * units :])
            i, f, o, g = z[:units], z[units : 2 * units], z[2 * units : 3 * units], z[3 * units :]
            c = cs[t + 1]
            np.multiply(f, cs[t], out=c)
            np.multiply(i, g, out=work)
            c += work
            np.tanh(c, out=work)
            np.multiply(o, work, out=stacked[features + 1 :, t + 1])
    hs = stacked[features + 1 :]
    outputs = empty((batch, steps, units), x.dtype)
    np.copyto(outputs, hs[:, 1:].transpose(2, 1, 0))
    return outputs, hs[:, steps].T.copy(), cs[steps].T.copy(), stacked, gates, cs


def _step_gradient(
    z: np.ndarray, c: np.ndarray, c_prev: np.ndarray, dh: np.ndarray, carry: np.ndarray, dz: np.ndarray
) -> None:
    """One step of backpropagation through time, transposed: writes the pre-activations'
    gradient into ``dz`` and turns ``carry`` (the cell state's gradient from the step after)
    into the one for the step before."""
    units = c.shape[0]
    i, f, o, g = z[:units], z[units : 2 * units], z[2 * units : 3 * units], z[3 * units :]
    di, df, do, dg = dz[:units], dz[units : 2 * units], dz[2 * units : 3 * units], dz[3 * units :]
    tanh_c = np.tanh(c)
    # do = dh tanh(c) o (1 - o)
    np.subtract(1, o, out=do)
    do *= o
    do *= dh
    do *= tanh_c
    # dc = dh o (1 - tanh(c)^2) + carry, kept in tanh_c
    np.multiply(tanh_c, tanh_c, out=tanh_c)
    np.subtract(1, tanh_c, out=tanh_c)
    tanh_c *= o
    tanh_c *= dh
    tanh_c += carry
    dc = tanh_c
    # each gate: dc * (what it multiplies) * (its activation's slope, from its output)
    np.subtract(1, i, out=di)
    di *= i
    di *= g
    di *= dc
    np.subtract(1, f, out=df)
    df *= f
    df *= c_prev
    df *= dc
    np.multiply(g, g, out=dg)
    np.subtract(1, dg, out=dg)
    dg *= i
    dg *= dc
    np.multiply(dc, f, out=carry)


def _lstm_sequence_grad(
    x: np.ndarray,
    kernel: np.ndarray,
    recurrent: np.ndarray,
    bias: np.ndarray,
    h0: np.ndarray,
    c0: np.ndarray,
    stacked: np.ndarray,
    gates: np.ndarray,
    cs: np.ndarray,
    doutputs: np.ndarray,
    dh_last: np.ndarray,
    dc_last: np.ndarray,
) -> tuple[np.ndarray, ...]:
    steps, width, batch = gates.shape
    units, features = width // 4, x.shape[-1]
    order = _internal_order(units)
    recurrent_i = recurrent[:, order]  # (units, 4*units)
    douts = empty((steps, units, batch), x.dtype)
    np.copyto(douts, doutputs.transpose(1, 2, 0))
    dzs = empty((steps, width, batch), x.dtype)
    dh = dh_last.T.copy()  # copies: both are written, and for one row .T is contiguous
    carry = dc_last.T.copy()
    for t in range(steps - 1, -1, -1):
        dh += douts[t]
        _step_gradient(gates[t], cs[t + 1], cs[t], dh, carry, dzs[t])
        np.matmul(recurrent_i, dzs[t], out=dh)  # the gradient of h_{t-1}
    # The products over all steps take (time, batch) as one axis: one copy into that layout
    # costs less than one per step (each writes a row per gate unit, a page apart).
    flat = empty((width, steps, batch), x.dtype)
    np.copyto(flat, dzs.transpose(1, 0, 2))
    flat = flat.reshape(width, steps * batch)
    # One product for the kernel's, the bias's and the recurrent kernel's gradients.
    dweights = np.matmul(stacked[:, :steps].reshape(-1, steps * batch), flat.T)[:, order]
    dx_by_step = np.matmul(flat.T, kernel.T[order], out=empty((steps * batch, features), x.dtype))
    dx = empty((batch, steps, features), x.dtype)
    np.copyto(dx, dx_by_step.reshape(steps, batch, features).transpose(1, 0, 2))
    return (
        dx,
        np.ascontiguousarray(dweights[:features]),
        np.ascontiguousarray(dweights[features + 1 :]),
        dweights[features].copy(),
        np.ascontiguousarray(dh.T),
        np.ascontiguousarray(carry.T),
    )


_LSTM_SEQUENCE = OpDef("LSTMSequence", _lstm_sequence, save="all")
_LSTM_SEQUENCE_GRAD = OpDef("LSTMSequenceGrad", _lstm_sequence_grad, save="all")


def lstm_sequence(
    x: Any, kernel: Any, recurrent_kernel: Any, bias: Any, h0: Any, c0: Any
) -> tuple[Tensor, Tensor, Tensor]:
    """A whole LSTM layer's time loop as one op: returns ``(outputs, h, c)``, every step's
    output (batch, time, units) and the last step's states (batch, units).

    ``x`` (batch, time, features); ``kernel`` (features, 4*units), ``recurrent_kernel``
    (units, 4*units) and ``bias`` (4*units,) with Keras's gate order ``i, f, c, o`` and
    default activations (sigmoid gates, tanh); ``h0``, ``c0`` (batch, units) the initial
    states. The caller checks shapes and dtypes (one floating dtype, at least one step).
    """
    inputs = tuple(as_tensor(v) for v in (x, kernel, recurrent_kernel, bias, h0, c0))
    outputs, h, c, *_ = execute(_LSTM_SEQUENCE, inputs)
    return outputs, h, c


@register_gradient("LSTMSequence")
def _lstm_sequence_op_grad(op: Op, doutputs: Tensor, dh: Tensor, dc: Tensor, *working: Tensor) -> Any:
    # The working outputs (the op's saved state) are not results: their gradients are dropped.
    return execute(_LSTM_SEQUENCE_GRAD, (*op.inputs, *op.outputs[3:], doutputs, dh, dc))


def _per_step(
    x: Tensor, kernel: Tensor, recurrent: Tensor, bias: Tensor, h: Tensor, c: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """``lstm_sequence`` in per-step tapefit ops, to differentiate its gradient."""
    batch, steps, features = x.shape
    projected = matmul(reshape(x, (batch * steps, features)), kernel) + bias
    outputs = []
    for z in unstack(reshape(projected, (batch, steps, kernel.shape[-1])), axis=1):
        h, c = lstm_cell(z + matmul(h, recurrent), c)
        outputs.append(h)
    return stack(outputs, axis=1), h, c


@register_gradient("LSTMSequenceGrad")
def _lstm_sequence_grad_grad(op: Op, *upstream: Tensor) -> list[Tensor | None]:
    from tapefit.core.tape import GradientTape  # the tape imports the ops

    inputs = list(op.inputs)
    primal, cotangents = inputs[:6], inputs[9:]
    with GradientTape() as outer:
        outer.watch(inputs)
        with GradientTape() as inner:
            inner.watch(primal)
            results = _per_step(*primal)
        grads = inner.gradient(list(results), primal, output_gradients=cotangents)
    return outer.gradient(grads, inputs, output_gradients=list(upstream))
