"""The everyday layers: Dense, Activation, Flatten, Embedding, Dropout, Lambda, Sequential."""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core.messages import shown
from tapefit.core.ops import nn as _nn
from tapefit.core.ops import shape as _shape
from tapefit.core.ops.linalg import matmul
from tapefit.core.ops.math import cast
from tapefit.core.tensor import Tensor, Variable, as_tensor
from tapefit.layers import activations, constraints, initializers
from tapefit.layers.module import Layer, Module, in_call, known_size, rank_of
from tapefit.layers.symbolic import SymbolicTensor, mask_marker, symbolic_outputs


def _positive_int(value: Any, what: str, layer: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{layer}: {what} must be a positive integer, got {shown(value)}")
    return int(value)


class _KernelLayer(Layer):
    """What Dense and Conv2D share: ``activation(op(inputs, kernel) + bias)``, with the weights'
    initializers and regularizers, and ``kernel``/``bias`` made by ``build``."""

    kernel: Variable | None  # None until build
    bias: Variable | None  # None until build, and without use_bias

    def _built_kernel(self) -> Variable:
        """``kernel``, for ``call``: the layer was built before it runs."""
        assert self.kernel is not None, f"{type(self).__name__} '{self.name}' was called before build"
        return self.kernel

    def _init_kernel(
        self,
        activation: str | Callable[..., Any] | None,
        use_bias: bool,
        kernel_initializer: Any,
        bias_initializer: Any,
        kernel_regularizer: Any,
        bias_regularizer: Any,
        kernel_constraint: Any = None,
        bias_constraint: Any = None,
        activity_regularizer: Any = None,
    ) -> None:
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        # Resolved now, as Keras does, so that a misspelt name fails where the layer is made.
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel = None
        self.bias = None
        self._add_regularizer("kernel", kernel_regularizer)
        self._add_regularizer("bias", bias_regularizer)
        self.kernel_constraint = constraints.get(kernel_constraint)
        self.bias_constraint = constraints.get(bias_constraint)
        self._set_activity_regularizer(activity_regularizer)

    def _build_kernel(self, kernel_shape: tuple[int, ...], outputs: int) -> None:
        """Creates ``kernel`` of ``kernel_shape`` and (with ``use_bias``) ``bias`` of ``(outputs,)``."""
        self.kernel = self.add_weight(
            kernel_shape, self.kernel_initializer, name="kernel", constraint=self.kernel_constraint
        )
        if self.use_bias:
            self.bias = self.add_weight(
                (outputs,), self.bias_initializer, name="bias", constraint=self.bias_constraint
            )

    def _bias_and_activation(self, y: Tensor) -> Tensor:
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y)


# Activations the fused dense op computes itself.
_FUSED = (activations.linear, activations.relu)


