"""Symbolic tensors and the record of a layer called on them (the functional API's graph).

``tp.Input`` gives a ``SymbolicTensor``: a shape whose first (batch) axis is ``None``, a dtype
and a name, and no values. ``Module.__call__`` hands a call whose arguments hold symbolic
tensors to ``record_call``, which runs the layer once on a small batch of zeros (building its
variables for the right input shape and learning its output shapes), then returns symbolic
outputs that remember the call as a ``Node``. ``tp.Model`` walks those nodes back from its
outputs and runs them in order. This module knows layers only by what it calls on them.
"""

from __future__ import annotations

import inspect
import itertools
import threading
from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core import nest
from tapefit.core.record import pause_recording
from tapefit.core.tensor import Tensor

__all__ = ["Node", "SymbolicTensor", "format_shape", "has_symbolic", "record_call"]

_node_ids = itertools.count()
_node_lock = threading.Lock()

# The sizes a probe batch gives the batch axis and any other None axis. Two probes with
# different sizes tell which output axes follow an input's unknown axes.
_PROBE_SIZES = (2, 3)


class SymbolicTensor:
    """A tensor of the functional API: a shape (``None`` for the batch axis) and a dtype, no values.

    Made by ``tp.Input`` and by calling a layer on symbolic tensors. Pass it to layers and
    to ``tp.Model``; it cannot be computed with directly.

    Attributes:
        shape: the shape, ``None`` for the batch axis and any other unknown axis.
        dtype: the NumPy dtype of the values it stands for.
        name: the name of the input (or of the layer output) it is.
    """

    def __init__(
        self,
        shape: tuple[int | None, ...],
        dtype: Any,
        name: str,
        node: Node | None = None,
        index: int = 0,
        has_mask: bool = False,
    ) -> None:
        self.shape = tuple(shape)
        self.dtype = _dt.as_dtype(dtype)
        self.name = name
        self.node = node  # the call that made it (None for an input)
        self.index = index  # its position among that call's outputs
        self.has_mask = has_mask  # the layer that made it gives a mask of its steps

    @property
    def ndim(self) -> int:
        """The number of axes."""
        return len(self.shape)

    def __repr__(self) -> str:
        return f"<SymbolicTensor shape={format_shape(self.shape)}, dtype={self.dtype.name}, name={self.name}>"

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError(
            f"the symbolic tensor '{self.name}' has no values: call layers on it "
            "(tp.layers.Add, Multiply, Lambda, ...) and build a tp.Model from the result"
        )

    def __bool__(self) -> bool:
        raise TypeError(f"the symbolic tensor '{self.name}' has no truth value (it holds no values)")


class Node:
    """One call of a layer on symbolic tensors: the layer, its arguments and its outputs.

    Attributes:
        layer: the layer (any ``Module``) called.
        args: the positional arguments, with ``SymbolicTensor`` leaves.
        kwargs: the keyword arguments, with ``SymbolicTensor`` leaves.
        inputs: the symbolic tensors among the arguments, in order.
        outputs: the call's result, with ``SymbolicTensor`` leaves.
        pass_mask: the mask of the first argument is passed to the call as ``mask=``.
        id: increases with every node made, so sorting by it orders nodes after their inputs.
    """

    def __init__(self, layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any], pass_mask: bool) -> None:
        self.layer = layer
        self.args = args
        self.kwargs = kwargs
        self.inputs = [v for v in nest.flatten((args, kwargs)) if isinstance(v, SymbolicTensor)]
        self.outputs: Any = None
        self.pass_mask = pass_mask
        with _node_lock:
            self.id = next(_node_ids)

    @property
    def flat_outputs(self) -> list[SymbolicTensor]:
        """The output symbolic tensors, in order."""
        return [v for v in nest.flatten(self.outputs) if isinstance(v, SymbolicTensor)]


def format_shape(shape: Any) -> str:
    """A shape as Keras prints it: ``(None, 4)``, ``(None, 3,)`` for one axis."""
    if isinstance(shape, tuple) and all(n is None or isinstance(n, int) for n in shape):
        dims = ["None" if n is None else str(n) for n in shape]
        return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
    if isinstance(shape, (list, tuple)):
        return "[" + ", ".join(format_shape(s) for s in shape) + "]"
    return str(shape)


