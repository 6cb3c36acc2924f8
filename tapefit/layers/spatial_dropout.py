"""Spatial dropout: Dropout that drops whole channels (feature maps), as Keras's
``SpatialDropout1D`` and ``SpatialDropout2D``."""

from __future__ import annotations

import numbers
from typing import Any

from tapefit.core.messages import shown
from tapefit.core.ops import nn as _nn
from tapefit.core.tensor import Tensor
from tapefit.layers.core import Dropout
from tapefit.layers.module import rank_of


class _SpatialDropout(Dropout):
    _rank = 0
    _what = ""

    def __init__(
        self, rate: float, seed: int | None = None, name: str | None = None, dtype: Any = None
    ) -> None:
        if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not 0 <= rate < 1:
            raise ValueError(f"{type(self).__name__}: rate must be a number in [0, 1), got {shown(rate)}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"{type(self).__name__}: seed must be an int or None, got {shown(seed)}")
        super().__init__(rate, seed=seed, name=name, dtype=dtype)

    def call(self, inputs: Any, training: bool | None = None) -> Tensor:
        """Drops whole channels when ``training`` is true."""
        x = self._cast_input(inputs)
        if x.ndim != self._rank:
            raise ValueError(f"{type(self).__name__} '{self.name}' needs {self._what}, got shape {x.shape}")
        if not training or self.rate == 0:
            return x
        # one keep/drop draw per example and channel, shared along the steps (or pixels)
        noise_shape = (x.shape[0], *([1] * (self._rank - 2)), x.shape[-1])
        return _nn.dropout(x, self.rate, noise_shape=noise_shape, seed=self.seed)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``input_shape``."""
        return rank_of(self, input_shape, self._rank, self._what)


class SpatialDropout1D(_SpatialDropout):
    """Drops whole channels of ``(batch, steps, channels)``: each example's channel is zeroed
    at every step with probability ``rate``, the kept ones scaled by ``1 / (1 - rate)``.

    Active only when called with ``training=True``; otherwise the identity.

    Args:
        rate: the fraction of channels to drop, in ``[0, 1)``.
        seed: an op seed; with ``tp.random.set_seed`` the masks repeat from run to run.
        name: the layer's name.
        dtype: inputs are cast to it (default float32).
    """

    _rank = 3
    _what = "sequences (batch, steps, channels)"


class SpatialDropout2D(_SpatialDropout):
    """Drops whole channels of NHWC images: each example's feature map is zeroed at every
    pixel with probability ``rate``, the kept ones scaled by ``1 / (1 - rate)``.

    Active only when called with ``training=True``; otherwise the identity.

    Args:
        rate: the fraction of feature maps to drop, in ``[0, 1)``.
        seed: an op seed; with ``tp.random.set_seed`` the masks repeat from run to run.
        name: the layer's name.
        dtype: inputs are cast to it (default float32).
    """

    _rank = 4
    _what = "images (batch, height, width, channels)"

    # Keyword-only after rate: Keras's second argument is data_format, which a position here
    # would take for the seed.
    def __init__(
        self, rate: float, *, seed: int | None = None, name: str | None = None, dtype: Any = None
    ) -> None:
        super().__init__(rate, seed=seed, name=name, dtype=dtype)


__all__ = ["SpatialDropout1D", "SpatialDropout2D"]
