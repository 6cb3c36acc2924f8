"""``GradientTape``: records ops on watched tensors and runs them backwards.

The backward pass is built from tapefit ops, so an outer tape that watches the
same tensors records it: nested tapes give higher derivatives. When nothing can
record it (the common case: no other tape recording, no ``tp.function`` trace),
the same gradient functions run in a lean walk that keeps the gradients as
ndarrays between ops and records nothing (``_run_fast``).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

from tapefit.core import nest
from tapefit.core.explain import explain
from tapefit.core.graph import Node, downstream, node_fields, upstream
from tapefit.core.ops import add, ones_like, reduce_sum, reshape, stack, zeros, zeros_like
from tapefit.core.record import Op, active_tapes, pop_tape, push_tape, recording
from tapefit.core.registry import _GRADIENTS, _WORKING, get_gradient
from tapefit.core.tensor import Tensor, Variable, _traces, _wrap

logger = logging.getLogger("tapefit")

# getrefcount of a gradient Tensor held only by the backward pass's dict (see _accumulate).
_SOLE_TENSOR_REFS = 3

NON_PERSISTENT_MESSAGE = (
    "A non-persistent GradientTape can only be used to compute one set of gradients (or jacobians)"
)


class UnconnectedGradients(enum.Enum):
    """What ``gradient`` returns for a source the target does not depend on."""

    NONE = "none"
    ZERO = "zero"


def _float(t: Tensor) -> bool:
    return t._value.dtype.kind == "f"


class GradientTape:
    """Records operations for automatic differentiation, as ``tf.GradientTape``.

    Args:
        persistent: allow more than one ``gradient``/``jacobian`` call.
        watch_accessed_variables: watch every trainable Variable read inside the
            context automatically.
    """

    _paused: bool  # set by reset()

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True) -> None:
        self._persistent = bool(persistent)
        self._watch_accessed = bool(watch_accessed_variables)
        self._active = False
        self.reset()

    # -- recording -------------------------------------------------------

    def __enter__(self) -> GradientTape:
        if self._active:
            raise RuntimeError("this GradientTape is already recording; tapes cannot be re-entered")
        if self._released:
            # A non-persistent tape that has answered starts afresh, as in TensorFlow, so one
            # tape object can serve every step of a loop.
            self.reset()
        push_tape(self)
        self._active = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        pop_tape(self)
        self._active = False

    def _watches(self, t: Tensor) -> bool:
        """Whether ``t`` is watched; reading a trainable Variable watches it when allowed."""
        if t._id in self._watched:
            return True
        if t._is_variable and self._watch_accessed and t._trainable:  # type: ignore[attr-defined]
            self._watch_variable(t)  # type: ignore[arg-type]
            return True
        return False

    def _watch_variable(self, v: Variable) -> None:
        self._watched.add(v._id)
        self._variables.setdefault(v._id, v)

    def watch(self, tensor: Any) -> None:
        """Watches a Tensor or Variable, or every one in a nested list/tuple/dict."""
        for i, t in enumerate(nest.flatten(tensor)):
            if not isinstance(t, Tensor):
                raise TypeError(
                    f"watch() takes Tensors and Variables, got {type(t).__name__} "
                    f"(leaf {i}); convert with tp.constant first"
                )
            if not _float(t):
                logger.warning(
                    "The dtype of the watched tensor must be floating (e.g. tp.float32), got %s",
                    t.dtype.name,
                )
            if t._is_variable:
                self._watch_variable(t)  # type: ignore[arg-type]
            else:
                self._watched.add(t._id)
            self._explicit.add(t._id)

    def watched_variables(self) -> tuple[Variable, ...]:
        """The Variables watched so far, in first-access order."""
        return tuple(self._variables.values())

    @contextlib.contextmanager
    def stop_recording(self) -> Iterator[None]:
        """Suspends recording on this tape inside the ``with`` block."""
        if not self._active:
            raise RuntimeError("stop_recording() is only meaningful inside the tape's with block")
        paused = self._paused
        self._paused = True
        try:
            yield
        finally:
            self._paused = paused

    def reset(self) -> None:
        """Clears everything recorded and watched, as a fresh tape."""
        self._entries: list[Op] = []
        self._watched: set[int] = set()
        self._explicit: set[int] = set()
        self._variables: dict[int, Variable] = {}
        self._paused = False
        self._released = False
        self._skeleton: list[tuple[Any, ...]] | None = None

    def _release(self) -> None:
        """Drops the recorded values; keeps the graph's shape for ``explain``."""
        # Plain tuples of fields the ops already hold, made in C (no Python per op);
        # explain() turns them into Nodes only when asked.
        self._skeleton = list(map(node_fields, self._entries))
        self._entries = []
        self._released = True
        self._paused = True

    # -- gradients -------------------------------------------------------

    def gradient(
        self,
        target: Any,
        sources: Any,
        output_gradients: Any = None,
        unconnected_gradients: UnconnectedGradients | str = UnconnectedGradients.NONE,
        stop_gradients: Any = None,
    ) -> Any:
        """Gradients of the sum of ``target``'s elements with respect to ``sources``.

        Args:
            target: a Tensor or a nested structure of them (all elements summed).
            sources: a Tensor/Variable or a nested structure of them.
            output_gradients: upstream gradients, with ``target``'s structure.
            unconnected_gradients: ``NONE`` (or ``"none"``) gives ``None`` for a
                source the target does not depend on, ``ZERO`` gives zeros.
            stop_gradients: tensors treated as constants from there back.

        Returns:
            The gradients, in the structure of ``sources``.
        """
        unconnected = UnconnectedGradients(unconnected_gradients)
        targets = self._check_targets(target)
        flat_sources = self._check_sources(sources)
        if output_gradients is None:
            upstream: list[Any] = [None] * len(targets)
        else:
            upstream = self._check_output_gradients(output_gradients, target, targets)
        stops = self._check_stops(stop_gradients)
        self._check_usable()
        try:
            plan = self._plan(targets, flat_sources, stops)
            grads = self._run(plan, targets, upstream, flat_sources)
        finally:
            if not self._persistent:
                self._release()
        return nest.pack_sequence_as(sources, self._fill(grads, flat_sources, unconnected))

    def jacobian(
        self,
        target: Any,
        sources: Any,
        unconnected_gradients: UnconnectedGradients | str = UnconnectedGradients.NONE,
        parallel_iterations: int | None = None,
        experimental_use_pfor: bool = True,
    ) -> Any:
        """The full Jacobian of ``target``: shape ``target.shape + source.shape`` per source.

        ``parallel_iterations`` and ``experimental_use_pfor`` are accepted for TensorFlow
        code and change nothing: the rows are computed one after the other.
        """
        unconnected = UnconnectedGradients(unconnected_gradients)
        (target,) = self._check_targets([_single(target, "target", "jacobian")])
        flat_sources = self._check_sources(sources)
        self._check_usable()
        try:
            plan = self._plan([target], flat_sources, set())
            rows = [
                self._run(plan, [target], [_one_hot_like(target, j)], flat_sources)
                for j in range(target.size)
            ]
            if not rows:  # an empty target: one pass with an empty seed tells which sources connect
                rows = [
                    self._run(plan, [target], [_wrap(np.zeros(target.shape, target.dtype))], flat_sources)
                ]
        finally:
            if not self._persistent:
                self._release()
        result = [
            _stack_rows([row[k] for row in rows], target.shape, src, unconnected)
            for k, src in enumerate(flat_sources)
        ]
        return nest.pack_sequence_as(sources, result)

    def batch_jacobian(
        self,
        target: Tensor,
        source: Tensor,
        unconnected_gradients: UnconnectedGradients | str = UnconnectedGradients.NONE,
        parallel_iterations: int | None = None,
        experimental_use_pfor: bool = True,
    ) -> Tensor | None:
        """Per-example Jacobians: shape ``(batch,) + target.shape[1:] + source.shape[1:]``.

        Assumes, as TensorFlow does, that row ``i`` of ``target`` depends only on row ``i`` of ``source``.
        ``parallel_iterations`` and ``experimental_use_pfor`` are accepted for TensorFlow code
        and change nothing.
        """
        unconnected = UnconnectedGradients(unconnected_gradients)
        (target,) = self._check_targets([_single(target, "target", "batch_jacobian")])
        (source,) = self._check_sources([_single(source, "source", "batch_jacobian")])
        if target.ndim < 1 or source.ndim < 1 or target.shape[0] != source.shape[0]:
            raise ValueError(
                f"batch_jacobian needs target and source with the same first (batch) dimension, "
                f"got shapes {target.shape} and {source.shape}"
            )
        self._check_usable()
        batch = target.shape[0]
        inner = int(np.prod(target.shape[1:], dtype=np.int64))
        try:
            plan = self._plan([target], [source], set())
            cols = []
            for j in range(inner):
                seed = np.zeros((batch, inner), target.dtype)
                seed[:, j] = 1
                cols.append(self._run(plan, [target], [_wrap(seed.reshape(target.shape))], [source])[0])
        finally:
            if not self._persistent:
                self._release()
        shape = (batch, *target.shape[1:], *source.shape[1:])
        if all(c is None for c in cols):
            return zeros(shape, source.dtype) if unconnected is UnconnectedGradients.ZERO else None
        cols = [zeros(source.shape, source.dtype) if c is None else c for c in cols]
        return reshape(stack(cols, axis=1), shape)

    # -- the backward walk -----------------------------------------------

    def _check_usable(self) -> None:
        if self._released:
            raise RuntimeError(NON_PERSISTENT_MESSAGE)

    def _check_targets(self, target: Any) -> list[Tensor]:
        targets = nest.flatten(target)
        for t in targets:
            if not isinstance(t, Tensor):
                raise TypeError(
                    f"gradient target must be a Tensor, got {type(t).__name__}: computations outside "
                    "tapefit ops (for example in NumPy) are not recorded by the tape"
                )
            if not _float(t):
                logger.warning(
                    "The dtype of the target tensor must be floating (e.g. tp.float32) when calling "
                    "GradientTape.gradient, got %s",
                    t.dtype.name,
                )
        return targets

    def _check_sources(self, sources: Any) -> list[Tensor]:
        flat = nest.flatten(sources)
        for i, s in enumerate(flat):
            if not isinstance(s, Tensor):
                raise TypeError(
                    f"gradient sources must be Tensors or Variables, got {type(s).__name__} at "
                    f"position {i} of the flattened sources"
                )
            if not _float(s):
                logger.warning(
                    "The dtype of the source tensor must be floating (e.g. tp.float32) when calling "
                    "GradientTape.gradient, got %s",
                    s.dtype.name,
                )
        return flat

    @staticmethod
    def _check_stops(stop_gradients: Any) -> set[int]:
        # ``is None``, not truthiness: a single scalar Tensor equal to 0 is a valid stop.
        if stop_gradients is None:
            return set()
        stops = set()
        for i, t in enumerate(nest.flatten(stop_gradients)):
            if not isinstance(t, Tensor):
                raise TypeError(
                    f"stop_gradients must hold Tensors or Variables, got {type(t).__name__} at "
                    f"position {i} of the flattened stop_gradients"
                )
            stops.add(t._id)
        return stops

    def _check_output_gradients(
        self, output_gradients: Any, target: Any, targets: list[Tensor]
    ) -> list[Tensor | None]:
        flat = nest.flatten(output_gradients)
        if len(flat) != len(targets):
            raise ValueError(
                f"output_gradients must have the structure of target: {len(targets)} tensors, got {len(flat)}"
            )
        checked: list[Tensor | None] = []
        for i, (g, t) in enumerate(zip(flat, targets)):
            if g is None:
                checked.append(None)
                continue
            g = g if isinstance(g, Tensor) else _wrap(np.asarray(g, dtype=t.dtype))
            if g.shape != t.shape:
                raise ValueError(
                    f"output_gradients[{i}] has shape {g.shape}, but its target has shape {t.shape}"
                )
            if g.dtype != t.dtype:
                raise TypeError(
                    f"output_gradients[{i}] has dtype {g.dtype.name}, but its target has dtype {t.dtype.name}"
                )
            checked.append(g)
        return checked

    def _plan(
        self, targets: list[Tensor], sources: list[Tensor], stops: set[int]
    ) -> tuple[list[Op], set[int], set[int]]:
        """The recorded ops on a path from a source to a target, the ids downstream of a
        source, and the ids of ``stop_gradients``.

        The fast walk skips the pass up from the targets: it runs an op only when one of its
        outputs has a gradient, which already confines it to the ops that lead to a target.
        """
        if self._unrecorded():  # graph.downstream without the cut ops' list
            reach = {s._id for s in sources if _float(s)}
            if not stops and len(reach) == len(sources) and self._roots() <= reach:
                # Every watched tensor is a source (the training step's case: the variables
                # the forward pass read): each record has a watched input, and the watched
                # set is already everything downstream of them, with the sources this tape
                # did not watch (another tape's record may reach them) added.
                return self._entries, self._watched | reach, stops
            path = []
            for op in self._entries:
                if not reach.isdisjoint(op.input_ids):
                    path.append(op)
                    reach.update(op.output_ids)
            return path, reach, stops
        back = upstream(self._entries, {t._id for t in targets if _float(t)}, stops, through_cuts=False)[0]
        path, reach, _ = downstream(back, {s._id for s in sources if _float(s)})
        return path, reach, stops

    def _roots(self) -> set[int]:
        """The ids this tape watches because it was told to or a Variable was read."""
        return self._explicit | self._variables.keys()

    def _run(
        self,
        plan: tuple[list[Op], set[int], set[int]],
        targets: list[Tensor],
        upstream: list[Tensor | None],
        sources: list[Tensor],
    ) -> list[Tensor | None]:
        if self._unrecorded():
            return self._run_fast(plan, targets, upstream, sources)
        path, reach, stops = plan
        keep = {s._id for s in sources}
        grads: dict[int, Tensor] = {}
        for t, g in zip(targets, upstream):
            if _float(t):
                previous = grads.get(t._id)
                g = ones_like(t) if g is None else g
                grads[t._id] = g if previous is None else add(previous, g)
        # A non-persistent tape is done once it answers; a persistent one inside its
        # context records its own backward pass, for higher derivatives.
        paused = self._paused
        if not self._persistent:
            self._paused = True
        try:
            for op in reversed(path):
                dys = self._output_gradients(op, grads, keep, stops)
                if dys is None:
                    continue
                grad_fn = op.grad_fn or get_gradient(op.type)
                if grad_fn is None:
                    continue
                input_grads = grad_fn(op, *dys)
                if not isinstance(input_grads, (tuple, list)):
                    input_grads = (input_grads,)
                if len(input_grads) != len(op.input_ids):
                    raise ValueError(
                        f"the gradient function of '{op.type}' returned {len(input_grads)} gradients "
                        f"for {len(op.input_ids)} inputs"
                    )
                needs, ids = op.needs_grad, op.input_ids
                for i, g in enumerate(input_grads):
                    # needs_grad is False for integer inputs and inputs no tape watched.
                    if g is None or not needs[i] or ids[i] not in reach:
                        continue
                    value = g._value if g.__class__ is Tensor else None
                    if (
                        value is None
                        or value.shape != op.input_shapes[i]
                        or value.dtype != op.input_dtypes[i]
                    ):
                        g = _fit_gradient(g, op, i)
                    key = ids[i]
                    grads[key] = _accumulate(grads, key, g) if key in grads else g
        finally:
            self._paused = paused
        return [grads.get(s._id) if _float(s) else None for s in sources]

    def _unrecorded(self) -> bool:
        """Whether no tape can record this backward pass and no ``tp.function`` traces it.

        This tape records its own backward only while persistent and recording (higher
        derivatives from one tape); any other recording tape, in any thread, may watch a
        value the gradient functions read, so it sends the walk the recorded way.
        """
        if _traces:
            return False
        for tape in active_tapes:
            if not tape._paused and (tape is not self or self._persistent):
                return False
        return True

    def _run_fast(
        self,
        plan: tuple[list[Op], set[int], set[int]],
        targets: list[Tensor],
        upstream: list[Tensor | None],
        sources: list[Tensor],
    ) -> list[Tensor | None]:
        """``_run`` when nothing records: the same gradient functions, the same sums in the
        same order (so the same bits), with the walk's bookkeeping on ndarrays.

        Between ops a gradient is an ndarray, wrapped into a Tensor only to call a gradient
        function. A sum of two contributions is a new array that only this walk holds, so
        later contributions are added into it in place; no other array is ever written.
        """
        path, reach, stops = plan
        keep = {s._id for s in sources}
        grads: dict[int, np.ndarray] = {}
        owned: set[int] = set()  # ids whose array this walk made by a sum
        for t, g in zip(targets, upstream):
            if _float(t):
                _add_into(grads, owned, t._id, np.ones(t.shape, t.dtype) if g is None else g._value)
        gradients = _GRADIENTS
        tensor, new = Tensor, Tensor.__new__
        paused = self._paused
        self._paused = True
        try:
            for op in reversed(path):
                oids = op.output_ids
                if len(oids) == 1 and not stops:
                    oid = oids[0]
                    dy = grads.get(oid)
                    if dy is None:
                        continue
                    if oid not in keep:
                        del grads[oid]
                    grad_fn = op.grad_fn or gradients.get(op.type) or get_gradient(op.type)
                    if grad_fn is None:
                        continue
                    t = new(tensor)
                    t._value = dy
                    input_grads = grad_fn(op, t)
                else:
                    arrays = _output_arrays(op, grads, keep, stops)
                    if arrays is None:
                        continue
                    grad_fn = op.grad_fn or gradients.get(op.type) or get_gradient(op.type)
                    if grad_fn is None:
                        continue
                    input_grads = grad_fn(op, *[None if a is None else _wrap(a) for a in arrays])
                if input_grads.__class__ is not tuple:
                    input_grads = (
                        (input_grads,) if input_grads.__class__ is tensor else _as_tuple(input_grads)
                    )
                ids = op.input_ids
                if len(input_grads) != len(ids):
                    raise ValueError(
                        f"the gradient function of '{op.type}' returned {len(input_grads)} gradients "
                        f"for {len(ids)} inputs"
                    )
                needs, shapes, dtypes = op.needs_grad, op.input_shapes, op.input_dtypes
                for i, g in enumerate(input_grads):
                    if g is None or not needs[i] or ids[i] not in reach:
                        continue
                    value = g._value if g.__class__ is tensor else None
                    # `is` first: NumPy's built-in dtypes are singletons, and != costs more.
                    if (
                        value is None
                        or value.shape != shapes[i]
                        or (value.dtype is not dtypes[i] and value.dtype != dtypes[i])
                    ):
                        value = _fit_gradient(g, op, i)._value
                    key = ids[i]
                    if key in grads:
                        _add_into(grads, owned, key, value)
                    else:
                        grads[key] = value
        finally:
            self._paused = paused
        return [_wrap(grads[s._id]) if _float(s) and s._id in grads else None for s in sources]

    @staticmethod
    def _output_gradients(
        op: Op, grads: dict[int, Tensor], keep: set[int], stops: set[int]
    ) -> list[Tensor] | None:
        """The upstream gradients of ``op``'s outputs (zeros for the missing ones, ``None`` for
        a missing working output: see ``working_outputs``), or ``None`` when none arrived;
        drops them from ``grads`` unless they are sources.

        An output in ``stops`` passes nothing back: the op is on the path only through its
        other outputs (``a, b = split(x)`` with ``b`` stopped).
        """
        dys = [grads.get(oid) for oid in op.output_ids]
        if stops:
            dys = [None if oid in stops else dy for oid, dy in zip(op.output_ids, dys)]
        if all(dy is None for dy in dys):
            return None
        working = _WORKING.get(op.type, len(dys))
        filled: list[Tensor] = []
        for k, oid in enumerate(op.output_ids):
            dy = dys[k]
            if dy is None and k < working:
                dy = zeros(op.output_shapes[k], op.output_dtypes[k])
            filled.append(dy)  # type: ignore[arg-type]  # None only for working outputs
            if oid not in keep:
                grads.pop(oid, None)
        return filled

    @staticmethod
    def _fill(
        grads: list[Tensor | None], sources: list[Tensor], unconnected: UnconnectedGradients
    ) -> list[Any]:
        if unconnected is UnconnectedGradients.NONE:
            return grads
        return [zeros_like(s) if g is None else g for g, s in zip(grads, sources)]

    # -- explain ---------------------------------------------------------

    def explain(self, target: Any, source: Any) -> str | None:
        """Why ``gradient(target, source)`` is ``None``, in one sentence; ``None`` if it is not.

        Where ``gradient`` would raise ``LookupError`` (an op on the path has no registered
        gradient) the sentence says so instead.

        The answer is read off what the tape recorded, so it works before and after a
        non-persistent tape has answered its ``gradient`` call. A nested ``target`` is
        differentiated as the sum of its tensors, as in ``gradient``: ``None`` if any of
        them has a gradient, else the first one's reason.
        """
        return explain(self, target, source)

    def _nodes(self) -> list[Any]:
        """The recorded ops, or what a released tape kept of them, for ``explain``."""
        if self._released and self._skeleton is not None:
            return [Node(*fields) for fields in self._skeleton]
        return self._entries


