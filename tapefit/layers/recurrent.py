"""Recurrent layers with Keras 3's names, arguments and weight layouts: SimpleRNN, LSTM, GRU,
and the Bidirectional wrapper.

A layer runs its cell over the time steps in a Python loop that the tape records like any
other code (so gradients, higher derivatives and ``tp.function`` replay work as for any op).
The input projection of every time step is one matrix product before the loop; each step adds
one product with the recurrent kernel. Inputs are ``(batch, time, features)``.

An LSTM, or a GRU with ``reset_after``, with the default activations and without recurrent
dropout runs the whole loop, masks included, as one op instead (``lstm_sequence`` and
``gru_sequence`` in ``tapefit.core.ops``), and its backward pass as one more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core.messages import shown
from tapefit.core.ops import math as _math
from tapefit.core.ops import nn as _nn
from tapefit.core.ops import shape as _shape
from tapefit.core.ops.gru_sequence import gru_sequence
from tapefit.core.ops.linalg import matmul
from tapefit.core.ops.lstm_sequence import lstm_sequence
from tapefit.core.ops.recurrent import gru_cell, lstm_cell, rnn_cell
from tapefit.core.tensor import Tensor, as_tensor
from tapefit.layers import activations, constraints, initializers
from tapefit.layers.module import Layer, known_size, rank_of
from tapefit.layers.recurrent_cells import ForgetBias, RecurrentWeights, ResetAfterBias, StatefulMixin

__all__ = ["GRU", "LSTM", "Bidirectional", "SimpleRNN"]


class _RNN(RecurrentWeights, StatefulMixin, Layer):
    """What the three layers share: the time loop, masks, ``return_sequences``/``return_state``
    and ``go_backwards``. A subclass gives the number of gates, its states and ``_cell``."""

    _state_count = 1

    def __init__(
        self,
        units: int,
        activation: str | Callable[..., Any] | None = "tanh",
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        recurrent_initializer: Any = "orthogonal",
        bias_initializer: Any = "zeros",
        *,
        return_sequences: bool = False,
        return_state: bool = False,
        go_backwards: bool = False,
        stateful: bool = False,
        unroll: bool = False,
        name: str | None = None,
        dropout: float = 0.0,
        recurrent_dropout: float = 0.0,
        zero_output_for_mask: bool = False,
        kernel_regularizer: Any = None,
        recurrent_regularizer: Any = None,
        bias_regularizer: Any = None,
        activity_regularizer: Any = None,
        kernel_constraint: Any = None,
        recurrent_constraint: Any = None,
        bias_constraint: Any = None,
    ) -> None:
        super().__init__(name=name)
        for what, rate in (("dropout", dropout), ("recurrent_dropout", recurrent_dropout)):
            if not 0.0 <= float(rate) < 1.0:
                raise ValueError(f"{type(self).__name__}: {what} must be in [0, 1), got {shown(rate)}")
        self.dropout, self.recurrent_dropout = float(dropout), float(recurrent_dropout)
        if isinstance(units, bool) or not isinstance(units, (int, np.integer)) or units < 1:
            raise ValueError(f"{type(self).__name__}: units must be a positive integer, got {shown(units)}")
        self.units = int(units)
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.recurrent_initializer = initializers.get(recurrent_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.return_sequences, self.return_state = bool(return_sequences), bool(return_state)
        self.go_backwards = bool(go_backwards)
        self.stateful, self.unroll = bool(stateful), bool(unroll)
        self.zero_output_for_mask = bool(zero_output_for_mask)
        self._add_regularizer("kernel", kernel_regularizer)
        self._add_regularizer("recurrent_kernel", recurrent_regularizer)
        self._add_regularizer("bias", bias_regularizer)
        self._set_activity_regularizer(activity_regularizer)
        self.kernel_constraint = constraints.get(kernel_constraint)
        self.recurrent_constraint = constraints.get(recurrent_constraint)
        self.bias_constraint = constraints.get(bias_constraint)
        self._arguments = {
            "units": units,
            "activation": activation,
            "use_bias": use_bias,
            "kernel_initializer": kernel_initializer,
            "recurrent_initializer": recurrent_initializer,
            "bias_initializer": bias_initializer,
            "return_sequences": return_sequences,
            "return_state": return_state,
            "stateful": stateful,
            "unroll": unroll,
            "dropout": dropout,
            "recurrent_dropout": recurrent_dropout,
            "zero_output_for_mask": zero_output_for_mask,
            "kernel_regularizer": kernel_regularizer,
            "recurrent_regularizer": recurrent_regularizer,
            "bias_regularizer": bias_regularizer,
            "activity_regularizer": activity_regularizer,
            "kernel_constraint": kernel_constraint,
            "recurrent_constraint": recurrent_constraint,
            "bias_constraint": bias_constraint,
        }
        self.kernel = self.recurrent_kernel = self.bias = None

    def build(self, input_shape: Any) -> None:
        """Creates ``kernel`` (features, gates*units), ``recurrent_kernel`` (units, gates*units), ``bias``."""
        if not isinstance(input_shape, tuple) or len(input_shape) != 3:
            raise ValueError(
                f"{type(self).__name__} '{self.name}' needs inputs of shape (batch, time, features), "
                f"got shape {input_shape}"
            )
        self._add_recurrent_weights(known_size(self, input_shape, -1, "the features"))
        self._note_batch(input_shape)

    def _input_projection(self, x: Tensor) -> list[Tensor]:
        """``x @ kernel + bias`` for every time step in one product, then one (batch,
        gates*units) view per step (unstacking them all at once records one op, not one per step)."""
        batch, steps, features = x.shape
        flat = matmul(_shape.reshape(x, (batch * steps, features)), self.kernel)
        if self.bias is not None:
            flat = flat + self._input_bias()
        return _shape.unstack(_shape.reshape(flat, (batch, steps, self._gates * self.units)), axis=1)

    def _input_bias(self) -> Any:
        return self.bias

    def _recurrent_weights(self) -> Any:
        """What ``_cell`` multiplies ``h_in`` by, worked out once per call."""
        return self.recurrent_kernel

    def _cell(
        self, xw: Tensor, states: list[Tensor], h_in: Tensor, recurrent: Any
    ) -> tuple[Tensor, list[Tensor]]:
        """One step: the output and the new states; ``h_in`` is the state the recurrent kernel
        multiplies (``states[0]`` after recurrent dropout), ``recurrent`` what
        ``_recurrent_weights`` gave."""
        raise NotImplementedError

    def _sequence(
        self, x: Tensor, states: list[Tensor], keep: Tensor | None
    ) -> tuple[Tensor, list[Tensor]] | None:
        """Every step at once, in one op, where the layer has one for its configuration: the
        outputs in the order run (reversed with ``go_backwards``) and the last states; ``None``
        to run step by step. Called without recurrent dropout or empty inputs; ``keep`` is the
        boolean mask or ``None``."""
        return None

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        """The steps' mask goes on with the sequence (``return_sequences``), not past the last state."""
        return mask if self.return_sequences else None

    def compute_output_shape(self, input_shape: Any) -> Any:
        """``(batch, units)``, ``(batch, steps, units)`` with ``return_sequences``, followed by
        one ``(batch, units)`` per state with ``return_state``."""
        shape = rank_of(self, input_shape, 3, "inputs (batch, time, features)")
        if self.kernel is not None and shape[-1] not in (None, self.kernel.shape[0]):
            raise ValueError(
                f"{type(self).__name__} '{self.name}' was built for {self.kernel.shape[0]} features, "
                f"got shape {input_shape}"
            )
        output = (shape[0], shape[1], self.units) if self.return_sequences else (shape[0], self.units)
        if self.return_state:
            return [output, *[(shape[0], self.units)] * self._state_count]
        return output

    def call(self, inputs: Any, mask: Any = None, initial_state: Any = None, training: Any = None) -> Any:
        """Runs the layer over the time axis; see the class docstring for what it returns."""
        x = as_tensor(inputs)
        kernel = self.kernel
        assert kernel is not None, f"{type(self).__name__} '{self.name}' was called before build"
        if x.dtype != kernel.dtype:
            x = _math.cast(x, kernel.dtype)
        if x.ndim != 3 or x.shape[-1] != kernel.shape[0]:
            raise ValueError(
                f"{type(self).__name__} '{self.name}' was built for inputs (batch, time, {kernel.shape[0]}), "
                f"got shape {x.shape}"
            )
        batch, steps, _ = x.shape
        if mask is not None:  # a Tensor: ops, so that tp.function replays it
            mask = as_tensor(mask)
            if tuple(mask.shape) != (batch, steps):
                raise ValueError(
                    f"{type(self).__name__} '{self.name}': mask must have shape {(batch, steps)}, "
                    f"got {tuple(mask.shape)}"
                )
            mask = mask if mask.dtype == bool else _math.cast(mask, bool)
        if self.stateful and initial_state is None:
            states = self._carried_states(batch, lambda b: self._initial_states(b, None, x.dtype))
        else:
            states = self._initial_states(batch, initial_state, x.dtype)
            if self.stateful:  # the variables are made here when the first call gives the states
                self._carried_states(batch, lambda b: self._initial_states(b, None, x.dtype))
        recurrent_keep = None
        if training and self.dropout:  # one mask per sequence, the same at every step (Keras)
            x = x * _nn.dropout(as_tensor(np.ones((batch, 1, x.shape[-1]), x.dtype)), self.dropout)
        if training and self.recurrent_dropout:
            recurrent_keep = _nn.dropout(
                as_tensor(np.ones((batch, self.units), x.dtype)), self.recurrent_dropout
            )
        fused = self._sequence(x, states, mask) if recurrent_keep is None and steps and batch else None
        if fused is not None:
            sequence, states = fused
            # the last output is the state, unless a mask made the last step repeat or zero it
            last = states[0] if mask is None else sequence[:, -1]
            result = sequence if self.return_sequences else last
            self._keep_states(states)
            return [result, *states] if self.return_state else result
        keep = None if mask is None else _shape.split(mask, steps, axis=1)
        inputs_by_step = self._input_projection(x)
        recurrent = self._recurrent_weights()
        order = range(steps - 1, -1, -1) if self.go_backwards else range(steps)
        outputs: list[Tensor] = []
        last = states[0]  # what a layer without steps returns
        previous = zeros = None  # previous: the last step's output, zeros before the first
        for t in order:
            h_in = states[0] if recurrent_keep is None else states[0] * recurrent_keep
            output, new_states = self._cell(inputs_by_step[t], states, h_in, recurrent)
            if keep is not None:
                # Keras's rule: a masked step carries the states through and repeats the
                # previous step's output, or outputs zeros with zero_output_for_mask.
                step_keep = keep[t]
                new_states = [_math.where(step_keep, n, s) for n, s in zip(new_states, states)]
                if previous is None or self.zero_output_for_mask:
                    if zeros is None:
                        zeros = as_tensor(np.zeros((batch, self.units), x.dtype))
                    previous = zeros
                output = _math.where(step_keep, output, previous)
            states = new_states
            previous = last = output
            if self.return_sequences:
                outputs.append(output)
        result = _shape.stack(outputs, axis=1) if self.return_sequences else last
        self._keep_states(states)
        if self.return_state:
            return [result, *states]
        return result

    def _initial_states(self, batch: int, initial_state: Any, dtype: Any) -> list[Tensor]:
        if initial_state is None:
            return [as_tensor(np.zeros((batch, self.units), dtype)) for _ in range(self._state_count)]
        given = list(initial_state) if isinstance(initial_state, (list, tuple)) else [initial_state]
        if len(given) != self._state_count:
            raise ValueError(
                f"{type(self).__name__} '{self.name}' takes {self._state_count} initial state(s), got {len(given)}"
            )
        states = [as_tensor(s) for s in given]
        for s in states:
            if tuple(s.shape) != (batch, self.units):
                raise ValueError(
                    f"{type(self).__name__} '{self.name}': an initial state must have shape {(batch, self.units)}, "
                    f"got {tuple(s.shape)}"
                )
        return states


