"""Clipping tensors by their norm, one at a time or jointly (``tp.clip_by_norm``, ``tp.clip_by_global_norm``).

Small pure functions of tapefit ops, with TensorFlow's formulas, so the results match
TensorFlow's and stay differentiable. ``clip_by_value`` lives with the elementwise math.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core.ops.creation import ones_like
from tapefit.core.ops.math import add_n, cast, maximum, minimum, sqrt, where
from tapefit.core.ops.reduce import Axis, reduce_sum
from tapefit.core.tensor import Tensor, as_tensor


def _floating(t: Any, fn: str, what: str) -> Tensor:
    t = as_tensor(t)
    if t.dtype.kind != "f":
        raise TypeError(f"{fn}: {what} must be a floating tensor, got {t.dtype.name}")
    return t


def _clip_norm(clip_norm: Any, dtype: np.dtype, fn: str) -> Tensor:
    """``clip_norm`` as a scalar of ``dtype``, checked to be a finite number > 0."""
    if isinstance(clip_norm, Tensor):
        if clip_norm.dtype != dtype:
            raise _dt.mix_error(fn, [dtype, clip_norm.dtype])
        value = clip_norm._value
    else:
        value = np.asarray(clip_norm)
        if value.dtype.kind not in "fiu":
            raise TypeError(f"{fn}: clip_norm must be a number, got {clip_norm!r}")
    if value.ndim != 0:
        raise ValueError(f"{fn}: clip_norm must be a scalar, got shape {value.shape}")
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{fn}: clip_norm must be a finite number > 0, got {clip_norm!r}")
    return clip_norm if isinstance(clip_norm, Tensor) else as_tensor(value.astype(dtype))


def clip_by_norm(t: Any, clip_norm: Any, axes: Axis = None) -> Tensor:
    """``t`` scaled so that its L2 norm (over ``axes``) is at most ``clip_norm``.

    Computes ``t * clip_norm / maximum(l2norm(t), clip_norm)`` as TensorFlow does: a
    tensor whose norm is within the bound comes back unchanged, and an all-zero tensor
    stays zero (its gradient too, not NaN).

    Args:
        t: a floating tensor.
        clip_norm: a finite number > 0 (TensorFlow documents the same bound; it does not check it).
        axes: the axes the norm is taken over (each slice clipped on its own); all by default.
    """
    t = _floating(t, "clip_by_norm", "t")
    clip = _clip_norm(clip_norm, t.dtype, "clip_by_norm")
    l2sum = reduce_sum(t * t, axes, keepdims=True)
    # The two-sided where keeps sqrt's gradient away from 0, where it is infinite.
    positive = l2sum > 0
    l2norm = where(positive, sqrt(where(positive, l2sum, ones_like(l2sum))), l2sum)
    return t * clip / maximum(l2norm, clip)


def _global_norm(tensors: list[Tensor]) -> Tensor:
    dtype = np.result_type(*[t.dtype for t in tensors])
    squares = [cast(reduce_sum(t * t), dtype) for t in tensors]
    return sqrt(add_n(squares))


def clip_by_global_norm(
    t_list: Sequence[Any], clip_norm: Any, use_norm: Any = None
) -> tuple[list[Tensor | None], Tensor]:
    """Scales a list of tensors jointly so that the norm of them all together is at most ``clip_norm``.

    The global norm is ``sqrt(sum of every element squared)`` over the non-``None``
    entries; each tensor is multiplied by ``clip_norm / maximum(global_norm, clip_norm)``
    (TensorFlow's formula). ``None`` entries pass through. If the global norm is ``inf``
    or ``NaN``, every clipped tensor is all ``NaN``, as in TensorFlow. Tensors of several
    floating dtypes are allowed (TensorFlow requires one): the norm is computed in the
    widest.

    Args:
        t_list: a list or tuple of tensors (or ``None``).
        clip_norm: a finite number > 0.
        use_norm: the global norm to use instead of computing it.

    Returns:
        ``(clipped_list, global_norm)``; ``global_norm`` is the norm before clipping
        (``use_norm`` when given).
    """
    fn = "clip_by_global_norm"
    if isinstance(t_list, (Tensor, np.ndarray, str)) or not isinstance(t_list, Sequence):
        raise TypeError(f"{fn}: t_list should be a list or tuple of tensors, got {type(t_list).__name__}")
    values = [None if t is None else _floating(t, fn, f"t_list[{i}]") for i, t in enumerate(t_list)]
    present = [v for v in values if v is not None]
    if use_norm is None:
        if not present:
            raise ValueError(f"{fn}: t_list has no tensors (every entry is None) to take a norm of")
        use_norm = _global_norm(present)
    else:
        dtype = np.result_type(*[t.dtype for t in present]) if present else _dt.float32
        use_norm = use_norm if isinstance(use_norm, Tensor) else as_tensor(use_norm, dtype)
        use_norm = _floating(use_norm, fn, "use_norm")
        if use_norm.ndim != 0:
            raise ValueError(f"{fn}: use_norm must be a scalar, got shape {use_norm.shape}")
    clip = _clip_norm(clip_norm, use_norm.dtype, fn)
    # 1 / 0 is inf (and min picks 1 / clip_norm); inf - inf is NaN, which then spreads on purpose.
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = clip * minimum(1.0 / use_norm, 1.0 / clip) + (use_norm - use_norm)
    clipped = [None if v is None else v * cast(scale, v.dtype) for v in values]
    return clipped, use_norm


__all__ = ["clip_by_global_norm", "clip_by_norm"]