def has_symbolic(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a call's arguments hold a ``SymbolicTensor`` (at the top or one container down)."""
    for value in itertools.chain(args, kwargs.values()):
        if isinstance(value, SymbolicTensor):
            return True
        if isinstance(value, (list, tuple)):
            if any(isinstance(v, SymbolicTensor) for v in value):
                return True
        elif isinstance(value, dict) and any(isinstance(v, SymbolicTensor) for v in value.values()):
            return True
    return False


def _map(fn: Any, structure: Any) -> Any:
    return nest.pack_sequence_as(structure, [fn(v) for v in nest.flatten(structure)])


def takes_mask(layer: Any) -> bool:
    """Whether the layer's ``call`` has a ``mask`` parameter."""
    call = getattr(type(layer), "call", None)
    try:
        return call is not None and "mask" in inspect.signature(call).parameters
    except (TypeError, ValueError):
        return False


def _probe(layer: Any, args: Any, kwargs: Any, pass_mask: bool, size: int) -> tuple[Any, Any]:
    """Calls ``layer`` on zeros in place of the symbolic tensors (``size`` for unknown axes),
    with all-true masks where they have masks; returns its outputs and its output mask."""

    def zeros(value: Any) -> Any:
        if not isinstance(value, SymbolicTensor):
            return value
        return Tensor(np.zeros(tuple(size if n is None else n for n in value.shape), dtype=value.dtype))

    def ones_mask(value: Any) -> Any:
        if not isinstance(value, SymbolicTensor) or not value.has_mask:
            return None
        steps = tuple(size if n is None else n for n in value.shape[:2])
        return Tensor(np.ones(steps, dtype=bool))

    concrete_args, concrete_kwargs = _map(zeros, args), _map(zeros, kwargs)
    first_mask = _map(ones_mask, args[0]) if args else None
    if all(m is None for m in nest.flatten(first_mask)):
        first_mask = None
    if pass_mask:
        concrete_kwargs["mask"] = first_mask
    with pause_recording():
        outputs = layer(*concrete_args, **concrete_kwargs)
        compute_mask = getattr(layer, "compute_mask", None)
        first = concrete_args[0] if concrete_args else None
        out_mask = compute_mask(first, first_mask) if callable(compute_mask) else None
    return outputs, out_mask


def _input_shapes(args: Any) -> str:
    shapes = [format_shape(v.shape) for v in nest.flatten(args) if isinstance(v, SymbolicTensor)]
    return shapes[0] if len(shapes) == 1 else "[" + ", ".join(shapes) + "]"


def record_call(layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Records ``layer(*args, **kwargs)`` on symbolic tensors and returns symbolic outputs.

    The layer runs on a batch of zeros (twice when an input has unknown axes besides the
    batch), which builds its variables and gives the output shapes, dtypes and mask.

    Raises:
        ValueError: the layer refuses the inputs' shapes; the message names the layer and
            the shapes it was given, then the layer's own words.
    """
    first = args[0] if args else None
    firsts = [v for v in nest.flatten(first) if isinstance(v, SymbolicTensor)]
    pass_mask = "mask" not in kwargs and takes_mask(layer) and any(v.has_mask for v in firsts)
    node = Node(layer, args, kwargs, pass_mask)
    unknown = any(None in v.shape[1:] for v in node.inputs)
    results = []
    for size in _PROBE_SIZES[: 2 if unknown else 1]:
        try:
            results.append(_probe(layer, args, dict(kwargs), pass_mask, size))
        except (ValueError, TypeError, IndexError) as error:
            message = str(error).split("\n")[0]
            raise ValueError(
                f"{type(layer).__name__} '{layer.name}' cannot be called on inputs of shape "
                f"{_input_shapes(args)}: {message}"
            ) from None
    outputs, out_mask = results[0]
    flat = nest.flatten(outputs)
    other = nest.flatten(results[1][0]) if len(results) > 1 else flat
    masks = nest.flatten(out_mask) if nest.is_nested(out_mask) else [out_mask] * len(flat)
    if len(masks) != len(flat):
        masks = [masks[0]] * len(flat)
    symbolic = []
    for index, (value, again, value_mask) in enumerate(zip(flat, other, masks)):
        if not isinstance(value, Tensor):
            raise TypeError(
                f"{type(layer).__name__} '{layer.name}' returned {type(value).__name__}, not tensors; "
                "the functional API needs layers that return tensors"
            )
        shape = tuple(
            None if i == 0 or n != m else int(n) for i, (n, m) in enumerate(zip(value.shape, again.shape))
        )
        symbolic.append(
            SymbolicTensor(shape, value.dtype, f"{layer.name}_{index}", node, index, value_mask is not None)
        )
    node.outputs = nest.pack_sequence_as(outputs, symbolic) if nest.is_nested(outputs) else symbolic[0]
    layer._output_shape = _map(lambda t: t.shape, node.outputs)
    return node.outputs