def _single(value: Any, role: str, method: str) -> Any:
    """``value`` itself, unless it is a structure where ``method`` takes one tensor."""
    if nest.is_nested(value):
        raise TypeError(
            f"{method} takes one Tensor as its {role}, got a {type(value).__name__}; "
            f"call {method} once per {role} (or tp.stack them)"
        )
    return value


def _as_tuple(input_grads: Any) -> tuple[Any, ...]:
    """A gradient function's result as a tuple: it may return a list, a tuple subclass (a
    namedtuple), or one gradient."""
    return tuple(input_grads) if isinstance(input_grads, (list, tuple)) else (input_grads,)


def _add_into(grads: dict[int, np.ndarray], owned: set[int], key: int, value: np.ndarray) -> None:
    """``grads[key] += value`` for the fast walk: in place only into an array the walk made.

    The first sum makes a new array (``add``'s kernel, so the bits match the recorded
    walk's ``add``); the arrays it started from may be held by Tensors, users or other keys.
    """
    total = grads.get(key)
    if total is None:
        grads[key] = value
    elif key in owned:
        np.add(total, value, out=total)
    else:
        total = np.add(total, value)
        grads[key] = total if total.__class__ is np.ndarray else np.asarray(total)
        owned.add(key)


def _output_arrays(
    op: Op, grads: dict[int, np.ndarray], keep: set[int], stops: set[int]
) -> list[np.ndarray | None] | None:
    """``_output_gradients`` on ndarrays, for the fast walk."""
    oids = op.output_ids
    dys = [None if oid in stops else grads.get(oid) for oid in oids]
    if all(dy is None for dy in dys):
        return None
    working = _WORKING.get(op.type, len(dys))
    for k, oid in enumerate(oids):
        if dys[k] is None and k < working:
            dys[k] = np.zeros(op.output_shapes[k], op.output_dtypes[k])
        if oid not in keep:
            grads.pop(oid, None)
    return dys