class Dense(_KernelLayer):
    """``activation(inputs @ kernel + bias)`` over the last axis of ``inputs``.

    Builds on its first call: ``kernel`` has shape ``(input_dim, units)``, ``bias``
    ``(units,)``. Integer inputs are cast to the layer's dtype (float32).

    Args:
        units: the output size.
        activation: ``None``, a name (``"relu"``, ``"softmax"``, ...) or a callable.
        use_bias: whether to add ``bias``.
        kernel_initializer: initializer name or callable.
        bias_initializer: initializer name or callable.
        name: the layer's name.
        kernel_regularizer: ``None``, ``"l1"``/``"l2"`` or a callable; its penalty goes to ``losses``.
        bias_regularizer: as ``kernel_regularizer``, for the bias.
        activity_regularizer: as ``kernel_regularizer``, for the output: each call adds its
            penalty divided by the batch size to ``losses`` (Keras 3's rule).
        kernel_constraint: ``None``, a name (``"max_norm"``, ``"non_neg"``, ...) or a callable;
            optimizers project the kernel with it after each update.
        bias_constraint: as ``kernel_constraint``, for the bias.
        dtype: the dtype of the weights and computations (default float32).
        trainable: whether the weights are trainable.
    """

    supports_masking = True  # the steps' mask passes on to the next layer

    def __init__(
        self,
        units: int,
        activation: str | Callable[..., Any] | None = None,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        name: str | None = None,
        *,
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        activity_regularizer: Any = None,
        kernel_constraint: Any = None,
        bias_constraint: Any = None,
        dtype: Any = None,
        trainable: bool = True,
    ) -> None:
        super().__init__(trainable=trainable, name=name, dtype=dtype)
        self.units = _positive_int(units, "units", "Dense")
        self._init_kernel(
            activation,
            use_bias,
            kernel_initializer,
            bias_initializer,
            kernel_regularizer,
            bias_regularizer,
            kernel_constraint,
            bias_constraint,
            activity_regularizer,
        )

    def build(self, input_shape: Any) -> None:
        """Creates ``kernel`` (input_shape[-1], units) and ``bias`` (units,)."""
        if not isinstance(input_shape, tuple) or not input_shape:
            raise ValueError(f"Dense '{self.name}' needs inputs of rank >= 1, got shape {input_shape}")
        self._build_kernel((known_size(self, input_shape, -1, "the last axis"), self.units), self.units)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``input_shape`` with the last axis ``units``."""
        shape = rank_of(self, input_shape, range(1, 64))
        if self.kernel is not None and shape[-1] not in (None, self.kernel.shape[0]):
            raise ValueError(
                f"Dense '{self.name}' was built for inputs with last dimension {self.kernel.shape[0]}, "
                f"got shape {input_shape}"
            )
        return (*shape[:-1], self.units)

    def call(self, inputs: Any) -> Tensor:
        """Applies the layer."""
        x = self._cast_input(inputs)
        kernel = self._built_kernel()
        in_dim = kernel.shape[0]
        if x.ndim == 0 or x.shape[-1] != in_dim:
            raise ValueError(
                f"Dense '{self.name}' was built for inputs with last dimension {in_dim}, got shape {x.shape}"
            )
        if x.ndim == 2 and self.activation in _FUSED and x.dtype == kernel.dtype:
            # One recorded op with a fused gradient (no broadcast to undo for the bias).
            return _nn.dense(x, kernel, self.bias, relu=self.activation is activations.relu)
        if x.ndim == 2:
            y = matmul(x, kernel)
        else:
            # One matmul over all leading axes, then the leading axes back.
            y = _shape.reshape(matmul(_shape.reshape(x, (-1, in_dim)), kernel), x.shape[:-1] + (self.units,))
        return self._bias_and_activation(y)


class Activation(Layer):
    """Applies an activation (a name such as ``"relu"`` or a callable) to its input.

    Args:
        activation: the activation.
        name: the layer's name.
        dtype: inputs are cast to it (default float32).
    """

    supports_masking = True  # the steps' mask passes on to the next layer

    def __init__(
        self, activation: str | Callable[..., Any], name: str | None = None, dtype: Any = None
    ) -> None:
        super().__init__(name=name, dtype=dtype)
        self.activation = activations.get(activation)

    def call(self, inputs: Any) -> Tensor:
        """Applies the activation."""
        return self.activation(self._cast_input(inputs))

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``input_shape``: the activation works value by value."""
        return rank_of(self, input_shape, range(0, 64))


