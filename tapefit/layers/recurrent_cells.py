"""Keras's cell-level recurrent API: ``SimpleRNNCell``, ``LSTMCell``, ``GRUCell``,
``StackedRNNCells`` and the generic ``RNN`` layer that runs any cell over the time axis.

A cell computes one time step: ``cell(inputs, states)`` returns ``(output, new_states)``; it
says the sizes of its states in ``state_size`` (an int, or a list with one entry per state).
``RNN(cell)`` loops over the steps in Python, calling the cell each time, so that the tape
records the cell's ops as it records any code: cells written by users (Keras's guide's way)
get gradients, masks and ``tp.function`` replay for free. The built-in cells use the same
fused step ops as the ``SimpleRNN``, ``LSTM`` and ``GRU`` layers, and give their numbers.

``stateful=True`` (here and on those layers) keeps the last states across calls in
non-trainable variables that are not among the layer's weights (Keras keeps them out of
``weights`` and model files too); ``reset_states()`` sets them back to zeros.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core import nest
from tapefit.core.messages import shown
from tapefit.core.ops import math as _math
from tapefit.core.ops import nn as _nn
from tapefit.core.ops import shape as _shape
from tapefit.core.ops.linalg import matmul
from tapefit.core.ops.recurrent import gru_cell, lstm_cell, rnn_cell
from tapefit.core.tensor import Tensor, Variable, as_tensor
from tapefit.layers import activations, constraints, initializers
from tapefit.layers.module import Layer, Module, known_size

__all__ = ["RNN", "GRUCell", "LSTMCell", "SimpleRNNCell", "StackedRNNCells"]

_TANH = (activations.tanh, _math.tanh)
_SIGMOID = (activations.sigmoid, _math.sigmoid)


# -- state kept across calls ---------------------------------------------------------------


class _StateStore:
    """The states a stateful layer carries from one call to the next: non-trainable variables
    (flat, with the structure they pack into) and the batch size they are made for. Held in an
    object the weight walk does not enter, so they are not weights (as in Keras)."""

    def __init__(self) -> None:
        self.variables: list[Variable] | None = None
        self.structure: Any = None
        self.batch: int | None = None


class StatefulMixin:
    """``stateful``, ``states`` and ``reset_states`` for a recurrent layer."""

    stateful: bool
    name: str

    def _store(self) -> _StateStore:
        store = self.__dict__.get("_state_store")
        if store is None:
            store = self.__dict__["_state_store"] = _StateStore()
        return store

    @property
    def states(self) -> Any:
        """With ``stateful=True``, the variables holding the states the next call starts from
        (``None`` before the first call); ``None`` otherwise."""
        store = self._store()
        if store.variables is None:
            return None
        return nest.pack_sequence_as(store.structure, list(store.variables))

    def reset_states(self) -> None:
        """Sets the carried states back to zeros (a stateful layer); does nothing otherwise."""
        store = self._store()
        for variable in store.variables or ():
            variable.assign(np.zeros(variable.shape, variable.dtype))

    def reset_state(self) -> None:
        """Keras 3's name of ``reset_states``."""
        self.reset_states()

    def _note_batch(self, shape: Any) -> None:
        """Takes the batch size of a stateful layer from a build shape (or from Keras's
        ``batch_size``/``batch_input_shape`` arguments) when it is known."""
        if not self.stateful:
            return
        store = self._store()
        declared = self.__dict__.get("_input_shape_arg")
        for candidate in (declared, shape):
            batch = _batch_of(candidate)
            if store.batch is None and batch is not None:
                store.batch = batch

    def _carried_states(self, batch: int, zeros: Callable[[int], Any]) -> Any:
        """The states a stateful call starts from (made by ``zeros(batch)`` the first time).

        Raises:
            ValueError: the batch size differs from the one the states were made for.
        """
        store = self._store()
        self._note_batch(None)
        if store.batch is None:
            store.batch = batch
        if batch != store.batch:
            raise ValueError(
                f"{type(self).__name__} '{self.name}' is stateful: each call carries the states of "
                f"the last one, for a batch of {store.batch} sequences, but got a batch of {batch}; "
                "feed batches of one size (drop or pad the last one), or make a new layer"
            )
        if store.variables is None:
            initial = zeros(batch)
            store.structure = initial
            store.variables = [
                Variable(as_tensor(s).numpy(), trainable=False, name="rnn_state")
                for s in nest.flatten(initial)
            ]
        return nest.pack_sequence_as(store.structure, list(store.variables))

    def _keep_states(self, states: Any) -> None:
        """Stores a stateful call's last states for the next call."""
        store = self._store()
        if not self.stateful or store.variables is None:
            return
        for variable, value in zip(store.variables, nest.flatten(states)):
            variable.assign(value)


def _batch_of(shape: Any) -> int | None:
    """The first axis of the first shape in ``shape`` (nested), if it is a known int."""
    while isinstance(shape, (list, tuple)) and shape and isinstance(shape[0], (list, tuple)):
        shape = shape[0]
    if isinstance(shape, (list, tuple)) and shape and isinstance(shape[0], (int, np.integer)):
        return int(shape[0])
    return None