class SimpleRNN(_RNN):
    """Keras's ``SimpleRNN``: ``h_t = activation(x_t @ kernel + h_{t-1} @ recurrent_kernel + bias)``.

    Args:
        units: the size of the state and of each output.
        activation: default ``"tanh"``.
        use_bias: whether the cell adds a bias.
        kernel_initializer: initializer of ``kernel`` (name or callable), as Keras.
        recurrent_initializer: initializer of ``recurrent_kernel`` (default ``"orthogonal"``).
        bias_initializer: initializer of ``bias``, as Keras.
        return_sequences: return every step's output ``(batch, time, units)``, not the last.
        return_state: also return the final state: ``[output, state]``.
        go_backwards: run over the steps in reverse (outputs in that reversed order).
        stateful: carry each call's last states into the next call (``states`` holds them,
            ``reset_states()`` zeros them); the batch size must stay the same: the first
            call's, or the one ``batch_size``/``batch_input_shape``/``Input(batch_shape=...)``
            declared. The carried states are not weights, as in Keras: model files and
            ``state_dict`` leave them out.
        unroll: accepted for Keras's sake; the loop is a Python loop either way.
        dropout: in training, the rate of dropout on the inputs (one mask per sequence, the
            same at every step, as Keras), drawn from ``tp.random``'s generators.
        recurrent_dropout: likewise, on the state the recurrent kernel multiplies.
        zero_output_for_mask: a masked step outputs zeros, not the previous step's output.
        kernel_regularizer: ``None``, a regularizer name or a callable for ``kernel``; its
            penalty goes to ``losses``.
        recurrent_regularizer: as ``kernel_regularizer``, for ``recurrent_kernel``.
        bias_regularizer: as ``kernel_regularizer``, for ``bias``.
        activity_regularizer: as ``kernel_regularizer``, for each output Tensor (the states
            too, with ``return_state``): each call adds its penalty divided by the batch size
            to ``losses`` (Keras 3's rule).
        kernel_constraint: ``None``, a constraint name or a callable for ``kernel``; optimizers
            project the weight with it after each update.
        recurrent_constraint: as ``kernel_constraint``, for ``recurrent_kernel``.
        bias_constraint: as ``kernel_constraint``, for ``bias``.

    Called as ``layer(inputs, mask=None, initial_state=None)``; ``mask`` (batch, time) of
    booleans marks the real steps. As in Keras, a masked step keeps the states and outputs
    the previous step's output (zeros before the first real step, as Keras's TensorFlow
    backend), or zeros with ``zero_output_for_mask``; without ``return_sequences`` the layer
    returns the last step's output so defined.
    """

    def _cell(
        self, xw: Tensor, states: list[Tensor], h_in: Tensor, recurrent: Any
    ) -> tuple[Tensor, list[Tensor]]:
        if self.activation in _TANH:  # the default: one fused op per step
            h = rnn_cell(xw, h_in, recurrent)
        else:
            h = self.activation(xw + matmul(h_in, recurrent))
        return h, [h]


