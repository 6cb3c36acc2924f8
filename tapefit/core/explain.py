"""``GradientTape.explain``: why a gradient is ``None``, read off what the tape recorded.

It walks the recorded ops with the same reachability walk (``core/graph.py``) that
``gradient`` plans its backward pass with, so the two cannot disagree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tapefit.core import nest
from tapefit.core.graph import cuts, downstream, upstream
from tapefit.core.registry import has_gradient
from tapefit.core.tensor import Tensor

if TYPE_CHECKING:
    from tapefit.core.tape import GradientTape


def _float(t: Tensor) -> bool:
    return t._value.dtype.kind == "f"


def explain(tape: GradientTape, target: Any, source: Any) -> str | None:
    """Why ``gradient(target, source)`` is ``None``, in one sentence; ``None`` if it is not.

    Where ``gradient`` would raise ``LookupError`` (an op on the path has no registered
    gradient) the sentence says so instead.

    The answer is read off what the tape recorded, so it works before and after a
    non-persistent tape has answered its ``gradient`` call. A nested ``target`` is
    differentiated as the sum of its tensors, as in ``gradient``: ``None`` if any of
    them has a gradient, else the first one's reason.
    """
    if nest.is_nested(target):
        leaves = nest.flatten(target)
        if not leaves:
            return f"the target is an empty {type(target).__name__}: there is nothing to differentiate"
        reasons = [explain(tape, leaf, source) for leaf in leaves]
        return None if None in reasons else reasons[0]
    nodes = tape._nodes()
    if not isinstance(target, Tensor):
        return (
            f"the target is a {type(target).__name__}, not a Tensor: computations outside tapefit "
            "ops (for example in NumPy) are not recorded, so the tape cannot differentiate them"
        )
    if not isinstance(source, Tensor):
        return f"the source is a {type(source).__name__}, not a Tensor or Variable"
    what = _describe(source)
    if not _float(source):
        return f"{what} has dtype {source.dtype.name}; only floating-point tensors have gradients"
    if not _float(target):
        return f"the target has dtype {target.dtype.name}; only floating-point targets have gradients"
    if source._id == target._id:
        return None
    if source._id not in tape._watched:
        return f"{what} was never watched by this tape: {_why_unwatched(tape, source)}"
    _, downstream_all, cut_ops = downstream(nodes, {source._id})
    if target._id not in downstream_all:
        return (
            f"the target was computed without {what}: no recorded op connects them (was the target "
            "computed from a copy, for example after `x = x + 1`, from an assigned value, or "
            "through NumPy?)"
        )
    upstream_of_target = upstream(nodes, {target._id})[1]
    uncut = downstream(nodes, {source._id}, through_cuts=False)[1]
    if target._id not in uncut:
        names = sorted({n.type for n in cut_ops if any(o in upstream_of_target for o in n.output_ids)})
        described = ", ".join(_cut_name(n) for n in names)
        return f"every path from {what} to the target is cut by {described}"
    # Gradients enter only floating inputs (op.needs_grad), so an integer tensor cuts a path too.
    reachable = downstream(nodes, {source._id}, through_cuts=False, floating_only=True)[1]
    if target._id not in reachable:
        makers = sorted(
            {
                n.type
                for n in nodes
                if any(i in reachable and d.kind == "f" for i, d in zip(n.input_ids, n.input_dtypes))
                and any(o in uncut and d.kind != "f" for o, d in zip(n.output_ids, n.output_dtypes))
                and not upstream_of_target.isdisjoint(n.output_ids)
            }
        )
        made_by = f" (made by {', '.join(makers)})" if makers else ""
        return (
            f"every path from {what} to the target goes through an integer or bool tensor"
            f"{made_by}; only floating-point tensors carry gradients"
        )
    missing = sorted(
        {
            n.type
            for n in nodes
            if not (n.custom or has_gradient(n.type))
            and not cuts(n)
            and not reachable.isdisjoint(n.input_ids)
            and not upstream_of_target.isdisjoint(n.output_ids)
        }
    )
    if missing:
        return (
            f"the gradient is not None but an error: gradient registry has no entry for: {missing[0]} "
            "(register one with @tp.register_gradient, or declare it with tp.not_differentiable)"
        )
    return None


def _why_unwatched(tape: GradientTape, source: Tensor) -> str:
    if source._is_variable:
        name = source.name  # type: ignore[attr-defined]
        if not source.trainable:  # type: ignore[attr-defined]
            return (
                f"the Variable '{name}' is not trainable, so reading it does not watch it; "
                "call tape.watch() on it"
            )
        if not tape._watch_accessed:
            return (
                f"the tape was created with watch_accessed_variables=False and the Variable '{name}' "
                "was not passed to tape.watch()"
            )
        return (
            f"the Variable '{name}' was not read by any recorded op inside the tape's context "
            "(assign, assign_add and assign_sub are not recorded, nor ops under stop_recording())"
        )
    return (
        "it is a Tensor (not a Variable), and a tape only watches Tensors passed to tape.watch() "
        "(a Variable turns into a Tensor after `x = x + 1`)"
    )


def _describe(source: Tensor) -> str:
    if source._is_variable:
        return f"the Variable '{source.name}'"  # type: ignore[attr-defined]
    return f"the source Tensor of shape {source.shape}"


def _cut_name(op_type: str) -> str:
    if op_type == "StopGradient":
        return "tp.stop_gradient (StopGradient)"
    return f"the non-differentiable op '{op_type}'"
