"""The whole-sequence LSTM op (TensorFlow's ``BlockLSTM``, cuDNN's RNN in tapefit's terms).

``lstm_sequence`` runs every time step of an LSTM layer as one recorded op (``LSTMSequence``)
and its backward pass, backpropagation through time, as one more (``LSTMSequenceGrad``). Each
step does one product (its input and the previous state by all the weights) and its gate
arithmetic into preallocated arrays; the backward pass does one product per step (the
recurrent kernel's share) and gets the gradients of the kernel, the recurrent kernel, the bias
and the inputs from two products over all steps after its loop.

Inside, the arrays are laid out so that every step's work is on contiguous blocks: the gates
are kept transposed, ``(4*units, batch)`` per step, in the order ``o, i, f, g`` (Keras's
``i, f, g, o`` rotated by one, so that the three sigmoid gates sit side by side, and so do the
three gates that the cell state's gradient multiplies), and each step multiplies one weight
matrix (kernel, bias and recurrent kernel side by side) by its input, its row of ones and the
previous state stacked. The sigmoid gates' weights are halved, so that one tanh serves all four
gates (sigmoid(z) = (1 + tanh(z / 2)) / 2). The backward pass computes what it needs from the
forward's values alone (each gate's slope times what the gate multiplies) a chunk of steps at a
time, so that each step's loop is a few calls. The op's extra outputs carry that state to the
gradient op: they are working arrays, not results, and take no gradient.

``LSTMSequenceGrad`` is differentiated by running the sequence in per-step tapefit ops
(``lstm_cell``) and their gradient under a tape, so second and higher derivatives hold.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tapefit.core.ops.creation import zeros_like
from tapefit.core.ops.linalg import matmul
from tapefit.core.ops.math import cast, where
from tapefit.core.ops.recurrent import lstm_cell
from tapefit.core.ops.shape import reshape, split, stack, unstack
from tapefit.core.ops.workspace import empty
from tapefit.core.record import Op
from tapefit.core.registry import OpDef, execute, register_gradient, working_outputs
from tapefit.core.tensor import Tensor, as_tensor

__all__ = ["lstm_sequence"]


def _rotate(a: np.ndarray, units: int, out: np.ndarray | None = None) -> np.ndarray:
    """Keras's gate columns ``i, f, g, o`` in the internal order ``o, i, f, g`` (a rotation),
    into ``out`` (a new array by default)."""
    if out is None:
        out = empty(a.shape, a.dtype)
    np.copyto(out[..., :units], a[..., 3 * units :])
    np.copyto(out[..., units:], a[..., : 3 * units])
    return out


def _weights(kernel: np.ndarray, recurrent: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """``(4*units, features + 1 + units)``: each internal gate row's input, bias and recurrent
    weights, the sigmoid gates' halved."""
    features, units = kernel.shape[0], recurrent.shape[0]
    # Built by rows, then transposed in one copy. The rows are one column longer than the
    # gates: reading a column of rows a power of two bytes apart is several times slower.
    rows = empty((features + 1 + units, 4 * units + 1), kernel.dtype)[:, : 4 * units]
    _rotate(kernel, units, rows[:features])
    _rotate(bias, units, rows[features])
    _rotate(recurrent, units, rows[features + 1 :])
    weights = empty((4 * units, features + 1 + units), kernel.dtype)
    np.copyto(weights, rows.T)
    weights[: 3 * units] *= 0.5  # sigmoid(z) = (1 + tanh(z / 2)) / 2: one tanh for all gates
    return weights


