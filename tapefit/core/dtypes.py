"""The dtypes tapefit uses (plain NumPy dtypes) and the rules for mixing them."""

from __future__ import annotations

from typing import Any

import numpy as np

float16 = np.dtype(np.float16)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
bool = np.dtype(np.bool_)
string = np.dtype(np.str_)
"""The dtype of string inputs (``tp.Input(shape, dtype="string")``, named ``"str"`` in files):
NumPy's unicode strings. No op computes with it; the preprocessing layers take it."""

DTypeLike = Any  # anything ``np.dtype()`` accepts

# NumPy reads these as float64 and int64: an accidental 64-bit tensor next to float32 ones.
_PYTHON_TYPES = {float: float32, "float": float32, int: int32, "int": int32}


def as_dtype(dtype: DTypeLike) -> np.dtype:
    """Returns ``dtype`` as a NumPy dtype a tensor can hold (floating, integer or bool).

    ``float`` and ``"float"`` are float32 (as in TensorFlow), ``int`` and ``"int"`` int32:
    the dtypes Python numbers get, where NumPy would read them as 64-bit.

    Raises:
        TypeError: an unknown name, ``None`` (NumPy would read it as float64), or a dtype
            such as ``object``, complex or strings.
    """
    if not isinstance(dtype, np.dtype):
        if isinstance(dtype, (type, str)) and dtype in _PYTHON_TYPES:
            return _PYTHON_TYPES[dtype]
        if dtype is None:
            raise TypeError("None is not a dtype; use tp.float32, tp.int32, ...")
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"{dtype!r} is not a dtype; use tp.float32, tp.int32, ...") from None
    if dtype.kind not in "fiub":
        raise TypeError(
            f"{dtype.name} is not a tensor dtype; tensors hold floats, integers or bools "
            "(tp.float32, tp.int32, tp.bool, ...)"
        )
    return dtype


def input_dtype(dtype: DTypeLike) -> np.dtype:
    """``as_dtype``, and also strings (``"string"``, ``"str"``, any NumPy string dtype) as
    ``string``: the dtypes a model's input (``tp.Input``) may have.

    Raises:
        TypeError: as ``as_dtype``.
    """
    if isinstance(dtype, str) and dtype in ("string", "str"):
        return string
    if isinstance(dtype, np.dtype) and dtype.kind in "US":
        return string
    return as_dtype(dtype)


def mix_error(op_name: str, dtypes: list[np.dtype]) -> TypeError:
    """The error for an op given tensors of different dtypes."""
    names = ", ".join(d.name for d in dtypes)
    target = next((d for d in dtypes if d.kind == "f"), dtypes[-1])
    return TypeError(
        f"{op_name}: cannot mix dtypes {names} in one op; convert explicitly, "
        f"for example with tp.cast(x, tp.{target.name})"
    )
