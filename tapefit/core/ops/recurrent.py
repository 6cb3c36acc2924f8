"""The fused LSTM cell, TensorFlow's ``LSTMBlockCell`` in tapefit's terms.

A cell written with elementwise ops records about a dozen ops per time step and twice as many
in its backward pass; ``lstm_cell`` records one op (``LSTMCell``) and its gradient one more
(``LSTMCellGrad``). Gates ``i, f, g, o`` lie in that order along the last axis of ``z``, with
Keras's default activations: sigmoid on ``i, f, o``, tanh on ``g`` and on the cell state.

``LSTMCellGrad`` is differentiated by running the same formula in tapefit ops under a tape
(``_cell_backward``), so second and higher derivatives go through the fused cell too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tapefit.core.ops.math import sigmoid_into, tanh
from tapefit.core.ops.shape import concat, split
from tapefit.core.record import Op, recording
from tapefit.core.registry import OpDef, execute, register_gradient
from tapefit.core.tensor import Tensor, as_tensor

__all__ = ["lstm_cell"]


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
    from tapefit.core.tape import GradientTape  # the tape imports the ops

    inputs = list(op.inputs)
    with GradientTape() as tape:
        tape.watch(inputs)
        outputs = _cell_backward(*inputs)
    return tape.gradient(list(outputs), inputs, output_gradients=[ddz, ddc_prev])