class Flatten(Layer):
    """Flattens every axis but the first (batch): ``(batch, ...)`` -> ``(batch, product)``.

    Keeps the input's dtype. Its arguments are keyword-only: Keras's first is ``data_format``,
    which a position here would silently take for another.
    """

    def __init__(self, *, trainable: bool = True, name: str | None = None, dtype: Any = None) -> None:
        super().__init__(trainable=trainable, name=name, dtype=dtype)

    def call(self, inputs: Any) -> Tensor:
        """Flattens the input."""
        x = as_tensor(inputs)
        if x.ndim == 0:
            raise ValueError(f"Flatten '{self.name}' needs inputs with a batch axis, got a scalar")
        return _shape.reshape(x, (x.shape[0], math.prod(x.shape[1:])))

    _keeps_input_dtype = True

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``(batch, product of the other axes)``, unknown when one of them is."""
        shape = rank_of(self, input_shape, range(1, 64))
        rest = shape[1:]
        return (shape[0], None if None in rest else math.prod(n for n in rest if n is not None))


class Embedding(Layer):
    """Maps integer ids in ``[0, input_dim)`` to rows of a trainable ``embeddings`` matrix.

    The matrix ``(input_dim, output_dim)`` is created at construction (its shape
    does not depend on the input). Output shape: ``ids.shape + (output_dim,)``.

    Args:
        input_dim: the vocabulary size.
        output_dim: the embedding size.
        embeddings_initializer: initializer name or callable (Keras default ``"uniform"``,
            uniform on ``[-0.05, 0.05)``).
        embeddings_regularizer: ``None``, a name or a callable; its penalty goes to ``losses``.
        embeddings_constraint: ``None``, a constraint name or a callable; optimizers project
            the embeddings with it after each update.
        activity_regularizer: ``None``, a regularizer name or a callable for the output: each
            call adds its penalty divided by the batch size to ``losses`` (Keras 3's rule).
        mask_zero: id 0 is padding: the layer's mask (``compute_mask``) marks the other ids,
            and ``Sequential`` hands it to the next layers that take a ``mask`` (recurrent
            layers skip the padded steps), as in Keras. ``input_dim`` counts the padding id.
        name: the layer's name.
        dtype: the dtype of the embeddings (default float32).
        trainable: whether the embeddings are trainable.
    """

    def __init__(
        self,
        input_dim: int,
        output_dim: int,
        embeddings_initializer: Any = "uniform",
        embeddings_regularizer: Any = None,
        *,
        name: str | None = None,
        dtype: Any = None,
        trainable: bool = True,
        mask_zero: bool = False,
        embeddings_constraint: Any = None,
        activity_regularizer: Any = None,
    ) -> None:
        super().__init__(trainable=trainable, name=name, dtype=dtype)
        self.embeddings_constraint = constraints.get(embeddings_constraint)
        self._set_activity_regularizer(activity_regularizer)
        self.mask_zero = bool(mask_zero)
        self.input_dim = _positive_int(input_dim, "input_dim", "Embedding")
        self.output_dim = _positive_int(output_dim, "output_dim", "Embedding")
        self.embeddings = self.add_weight(
            (self.input_dim, self.output_dim),
            embeddings_initializer,
            name="embeddings",
            constraint=self.embeddings_constraint,
        )
        self._add_regularizer("embeddings", embeddings_regularizer)

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        """With ``mask_zero``, ``ids != 0`` (a boolean Tensor, an op: replayed by ``tp.function``)."""
        if isinstance(inputs, SymbolicTensor):
            return mask_marker(inputs) if self.mask_zero else None
        return cast(as_tensor(inputs), _dt.bool) if self.mask_zero else None

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``input_shape + (output_dim,)``."""
        return (*rank_of(self, input_shape, range(1, 64)), self.output_dim)

    def call(self, inputs: Any) -> Tensor:
        """Looks the ids up."""
        ids = as_tensor(inputs)
        if ids.dtype.kind == "f":
            values = ids.numpy()
            if not np.all(values == np.floor(values)):
                raise TypeError(
                    f"Embedding '{self.name}' needs integer ids, got non-integral {ids.dtype.name} values"
                )
            ids = cast(ids, _dt.int32)
        elif ids.dtype.kind not in "iu":
            raise TypeError(f"Embedding '{self.name}' needs integer ids, got dtype {ids.dtype.name}")
        try:  # the range is checked in the gather op, so a tp.function replay checks it too
            return _shape.gather(self.embeddings, ids)
        except IndexError as error:
            raise ValueError(
                f"Embedding '{self.name}': ids must lie in [0, {self.input_dim}): {error}"
            ) from None


class Dropout(Layer):
    """Sets a random fraction ``rate`` of the inputs to 0 and scales the rest by ``1 / (1 - rate)``.

    Active only when called with ``training=True`` (directly, or inside a model
    called with it); otherwise the identity.

    Args:
        rate: the fraction to drop, in ``[0, 1)``.
        noise_shape: the shape of the keep/drop mask, broadcast against the input.
        seed: an op seed; with ``tp.random.set_seed`` the masks repeat from run to run.
        name: the layer's name.
        dtype: inputs are cast to it (default float32).
    """

    supports_masking = True  # the steps' mask passes on to the next layer

    rate: float
    noise_shape: Any
    seed: int | None

    def __init__(
        self,
        rate: float,
        noise_shape: Any = None,
        seed: int | None = None,
        name: str | None = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(name=name, dtype=dtype)
        if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not 0 <= rate < 1:
            raise ValueError(f"Dropout: rate must be a number in [0, 1), got {shown(rate)}")
        self.rate = float(rate)
        self.noise_shape = noise_shape
        self.seed = seed

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """Drops units when ``training`` is true."""
        x = self._cast_input(inputs)
        if not training or self.rate == 0:
            return x
        if self.noise_shape is not None:
            return _nn.dropout(x, self.rate, noise_shape=self.noise_shape, seed=self.seed)
        return _nn.dropout(x, self.rate, seed=self.seed)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``input_shape``."""
        return rank_of(self, input_shape, range(0, 64))


class Lambda(Layer):
    """Wraps a function of tensors as a layer (``keras.layers.Lambda``); it has no variables.

    Args:
        function: ``function(inputs) -> outputs``, built from tapefit ops.
        name: the layer's name.
    """

    def __init__(self, function: Callable[..., Any], name: str | None = None) -> None:
        if not callable(function):
            raise TypeError(f"Lambda needs a callable, got {shown(function)}")
        super().__init__(name=name)
        self.function = function

    def call(self, inputs: Any) -> Any:
        """Applies the function."""
        return self.function(inputs)


class Sequential(Layer):
    """A stack of layers, each called on the previous one's output.

    As in Keras, a ``tp.Input`` as the first entry, or a first layer made with ``input_shape=``
    (``input_dim=``, ``batch_shape=``), gives the input's shape: each layer is then built as it
    is added, and ``summary`` shows the shapes before any data. ``build(input_shape)`` does the
    same for a stack without one.

    Args:
        layers: the layers (Modules), in order, the first may be a ``tp.Input``; more can be
            added with ``add``.
        name: the model's name.
        trainable: whether its variables are trainable.
    """

    def __init__(
        self, layers: list[Any] | None = None, name: str | None = None, trainable: bool = True
    ) -> None:
        super().__init__(trainable=trainable, name=name)
        self._layers: list[Module] = []
        self._symbolic: SymbolicTensor | None = None  # the last layer's output on the input, once known
        self._input: SymbolicTensor | None = None
        for layer in layers or []:
            self.add(layer)

    @property
    def layers(self) -> list[Module]:
        """The layers, in order (a copy)."""
        return list(self._layers)

    def add(self, layer: Any) -> None:
        """Appends a layer (built at once when the input's shape is known), or sets the input's
        shape with a ``tp.Input`` as the first entry.

        Raises:
            TypeError: ``layer`` is not a Module (wrap a function in ``Lambda``).
            ValueError: a ``tp.Input`` after the first entry, or a layer that refuses the shape
                the layers before it give (named).
        """
        if isinstance(layer, SymbolicTensor):
            if self._layers or self._symbolic is not None or layer.node is not None:
                raise ValueError(
                    f"Sequential '{self.name}': a tp.Input may only be the first entry, got {layer!r} "
                    f"after {len(self._layers)} layers"
                )
            self._start(layer)
            return
        if not isinstance(layer, Module):
            raise TypeError(
                f"Sequential '{self.name}' takes Modules (layers), got {type(layer).__name__} {shown(layer)}; "
                "wrap a function in tp.layers.Lambda"
            )
        declared = layer.__dict__.get("_input_shape_arg")
        if not self._layers and self._symbolic is None and declared is not None:
            from tapefit.layers.functional import Input

            self._start(Input(batch_shape=declared))
        self._layers.append(layer)
        if self._symbolic is not None:
            self._symbolic = layer(self._symbolic)

    @property
    def inputs(self) -> list[SymbolicTensor]:
        """The symbolic input (``tp.Input`` first, or the one ``input_shape=`` made), as a list.

        Raises:
            AttributeError: the stack was given no input shape.
        """
        if self._input is None:
            raise AttributeError(
                f"Sequential '{self.name}' has no input: give a tp.Input first, or input_shape= to its first layer"
            )
        return [self._input]

    @property
    def outputs(self) -> list[SymbolicTensor]:
        """The last layer's symbolic output on ``inputs``, as a list."""
        self.inputs  # noqa: B018  (says what is missing)
        assert self._symbolic is not None
        return [self._symbolic]

    def _start(self, inputs: SymbolicTensor) -> None:
        """The input's shape is known: the stack is built as it grows."""
        self._input = inputs
        self._symbolic = inputs
        self.__dict__["_built"] = True
        self._build_input = (tuple(inputs.shape), inputs.dtype.name)
        self._build_input_shape = tuple(inputs.shape)

    def build(self, input_shape: Any) -> None:
        """Builds every layer for inputs of ``input_shape`` (batch axis first), as Keras's
        ``Sequential.build``: the layers run on a symbolic input, so their weights exist before
        any data. Inside a call (the first call builds) there is nothing to do first."""
        if in_call() or self._symbolic is not None:
            return
        from tapefit.layers.functional import Input

        x = Input(batch_shape=input_shape)
        for layer in self._layers:
            x = layer(x)

    def compute_output_spec(self, inputs: Any, training: bool | None = None, mask: Any = None) -> Any:
        """The symbolic output of the stack for symbolic ``inputs``: each layer's, in turn
        (building the layers), as ``call`` would pass them on."""
        x = inputs
        for layer in self._layers:
            x = symbolic_outputs(layer, (x,), {})
        return x

    def get_config(self) -> dict[str, Any]:
        """``name``, ``trainable`` and ``layers`` (each layer's serialized config), as Keras's."""
        from tapefit.layers import serialization

        config = {"name": self.name, "trainable": self.trainable, "layers": self._layers}
        return serialization.to_plain(config, f"Sequential '{self.name}'")

    def pop(self) -> Module:
        """Removes and returns the last layer."""
        if not self._layers:
            raise IndexError(f"Sequential '{self.name}' has no layers to pop")
        return self._layers.pop()

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        """Calls the layers in turn; ``training`` reaches those that take it."""
        x, mask = inputs, None
        for layer in self._layers:
            # training (and a mask) are dropped for layers whose call does not take them
            if mask is not None and _takes_mask(layer):
                y = layer(x, training=training, mask=mask)
            else:
                y = layer(x, training=training)
            compute_mask = getattr(layer, "compute_mask", None)
            mask = compute_mask(x, mask) if callable(compute_mask) else None
            x = y
        return x


def _takes_mask(layer: Any) -> bool:
    call = getattr(type(layer), "call", None)
    return call is not None and "mask" in inspect.signature(call).parameters


__all__ = ["Activation", "Dense", "Dropout", "Embedding", "Flatten", "Lambda", "Sequential"]
