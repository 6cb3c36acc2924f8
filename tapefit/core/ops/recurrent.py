"""The fused recurrent cells: LSTM (TensorFlow's ``LSTMBlockCell`` in tapefit's terms), GRU
and the simple RNN's tanh step.

A cell written with elementwise ops records about a dozen ops per time step and twice as many
in its backward pass; ``lstm_cell`` records one op (``LSTMCell``) and its gradient one more
(``LSTMCellGrad``). Gates ``i, f, g, o`` lie in that order along the last axis of ``z``, with
Keras's default activations: sigmoid on ``i, f, o``, tanh on ``g`` and on the cell state.

``LSTMCellGrad`` is differentiated by running the same formula in tapefit ops under a tape
(``_cell_backward``), so second and higher derivatives go through the fused cell too.

``gru_cell`` (Keras's GRU with ``reset_after``) and ``rnn_cell`` (``tanh(x + h @ kernel)``)
follow the same pattern: one op forward, one op backward, whose own gradient runs the
backward formula in tapefit ops under a tape.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tapefit.core.ops.linalg import matmul
from tapefit.core.ops.math import sigmoid_into, tanh
from tapefit.core.ops.shape import concat, split
from tapefit.core.record import Op, recording
from tapefit.core.registry import OpDef, execute, register_gradient
from tapefit.core.tensor import Tensor, as_tensor

__all__ = ["gru_cell", "lstm_cell", "rnn_cell"]


def _gates(a: np.ndarray, units: int) -> tuple[np.ndarray, ...]:
    """Views of the four gates (np.split costs ten times more)."""
    return tuple([a[..., k * units : (k + 1) * units] for k in range(4)])


def _lstm_cell(z: np.ndarray, c_prev: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    units = c_prev.shape[-1]
    gates = np.empty_like(z)
    sigmoid_into(z[..., : 2 * units], gates[..., : 2 * units])
    np.tanh(z[..., 2 * units : 3 * units], out=gates[..., 2 * units : 3 * units])
    sigmoid_into(z[..., 3 * units :], gates[..., 3 * units :])
    i, f, g, o = _gates(gates, units)
    c = f * c_prev
    c += i * g
    h = np.tanh(c)
    h *= o
    return h, c, gates


def _lstm_cell_grad(
    c_prev: np.ndarray, c: np.ndarray, gates: np.ndarray, dh: np.ndarray, dc: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    i, f, g, o = _gates(gates, c.shape[-1])
    tanh_c = np.tanh(c)
    d_o = dh * tanh_c  # before o's slope
    np.multiply(tanh_c, tanh_c, out=tanh_c)
    np.subtract(1, tanh_c, out=tanh_c)  # now tanh'(c)
    dc_total = dh * o
    dc_total *= tanh_c
    dc_total += dc
    dz = np.empty_like(gates)
    di, df, dg, do = _gates(dz, c.shape[-1])
    # each gate: (what it multiplies) * dc_total * (its activation's slope, from its output)
    np.multiply(dc_total, g, out=di)
    di *= i
    di *= 1 - i
    np.multiply(dc_total, c_prev, out=df)
    df *= f
    df *= 1 - f
    np.multiply(g, g, out=dg)
    np.subtract(1, dg, out=dg)
    dg *= dc_total
    dg *= i
    np.multiply(d_o, o, out=do)
    do *= 1 - o
    dc_total *= f
    return dz, dc_total


_LSTM_CELL = OpDef("LSTMCell", _lstm_cell, save="y out")
_LSTM_CELL_GRAD = OpDef("LSTMCellGrad", _lstm_cell_grad, save="all")


def lstm_cell(z: Any, c_prev: Any) -> tuple[Tensor, Tensor]:
    """One LSTM step from the pre-activations ``z`` (..., 4*units) and the previous cell
    state ``c_prev`` (..., units): returns ``(h, c)``.

    ``c = sigmoid(f) * c_prev + sigmoid(i) * tanh(g)``, ``h = sigmoid(o) * tanh(c)``.
    The caller checks shapes and dtypes (one floating dtype, ``z``'s last axis 4*units).
    """
    h, c, _ = execute(_LSTM_CELL, (as_tensor(z), as_tensor(c_prev)))
    return h, c


def _gate_slopes(gates: Tensor) -> Tensor:
    """Each gate's activation's derivative, from the gate's output."""
    i, f, g, o = split(gates, 4, axis=-1)
    return concat([i * (1 - i), f * (1 - f), 1 - g * g, o * (1 - o)], axis=-1)


def _cell_backward(c_prev: Tensor, c: Tensor, gates: Tensor, dh: Tensor, dc: Tensor) -> tuple[Tensor, Tensor]:
    """``_lstm_cell_grad`` in tapefit ops, to differentiate it."""
    i, f, g, o = split(gates, 4, axis=-1)
    tanh_c = tanh(c)
    dc_total = dh * o * (1 - tanh_c * tanh_c) + dc
    dz = concat([dc_total * g, dc_total * c_prev, dc_total * i, dh * tanh_c], axis=-1) * _gate_slopes(gates)
    return dz, dc_total * f


@register_gradient("LSTMCell")
def _lstm_cell_op_grad(op: Op, dh: Tensor, dc: Tensor, dgates: Tensor) -> tuple[Tensor, Tensor]:
    c_prev = op.inputs[1]
    _, c, gates = op.outputs
    dz, dc_prev = execute(_LSTM_CELL_GRAD, (c_prev, c, gates, dh, dc))
    # The gates output only gets a gradient in higher-order derivatives.
    if recording() or dgates._value.any():
        dz = dz + dgates * _gate_slopes(gates)
    return dz, dc_prev


@register_gradient("LSTMCellGrad")
def _lstm_cell_grad_grad(op: Op, ddz: Tensor, ddc_prev: Tensor) -> list[Tensor | None]:
    return _differentiate(_cell_backward, op, [ddz, ddc_prev])


def _differentiate(backward: Any, op: Op, upstream: list[Tensor]) -> list[Tensor | None]:
    """The gradient of a fused backward op: ``backward`` (its formula in tapefit ops) under a tape."""
    from tapefit.core.tape import GradientTape  # the tape imports the ops

    inputs = list(op.inputs)
    with GradientTape() as tape:
        tape.watch(inputs)
        outputs = backward(*inputs)
    return tape.gradient(list(outputs), inputs, output_gradients=upstream)


# -- GRU (reset_after) -----------------------------------------------------------
# xw = x @ kernel + b_x and hw = h @ recurrent_kernel + b_h, both (..., 3*units) holding the
# z, r, h parts in that order: z = sigmoid(x_z + h_z), r = sigmoid(x_r + h_r),
# c = tanh(x_h + r * h_h), h' = z * h + (1 - z) * c. The cell outputs h' and the gates [z, r, c].


def _gru_cell(xw: np.ndarray, hw: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    units = h.shape[-1]
    gates = np.add(xw, hw)
    zr = gates[..., : 2 * units]
    sigmoid_into(zr, zr)
    z, r = gates[..., :units], gates[..., units : 2 * units]
    c = gates[..., 2 * units :]
    np.multiply(r, hw[..., 2 * units :], out=c)
    c += xw[..., 2 * units :]
    np.tanh(c, out=c)
    out = h - c
    out *= z
    out += c  # z * h + (1 - z) * c, as c + z * (h - c)
    return out, gates


def _gru_cell_grad(
    hw: np.ndarray, h: np.ndarray, gates: np.ndarray, dout: np.ndarray, dgates: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    units = h.shape[-1]
    z, r, c = gates[..., :units], gates[..., units : 2 * units], gates[..., 2 * units :]
    dxw = np.empty_like(gates)
    dz, dr, dc = dxw[..., :units], dxw[..., units : 2 * units], dxw[..., 2 * units :]
    # the candidate: dc = (dout (1 - z) + dgates_c) (1 - c^2)
    np.subtract(1, z, out=dc)
    dc *= dout
    dc += dgates[..., 2 * units :]
    slope = c * c
    np.subtract(1, slope, out=slope)
    dc *= slope
    # the update gate: dz = (dout (h - c) + dgates_z) z (1 - z)
    np.subtract(h, c, out=dz)
    dz *= dout
    dz += dgates[..., :units]
    slope = 1 - z
    slope *= z
    dz *= slope
    # the reset gate: dr = (dc h_h + dgates_r) r (1 - r)
    np.multiply(dc, hw[..., 2 * units :], out=dr)
    dr += dgates[..., units : 2 * units]
    slope = 1 - r
    slope *= r
    dr *= slope
    dhw = dxw.copy()
    dhw[..., 2 * units :] *= r
    return dxw, dhw, dout * z


_GRU_CELL = OpDef("GRUCell", _gru_cell, save="y z out")
_GRU_CELL_GRAD = OpDef("GRUCellGrad", _gru_cell_grad, save="all")


def gru_cell(xw: Any, hw: Any, h: Any) -> tuple[Tensor, Tensor]:
    """One GRU step (Keras's ``reset_after`` form, sigmoid and tanh) from the input part ``xw``
    and the recurrent part ``hw`` (both (..., 3*units), biases included) and the state ``h``:
    returns ``(h_new, gates)``, ``gates`` holding ``z, r`` and the candidate.

    The caller checks shapes and dtypes (one floating dtype).
    """
    return execute(_GRU_CELL, (as_tensor(xw), as_tensor(hw), as_tensor(h)))


def _gru_backward(
    hw: Tensor, h: Tensor, gates: Tensor, dout: Tensor, dgates: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """``_gru_cell_grad`` in tapefit ops, to differentiate it."""
    z, r, c = split(gates, 3, axis=-1)
    h_h = split(hw, 3, axis=-1)[2]
    dgz, dgr, dgc = split(dgates, 3, axis=-1)
    dc = (dout * (1 - z) + dgc) * (1 - c * c)
    dz = (dout * (h - c) + dgz) * (z * (1 - z))
    dr = (dc * h_h + dgr) * (r * (1 - r))
    return concat([dz, dr, dc], axis=-1), concat([dz, dr, dc * r], axis=-1), dout * z


@register_gradient("GRUCell")
def _gru_cell_op_grad(op: Op, dout: Tensor, dgates: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    _, hw, h = op.inputs
    return execute(_GRU_CELL_GRAD, (hw, h, op.outputs[1], dout, dgates))


@register_gradient("GRUCellGrad")
def _gru_cell_grad_grad(op: Op, ddxw: Tensor, ddhw: Tensor, ddh: Tensor) -> list[Tensor | None]:
    return _differentiate(_gru_backward, op, [ddxw, ddhw, ddh])


# -- the simple RNN's step: tanh(xw + h @ kernel) ----------------------------------


def _rnn_cell(xw: np.ndarray, h: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    out = np.matmul(h, kernel)
    out += xw
    return np.tanh(out, out=out)


def _rnn_cell_grad(
    h: np.ndarray, kernel: np.ndarray, out: np.ndarray, dout: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    dpre = out * out
    np.subtract(1, dpre, out=dpre)
    dpre *= dout
    return dpre, np.matmul(dpre, kernel.T), np.matmul(h.T, dpre)


_RNN_CELL = OpDef("RNNCell", _rnn_cell, save="y z out")
_RNN_CELL_GRAD = OpDef("RNNCellGrad", _rnn_cell_grad, save="all")


def rnn_cell(xw: Any, h: Any, kernel: Any) -> Tensor:
    """``tanh(xw + h @ kernel)`` as one op: a ``SimpleRNN`` step with its default activation.

    ``xw`` (batch, units), ``h`` (batch, units), ``kernel`` (units, units), one floating dtype;
    the caller checks.
    """
    return execute(_RNN_CELL, (as_tensor(xw), as_tensor(h), as_tensor(kernel)))


def _rnn_backward(h: Tensor, kernel: Tensor, out: Tensor, dout: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``_rnn_cell_grad`` in tapefit ops, to differentiate it."""
    dpre = dout * (1 - out * out)
    return dpre, matmul(dpre, kernel, transpose_b=True), matmul(h, dpre, transpose_a=True)


@register_gradient("RNNCell")
def _rnn_cell_op_grad(op: Op, dout: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    _, h, kernel = op.inputs
    return execute(_RNN_CELL_GRAD, (h, kernel, op.outputs[0], dout))


@register_gradient("RNNCellGrad")
def _rnn_cell_grad_grad(op: Op, ddxw: Tensor, ddh: Tensor, ddkernel: Tensor) -> list[Tensor | None]:
    return _differentiate(_rnn_backward, op, [ddxw, ddh, ddkernel])
