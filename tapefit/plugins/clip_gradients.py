"""The ``clip_gradients`` plugin, and gradient clipping as small pure functions.

The functions take and return lists of gradients (``None`` entries pass through);
the plugin applies one of them in the ``transform_gradients`` hook and puts the
pre-clip global norm into the batch logs as ``grad_global_norm``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tapefit.core.naming import suggest_keywords
from tapefit.core.ops.clip import clip_by_global_norm, clip_by_norm
from tapefit.core.ops.math import add_n, cast, clip_by_value, sqrt
from tapefit.core.ops.reduce import reduce_sum
from tapefit.core.tensor import Tensor, as_tensor
from tapefit.plugins.hookspecs import hookimpl

Gradients = Sequence[Any]


def global_norm(grads: Gradients) -> Tensor:
    """``sqrt(sum of every element squared)`` over the non-``None`` gradients (``tf.linalg.global_norm``).

    Computed in the widest floating dtype among them, as ``tp.clip_by_global_norm`` does.
    """
    present = [as_tensor(g) for g in grads if g is not None]
    if not present:
        raise ValueError("global_norm: every gradient is None")
    widest = max((g.dtype for g in present), key=lambda d: d.itemsize)
    return sqrt(add_n([cast(reduce_sum(g * g), widest) for g in present]))


def clip_grads_by_global_norm(grads: Gradients, clip_norm: float) -> tuple[list[Any], Tensor]:
    """Scales all gradients together so their global norm is at most ``clip_norm``.

    Exactly ``tp.clip_by_global_norm(grads, clip_norm)``.

    Returns:
        ``(clipped, global norm before clipping)``.
    """
    clipped, norm = clip_by_global_norm(list(grads), clip_norm)
    return clipped, norm


def clip_grads_by_norm(grads: Gradients, clip_norm: float) -> list[Any]:
    """Clips each gradient on its own to L2 norm at most ``clip_norm`` (``tp.clip_by_norm``; Keras's ``clipnorm``)."""
    return [None if g is None else clip_by_norm(g, clip_norm) for g in grads]


def clip_grads_by_value(grads: Gradients, clip_value: float) -> list[Any]:
    """Clips every element to ``[-clip_value, clip_value]`` (Keras's ``clipvalue``)."""
    return [None if g is None else clip_by_value(g, -clip_value, clip_value) for g in grads]


def _positive(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not value > 0
        or value == float("inf")
    ):
        raise ValueError(f"clip_gradients: {name} must be a finite number > 0, got {value!r}")
    return float(value)


@suggest_keywords
class ClipGradients:
    """Clips the gradients before every optimizer step (config name ``clip_gradients``).

    Give exactly one of:

    Args:
        global_norm: clip all gradients together to this global norm (exactly
            ``tp.clip_by_global_norm``; Keras's ``global_clipnorm``).
        norm: clip each gradient to this L2 norm (``tp.clip_by_norm``; Keras's ``clipnorm``).
        value: clip each element to ``[-value, value]`` (Keras's ``clipvalue``).

    ``None`` gradients pass through. The global norm of the gradients before any
    clipping goes into the batch logs as ``grad_global_norm``. Several clipping plugins
    compose: each clips what the previous one left.
    """

    plugin_name = "clip_gradients"
    adds_log_keys: tuple[str, ...] = ()  # epoch log keys it adds (hookspecs.py)

    def __init__(
        self, global_norm: float | None = None, norm: float | None = None, value: float | None = None
    ) -> None:
        options = {"global_norm": global_norm, "norm": norm, "value": value}
        given = [k for k, v in options.items() if v is not None]
        if len(given) != 1:
            raise ValueError(
                f"clip_gradients needs exactly one of global_norm, norm, value; got {given or 'none'}"
            )
        self.mode = given[0]
        self.threshold: float = _positive(self.mode, options[self.mode])  # type: ignore[assignment]

    def clip(self, grads: Gradients) -> tuple[list[Any], float]:
        """The clipped gradients and the global norm before clipping."""
        if self.mode == "global_norm":
            clipped, norm = clip_grads_by_global_norm(grads, self.threshold)
            return clipped, float(norm)
        norm_before = float(global_norm(grads))
        if self.mode == "norm":
            return clip_grads_by_norm(grads, self.threshold), norm_before
        return clip_grads_by_value(grads, self.threshold), norm_before

    @hookimpl
    def transform_gradients(
        self, grads_and_vars: list[tuple[Any, Any]], logs: dict[str, float]
    ) -> list[tuple[Any, Any]]:
        clipped, norm = self.clip([g for g, _ in grads_and_vars])
        # The first clipper (or tensorboard, which looks first) records the raw norm.
        logs.setdefault("grad_global_norm", norm)
        return list(zip(clipped, (v for _, v in grads_and_vars)))

    def __repr__(self) -> str:
        return f"ClipGradients({self.mode}={self.threshold})"
