"""The whole-sequence GRU op (Keras's ``reset_after`` GRU, cuDNN's form): ``GRUSequence`` runs
every time step as one recorded op and ``GRUSequenceGrad`` its backpropagation through time,
as ``lstm_sequence`` does for the LSTM (see there for the layout).

Each step's one product gives four blocks, in the internal order ``x_h, z, r, h_h``: the input
part of the candidate, the update and reset gates' pre-activations (input and recurrent parts
summed, halved so that one tanh gives both gates: sigmoid(z) = (1 + tanh(z / 2)) / 2) and the
recurrent part of the candidate (which the reset gate multiplies). The weight matrix has zeros
where a block has no input or no recurrent part; the blocks with input weights (the first three)
and those with recurrent weights (the last three) are adjacent, so the backward pass's products
skip the zeros. The backward pass computes what it needs from the forward's values alone (what
the gradient of a step's output is multiplied by to give each block's) a chunk of steps at a
time, so that each step's loop is a few calls. ``GRUSequenceGrad`` is differentiated by running
the sequence in per-step tapefit ops (``gru_cell``) and their gradient under a tape.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tapefit.core.ops.creation import zeros_like
from tapefit.core.ops.linalg import matmul
from tapefit.core.ops.lstm_sequence import mask_step, output_gradient, sequence_gradient, sequence_inputs
from tapefit.core.ops.math import where
from tapefit.core.ops.nn import dense
from tapefit.core.ops.recurrent import gru_cell
from tapefit.core.ops.shape import reshape, split, stack, unstack
from tapefit.core.ops.workspace import empty
from tapefit.core.record import Op
from tapefit.core.registry import OpDef, execute, register_gradient, working_outputs
from tapefit.core.tensor import Tensor

__all__ = ["gru_sequence"]


def _weights(kernel: np.ndarray, recurrent: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """``(4*units, features + 1 + units)``: each block's input, bias and recurrent weights, the
    gates' halved."""
    features, units = kernel.shape[0], recurrent.shape[0]
    weights = empty((4 * units, features + 1 + units), kernel.dtype)
    x_h, zr, h_h = slice(0, units), slice(units, 3 * units), slice(3 * units, 4 * units)
    weights[x_h, :features] = kernel[:, 2 * units :].T
    weights[x_h, features] = bias[0, 2 * units :]
    weights[x_h, features + 1 :] = 0
    weights[zr, :features] = kernel[:, : 2 * units].T
    np.add(bias[0, : 2 * units], bias[1, : 2 * units], out=weights[zr, features])
    weights[zr, features + 1 :] = recurrent[:, : 2 * units].T
    weights[zr] *= 0.5  # sigmoid(z) = (1 + tanh(z / 2)) / 2
    weights[h_h, :features] = 0
    weights[h_h, features] = bias[1, 2 * units :]
    weights[h_h, features + 1 :] = recurrent[:, 2 * units :].T
    return weights


def _gru_sequence(
    x: np.ndarray,
    kernel: np.ndarray,
    recurrent: np.ndarray,
    bias: np.ndarray,
    h0: np.ndarray,
    keep: np.ndarray | None = None,
    *,
    zero_output_for_mask: bool = False,
) -> tuple[np.ndarray, ...]:
    batch, steps, features = x.shape
    units = h0.shape[-1]
    # One column block per step: x_t, a row of ones (the biases) and h_{t-1}; step t writes
    # h_t into block t + 1.
    stacked = empty((features + 1 + units, steps + 1, batch), x.dtype)
    stacked[:features, :steps] = x.transpose(2, 1, 0)
    stacked[features, :steps] = 1
    stacked[features + 1 :, 0] = h0.T
    weights = _weights(kernel, recurrent, bias)
    # Step t's block: the candidate, the gates z and r, and h_h.
    gates = empty((steps, 4 * units, batch), x.dtype)
    hs = stacked[features + 1 :]
    outs = hs[:, 1:] if keep is None else empty((units, steps, batch), x.dtype)
    work = empty((units, batch), x.dtype)
    for t in range(steps):
        g = gates[t]
        np.matmul(weights, stacked[:, t], out=g[: 4 * units])
        zr = g[units : 3 * units]
        np.tanh(zr, out=zr)
        zr *= 0.5
        zr += 0.5
        update, c = g[units : 2 * units], g[:units]
        np.multiply(g[2 * units : 3 * units], g[3 * units : 4 * units], out=work)  # r h_h
        c += work
        np.tanh(c, out=c)  # the candidate
        np.subtract(hs[:, t], c, out=work)
        work *= update
        np.add(work, c, out=outs[:, t])  # z h + (1 - z) c, as c + z (h - c)
        if keep is not None:
            mask_step(~keep[:, t], outs, hs, None, t, zero_output_for_mask)
    outputs = empty((batch, steps, units), x.dtype)
    for t in range(steps):  # a step at a time: each step's block stays in cache
        np.copyto(outputs[:, t], outs[:, t].T)
    return outputs, hs[:, steps].T.copy(), stacked, gates