def _lstm_sequence(
    x: np.ndarray,
    kernel: np.ndarray,
    recurrent: np.ndarray,
    bias: np.ndarray,
    h0: np.ndarray,
    c0: np.ndarray,
    keep: np.ndarray | None = None,
    *,
    zero_output_for_mask: bool = False,
) -> tuple[np.ndarray, ...]:
    batch, steps, features = x.shape
    units = h0.shape[-1]
    # One column block per step: x_t, a row of ones (the bias) and h_{t-1}, so one product
    # gives the pre-activations; step t writes h_t into block t + 1. The backward pass finds
    # every weight's gradient in one product with it.
    stacked = empty((features + 1 + units, steps + 1, batch), x.dtype)
    stacked[:features, :steps] = x.transpose(2, 1, 0)
    stacked[features, :steps] = 1
    stacked[features + 1 :, 0] = h0.T
    weights = _weights(kernel, recurrent, bias)
    # Step t's block: the gates o, i, f, g, then c_{t-1} (step t writes c_t into block t + 1),
    # so that g and c_{t-1}, which i and f multiply, sit side by side.
    cells = empty((steps + 1, 5 * units, batch), x.dtype)
    cells[0, 4 * units :] = c0.T
    tanh_cs = empty((steps, units, batch), x.dtype)
    hs = stacked[features + 1 :]
    # With a mask, each step's output goes to its own block first: a masked step's output
    # (the previous output, or zeros) differs from its state (the previous state).
    outs = hs[:, 1:] if keep is None else empty((units, steps, batch), x.dtype)
    work = empty((2 * units, batch), x.dtype)
    i_g, f_c = work[:units], work[units:]
    for t in range(steps):
        z, tanh_c = cells[t, : 4 * units], tanh_cs[t]
        np.matmul(weights, stacked[:, t], out=z)
        np.tanh(z, out=z)
        sigmoids = z[: 3 * units]
        sigmoids *= 0.5
        sigmoids += 0.5
        np.multiply(z[units : 3 * units], cells[t, 3 * units :], out=work)  # i g and f c_{t-1}
        c = cells[t + 1, 4 * units :]
        np.add(i_g, f_c, out=c)
        np.tanh(c, out=tanh_c)
        np.multiply(z[:units], tanh_c, out=outs[:, t])
        if keep is not None:
            mask_step(~keep[:, t], outs, hs, cells[:, 4 * units :], t, zero_output_for_mask)
    outputs = empty((batch, steps, units), x.dtype)
    for t in range(steps):  # a step at a time: each step's block stays in cache
        np.copyto(outputs[:, t], outs[:, t].T)
    return outputs, hs[:, steps].T.copy(), cells[steps, 4 * units :].T.copy(), stacked, cells, tanh_cs


def mask_step(
    dropped: np.ndarray, outs: np.ndarray, hs: np.ndarray, cs: np.ndarray | None, t: int, zero_output: bool
) -> None:
    """Keras's rule for the masked (``dropped``) rows of step ``t``: the states (``hs`` and
    ``cs``, if any; block ``t + 1`` is step ``t``'s) carry through, the output (``outs[:, t]``,
    already in ``hs[:, t + 1]``'s place) repeats the previous output (zeros before the first
    step, or always zeros with ``zero_output``). The GRU's sequence op shares it."""
    np.copyto(hs[:, t + 1], outs[:, t])
    np.copyto(hs[:, t + 1], hs[:, t], where=dropped)
    if cs is not None:
        np.copyto(cs[t + 1], cs[t], where=dropped)
    np.copyto(outs[:, t], 0 if zero_output or t == 0 else outs[:, t - 1], where=dropped)


def output_gradient(dout: np.ndarray, douts: np.ndarray, kept: np.ndarray, t: int, zero_output: bool) -> None:
    """Turns ``dout`` (step ``t + 1``'s output gradient, with what later steps repeat) into
    step ``t``'s: a masked step ``t + 1`` repeated step ``t``'s output (``mask_step``)."""
    if zero_output or t == len(douts) - 1:
        dout[...] = douts[t]
    else:
        dout *= 1 - kept[t + 1]
        dout += douts[t]


def _local_factors(
    cells: np.ndarray, tanh_cs: np.ndarray, dzs: np.ndarray, dcs: np.ndarray, steps: slice
) -> None:
    """What backpropagation through time multiplies by at ``steps``, from the forward's values
    alone (``cells``: the gates and c_{t-1}; ``tanh_cs``: tanh(c_t)). Into ``dzs``, each gate's
    slope times what the gate multiplies: tanh(c_t) for o, g for i, c_{t-1} for f, i for g;
    into ``dcs``, o (1 - tanh(c_t)^2), what the cell state's gradient gets from h's."""
    units = dcs.shape[1]
    slope, gates = dzs[steps], cells[steps]
    sigmoids, g = gates[:, : 3 * units], gates[:, 3 * units : 4 * units]
    np.subtract(1, sigmoids, out=slope[:, : 3 * units])
    slope[:, : 3 * units] *= sigmoids
    np.multiply(g, g, out=slope[:, 3 * units :])
    np.subtract(1, slope[:, 3 * units :], out=slope[:, 3 * units :])
    tanh_c = tanh_cs[steps]
    slope[:, :units] *= tanh_c
    slope[:, units : 3 * units] *= gates[:, 3 * units :]
    slope[:, 3 * units :] *= gates[:, units : 2 * units]
    dc = dcs[steps]
    np.multiply(tanh_c, tanh_c, out=dc)
    np.subtract(1, dc, out=dc)
    dc *= gates[:, :units]


_CHUNK = 16
"""Steps whose local factors the backward pass computes together: their arrays stay in cache."""


def _to_keras(rows: np.ndarray, units: int) -> np.ndarray:
    """Gradient rows in the internal gate order ``o, i, f, g`` as Keras's columns
    ``i, f, g, o``: a new C-contiguous array."""
    out = empty((rows.shape[1], 4 * units), rows.dtype)
    np.copyto(out[:, : 3 * units], rows[units:].T)
    np.copyto(out[:, 3 * units :], rows[:units].T)
    return out


