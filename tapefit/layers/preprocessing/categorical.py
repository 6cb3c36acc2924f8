"""``CategoryEncoding`` and ``Hashing``: integer ids as vectors, and values hashed into bins."""

from __future__ import annotations

from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core import tensor as _tensor
from tapefit.core.function import host_call
from tapefit.core.messages import shown
from tapefit.core.ops.math import cast
from tapefit.core.ops.reduce import reduce_max, reduce_sum
from tapefit.core.ops.shape import expand_dims, one_hot, reshape
from tapefit.core.tensor import Tensor
from tapefit.layers.preprocessing import encoding as enc
from tapefit.layers.preprocessing.hashes import hash_buckets
from tapefit.layers.symbolic import SymbolicTensor


class CategoryEncoding(enc.PreprocessingLayer):
    """Encodes integer ids in ``[0, num_tokens)`` as vectors, as Keras's ``CategoryEncoding``.

    ``"one_hot"`` encodes each id (a last axis of 1 is replaced by ``num_tokens``);
    ``"multi_hot"`` and ``"count"`` encode the last axis as one sample (a 1-D input is one
    sample): whether each id occurs, or how often (or, with ``count_weights``, the sum of their
    weights). The output is a float Tensor, made of tapefit ops (so it exports to ONNX); ids
    are checked to be in range when they have values (not while ``tp.function`` or an export
    traces the layer: there an id outside the range encodes as zeros, as ``tf.one_hot``).

    Args:
        num_tokens: the number of ids (required).
        output_mode: ``"one_hot"``, ``"multi_hot"`` (default) or ``"count"``.
        name: the layer's name.
        dtype: the output's dtype (float32).
        trainable: kept for Keras's signature (there are no weights).
    """

    onnx_unsupported = None  # made of tapefit ops
    takes_strings = False

    def __init__(
        self,
        num_tokens: int | None = None,
        output_mode: str = "multi_hot",
        *,
        name: str | None = None,
        dtype: Any = None,
        trainable: bool = True,
    ) -> None:
        super().__init__(name=name, trainable=trainable)
        where = self._where()
        self.dtype = enc.float_dtype(dtype, where)
        self.output_mode = enc.check_mode(output_mode, ("one_hot", "multi_hot", "count"), where)
        if num_tokens is None:
            raise ValueError(
                f"{where}: num_tokens is required (IntegerLookup learns an unknown number of ids)"
            )
        if not isinstance(num_tokens, int) or isinstance(num_tokens, bool) or num_tokens < 1:
            raise ValueError(f"{where}: num_tokens must be an int >= 1, got {shown(num_tokens)}")
        self.num_tokens = num_tokens

    def call(self, inputs: Any, count_weights: Any = None) -> Tensor:
        """The vectors of the ids (``count_weights``, of the inputs' shape, in ``"count"`` mode).

        Raises:
            TypeError: ids that are not integers.
            ValueError: an id outside ``[0, num_tokens)``; ``count_weights`` outside ``"count"``.
        """
        where = self._where()
        if isinstance(inputs, Tensor):
            ids = inputs
            if ids.dtype.kind not in "iu":
                raise TypeError(f"{where} takes integers, got values of dtype {ids.dtype.name}")
        else:
            ids = Tensor(enc.integers_of(inputs, where))
        if not _tensor._traces:  # a trace (tp.function, export) has no values to check
            values = ids.numpy()
            outside = (values < 0) | (values >= self.num_tokens)
            if outside.any():
                raise ValueError(
                    f"{where}: the id {int(values[outside].flat[0])} is outside [0, {self.num_tokens})"
                )
        weights = None
        if count_weights is not None:
            if self.output_mode != "count":
                raise ValueError(f"{where}: count_weights are for output_mode='count' only")
            weights = (
                count_weights if isinstance(count_weights, Tensor) else Tensor(np.asarray(count_weights))
            )
            if tuple(weights.shape) != tuple(ids.shape):
                raise ValueError(
                    f"{where}: count_weights must have the inputs' shape {tuple(ids.shape)}, got {tuple(weights.shape)}"
                )
            weights = cast(weights, self.dtype)
        if ids.ndim == 0:
            ids = reshape(ids, (1,))
            weights = None if weights is None else reshape(weights, (1,))
        if self.output_mode == "one_hot":
            if ids.ndim > 1 and ids.shape[-1] == 1:
                ids = reshape(ids, tuple(ids.shape[:-1]))
            return one_hot(ids, self.num_tokens, dtype=self.dtype)
        hot = one_hot(ids, self.num_tokens, dtype=self.dtype)  # (..., samples, num_tokens)
        if self.output_mode == "multi_hot":
            return reduce_max(hot, axis=-2)
        if weights is not None:
            hot = hot * expand_dims(weights, -1)
        return reduce_sum(hot, axis=-2)

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """Keras's rule (see the class)."""
        return enc.encoded_shape(tuple(input_shape), self.output_mode, self.num_tokens)

    def compute_output_spec(self, inputs: Any, count_weights: Any = None) -> SymbolicTensor:
        """The symbolic output, of the layer's dtype."""
        enc.check_symbolic_input(self, inputs, "iu", "integer ids")
        return enc.symbolic(self, self.compute_output_shape(inputs.shape), self.dtype)