def _local_factors(
    gates: np.ndarray, hs: np.ndarray, dzs: np.ndarray, work: np.ndarray, steps: slice
) -> None:
    """What the gradient of each step's output is multiplied by to give each block's gradient,
    from the forward's blocks and states (``hs``, h_{t-1} at column block t) alone, into
    ``dzs`` at ``steps``; ``work`` is scratch of one block's shape for those steps."""
    units = work.shape[1]
    g, factor = gates[steps], dzs[steps]
    c, update, reset, h_h = (g[:, k * units : (k + 1) * units] for k in range(4))
    d_xh, d_update, d_reset, d_hh = (factor[:, k * units : (k + 1) * units] for k in range(4))
    # the slopes: 1 - c^2 for the candidate, s (1 - s) for the gates
    np.multiply(c, c, out=d_xh)
    np.subtract(1, d_xh, out=d_xh)
    np.subtract(1, g[:, units : 3 * units], out=factor[:, units : 3 * units])
    factor[:, units : 3 * units] *= g[:, units : 3 * units]
    np.subtract(1, update, out=work)
    d_xh *= work  # the candidate's pre-activation: (1 - z) (1 - c^2)
    np.multiply(d_xh, reset, out=d_hh)  # the reset gate multiplies h_h: r
    d_reset *= h_h  # and h_h r (1 - r)
    d_reset *= d_xh
    np.subtract(hs[:, steps].transpose(1, 0, 2), c, out=work)
    d_update *= work  # the update gate: (h_prev - c) z (1 - z)


_CHUNK = 16
"""Steps whose local factors the backward pass computes together: their arrays stay in cache."""


def _gru_sequence_grad(
    x: np.ndarray,
    kernel: np.ndarray,
    recurrent: np.ndarray,
    bias: np.ndarray,
    h0: np.ndarray,
    stacked: np.ndarray,
    gates: np.ndarray,
    doutputs: np.ndarray,
    dh_last: np.ndarray,
    keep: np.ndarray | None = None,
    *,
    zero_output_for_mask: bool = False,
) -> tuple[np.ndarray, ...]:
    steps, width, batch = gates.shape
    units, features = width // 4, x.shape[-1]
    douts = empty((steps, units, batch), x.dtype)
    np.copyto(douts, doutputs.transpose(1, 2, 0))
    dzs = empty((steps, 4 * units, batch), x.dtype)
    dh = dh_last.T.copy()  # a copy: it is written, and for one row .T is contiguous
    dh_new, dout, direct = np.empty_like(dh), np.zeros_like(dh), np.empty_like(dh)
    kept = None if keep is None else keep.T.astype(x.dtype)
    # Every block's gradient is the output's gradient times a factor from the forward pass:
    # the factors are computed a chunk of steps at a time, in a few larger calls.
    by_block = dzs.reshape(steps, 4, units, batch)
    update = gates[:, units : 2 * units]
    work = empty((_CHUNK, units, batch), x.dtype)
    for end in range(steps, 0, -_CHUNK):
        start = max(end - _CHUNK, 0)
        _local_factors(gates, stacked[features + 1 :], dzs, work[: end - start], slice(start, end))
        for t in range(end - 1, start - 1, -1):
            # h_{t-1} reaches h_t directly (times z) and through the blocks z, r, h_h
            if kept is None:
                dh += douts[t]
                np.multiply(by_block[t], dh, out=by_block[t])
                np.multiply(dh, update[t], out=direct)
                np.matmul(recurrent, dzs[t, units:], out=dh)
                dh += direct
            else:  # Keras's mask rule (see lstm_sequence's mask_step): a masked step passes
                # the state's gradient straight through
                output_gradient(dout, douts, kept, t, zero_output_for_mask)
                np.add(dh, dout, out=dh_new)
                dh_new *= kept[t]
                dh *= 1 - kept[t]
                np.multiply(by_block[t], dh_new, out=by_block[t])
                dh += np.multiply(dh_new, update[t], out=direct)
                dh += np.matmul(recurrent, dzs[t, units:], out=dh_new)
    flat = empty((4 * units, steps, batch), x.dtype)
    np.copyto(flat, dzs.transpose(1, 0, 2))
    flat = flat.reshape(4 * units, steps * batch)
    columns = stacked[:, :steps].reshape(-1, steps * batch)
    # The blocks x_h, z, r have input weights, the blocks z, r, h_h recurrent ones; all biases.
    d_input = np.matmul(flat[: 3 * units], columns[: features + 1].T)
    d_recurrent = np.matmul(flat[units:], columns[features:].T)
    kernel_i = np.concatenate([kernel[:, 2 * units :], kernel[:, : 2 * units]], axis=1)  # x_h, z, r
    dx_by_step = np.matmul(flat[: 3 * units].T, kernel_i.T, out=empty((steps * batch, features), x.dtype))
    dx = empty((batch, steps, features), x.dtype)
    np.copyto(dx, dx_by_step.reshape(steps, batch, features).transpose(1, 0, 2))
    dkernel = np.concatenate([d_input[units:, :features], d_input[:units, :features]]).T
    dbias = np.stack(
        [np.concatenate([d_input[units:, features], d_input[:units, features]]), d_recurrent[:, 0]]
    )
    return (
        dx,
        np.ascontiguousarray(dkernel),
        np.ascontiguousarray(d_recurrent[:, 1:].T),
        dbias,
        np.ascontiguousarray(dh.T),
    )


