"""Layers about the time axis of sequences: ``Masking`` (makes the mask of the steps that
recurrent layers skip) and ``TimeDistributed`` (applies a layer to every step)."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core import nest
from tapefit.core.messages import shown
from tapefit.core.ops import math as _math
from tapefit.core.ops import reduce as _reduce
from tapefit.core.ops import shape as _shape
from tapefit.core.tensor import Tensor, as_tensor
from tapefit.layers.module import Layer, Module, rank_of
from tapefit.layers.symbolic import SymbolicTensor, mask_marker

__all__ = ["Masking", "TimeDistributed"]


class Masking(Layer):
    """Keras's ``Masking``: marks as padding every step whose features all equal
    ``mask_value``, and zeroes those steps.

    Args:
        mask_value: the value of a padded step's features (default 0.0).

    ``compute_mask(inputs)`` is ``any(inputs != mask_value, axis=-1)``, (batch, time) booleans;
    ``Sequential`` and functional models hand it to the next layers that take a ``mask``
    (recurrent layers skip the masked steps). The output is ``inputs`` with the masked steps
    set to zero.
    """

    supports_masking = True

    def __init__(
        self, mask_value: float = 0.0, *, name: str | None = None, trainable: bool = True, dtype: Any = None
    ) -> None:
        super().__init__(trainable=trainable, name=name, dtype=dtype)
        if isinstance(mask_value, bool) or not isinstance(mask_value, (int, float, np.integer, np.floating)):
            raise ValueError(f"Masking: mask_value must be a number, got {shown(mask_value)}")
        self.mask_value = float(mask_value)

    def _kept(self, x: Tensor, keepdims: bool) -> Tensor:
        return _reduce.reduce_any(_math.not_equal(x, self.mask_value), axis=-1, keepdims=keepdims)

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        """``any(inputs != mask_value, axis=-1)`` (a boolean Tensor, an op: replayed by ``tp.function``)."""
        if isinstance(inputs, SymbolicTensor):
            return mask_marker(inputs)
        return self._kept(self._cast_input(inputs), keepdims=False)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``input_shape``."""
        return rank_of(self, input_shape, range(2, 64), "inputs (batch, time, ...)")

    def call(self, inputs: Any) -> Tensor:
        """``inputs`` with the masked steps zeroed."""
        x = self._cast_input(inputs)
        if x.ndim < 2:
            raise ValueError(f"Masking '{self.name}' needs inputs (batch, time, ...), got shape {x.shape}")
        return x * _math.cast(self._kept(x, keepdims=True), x.dtype)


def _takes(layer: Any, argument: str) -> bool:
    call = getattr(type(layer), "call", None)
    return call is not None and argument in inspect.signature(call).parameters


class TimeDistributed(Layer):
    """Keras's ``TimeDistributed``: applies ``layer`` to every step of ``(batch, time, ...)``
    inputs, as one call on ``(batch * time, ...)``, the same weights for every step.

    Args:
        layer: the layer to apply (a ``Layer`` or ``Module``).

    The input's mask of steps passes on unchanged; a ``layer`` whose ``call`` takes ``mask``
    gets it flattened to ``(batch * time,)``. ``layer``'s output ``(batch * time, ...)``
    comes back as ``(batch, time, ...)`` (each output, for a layer with several).
    """

    supports_masking = True

    def __init__(
        self, layer: Module, *, name: str | None = None, trainable: bool = True, dtype: Any = None
    ) -> None:
        super().__init__(trainable=trainable, name=name, dtype=dtype)
        if not isinstance(layer, Module):
            raise TypeError(f"TimeDistributed wraps a layer, got {shown(layer)}")
        self.layer = layer

    def _inner_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        shape = rank_of(self, input_shape, range(3, 64), "inputs (batch, time, ...)")
        return (shape[0], *shape[2:])

    def build(self, input_shape: Any) -> None:
        """Builds ``layer`` for one step's shape ``(batch, *input_shape[2:])``."""
        inner = self._inner_shape(input_shape)
        if not self.layer.built:
            self.layer.build(inner)

    def compute_output_shape(self, input_shape: Any) -> Any:
        """``layer``'s output shape for one step, with the time axis put back second."""
        shape = rank_of(self, input_shape, range(3, 64), "inputs (batch, time, ...)")
        inner = self.layer.compute_output_shape(self._inner_shape(shape))

        def back(s: Any) -> Any:
            if isinstance(s, tuple) and all(n is None or isinstance(n, int) for n in s):
                return (shape[0], shape[1], *s[1:])
            return [back(t) for t in s]

        return back(inner)

    def call(self, inputs: Any, training: Any = None, mask: Any = None) -> Any:
        """``layer`` on every step; see the class docstring."""
        x = as_tensor(inputs)
        if x.ndim < 3:
            raise ValueError(
                f"TimeDistributed '{self.name}' needs inputs (batch, time, ...), got shape {x.shape}"
            )
        batch, steps = x.shape[0], x.shape[1]
        kwargs: dict[str, Any] = {}
        if training is not None:
            kwargs["training"] = training
        if mask is not None and _takes(self.layer, "mask"):
            mask = as_tensor(mask)
            if tuple(mask.shape) != (batch, steps):
                raise ValueError(
                    f"TimeDistributed '{self.name}': mask must have shape {(batch, steps)}, got {tuple(mask.shape)}"
                )
            kwargs["mask"] = _shape.reshape(
                mask if mask.dtype == _dt.bool else _math.cast(mask, _dt.bool), (-1,)
            )
        flat = _shape.reshape(x, (batch * steps, *x.shape[2:]))
        outputs = self.layer(flat, **kwargs)

        def back(y: Any) -> Tensor:
            y = as_tensor(y)
            if y.ndim < 1 or y.shape[0] != batch * steps:
                raise ValueError(
                    f"TimeDistributed '{self.name}': {type(self.layer).__name__} '{self.layer.name}' must "
                    f"keep the first axis ({batch * steps}), got an output of shape {y.shape}"
                )
            return _shape.reshape(y, (batch, steps, *y.shape[1:]))

        if nest.is_nested(outputs):
            return nest.pack_sequence_as(outputs, [back(y) for y in nest.flatten(outputs)])
        return back(outputs)