class Hashing(enc.PreprocessingLayer):
    """Hashes strings or integers into ``num_bins`` bins, as Keras's ``Hashing``, bin for bin.

    A value is hashed as text (an integer as its decimal digits, a float first cut to an
    int64) with FarmHash ``Fingerprint64``, or with ``salt`` SipHash-2-4, modulo the bins: the
    hashes TensorFlow's ``to_hash_bucket_fast`` and ``to_hash_bucket_strong`` use, so the bins
    are Keras's. With ``mask_value``, bin 0 is the mask's and the others take ``num_bins - 1``.

    Args:
        num_bins: the number of bins, mask bin included.
        mask_value: the value of bin 0 (``None``: no mask bin).
        salt: an int or two: the SipHash key (``None``: FarmHash).
        output_mode: ``"int"`` (bin ids), ``"one_hot"``, ``"multi_hot"`` or ``"count"``.
        name: the layer's name.
        dtype: the output's dtype: ``"int64"`` (default) or ``"int32"`` in ``"int"`` mode,
            float32 otherwise.
        trainable: kept for Keras's signature (there are no weights).
    """

    def __init__(
        self,
        num_bins: int,
        mask_value: Any = None,
        salt: Any = None,
        output_mode: str = "int",
        *,
        name: str | None = None,
        dtype: Any = None,
        trainable: bool = True,
    ) -> None:
        super().__init__(name=name, trainable=trainable)
        where = self._where()
        self.output_mode = enc.check_mode(output_mode, ("int", "one_hot", "multi_hot", "count"), where)
        if self.output_mode == "int":
            out = _dt.int64 if dtype is None else _dt.as_dtype(dtype)
            if out not in (_dt.int32, _dt.int64):
                raise ValueError(
                    f"{where}: with output_mode='int', dtype must be int32 or int64, got {out.name}"
                )
            self.output_dtype = out
        else:
            self.dtype = enc.float_dtype(dtype, where)
            self.output_dtype = self.dtype
        if not isinstance(num_bins, int) or isinstance(num_bins, bool) or num_bins <= 0:
            raise ValueError(f"{where}: num_bins must be an int > 0, got {shown(num_bins)}")
        if salt is not None:
            if isinstance(salt, (tuple, list)) and len(salt) == 2 and all(isinstance(s, int) for s in salt):
                salt = [int(salt[0]), int(salt[1])]
            elif isinstance(salt, int) and not isinstance(salt, bool):
                salt = [salt, salt]
            else:
                raise ValueError(f"{where}: salt must be an int or a pair of ints, got {shown(salt)}")
        self.num_bins = num_bins
        self.mask_value = mask_value
        self.salt = salt

    def _texts(self, values: np.ndarray) -> list[bytes]:
        if values.dtype.kind in "USO":
            strings = enc.strings_of(values, self._where())
            return [s.encode("utf-8") for s in strings.reshape(-1).tolist()]
        if values.dtype.kind == "f":
            values = values.astype(np.int64)
        elif values.dtype.kind not in "iu":
            raise TypeError(
                f"{self._where()} takes strings or numbers, got values of dtype {values.dtype.name}"
            )
        return [str(int(v)).encode("ascii") for v in values.reshape(-1).tolist()]

    def bins(self, inputs: Any) -> np.ndarray:
        """The bin of each value, as an int64 NumPy array of the inputs' shape."""
        values = inputs.numpy() if isinstance(inputs, Tensor) else np.asarray(inputs)
        bins = self.num_bins
        mask = None
        if self.mask_value is not None and bins > 1:
            bins -= 1
            mask = values == self.mask_value
        key = None if self.salt is None else (self.salt[0], self.salt[1])
        out = hash_buckets(self._texts(values), bins, key).reshape(values.shape)
        if mask is not None:
            out = np.where(mask, 0, out + 1)
        return out

    def call(self, inputs: Any) -> Tensor:
        """The bins of the values (``"int"``), or their encoding; a Tensor no tape records."""
        return host_call(self._hash, inputs)

    def _hash(self, inputs: Any) -> Tensor:
        bins = self.bins(inputs)
        if self.output_mode == "int":
            return enc.constant(bins.astype(self.output_dtype))
        out = enc.encode(bins, self.output_mode, self.num_bins, self._where())
        return enc.constant(out.astype(self.output_dtype, copy=False))

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """The input's shape (``"int"``), else ``CategoryEncoding``'s rule with ``num_bins``."""
        shape = tuple(input_shape)
        if self.output_mode == "int":
            return shape
        return enc.encoded_shape(shape, self.output_mode, self.num_bins)

    def compute_output_spec(self, inputs: Any) -> SymbolicTensor:
        """The symbolic output: bins of the layer's int dtype, or float vectors."""
        enc.check_symbolic_input(self, inputs, "iufU", "strings or numbers")
        return enc.symbolic(self, self.compute_output_shape(inputs.shape), self.output_dtype)

    def get_config(self) -> dict[str, Any]:
        """Keras's keys."""
        from tapefit.layers import serialization

        config = {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": self.output_dtype.name,
            "num_bins": self.num_bins,
            "mask_value": self.mask_value,
            "salt": self.salt,
            "output_mode": self.output_mode,
        }
        return serialization.to_plain(config, self._where())