_GRU_SEQUENCE = OpDef("GRUSequence", _gru_sequence, save="all")
_GRU_SEQUENCE_GRAD = OpDef("GRUSequenceGrad", _gru_sequence_grad, save="all")
working_outputs("GRUSequence", 2)  # the tape fills no zeros for them


def gru_sequence(
    x: Any,
    kernel: Any,
    recurrent_kernel: Any,
    bias: Any,
    h0: Any,
    mask: Any = None,
    zero_output_for_mask: bool = False,
) -> tuple[Tensor, Tensor]:
    """A whole GRU layer's time loop (Keras's ``reset_after`` form) as one op: returns
    ``(outputs, h)``, every step's output (batch, time, units) and the last state (batch, units).

    ``x`` (batch, time, features); ``kernel`` (features, 3*units), ``recurrent_kernel``
    (units, 3*units) and ``bias`` (2, 3*units: the input and the recurrent biases) with
    Keras's gate order ``z, r, h`` and default activations (sigmoid gates, tanh); ``h0``
    (batch, units) the initial state. ``mask`` and ``zero_output_for_mask`` as in
    ``lstm_sequence``. The caller checks shapes and dtypes (one floating dtype, at least one
    step).
    """
    inputs, attrs = sequence_inputs((x, kernel, recurrent_kernel, bias, h0), mask, zero_output_for_mask)
    outputs, h, *_ = execute(_GRU_SEQUENCE, inputs, attrs)
    return outputs, h


@register_gradient("GRUSequence")
def _gru_sequence_op_grad(op: Op, doutputs: Tensor, dh: Tensor, *working: Tensor | None) -> Any:
    return sequence_gradient(_GRU_SEQUENCE_GRAD, op, 2, (doutputs, dh))


def _per_step(
    x: Tensor,
    kernel: Tensor,
    recurrent: Tensor,
    bias: Tensor,
    h: Tensor,
    mask: Tensor | None = None,
    zero_output_for_mask: bool = False,
) -> tuple[Tensor, Tensor]:
    """``gru_sequence`` in per-step tapefit ops, to differentiate its gradient."""
    batch, steps, features = x.shape
    input_bias, recurrent_bias = unstack(bias, axis=0)
    projected = matmul(reshape(x, (batch * steps, features)), kernel) + input_bias
    keep = [None] * steps if mask is None else split(mask, steps, axis=1)
    zeros = zeros_like(h)
    outputs: list[Tensor] = []
    for xw, step_keep in zip(unstack(reshape(projected, (batch, steps, kernel.shape[-1])), axis=1), keep):
        h_new, _ = gru_cell(xw, dense(h, recurrent, recurrent_bias), h)
        if step_keep is None:
            h, output = h_new, h_new
        else:
            h = where(step_keep, h_new, h)
            previous = outputs[-1] if outputs and not zero_output_for_mask else zeros
            output = where(step_keep, h_new, previous)
        outputs.append(output)
    return stack(outputs, axis=1), h


@register_gradient("GRUSequenceGrad")
def _gru_sequence_grad_grad(op: Op, *upstream: Tensor) -> list[Tensor | None]:
    from tapefit.core.tape import GradientTape  # the tape imports the ops

    inputs = list(op.inputs)
    primal, cotangents, mask = inputs[:5], inputs[7:9], inputs[9:]
    with GradientTape() as outer:
        outer.watch(primal + cotangents)
        with GradientTape() as inner:
            inner.watch(primal)
            results = _per_step(*primal, *mask, **op.attrs)
        grads = inner.gradient(list(results), primal, output_gradients=cotangents)
    first = outer.gradient(grads, primal + cotangents, output_gradients=list(upstream))
    return [*first[:5], None, None, *first[5:], *[None for _ in mask]]  # none for the working arrays