class _GatedRNN(_RNN):
    """A recurrent layer whose gates go through ``recurrent_activation`` (LSTM, GRU)."""

    def __init__(
        self,
        units: int,
        activation: str | Callable[..., Any] | None = "tanh",
        recurrent_activation: str | Callable[..., Any] | None = "sigmoid",
        **kwargs: Any,
    ) -> None:
        super().__init__(units, activation, **kwargs)
        self.recurrent_activation = activations.get(recurrent_activation)
        self._arguments.update(recurrent_activation=recurrent_activation)

    def _default_activations(self) -> bool:
        return self.activation in _TANH and self.recurrent_activation in _SIGMOID


_TANH = (activations.tanh, _math.tanh)
_SIGMOID = (activations.sigmoid, _math.sigmoid)


class LSTM(ForgetBias, _GatedRNN):
    """Keras's ``LSTM``: gates ``i, f, c, o`` in that order along the last axis of ``kernel``
    (features, 4*units), ``recurrent_kernel`` (units, 4*units) and ``bias`` (4*units,).

    ``c_t = f * c_{t-1} + i * activation(c~)``, ``h_t = o * activation(c_t)``, the gates through
    ``recurrent_activation`` (default sigmoid). ``unit_forget_bias`` (default true) starts the
    forget gate's bias at 1. ``return_state`` gives ``[output, h, c]``; ``initial_state`` is
    ``[h, c]``. Other arguments (by keyword) as ``SimpleRNN``.
    """

    _gates = 4
    _state_count = 2

    def __init__(
        self,
        units: int,
        activation: str | Callable[..., Any] | None = "tanh",
        recurrent_activation: str | Callable[..., Any] | None = "sigmoid",
        *,
        unit_forget_bias: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(units, activation, recurrent_activation, **kwargs)
        self.unit_forget_bias = bool(unit_forget_bias)
        self._arguments.update(unit_forget_bias=unit_forget_bias)

    def _sequence(
        self, x: Tensor, states: list[Tensor], keep: Tensor | None
    ) -> tuple[Tensor, list[Tensor]] | None:
        if not self._default_activations() or any(s.dtype != x.dtype for s in states):
            return None  # other dtypes: the step loop raises its usual error
        if self.go_backwards:
            x, keep = x[:, ::-1], None if keep is None else keep[:, ::-1]
        bias = self.bias if self.bias is not None else np.zeros(4 * self.units, x.dtype)
        h0, c0 = states
        outputs, h, c = lstm_sequence(
            x, self.kernel, self.recurrent_kernel, bias, h0, c0, keep, self.zero_output_for_mask
        )
        return outputs, [h, c]

    def _cell(
        self, xw: Tensor, states: list[Tensor], h_in: Tensor, recurrent: Any
    ) -> tuple[Tensor, list[Tensor]]:
        c = states[1]
        z = xw + matmul(h_in, recurrent)
        if self._default_activations():
            h, c = lstm_cell(z, c)  # the default activations: one fused op per step
            return h, [h, c]
        i, f, g, o = _shape.split(z, 4, axis=-1)
        gate = self.recurrent_activation
        c = gate(f) * c + gate(i) * self.activation(g)
        h = gate(o) * self.activation(c)
        return h, [h, c]


class GRU(ResetAfterBias, _GatedRNN):
    """Keras's ``GRU``: gates ``z, r, h`` in that order along the last axis of ``kernel``
    (features, 3*units) and ``recurrent_kernel`` (units, 3*units).

    ``z = sigmoid(x_z + h_z)``, ``r = sigmoid(x_r + h_r)``, ``h_t = z * h_{t-1} + (1 - z) * ĥ``,
    where ``x_* = x_t @ kernel + b_x`` and ``h_* = h_{t-1} @ recurrent_kernel + b_h``.
    ``reset_after`` (keyword, default true: Keras 3's default and cuDNN's form) applies the
    reset gate after the recurrent product, ``ĥ = activation(x_h + r * h_h)``, with ``bias``
    (2, 3*units) holding ``b_x`` and ``b_h``; with ``reset_after=False``,
    ``ĥ = activation(x_h + (r * h_{t-1}) @ recurrent_kernel[:, 2*units:])``, ``bias`` (3*units,)
    is ``b_x`` and there is no ``b_h``. Other arguments (by keyword) as ``SimpleRNN``.
    """

    _gates = 3

    def __init__(
        self,
        units: int,
        activation: str | Callable[..., Any] | None = "tanh",
        recurrent_activation: str | Callable[..., Any] | None = "sigmoid",
        *,
        reset_after: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(units, activation, recurrent_activation, **kwargs)
        self.reset_after = bool(reset_after)
        self._arguments.update(reset_after=reset_after)

    def _input_bias(self) -> Any:
        assert self.bias is not None  # called only with use_bias
        return self.bias[0] if self.reset_after else self.bias

    def _recurrent_weights(self) -> Any:
        if self.reset_after:  # the recurrent bias taken out once, not at every step
            return self.recurrent_kernel, None if self.bias is None else self.bias[1]
        return _shape.split(self.recurrent_kernel, [2 * self.units, self.units], axis=-1)

    def _sequence(
        self, x: Tensor, states: list[Tensor], keep: Tensor | None
    ) -> tuple[Tensor, list[Tensor]] | None:
        if not (self.reset_after and self._default_activations()) or states[0].dtype != x.dtype:
            return None  # other dtypes: the step loop raises its usual error
        if self.go_backwards:
            x, keep = x[:, ::-1], None if keep is None else keep[:, ::-1]
        bias = self.bias if self.bias is not None else np.zeros((2, 3 * self.units), x.dtype)
        outputs, h = gru_sequence(
            x, self.kernel, self.recurrent_kernel, bias, states[0], keep, self.zero_output_for_mask
        )
        return outputs, [h]

    def _cell(
        self, xw: Tensor, states: list[Tensor], h_in: Tensor, recurrent: Any
    ) -> tuple[Tensor, list[Tensor]]:
        (h,) = states
        if self.reset_after:
            kernel, bias = recurrent
            hw = _nn.dense(h_in, kernel, bias)  # h @ recurrent_kernel (+ b_h): one op
            if self.activation in _TANH and self.recurrent_activation in _SIGMOID:
                h, _ = gru_cell(xw, hw, h)  # the default activations: one fused op per step
                return h, [h]
        x_z, x_r, x_h = _shape.split(xw, 3, axis=-1)
        gate = self.recurrent_activation
        if self.reset_after:
            h_z, h_r, h_h = _shape.split(hw, 3, axis=-1)
            z = gate(x_z + h_z)
            r = gate(x_r + h_r)
            candidate = self.activation(x_h + r * h_h)
        else:
            gates_kernel, candidate_kernel = recurrent
            h_z, h_r = _shape.split(matmul(h_in, gates_kernel), 2, axis=-1)
            z = gate(x_z + h_z)
            r = gate(x_r + h_r)
            candidate = self.activation(x_h + matmul(r * h_in, candidate_kernel))
        h = z * h + (1.0 - z) * candidate
        return h, [h]


class Bidirectional(Layer):
    """Keras's ``Bidirectional``: runs ``layer`` forward and a copy of it backward, and merges
    their outputs (``merge_mode``: ``"concat"`` (default), ``"sum"``, ``"mul"``, ``"ave"``, or
    ``None`` for the pair ``[forward, backward]``). With ``return_sequences`` the backward
    outputs are put back in time order first. With ``return_state``: ``[output, *forward
    states, *backward states]``.

    As Keras, it sets both layers' ``zero_output_for_mask`` to ``return_sequences``: masked
    steps output zeros in both directions.
    """

    _MODES = ("concat", "sum", "mul", "ave", None)

    def __init__(self, layer: _RNN, merge_mode: str | None = "concat", *, name: str | None = None) -> None:
        super().__init__(name=name)
        if not isinstance(layer, _RNN):
            raise TypeError(f"Bidirectional wraps a SimpleRNN, LSTM or GRU layer, got {shown(layer)}")
        if merge_mode not in self._MODES:
            raise ValueError(
                f"Bidirectional: merge_mode must be one of {self._MODES}, got {shown(merge_mode)}"
            )
        self.merge_mode = merge_mode
        self.forward_layer = layer
        layer.zero_output_for_mask = layer.return_sequences
        self.backward_layer = type(layer)(
            **{
                **layer._arguments,
                "go_backwards": not layer.go_backwards,
                "zero_output_for_mask": layer.return_sequences,
            }
        )

    def reset_states(self) -> None:
        """Zeros both directions' carried states (with ``stateful=True``)."""
        self.forward_layer.reset_states()
        self.backward_layer.reset_states()

    def reset_state(self) -> None:
        """Keras 3's name of ``reset_states``."""
        self.reset_states()

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        """Keras's rule: the steps' mask with ``return_sequences`` (one per output with
        ``merge_mode=None``), else ``None``."""
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        output_mask = mask if self.forward_layer.return_sequences else None
        return [output_mask, output_mask] if self.merge_mode is None else output_mask

    def build(self, input_shape: Any) -> None:
        """Builds both directions for ``input_shape``."""
        for layer in (self.forward_layer, self.backward_layer):
            if not layer.built:
                layer.build(input_shape)

    def compute_output_shape(self, input_shape: Any) -> Any:
        """The forward layer's shapes, the output's last axis doubled by ``"concat"``, a pair of
        outputs without ``merge_mode``, and both directions' states with ``return_state``."""
        shapes = self.forward_layer.compute_output_shape(input_shape)
        output, states = (shapes[0], shapes[1:]) if self.forward_layer.return_state else (shapes, [])
        if self.merge_mode == "concat":
            output = (*output[:-1], 2 * output[-1])
        merged: Any = [output, output] if self.merge_mode is None else output
        return [merged, *states, *states] if states else merged

    def call(self, inputs: Any, mask: Any = None, initial_state: Any = None, training: Any = None) -> Any:
        """Runs both directions and merges them."""
        forward_state = backward_state = None
        if initial_state is not None:
            half = len(initial_state) // 2
            forward_state, backward_state = initial_state[:half], initial_state[half:]
        forward = self.forward_layer(inputs, mask=mask, initial_state=forward_state)
        backward = self.backward_layer(inputs, mask=mask, initial_state=backward_state)
        states: list[Tensor] = []
        if self.forward_layer.return_state:
            forward, *f_states = forward
            backward, *b_states = backward
            states = [*f_states, *b_states]
        if self.forward_layer.return_sequences:
            backward = backward[:, ::-1]
        if self.merge_mode == "concat":
            output: Any = _shape.concat([forward, backward], axis=-1)
        elif self.merge_mode == "sum":
            output = forward + backward
        elif self.merge_mode == "mul":
            output = forward * backward
        elif self.merge_mode == "ave":
            output = (forward + backward) * 0.5
        else:
            output = [forward, backward]
        return [output, *states] if states else output