def _lstm_sequence_grad(
    x: np.ndarray,
    kernel: np.ndarray,
    recurrent: np.ndarray,
    bias: np.ndarray,
    h0: np.ndarray,
    c0: np.ndarray,
    stacked: np.ndarray,
    cells: np.ndarray,
    tanh_cs: np.ndarray,
    doutputs: np.ndarray,
    dh_last: np.ndarray,
    dc_last: np.ndarray,
    keep: np.ndarray | None = None,
    *,
    zero_output_for_mask: bool = False,
) -> tuple[np.ndarray, ...]:
    steps, units, batch = tanh_cs.shape
    width, features = 4 * units, x.shape[-1]
    douts = empty((steps, units, batch), x.dtype)
    np.copyto(douts, doutputs.transpose(1, 2, 0))
    dzs = empty((steps, width, batch), x.dtype)
    dh = dh_last.T.copy()  # copies: both are written, and for one row .T is contiguous
    dc = dc_last.T.copy()
    recurrent_i = _rotate(recurrent, units)  # (units, 4*units)
    # The factors that need no gradient are computed a chunk of steps at a time, in a few
    # larger calls; each step then needs six small ones besides its product.
    factors = empty((steps, units, batch), x.dtype)
    by_gate = dzs.reshape(steps, 4, units, batch)
    forget = cells[:, 2 * units : 3 * units]
    kept = None if keep is None else keep.T.astype(x.dtype)
    dout = np.zeros_like(dh)  # with a mask: the gradient of step t's output, with repeats
    dh_new, dc_new, work = np.empty_like(dh), np.empty_like(dc), np.empty_like(dc)
    for end in range(steps, 0, -_CHUNK):
        start = max(end - _CHUNK, 0)
        _local_factors(cells, tanh_cs, dzs, factors, slice(start, end))
        for t in range(end - 1, start - 1, -1):
            if kept is None:
                dh += douts[t]
                np.multiply(dh, factors[t], out=work)
                work += dc  # the cell state's gradient
                o, ifg = by_gate[t, 0], by_gate[t, 1:]
                o *= dh
                np.multiply(ifg, work, out=ifg)
                np.multiply(work, forget[t], out=dc)
                np.matmul(recurrent_i, dzs[t], out=dh)  # the gradient of h_{t-1}
            else:  # Keras's mask rule (see mask_step): a masked step passes the gradients on
                output_gradient(dout, douts, kept, t, zero_output_for_mask)
                np.add(dh, dout, out=dh_new)
                dh_new *= kept[t]
                np.multiply(dh_new, factors[t], out=work)
                np.multiply(dc, kept[t], out=dc_new)
                work += dc_new
                o, ifg = by_gate[t, 0], by_gate[t, 1:]
                o *= dh_new
                np.multiply(ifg, work, out=ifg)
                dropped = 1 - kept[t]
                dh *= dropped
                dc *= dropped
                dc += np.multiply(work, forget[t], out=dc_new)
                dh += np.matmul(recurrent_i, dzs[t], out=dh_new)
    # The products over all steps take (time, batch) as one axis: one copy into that layout
    # costs less than one per step (each writes a row per gate unit, a page apart).
    flat = empty((width, steps, batch), x.dtype)
    np.copyto(flat, dzs.transpose(1, 0, 2))
    flat = flat.reshape(width, steps * batch)
    # One product for the kernel's, the bias's and the recurrent kernel's gradients.
    dweights = empty((width, len(stacked)), x.dtype)
    np.matmul(flat, stacked[:, :steps].reshape(-1, steps * batch).T, out=dweights)
    kernel_i = _rotate(kernel, units)  # (features, 4*units)
    dx_by_step = np.matmul(flat.T, kernel_i.T, out=empty((steps * batch, features), x.dtype))
    dx = empty((batch, steps, features), x.dtype)
    np.copyto(dx, dx_by_step.reshape(steps, batch, features).transpose(1, 0, 2))
    return (
        dx,
        _to_keras(dweights[:, :features], units),
        _to_keras(dweights[:, features + 1 :], units),
        _to_keras(dweights[:, features : features + 1], units)[0].copy(),
        np.ascontiguousarray(dh.T),
        np.ascontiguousarray(dc.T),
    )


_LSTM_SEQUENCE = OpDef("LSTMSequence", _lstm_sequence, save="all")
_LSTM_SEQUENCE_GRAD = OpDef("LSTMSequenceGrad", _lstm_sequence_grad, save="all")
working_outputs("LSTMSequence", 3)  # the tape fills no zeros for them