# -- cells -----------------------------------------------------------------------------------


class RecurrentWeights:
    """The weights a recurrent layer and its cell make alike: ``kernel`` (features,
    gates*units), ``recurrent_kernel`` (units, gates*units) and ``bias`` (Keras's names, shapes
    and order). ``ForgetBias`` and ``ResetAfterBias`` give LSTM's and GRU's bias."""

    _gates = 1
    units: int
    use_bias: bool
    kernel_initializer: Any
    recurrent_initializer: Any
    bias_initializer: Any
    kernel_constraint: Any
    recurrent_constraint: Any
    bias_constraint: Any
    kernel: Variable | None  # None until build
    recurrent_kernel: Variable | None  # None until build
    bias: Variable | None  # None until build, and without use_bias
    add_weight: Callable[..., Variable]

    def _bias_shape(self) -> tuple[int, ...]:
        return (self._gates * self.units,)

    def _bias_initial(self, shape: tuple[int, ...], dtype: Any) -> Any:
        return self.bias_initializer(shape, dtype)

    def _add_recurrent_weights(self, features: int) -> None:
        width = self._gates * self.units
        self.kernel = self.add_weight(
            (features, width), self.kernel_initializer, name="kernel", constraint=self.kernel_constraint
        )
        self.recurrent_kernel = self.add_weight(
            (self.units, width),
            self.recurrent_initializer,
            name="recurrent_kernel",
            constraint=self.recurrent_constraint,
        )
        if self.use_bias:
            self.bias = self.add_weight(
                self._bias_shape(), self._bias_initial, name="bias", constraint=self.bias_constraint
            )


class ForgetBias(RecurrentWeights):
    """LSTM's bias: the forget gate's part starts at 1 with ``unit_forget_bias``."""

    unit_forget_bias: bool

    def _bias_initial(self, shape: tuple[int, ...], dtype: Any) -> Any:
        value = np.array(as_tensor(self.bias_initializer(shape, dtype)).numpy(), dtype=dtype)
        if self.unit_forget_bias:
            value[self.units : 2 * self.units] = 1.0
        return value


class ResetAfterBias(RecurrentWeights):
    """GRU's bias: an input and a recurrent row with ``reset_after`` (Keras 3's default)."""

    reset_after: bool

    def _bias_shape(self) -> tuple[int, ...]:
        return (2, 3 * self.units) if self.reset_after else (3 * self.units,)