def _accumulate(grads: dict[int, Tensor], key: int, g: Tensor) -> Tensor:
    """``grads[key] + g``, written into ``grads[key]``'s buffer when no one else can see it.

    Only when no tape records (a recorded backward pass needs the ``Add`` op), no
    ``tp.function`` traces (it replays ops, not this NumPy call), and the
    running total is a Tensor held by ``grads`` alone around an array held by it alone:
    not a view, not shared with another gradient (``add``'s gradient passes ``dy`` to both
    inputs), not a value a user or a saved op holds.
    """
    total = grads[key]
    value = total._value
    if (
        not recording()
        and not _traces  # a trace replays ops only: the sum must be one
        and total.__class__ is Tensor
        and g.__class__ is Tensor
        and value.base is None
        and value.flags.writeable
        and value.shape == g._value.shape
        and value.dtype == g._value.dtype
        # grads, ``total`` and getrefcount's argument; the array: ``total``, ``value``, the argument
        and sys.getrefcount(total) <= _SOLE_TENSOR_REFS
        and sys.getrefcount(value) <= 3
    ):
        np.add(value, g._value, out=value)
        return total
    return add(total, g)


def _fit_gradient(g: Any, op: Op, i: int) -> Tensor:
    """Undoes broadcasting (sums ``g`` to the input's shape) and checks shape and dtype."""
    if not isinstance(g, Tensor):
        g = _wrap(np.asarray(g, dtype=op.input_dtypes[i]))
    shape = op.input_shapes[i]
    if g.shape != shape:
        extra = g.ndim - len(shape)
        if extra < 0 or any(n not in (1, g.shape[extra + k]) for k, n in enumerate(shape)):
            raise ValueError(
                f"the gradient function of '{op.type}' returned shape {g.shape} for input {i}, "
                f"whose shape is {shape}"
            )
        summed = [k for k, n in enumerate(shape) if n == 1 and g.shape[extra + k] != 1]
        g = reshape(reduce_sum(g, axis=[*range(extra), *(extra + k for k in summed)]), shape)
    if g.dtype != op.input_dtypes[i]:
        raise TypeError(
            f"the gradient function of '{op.type}' returned dtype {g.dtype.name} for input {i}, "
            f"whose dtype is {op.input_dtypes[i].name}"
        )
    return g


def _one_hot_like(target: Tensor, j: int) -> Tensor:
    upstream = np.zeros(target.size, target.dtype)
    upstream[j] = 1
    return _wrap(upstream.reshape(target.shape))


def _stack_rows(
    rows: list[Tensor | None],
    target_shape: tuple[int, ...],
    source: Tensor,
    unconnected: UnconnectedGradients,
) -> Tensor | None:
    shape = target_shape + source.shape
    if all(r is None for r in rows):
        return zeros(shape, source.dtype) if unconnected is UnconnectedGradients.ZERO else None
    if not math.prod(target_shape):
        return zeros(shape, source.dtype)  # connected, but no rows to stack
    filled = [zeros(source.shape, source.dtype) if r is None else r for r in rows]
    return reshape(stack(filled, axis=0), shape)
