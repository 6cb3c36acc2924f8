"""What the preprocessing layers share: their inputs as NumPy arrays of strings or integers,
their outputs as tensors that no tape records, and the encodings of integer ids as vectors
(``one_hot``, ``multi_hot``, ``count``, ``tf_idf``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core.messages import shown
from tapefit.core.tensor import Tensor
from tapefit.layers.module import Layer
from tapefit.layers.symbolic import SymbolicTensor

ENCODINGS = ("one_hot", "multi_hot", "count", "tf_idf")
DROPPED = -1
"""The id an encoding leaves out (a mask token in a vector mode)."""


class PreprocessingLayer(Layer):
    """A layer that maps data to data outside the tape: its outputs are Tensors no tape
    records (no gradient flows through it), or NumPy arrays of strings."""

    takes_strings = True
    """Whether the layer's inputs may be strings (``fit`` then takes string arrays for a model
    that starts with it)."""

    onnx_unsupported: str | None = (
        "works on its inputs in NumPy (strings, vocabularies, hashes), which has no ONNX form; "
        "apply it to the data before the exported model"
    )
    """Why ONNX export refuses the layer (``None``: it exports)."""

    def _where(self) -> str:
        return f"{type(self).__name__} '{self.name}'"


def takes_strings(model: Any) -> bool:
    """Whether ``model``'s inputs may be strings: a functional model with a string input, a
    ``Sequential`` whose input is one or whose first layer takes strings, or such a layer."""
    inputs = model.__dict__.get("_flat_inputs") or []
    start = model.__dict__.get("_input")
    if start is not None:
        inputs = [*inputs, start]
    if any(getattr(t, "dtype", None) is not None and t.dtype.kind == "U" for t in inputs):
        return True
    first = (model.__dict__.get("_layers") or [model])[0]
    return bool(getattr(first, "takes_strings", False))


def strings_of(value: Any, where: str, encoding: str = "utf-8") -> np.ndarray:
    """``value`` (strings, bytes, a list or array of them) as a NumPy array of ``str``.

    Raises:
        TypeError: values that are not strings (numbers, a Tensor), named with ``where``.
    """
    if isinstance(value, Tensor) and value.dtype.kind in "US":
        value = value.numpy()  # tp.function hands a string array over as a Tensor
    if isinstance(value, (Tensor, SymbolicTensor)):
        raise TypeError(f"{where} takes strings, got a tensor of dtype {value.dtype.name}")
    array = np.asarray(value)
    if array.dtype.kind == "U":
        return array
    if array.dtype.kind == "S":
        return np.char.decode(array, encoding)
    if array.dtype.kind == "O":
        flat = array.reshape(-1)
        out = []
        for item in flat:
            if isinstance(item, bytes):
                item = item.decode(encoding)
            elif not isinstance(item, str):
                raise TypeError(f"{where} takes strings, got {shown(item)} in an object array")
            out.append(item)
        return np.asarray(out, dtype=str).reshape(array.shape) if out else np.zeros(array.shape, dtype=str)
    raise TypeError(f"{where} takes strings, got values of dtype {array.dtype.name}")


def integers_of(value: Any, where: str) -> np.ndarray:
    """``value`` (integers: a Tensor, an array, a list) as a NumPy int64 array.

    Raises:
        TypeError: strings, floats or booleans, named with ``where``.
    """
    array = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
    if array.dtype.kind not in "iu":
        raise TypeError(f"{where} takes integers, got values of dtype {array.dtype.name}")
    if array.dtype == np.uint64 and array.size and array.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{where}: a value is larger than int64 holds")
    return array.astype(np.int64, copy=False)


def constant(array: np.ndarray) -> Tensor:
    """``array`` as a Tensor that no tape records (a constant)."""
    return Tensor(array)


def symbolic(layer: PreprocessingLayer, shape: tuple[int | None, ...], dtype: Any) -> SymbolicTensor:
    """The symbolic output of ``layer``: ``shape`` and ``dtype``."""
    return SymbolicTensor(tuple(shape), dtype, layer.name)


def check_symbolic_input(layer: PreprocessingLayer, inputs: Any, kinds: str, what: str) -> SymbolicTensor:
    """``inputs``, a symbolic tensor whose dtype is of one of the NumPy ``kinds``.

    Raises:
        TypeError: another dtype (or not one symbolic tensor).
    """
    if not isinstance(inputs, SymbolicTensor):
        raise TypeError(f"{layer._where()} takes one input, got {shown(inputs)}")
    if inputs.dtype.kind not in kinds:
        raise TypeError(f"{layer._where()} takes {what}, got an input of dtype {inputs.dtype.name}")
    return inputs


def encoded_shape(shape: tuple[int | None, ...], mode: str, depth: int | None) -> tuple[int | None, ...]:
    """The shape of ids of ``shape`` encoded in ``mode`` (Keras's rule): ``one_hot`` adds an
    axis of ``depth`` (replacing a last axis of 1); the others replace the last axis."""
    if not shape:
        return (depth,)
    if mode == "one_hot":
        if len(shape) > 1 and shape[-1] == 1:
            return (*shape[:-1], depth)
        return (*shape, depth)
    return (*shape[:-1], depth)


def encode(
    ids: np.ndarray,
    mode: str,
    depth: int,
    where: str,
    weights: np.ndarray | None = None,
    count_weights: np.ndarray | None = None,
) -> np.ndarray:
    """Integer ``ids`` (``DROPPED`` for ids left out) as float32 vectors of ``depth``.

    ``one_hot`` encodes each id (a last axis of 1 is replaced); ``multi_hot``, ``count`` and
    ``tf_idf`` encode the last axis as one sample (a 1-D input is one sample): whether each id
    occurs, how often (``count_weights``: the sum of their weights), and the count times
    ``weights`` (the idf).

    Raises:
        ValueError: an id outside ``[0, depth)``.
    """
    ids = np.asarray(ids, dtype=np.int64)
    kept = ids != DROPPED
    if np.any(kept & ((ids < 0) | (ids >= depth))):
        bad = ids[kept & ((ids < 0) | (ids >= depth))]
        raise ValueError(f"{where}: the id {int(bad.flat[0])} is outside [0, {depth}) (the encoded depth)")
    if ids.ndim == 0:
        ids = ids.reshape(1)
        kept = kept.reshape(1)
    if mode == "one_hot":
        if ids.ndim > 1 and ids.shape[-1] == 1:
            ids, kept = ids[..., 0], kept[..., 0]
        out = np.zeros((*ids.shape, depth), dtype=np.float32)
        rows = np.nonzero(kept.reshape(-1))[0]
        out.reshape(-1, depth)[rows, ids.reshape(-1)[rows]] = 1.0
        return out
    flat_ids = ids.reshape(-1, ids.shape[-1]) if ids.ndim > 1 else ids.reshape(1, -1)
    flat_kept = kept.reshape(flat_ids.shape)
    out = np.zeros((flat_ids.shape[0], depth), dtype=np.float32)
    rows, cols = np.nonzero(flat_kept)
    if mode == "multi_hot":
        out[rows, flat_ids[rows, cols]] = 1.0
    else:
        if count_weights is not None:
            w = np.broadcast_to(np.asarray(count_weights, dtype=np.float32), ids.shape).reshape(
                flat_ids.shape
            )
            np.add.at(out, (rows, flat_ids[rows, cols]), w[rows, cols])
        else:
            np.add.at(out, (rows, flat_ids[rows, cols]), 1.0)
        if mode == "tf_idf":
            assert weights is not None
            out *= weights[:depth].astype(np.float32)
    return out.reshape((*ids.shape[:-1], depth)) if ids.ndim > 1 else out.reshape(depth)


def encode_rows(rows: list[np.ndarray], mode: str, depth: int, where: str, weights: Any = None) -> np.ndarray:
    """``encode`` for rows of different lengths (the tokens of each text): one vector each."""
    out = np.zeros((len(rows), depth), dtype=np.float32)
    for i, row in enumerate(rows):
        if row.size:
            out[i] = encode(row, mode, depth, where, weights)
    return out


def check_mode(mode: Any, allowed: tuple[str, ...], where: str) -> str:
    """``mode``, one of ``allowed`` (Keras's old names ``"binary"`` and ``"tf-idf"`` taken).

    Raises:
        ValueError: another value.
    """
    if mode == "binary":
        mode = "multi_hot"
    if mode == "tf-idf":
        mode = "tf_idf"
    if mode not in allowed:
        raise ValueError(f"{where}: output_mode must be one of {', '.join(allowed)}; got {shown(mode)}")
    return str(mode)


def float_dtype(dtype: Any, where: str) -> np.dtype:
    """The float dtype of a layer's vector outputs (float32 by default)."""
    value = _dt.float32 if dtype is None else _dt.as_dtype(dtype)
    if value.kind != "f":
        raise TypeError(f"{where}: dtype must be floating, got {value.name}")
    return value