class _Cell(RecurrentWeights, Layer):
    """What the built-in cells share: units, the weights' initializers, regularizers and
    constraints, dropout masks drawn once per sequence."""

    def __init__(
        self,
        units: int,
        activation: Any,
        use_bias: bool,
        kernel_initializer: Any,
        recurrent_initializer: Any,
        bias_initializer: Any,
        kernel_regularizer: Any,
        recurrent_regularizer: Any,
        bias_regularizer: Any,
        kernel_constraint: Any,
        recurrent_constraint: Any,
        bias_constraint: Any,
        dropout: float,
        recurrent_dropout: float,
        seed: int | None,
        name: str | None,
        trainable: bool,
        dtype: Any,
    ) -> None:
        super().__init__(trainable=trainable, name=name, dtype=dtype)
        kind = type(self).__name__
        if isinstance(units, bool) or not isinstance(units, (int, np.integer)) or units < 1:
            raise ValueError(f"{kind}: units must be a positive integer, got {shown(units)}")
        for what, rate in (("dropout", dropout), ("recurrent_dropout", recurrent_dropout)):
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= float(rate) < 1.0:
                raise ValueError(f"{kind}: {what} must be in [0, 1), got {shown(rate)}")
        self.units = int(units)
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.recurrent_initializer = initializers.get(recurrent_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self._add_regularizer("kernel", kernel_regularizer)
        self._add_regularizer("recurrent_kernel", recurrent_regularizer)
        self._add_regularizer("bias", bias_regularizer)
        self.kernel_constraint = constraints.get(kernel_constraint)
        self.recurrent_constraint = constraints.get(recurrent_constraint)
        self.bias_constraint = constraints.get(bias_constraint)
        self.dropout, self.recurrent_dropout = float(dropout), float(recurrent_dropout)
        self.seed = seed
        self.kernel = self.recurrent_kernel = self.bias = None
        self._dropout_mask: Tensor | None = None
        self._recurrent_dropout_mask: Tensor | None = None

    @property
    def output_size(self) -> int:
        """The size of each step's output: ``units``."""
        return self.units

    def build(self, input_shape: Any) -> None:
        """Creates ``kernel`` (features, gates*units), ``recurrent_kernel`` (units, gates*units)
        and ``bias``, for step inputs of ``input_shape`` (batch, features)."""
        if not isinstance(input_shape, tuple) or len(input_shape) != 2:
            raise ValueError(
                f"{type(self).__name__} '{self.name}' needs step inputs of shape (batch, features), "
                f"got shape {input_shape}"
            )
        self._add_recurrent_weights(known_size(self, input_shape, -1, "the features"))

    def get_initial_state(self, batch_size: int | None = None) -> list[Tensor]:
        """Zeros, one (batch_size, units) Tensor per state."""
        count = 2 if isinstance(self.state_size, list) else 1  # type: ignore[attr-defined]
        return [as_tensor(np.zeros((int(batch_size or 1), self.units), self.dtype)) for _ in range(count)]

    def reset_dropout_mask(self) -> None:
        """Forgets the inputs' dropout mask: the next call in training draws a new one (``RNN``
        calls it before and after each sequence, so that every step of it shares one mask)."""
        self._dropout_mask = None

    def reset_recurrent_dropout_mask(self) -> None:
        """As ``reset_dropout_mask``, for the mask on the state the recurrent kernel multiplies."""
        self._recurrent_dropout_mask = None

    def _step_inputs(self, inputs: Any, h: Tensor, training: Any) -> tuple[Tensor, Tensor]:
        """The inputs and the recurrent state after this sequence's dropout masks (in training)."""
        x = as_tensor(inputs)
        kernel = self.kernel
        assert kernel is not None, f"{type(self).__name__} '{self.name}' was called before build"
        if x.dtype != kernel.dtype:
            x = _math.cast(x, kernel.dtype)
        if x.ndim != 2 or x.shape[-1] != kernel.shape[0]:
            raise ValueError(
                f"{type(self).__name__} '{self.name}' was built for step inputs (batch, {kernel.shape[0]}), "
                f"got shape {x.shape}"
            )
        if tuple(h.shape) != (x.shape[0], self.units):
            raise ValueError(
                f"{type(self).__name__} '{self.name}': a state must have shape {(x.shape[0], self.units)}, "
                f"got {tuple(h.shape)}"
            )
        if training and self.dropout:
            if self._dropout_mask is None or self._dropout_mask.shape != x.shape:
                ones = as_tensor(np.ones(x.shape, x.dtype))
                self._dropout_mask = _nn.dropout(ones, self.dropout, seed=self.seed)
            x = x * self._dropout_mask
        h_in = h
        if training and self.recurrent_dropout:
            if self._recurrent_dropout_mask is None or self._recurrent_dropout_mask.shape != h.shape:
                ones = as_tensor(np.ones(h.shape, x.dtype))
                self._recurrent_dropout_mask = _nn.dropout(ones, self.recurrent_dropout, seed=self.seed)
            h_in = h * self._recurrent_dropout_mask
        return x, h_in

    def _weights(self) -> tuple[Variable, Variable]:
        kernel, recurrent = self.kernel, self.recurrent_kernel
        assert kernel is not None and recurrent is not None, (
            f"{type(self).__name__} '{self.name}' is not built"
        )
        return kernel, recurrent

    @staticmethod
    def _states_list(states: Any, count: int, owner: str) -> list[Tensor]:
        listed = list(states) if isinstance(states, (list, tuple)) else [states]
        if len(listed) != count:
            raise ValueError(f"{owner} takes {count} state(s), got {len(listed)}")
        return [as_tensor(s) for s in listed]


class SimpleRNNCell(_Cell):
    """Keras's ``SimpleRNNCell``: one step of ``SimpleRNN``,
    ``h = activation(x @ kernel + h_prev @ recurrent_kernel + bias)``.

    Args:
        units: the size of the state and of the output.
        activation: default ``"tanh"``.
        use_bias: whether to add ``bias``.
        kernel_initializer: as ``SimpleRNN``'s.
        recurrent_initializer: as ``SimpleRNN``'s.
        bias_initializer: as ``SimpleRNN``'s.
        kernel_regularizer: as ``SimpleRNN``'s.
        recurrent_regularizer: as ``SimpleRNN``'s.
        bias_regularizer: as ``SimpleRNN``'s.
        kernel_constraint: as ``SimpleRNN``'s.
        recurrent_constraint: as ``SimpleRNN``'s.
        bias_constraint: as ``SimpleRNN``'s.
        dropout: in training, the rate of dropout on the inputs; the mask is drawn once and
            kept until ``reset_dropout_mask`` (``RNN`` resets it for every sequence).
        recurrent_dropout: likewise, on the state the recurrent kernel multiplies.
        seed: the dropout's op seed.

    Called as ``cell(inputs, states, training=None)`` with ``inputs`` (batch, features) and
    ``states`` ``[h]``; returns ``(h, [h])``. ``state_size`` and ``output_size`` are ``units``.
    """

    def __init__(
        self,
        units: int,
        activation: str | Callable[..., Any] | None = "tanh",
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        recurrent_initializer: Any = "orthogonal",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        recurrent_regularizer: Any = None,
        bias_regularizer: Any = None,
        kernel_constraint: Any = None,
        recurrent_constraint: Any = None,
        bias_constraint: Any = None,
        dropout: float = 0.0,
        recurrent_dropout: float = 0.0,
        seed: int | None = None,
        *,
        name: str | None = None,
        trainable: bool = True,
        dtype: Any = None,
    ) -> None:
        super().__init__(
            units, activation, use_bias, kernel_initializer, recurrent_initializer, bias_initializer,
            kernel_regularizer, recurrent_regularizer, bias_regularizer, kernel_constraint,
            recurrent_constraint, bias_constraint, dropout, recurrent_dropout, seed, name, trainable, dtype,
        )  # fmt: skip
        self.state_size = self.units

    def call(self, inputs: Any, states: Any, training: Any = None) -> tuple[Tensor, list[Tensor]]:
        """One step: ``(h, [h])``."""
        (h,) = self._states_list(states, 1, f"SimpleRNNCell '{self.name}'")
        x, h_in = self._step_inputs(inputs, h, training)
        kernel, recurrent = self._weights()
        xw = _nn.dense(x, kernel, self.bias)
        if self.activation in _TANH:
            out = rnn_cell(xw, h_in, recurrent)
        else:
            out = self.activation(xw + matmul(h_in, recurrent))
        return out, [out]


class LSTMCell(ForgetBias, _Cell):
    """Keras's ``LSTMCell``: one step of ``LSTM``, gates ``i, f, c, o`` in that order along the
    last axis of ``kernel`` (features, 4*units), ``recurrent_kernel`` (units, 4*units) and
    ``bias`` (4*units,).

    Arguments as ``SimpleRNNCell``, plus ``recurrent_activation`` (default ``"sigmoid"``, for the
    gates) and ``unit_forget_bias`` (default true: the forget gate's bias starts at 1).

    Called as ``cell(inputs, [h, c], training=None)``; returns ``(h, [h, c])``. ``state_size``
    is ``[units, units]``.
    """

    _gates = 4

    def __init__(
        self,
        units: int,
        activation: str | Callable[..., Any] | None = "tanh",
        recurrent_activation: str | Callable[..., Any] | None = "sigmoid",
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        recurrent_initializer: Any = "orthogonal",
        bias_initializer: Any = "zeros",
        unit_forget_bias: bool = True,
        kernel_regularizer: Any = None,
        recurrent_regularizer: Any = None,
        bias_regularizer: Any = None,
        kernel_constraint: Any = None,
        recurrent_constraint: Any = None,
        bias_constraint: Any = None,
        dropout: float = 0.0,
        recurrent_dropout: float = 0.0,
        seed: int | None = None,
        *,
        name: str | None = None,
        trainable: bool = True,
        dtype: Any = None,
    ) -> None:
        super().__init__(
            units, activation, use_bias, kernel_initializer, recurrent_initializer, bias_initializer,
            kernel_regularizer, recurrent_regularizer, bias_regularizer, kernel_constraint,
            recurrent_constraint, bias_constraint, dropout, recurrent_dropout, seed, name, trainable, dtype,
        )  # fmt: skip
        self.recurrent_activation = activations.get(recurrent_activation)
        self.unit_forget_bias = bool(unit_forget_bias)
        self.state_size = [self.units, self.units]

    def call(self, inputs: Any, states: Any, training: Any = None) -> tuple[Tensor, list[Tensor]]:
        """One step: ``(h, [h, c])``."""
        h, c = self._states_list(states, 2, f"LSTMCell '{self.name}'")
        x, h_in = self._step_inputs(inputs, h, training)
        kernel, recurrent = self._weights()
        z = _nn.dense(x, kernel, self.bias) + matmul(h_in, recurrent)
        if self.activation in _TANH and self.recurrent_activation in _SIGMOID:
            h, c = lstm_cell(z, c)
            return h, [h, c]
        i, f, g, o = _shape.split(z, 4, axis=-1)
        gate = self.recurrent_activation
        c = gate(f) * c + gate(i) * self.activation(g)
        h = gate(o) * self.activation(c)
        return h, [h, c]


class GRUCell(ResetAfterBias, _Cell):
    """Keras's ``GRUCell``: one step of ``GRU``, gates ``z, r, h`` in that order along the last
    axis of ``kernel`` (features, 3*units) and ``recurrent_kernel`` (units, 3*units).

    ``reset_after`` (default true, Keras 3's default) applies the reset gate after the
    recurrent product, with ``bias`` (2, 3*units) holding the input and the recurrent biases;
    ``reset_after=False`` applies it before, with one ``bias`` (3*units,). Other arguments as
    ``LSTMCell`` (without ``unit_forget_bias``).

    Called as ``cell(inputs, [h], training=None)``; returns ``(h, [h])``. ``state_size`` is
    ``units``.
    """

    _gates = 3

    def __init__(
        self,
        units: int,
        activation: str | Callable[..., Any] | None = "tanh",
        recurrent_activation: str | Callable[..., Any] | None = "sigmoid",
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        recurrent_initializer: Any = "orthogonal",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        recurrent_regularizer: Any = None,
        bias_regularizer: Any = None,
        kernel_constraint: Any = None,
        recurrent_constraint: Any = None,
        bias_constraint: Any = None,
        dropout: float = 0.0,
        recurrent_dropout: float = 0.0,
        reset_after: bool = True,
        seed: int | None = None,
        *,
        name: str | None = None,
        trainable: bool = True,
        dtype: Any = None,
    ) -> None:
        super().__init__(
            units, activation, use_bias, kernel_initializer, recurrent_initializer, bias_initializer,
            kernel_regularizer, recurrent_regularizer, bias_regularizer, kernel_constraint,
            recurrent_constraint, bias_constraint, dropout, recurrent_dropout, seed, name, trainable, dtype,
        )  # fmt: skip
        self.recurrent_activation = activations.get(recurrent_activation)
        self.reset_after = bool(reset_after)
        self.state_size = self.units

    def call(self, inputs: Any, states: Any, training: Any = None) -> tuple[Tensor, list[Tensor]]:
        """One step: ``(h, [h])``."""
        (h,) = self._states_list(states, 1, f"GRUCell '{self.name}'")
        x, h_in = self._step_inputs(inputs, h, training)
        bias = self.bias
        kernel, recurrent = self._weights()
        gate = self.recurrent_activation
        if self.reset_after:
            xw = _nn.dense(x, kernel, None if bias is None else bias[0])
            hw = _nn.dense(h_in, recurrent, None if bias is None else bias[1])
            if self.activation in _TANH and self.recurrent_activation in _SIGMOID:
                h, _ = gru_cell(xw, hw, h)
                return h, [h]
            x_z, x_r, x_h = _shape.split(xw, 3, axis=-1)
            h_z, h_r, h_h = _shape.split(hw, 3, axis=-1)
            z, r = gate(x_z + h_z), gate(x_r + h_r)
            candidate = self.activation(x_h + r * h_h)
        else:
            xw = _nn.dense(x, kernel, bias)
            x_z, x_r, x_h = _shape.split(xw, 3, axis=-1)
            gates_kernel, candidate_kernel = _shape.split(recurrent, [2 * self.units, self.units], axis=-1)
            h_z, h_r = _shape.split(matmul(h_in, gates_kernel), 2, axis=-1)
            z, r = gate(x_z + h_z), gate(x_r + h_r)
            candidate = self.activation(x_h + matmul(r * h_in, candidate_kernel))
        h = z * h + (1.0 - z) * candidate
        return h, [h]


def _check_cell(cell: Any, owner: str) -> None:
    if not callable(getattr(cell, "call", None)) or getattr(cell, "state_size", None) is None:
        raise TypeError(
            f"{owner}: a cell needs a call(inputs, states) method and a state_size attribute "
            f"(an int, or a list with one entry per state), got {shown(cell)}"
        )


def _cell_output_size(cell: Any) -> Any:
    """What a cell says of its output's size: ``output_size``, else its first state's size."""
    size = getattr(cell, "output_size", None)
    if size is not None:
        return size
    state_size = cell.state_size
    return state_size[0] if isinstance(state_size, (list, tuple)) else state_size


def _zeros_for(size: Any, batch: int, dtype: Any) -> Any:
    """Zero states for a ``state_size`` entry: an int is a (batch, size) state, a tuple of
    ints one state of shape (batch, *tuple), a list one entry per state."""
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        return as_tensor(np.zeros((batch, int(size)), dtype))
    if isinstance(size, tuple) and all(isinstance(n, (int, np.integer)) for n in size):
        return as_tensor(np.zeros((batch, *[int(n) for n in size]), dtype))
    if isinstance(size, (list, tuple)):
        return [_zeros_for(s, batch, dtype) for s in size]
    raise ValueError(f"a state_size entry must be an int, a tuple shape or a list of them, got {shown(size)}")


def _initial_states_of(cell: Any, batch: int, dtype: Any) -> list[Any]:
    """A cell's first states: its ``get_initial_state(batch_size=)`` if it has one, else zeros
    of its ``state_size``; always a list with one entry per state."""
    make = getattr(cell, "get_initial_state", None)
    if callable(make):
        states = make(batch_size=batch)
        return list(states) if isinstance(states, (list, tuple)) else [states]
    size = cell.state_size
    if isinstance(size, (int, np.integer)):
        return [_zeros_for(size, batch, dtype)]
    return [_zeros_for(s, batch, dtype) for s in size]


def _call_cell(cell: Any, inputs: Any, states: Any, training: Any) -> tuple[Any, list[Any]]:
    """``cell(inputs, states)`` (``training`` too, when its ``call`` takes it); new states as a list."""
    if type(cell) in _BUILT_IN_CELLS and cell.built:
        # tapefit's own cells, built: their call directly, without a module call's bookkeeping
        return cell.call(inputs, states, training=training)
    kwargs: dict[str, Any] = {}
    if not isinstance(cell, Module) and "training" in inspect.signature(cell.call).parameters:
        kwargs["training"] = training
    elif isinstance(cell, Module) and training is not None:
        kwargs["training"] = training  # Module.__call__ passes it only to a call that takes it
    result = cell(inputs, states, **kwargs) if callable(cell) else cell.call(inputs, states, **kwargs)
    if not isinstance(result, (list, tuple)) or len(result) != 2:
        raise TypeError(
            f"a cell's call must return (output, new_states), got {shown(result)} from {type(cell).__name__}"
        )
    output, new_states = result
    return output, list(new_states) if isinstance(new_states, (list, tuple)) else [new_states]


class StackedRNNCells(Layer):
    """Keras's ``StackedRNNCells``: cells run one after the other within each step, each
    cell's output the next one's input.

    Args:
        cells: a list of cells.

    ``state_size`` is the list of the cells' ``state_size``; the states passed and returned
    hold one entry per cell (that cell's list of states). ``RNN([cell, cell])`` wraps a list in
    one of these.
    """

    def __init__(
        self, cells: list[Any], *, name: str | None = None, trainable: bool = True, dtype: Any = None
    ) -> None:
        super().__init__(trainable=trainable, name=name, dtype=dtype)
        if not isinstance(cells, (list, tuple)) or not cells:
            raise ValueError(f"StackedRNNCells: cells must be a non-empty list of cells, got {shown(cells)}")
        for cell in cells:
            _check_cell(cell, "StackedRNNCells")
        self.cells = list(cells)

    @property
    def state_size(self) -> list[Any]:
        """Each cell's ``state_size``, in order."""
        return [cell.state_size for cell in self.cells]

    @property
    def output_size(self) -> Any:
        """The last cell's output size."""
        return _cell_output_size(self.cells[-1])

    def get_initial_state(self, batch_size: int | None = None) -> list[Any]:
        """Each cell's first states (a list per cell)."""
        return [_initial_states_of(cell, int(batch_size or 1), self.dtype) for cell in self.cells]

    def build(self, input_shape: Any) -> None:
        """Builds each cell for the output size of the one before it."""
        batch = _batch_of(input_shape)
        shape = input_shape
        for cell in self.cells:
            if isinstance(cell, Module) and not cell.built:
                cell.build(shape)
            size = _cell_output_size(cell)
            shape = (batch, *size) if isinstance(size, (list, tuple)) else (batch, size)

    def call(self, inputs: Any, states: Any, training: Any = None) -> tuple[Any, list[Any]]:
        """One step of every cell: ``(last cell's output, [each cell's new states])``."""
        given = list(states) if isinstance(states, (list, tuple)) else [states]
        if len(given) != len(self.cells):
            raise ValueError(
                f"StackedRNNCells '{self.name}' takes one entry of states per cell ({len(self.cells)}), "
                f"got {len(given)}"
            )
        new_states = []
        for cell, cell_states in zip(self.cells, given):
            listed = list(cell_states) if isinstance(cell_states, (list, tuple)) else [cell_states]
            inputs, cell_new = _call_cell(cell, inputs, listed, training)
            new_states.append(cell_new)
        return inputs, new_states


_BUILT_IN_CELLS = (SimpleRNNCell, LSTMCell, GRUCell, StackedRNNCells)


# -- the RNN layer -----------------------------------------------------------------------------


def _is_shape(value: Any) -> bool:
    return isinstance(value, (tuple, list)) and all(
        n is None or (isinstance(n, (int, np.integer)) and not isinstance(n, bool)) for n in value
    )


def _map_shapes(fn: Callable[[tuple[Any, ...]], Any], shape: Any) -> Any:
    if _is_shape(shape):
        return fn(tuple(shape))
    if isinstance(shape, (list, tuple)):
        return [_map_shapes(fn, s) for s in shape]
    raise ValueError(f"not a shape: {shown(shape)}")


class RNN(StatefulMixin, Layer):
    """Keras's ``RNN``: runs a cell over the time axis of ``(batch, time, ...)`` inputs.

    Args:
        cell: a cell (``SimpleRNNCell``, ``LSTMCell``, ``GRUCell``, ``StackedRNNCells``, or your
            own: a layer with a ``state_size`` attribute, an int or a list with one entry per
            state, an entry being an int, a tuple shape or a nested list, and a
            ``call(inputs, states)`` returning ``(output, new_states)``; an ``output_size`` and a
            ``get_initial_state(batch_size)`` are optional), or a list of cells (stacked).
        return_sequences: return every step's output ``(batch, time, ...)``, not the last.
        return_state: also return the last states: ``[output, *states]``.
        go_backwards: run over the steps in reverse (outputs in that reversed order).
        stateful: carry the last states of a call into the next one (see ``reset_states``);
            the batch size must stay the same (the first call's, or the one ``batch_size`` /
            ``batch_input_shape`` / ``Input(batch_shape=...)`` declared).
        unroll: accepted for Keras's sake; the loop is a Python loop either way, so it
            changes nothing.
        zero_output_for_mask: a masked step outputs zeros, not the previous step's output.

    Called as ``layer(inputs, mask=None, initial_state=None, training=None)``. ``inputs`` may
    be a list or tuple of sequences (a cell with nested inputs), each step then giving the cell
    the same structure. ``mask`` (batch, time) marks the real steps: a masked step keeps the
    states and repeats the previous step's output (zeros before the first one). The cell's ops
    are recorded step by step, so the numbers, gradients and ``tp.function`` replay are those of
    the cell; ``RNN(LSTMCell(n))`` gives ``LSTM(n)``'s outputs for the same weights.
    """

    def __init__(
        self,
        cell: Any,
        return_sequences: bool = False,
        return_state: bool = False,
        go_backwards: bool = False,
        stateful: bool = False,
        unroll: bool = False,
        zero_output_for_mask: bool = False,
        *,
        name: str | None = None,
        trainable: bool = True,
        dtype: Any = None,
    ) -> None:
        super().__init__(trainable=trainable, name=name, dtype=dtype)
        if isinstance(cell, (list, tuple)):
            cell = StackedRNNCells(list(cell))
        _check_cell(cell, "RNN")
        size = cell.state_size
        if not (isinstance(size, (int, np.integer, list, tuple))) or isinstance(size, bool):
            raise ValueError(f"RNN: the cell's state_size must be an int or a list, got {shown(size)}")
        self.cell = cell
        self.return_sequences = bool(return_sequences)
        self.return_state = bool(return_state)
        self.go_backwards = bool(go_backwards)
        self.stateful = bool(stateful)
        self.unroll = bool(unroll)
        self.zero_output_for_mask = bool(zero_output_for_mask)

    @property
    def state_size(self) -> list[Any]:
        """The cell's ``state_size`` as a list (one entry per state)."""
        size = self.cell.state_size
        return [size] if isinstance(size, (int, np.integer)) else list(size)

    def get_initial_state(self, batch_size: int) -> list[Any]:
        """The states a call starts from without ``initial_state``: the cell's
        ``get_initial_state`` or zeros, one entry per state."""
        return _initial_states_of(self.cell, batch_size, self.dtype)

    def build(self, input_shape: Any) -> None:
        """Builds the cell for one step's inputs: ``(batch, *input_shape[2:])`` (each input's,
        for nested inputs)."""

        def step(shape: tuple[Any, ...]) -> tuple[Any, ...]:
            if len(shape) < 3:
                raise ValueError(
                    f"RNN '{self.name}' needs inputs of shape (batch, time, features...), got shape {shape}"
                )
            return (shape[0], *shape[2:])

        step_shape = _map_shapes(step, input_shape)
        if isinstance(self.cell, Module) and not self.cell.built:
            self.cell.build(step_shape)
        self._note_batch(input_shape)

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        """The steps' mask with ``return_sequences`` (``None`` without); ``None`` for each state."""
        if nest.is_nested(mask):
            mask = nest.flatten(mask)[0] if nest.flatten(mask) else None
        output_mask = mask if self.return_sequences else None
        if self.return_state:
            return [output_mask, *[None] * len(self.state_size)]
        return output_mask

    def compute_output_spec(
        self, inputs: Any, mask: Any = None, initial_state: Any = None, training: Any = None
    ) -> Any:
        """Symbolic outputs for symbolic inputs: the cell is run once (probed) on one step."""
        from tapefit.layers.symbolic import SymbolicTensor, symbolic_outputs

        flat = nest.flatten(inputs)
        if any(x.ndim < 3 for x in flat):
            raise ValueError(
                f"RNN '{self.name}' needs inputs of shape (batch, time, features...), got shapes "
                f"{[x.shape for x in flat]}"
            )
        if not self.built:  # nested inputs: the list of their shapes, as a first call builds
            self.build([tuple(x.shape) for x in flat] if nest.is_nested(inputs) else tuple(flat[0].shape))
        batch, steps = flat[0].shape[0], flat[0].shape[1]
        step_flat = [SymbolicTensor((batch, *x.shape[2:]), x.dtype, "step") for x in flat]
        step = nest.pack_sequence_as(inputs, step_flat) if nest.is_nested(inputs) else step_flat[0]
        if initial_state is not None:
            states = list(initial_state) if isinstance(initial_state, (list, tuple)) else [initial_state]
        else:
            zeros = self.get_initial_state(1)
            states = nest.pack_sequence_as(
                zeros, [SymbolicTensor((batch, *z.shape[1:]), z.dtype, "state") for z in nest.flatten(zeros)]
            )
        output, _ = symbolic_outputs(self.cell, (step, states), {})

        def sequence(leaf: Any) -> Any:
            shape = (batch, steps, *leaf.shape[1:]) if self.return_sequences else (batch, *leaf.shape[1:])
            return SymbolicTensor(shape, self.dtype, self.name)

        result = nest.pack_sequence_as(output, [sequence(o) for o in nest.flatten(output)])
        if not self.return_state:
            return result
        state_out = nest.pack_sequence_as(
            states, [SymbolicTensor(s.shape, self.dtype, self.name) for s in nest.flatten(states)]
        )
        return [result, *state_out]

    def compute_output_shape(self, input_shape: Any) -> Any:
        """The shapes ``compute_output_spec`` gives for inputs of ``input_shape``."""
        from tapefit.layers.symbolic import SymbolicTensor

        inputs = _map_shapes(lambda s: SymbolicTensor(s, self.dtype, "input"), input_shape)
        spec = self.compute_output_spec(inputs)
        return nest.pack_sequence_as(spec, [t.shape for t in nest.flatten(spec)])

    def call(self, inputs: Any, mask: Any = None, initial_state: Any = None, training: Any = None) -> Any:
        """Runs the cell over the steps; see the class docstring for what it returns."""
        flat = [self._cast(x) for x in nest.flatten(inputs)]
        if not flat:
            raise ValueError(f"RNN '{self.name}' was called without inputs")
        for x in flat:
            if x.ndim < 3:
                raise ValueError(
                    f"RNN '{self.name}' needs inputs of shape (batch, time, features...), got shape {x.shape}"
                )
        batch, steps = flat[0].shape[0], flat[0].shape[1]
        if any(x.shape[:2] != (batch, steps) for x in flat):
            raise ValueError(
                f"RNN '{self.name}': nested inputs must share their batch and time axes, got shapes "
                f"{[x.shape for x in flat]}"
            )
        if steps == 0:
            raise ValueError(f"RNN '{self.name}' needs at least one time step, got shape {flat[0].shape}")
        keep = self._mask(mask, batch, steps)
        if initial_state is not None:
            states: Any = list(initial_state) if isinstance(initial_state, (list, tuple)) else [initial_state]
            states = nest.pack_sequence_as(states, [as_tensor(s) for s in nest.flatten(states)])
            if len(states) != len(self.state_size):
                raise ValueError(
                    f"RNN '{self.name}' takes {len(self.state_size)} initial state(s) (one per entry of "
                    f"the cell's state_size), got {len(states)}"
                )
        elif self.stateful:
            states = self._carried_states(batch, self.get_initial_state)
        else:
            states = self.get_initial_state(batch)
        by_step = [_shape.unstack(x, axis=1) for x in flat]
        order = range(steps - 1, -1, -1) if self.go_backwards else range(steps)
        self._reset_dropout(self.cell)
        outputs: list[Any] = []
        last: Any = None
        previous: Any = None
        try:
            for t in order:
                pieces = [s[t] for s in by_step]
                step = nest.pack_sequence_as(inputs, pieces) if nest.is_nested(inputs) else pieces[0]
                output, new_states = _call_cell(self.cell, step, states, training)
                if keep is not None:
                    new_states = self._masked(keep[t], new_states, states)
                    if previous is None or self.zero_output_for_mask:
                        zeros = [as_tensor(np.zeros(o.shape, o.dtype)) for o in nest.flatten(output)]
                        previous = nest.pack_sequence_as(output, zeros)
                    output = self._masked(keep[t], output, previous)
                states = new_states
                previous = last = output
                if self.return_sequences:
                    outputs.append(output)
        finally:
            self._reset_dropout(self.cell)
        if self.return_sequences:
            leaves = list(zip(*[nest.flatten(o) for o in outputs]))
            result = nest.pack_sequence_as(outputs[0], [_shape.stack(list(leaf), axis=1) for leaf in leaves])
        else:
            result = last
        if self.stateful:
            self._carried_states(batch, self.get_initial_state)  # made here if initial_state was given
            self._keep_states(states)
        if self.return_state:
            return [result, *states]
        return result

    def _cast(self, x: Any) -> Tensor:
        x = as_tensor(x)
        if x.dtype != self.dtype and x.dtype.kind in "fiub":
            x = _math.cast(x, self.dtype)
        return x

    def _mask(self, mask: Any, batch: int, steps: int) -> list[Tensor] | None:
        """The mask as one (batch, 1) boolean Tensor per step, or ``None``."""
        if mask is None:
            return None
        if nest.is_nested(mask):
            mask = nest.flatten(mask)[0] if nest.flatten(mask) else None
            if mask is None:
                return None
        mask = as_tensor(mask)
        if tuple(mask.shape) != (batch, steps):
            raise ValueError(
                f"RNN '{self.name}': mask must have shape {(batch, steps)}, got {tuple(mask.shape)}"
            )
        mask = mask if mask.dtype == bool else _math.cast(mask, bool)
        return _shape.split(mask, steps, axis=1)

    @staticmethod
    def _masked(keep: Tensor, new: Any, old: Any) -> Any:
        """``new`` where the step is kept, else ``old``, leaf by leaf (keep broadcast to each)."""
        new_flat, old_flat = nest.flatten(new), nest.flatten(old)
        merged = []
        for n, o in zip(new_flat, old_flat):
            n = as_tensor(n)
            k = keep if n.ndim == 2 else _shape.reshape(keep, (keep.shape[0],) + (1,) * (n.ndim - 1))
            merged.append(_math.where(k, n, o))
        return nest.pack_sequence_as(new, merged)

    @staticmethod
    def _reset_dropout(cell: Any) -> None:
        for method in ("reset_dropout_mask", "reset_recurrent_dropout_mask"):
            reset = getattr(cell, method, None)
            if callable(reset):
                reset()
        for inner in getattr(cell, "cells", ()) if isinstance(cell, StackedRNNCells) else ():
            RNN._reset_dropout(inner)