def lstm_sequence(
    x: Any,
    kernel: Any,
    recurrent_kernel: Any,
    bias: Any,
    h0: Any,
    c0: Any,
    mask: Any = None,
    zero_output_for_mask: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """A whole LSTM layer's time loop as one op: returns ``(outputs, h, c)``, every step's
    output (batch, time, units) and the last step's states (batch, units).

    ``x`` (batch, time, features); ``kernel`` (features, 4*units), ``recurrent_kernel``
    (units, 4*units) and ``bias`` (4*units,) with Keras's gate order ``i, f, c, o`` and
    default activations (sigmoid gates, tanh); ``h0``, ``c0`` (batch, units) the initial
    states. ``mask`` (batch, time) of booleans marks the real steps: a masked step keeps the
    states and outputs the previous step's output (zeros before the first step), or zeros with
    ``zero_output_for_mask``, as Keras's layers. The caller checks shapes and dtypes (one
    floating dtype, at least one step).
    """
    inputs, attrs = sequence_inputs((x, kernel, recurrent_kernel, bias, h0, c0), mask, zero_output_for_mask)
    outputs, h, c, *_ = execute(_LSTM_SEQUENCE, inputs, attrs)
    return outputs, h, c


def sequence_inputs(
    values: tuple[Any, ...], mask: Any, zero_output_for_mask: bool
) -> tuple[tuple[Tensor, ...], dict[str, Any]]:
    """A sequence op's inputs (``values``, then the mask as booleans when there is one) and
    attrs. The GRU's sequence op shares it."""
    inputs = tuple(as_tensor(v) for v in values)
    if mask is None:
        return inputs, {}
    mask = as_tensor(mask)
    inputs += (mask if mask.dtype == bool else cast(mask, bool),)
    return inputs, {"zero_output_for_mask": bool(zero_output_for_mask)}


def sequence_gradient(grad_op: OpDef, op: Op, results: int, upstream: tuple[Tensor, ...]) -> Any:
    """A sequence op's gradient: ``grad_op`` on the op's inputs but the mask, its working
    outputs (those after its ``results``), the results' ``upstream`` gradients and the mask.
    The working outputs' own gradients are dropped (they are saved state, not results), and
    the mask gets none. The GRU's sequence op shares it."""
    values = len(op.inputs) - ("zero_output_for_mask" in op.attrs)
    grads = execute(
        grad_op, (*op.inputs[:values], *op.outputs[results:], *upstream, *op.inputs[values:]), op.attrs
    )
    return [*grads, None] if len(op.inputs) > values else grads


@register_gradient("LSTMSequence")
def _lstm_sequence_op_grad(op: Op, doutputs: Tensor, dh: Tensor, dc: Tensor, *working: Tensor | None) -> Any:
    return sequence_gradient(_LSTM_SEQUENCE_GRAD, op, 3, (doutputs, dh, dc))


def _per_step(
    x: Tensor,
    kernel: Tensor,
    recurrent: Tensor,
    bias: Tensor,
    h: Tensor,
    c: Tensor,
    mask: Tensor | None = None,
    zero_output_for_mask: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """``lstm_sequence`` in per-step tapefit ops, to differentiate its gradient."""
    batch, steps, features = x.shape
    projected = matmul(reshape(x, (batch * steps, features)), kernel) + bias
    keep = [None] * steps if mask is None else split(mask, steps, axis=1)
    zeros = zeros_like(h)
    outputs: list[Tensor] = []
    for z, step_keep in zip(unstack(reshape(projected, (batch, steps, kernel.shape[-1])), axis=1), keep):
        h_new, c_new = lstm_cell(z + matmul(h, recurrent), c)
        if step_keep is None:
            h, c, output = h_new, c_new, h_new
        else:
            h, c = where(step_keep, h_new, h), where(step_keep, c_new, c)
            previous = outputs[-1] if outputs and not zero_output_for_mask else zeros
            output = where(step_keep, h_new, previous)
        outputs.append(output)
    return stack(outputs, axis=1), h, c


@register_gradient("LSTMSequenceGrad")
def _lstm_sequence_grad_grad(op: Op, *upstream: Tensor) -> list[Tensor | None]:
    from tapefit.core.tape import GradientTape  # the tape imports the ops

    inputs = list(op.inputs)
    primal, cotangents, mask = inputs[:6], inputs[9:12], inputs[12:]
    with GradientTape() as outer:
        outer.watch(primal + cotangents)
        with GradientTape() as inner:
            inner.watch(primal)
            results = _per_step(*primal, *mask, **op.attrs)
        grads = inner.gradient(list(results), primal, output_gradients=cotangents)
    first = outer.gradient(grads, primal + cotangents, output_gradients=list(upstream))
    return [*first[:6], None, None, None, *first[6:], *[None for _ in mask]]  # none for the working arrays
