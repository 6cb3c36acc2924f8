"""Symbolic tensors and the record of a layer called on them (the functional API's graph).

``tp.Input`` gives a ``SymbolicTensor``: a shape whose first (batch) axis is ``None``, a dtype
and a name, and no values. ``Module.__call__`` hands a call whose arguments hold symbolic
tensors to ``record_call``, which works out the outputs without data, then returns symbolic
outputs that remember the call as a ``Node``. ``tp.Model`` walks those nodes back from its
outputs and runs them in order.

A layer with a shape rule (its own ``compute_output_shape``, or ``compute_output_spec`` for
one with several inputs or inner layers) is built with the symbolic shape and asked for its
outputs: nothing of the input's size is allocated. Only a layer without one (a user's layer,
``Lambda``) is probed: run on zeros of the smallest batch its shape allows, with nothing kept
of the run (random draws, moved variables, tapes). This is the one place that probes; the
functional API, ``Sequential``, model files and restore all come here. This module knows
layers only by what it calls on them.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core import nest
from tapefit.core import random as _random
from tapefit.core.record import pause_recording
from tapefit.core.tensor import Tensor

__all__ = [
    "Node",
    "SymbolicTensor",
    "format_shape",
    "has_rule",
    "has_symbolic",
    "mask_marker",
    "record_call",
    "symbolic_outputs",
]

_node_ids = itertools.count()
_node_lock = threading.Lock()

# The sizes a probe batch may give the batch axis and any other None axis, smallest first: a
# layer that refuses one is tried on the next. Two probes with different sizes tell which
# output axes follow an input's unknown axes (a split in two takes 2 and 4).
_PROBE_SIZES = (1, 2, 3, 4, 6, 8, 12, 16)


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
        self.dtype = _dt.input_dtype(dtype)
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


def mask_marker(like: SymbolicTensor) -> SymbolicTensor:
    """A symbolic stand-in for the mask of ``like``'s steps: what a layer's ``compute_mask`` is
    given, and may return, when the inputs are symbolic (only whether it is ``None`` counts)."""
    return SymbolicTensor(like.shape[:2], _dt.bool, f"{like.name}_mask")


def _defined_by(cls: type, attribute: str) -> type | None:
    for klass in cls.__mro__:
        if attribute in klass.__dict__:
            return klass
    return None


def _rule(layer: Any) -> str | None:
    """``"spec"`` or ``"shape"``: the layer's class gives ``compute_output_spec`` or
    ``compute_output_shape``, written for the ``call`` it runs (by the class that defines that
    ``call`` or one below it, or by tapefit's own classes, whose rules and calls go together);
    a user's subclass that runs a ``call`` of its own under an inherited rule has none.
    ``None``: no rule."""
    cls = type(layer)
    runners = [k for k in (_defined_by(cls, "call"), _defined_by(cls, "__call__")) if k is not None]
    runner = min(runners, key=cls.__mro__.index) if runners else object
    own = runner.__module__.startswith("tapefit.")
    for name, kind in (("compute_output_spec", "spec"), ("compute_output_shape", "shape")):
        owner = _defined_by(cls, name)
        if (
            owner is not None
            and (own or issubclass(owner, runner))
            and not getattr(owner.__dict__[name], "_no_rule", False)
        ):
            return kind
    return None


def has_rule(layer: Any) -> bool:
    """Whether the layer says what it gives for symbolic inputs (it is then never probed)."""
    return _rule(layer) is not None


def _spec(value: Any) -> Any:
    """The ``_build_input`` of a first argument: ``(shape with the batch axis None, dtype name)``
    of each symbolic tensor, in its nesting (what a model file rebuilds from)."""
    if isinstance(value, SymbolicTensor):
        return ((None, *value.shape[1:]), value.dtype.name)
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _spec(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_spec(v) for v in value]
    return None


def _shape(value: Any) -> Any:
    """The symbolic shape of a first argument, nested as it is (``None`` for anything else)."""
    if isinstance(value, SymbolicTensor):
        return value.shape
    if isinstance(value, dict):
        try:
            return nest.pack_sequence_as(value, [_shape(v) for v in nest.flatten(value)])
        except TypeError:
            return None
    if isinstance(value, (list, tuple)):
        return (
            type(value)(_shape(v) for v in value) if isinstance(value, tuple) else [_shape(v) for v in value]
        )
    return None


def _mark_first_call(layer: Any, first: Any, shape: Any) -> None:
    """Keeps what the first call keeps (the input spec a model file rebuilds from, its shape)."""
    if layer.__dict__.get("_build_input") is None:
        layer._build_input = _spec(first)
    if layer.__dict__.get("_build_input_shape") is None:
        layer._build_input_shape = shape


def _build(layer: Any, first: Any) -> None:
    """Builds a layer with a shape rule for the symbolic shape of its first argument."""
    if layer._built:
        return
    shape = _shape(first)
    _mark_first_call(layer, first, shape)
    layer.build(shape)
    layer.__dict__["_built"] = True


def _concrete_shape(value: Any) -> Any:
    """The shape of a probe's first argument, nested as it is."""
    if isinstance(value, Tensor):
        return tuple(value.shape)
    if isinstance(value, dict):
        try:
            return nest.pack_sequence_as(value, [_concrete_shape(v) for v in nest.flatten(value)])
        except TypeError:
            return None
    if isinstance(value, (list, tuple)):
        shapes = [_concrete_shape(v) for v in value]
        return tuple(shapes) if isinstance(value, tuple) else shapes
    return None


def _is_shape(value: Any) -> bool:
    return isinstance(value, (tuple, list)) and all(
        n is None or (isinstance(n, (int, np.integer)) and not isinstance(n, bool)) for n in value
    )


def _output_dtype(layer: Any, first: Any) -> np.dtype:
    """The layer's compute dtype, or the inputs' for a layer that only moves or merges values."""
    if getattr(layer, "_keeps_input_dtype", False):
        dtypes = [v.dtype for v in nest.flatten(first) if isinstance(v, SymbolicTensor)]
        if dtypes:
            return np.result_type(*dtypes)
    return _dt.as_dtype(getattr(layer, "dtype", None) or _dt.float32)


def _from_rule(layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any], kind: str) -> Any:
    first = args[0] if args else None
    if kind == "spec":
        if not layer._built:
            _mark_first_call(layer, first, _shape(first))
        outputs = layer.compute_output_spec(*args, **kwargs)
        layer.__dict__["_built"] = True
        return outputs
    _build(layer, first)
    shapes = layer.compute_output_shape(_shape(first))
    dtype = _output_dtype(layer, first)

    def make(shape: Any) -> Any:
        if _is_shape(shape):
            return SymbolicTensor(tuple(shape), dtype, layer.name)
        return [make(s) for s in shape]

    return make(shapes)


def _first_masks(args: tuple[Any, ...]) -> Any:
    """The markers of the first argument's masks, in its nesting; ``None`` without any."""
    if not args:
        return None
    marks = _map(lambda v: mask_marker(v) if isinstance(v, SymbolicTensor) and v.has_mask else None, args[0])
    return None if all(m is None for m in nest.flatten(marks)) else marks


@contextlib.contextmanager
def _no_trace(layer: Any) -> Iterator[None]:
    """Runs a probe so that nothing of it stays: the random generators are put back, the
    layer's variables hold their arrays again, and no tape records."""
    state = _random.get_state()
    # Holding each array makes assign swap in a new one rather than write into it.
    saved = [(v, v._value) for v in getattr(layer, "variables", ())]
    try:
        with pause_recording():
            yield
    finally:
        _random.set_state(state)
        for variable, value in saved:
            variable._value = value


def _probe(layer: Any, args: Any, kwargs: Any, pass_mask: bool, size: int) -> tuple[Any, Any]:
    """Calls ``layer`` on zeros in place of the symbolic tensors (``size`` for unknown axes),
    with all-true masks where they have masks; returns its outputs and its output mask. A layer
    not yet built is built first, for the shape of those zeros (its weights are kept)."""

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
    first = concrete_args[0] if concrete_args else None
    if not layer._built and not getattr(type(layer).__call__, "_tapefit_call_override", False):
        # Built outside the probe, as a first call builds: its weights and their draws stay.
        _mark_first_call(layer, args[0] if args else None, _concrete_shape(first))
        layer.build(_concrete_shape(first))
        layer.__dict__["_built"] = True
    with _no_trace(layer):
        outputs = layer(*concrete_args, **concrete_kwargs)
        compute_mask = getattr(layer, "compute_mask", None)
        out_mask = compute_mask(first, first_mask) if callable(compute_mask) else None
    return outputs, out_mask


def _probed(
    layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any], pass_mask: bool
) -> tuple[Any, list[bool]]:
    """The outputs of a layer without a rule, by probing: the smallest size that it takes, and
    (when an input has unknown axes besides the batch) a second, larger one to tell which
    output axes follow them. Returns symbolic outputs (no node yet) and their mask flags."""
    unknown = any(None in v.shape[1:] for v in nest.flatten((args, kwargs)) if isinstance(v, SymbolicTensor))
    results: list[tuple[Any, Any]] = []
    refusal: Exception | None = None
    for size in _PROBE_SIZES:
        try:
            results.append(_probe(layer, args, dict(kwargs), pass_mask, size))
        except (ValueError, TypeError, IndexError) as error:
            refusal = refusal or error
            continue
        if len(results) == (2 if unknown else 1):
            break
    if not results or (unknown and len(results) < 2):
        assert refusal is not None
        raise refusal
    outputs, out_mask = results[0]
    flat = nest.flatten(outputs)
    other = nest.flatten(results[1][0]) if len(results) > 1 else flat
    masks = nest.flatten(out_mask) if nest.is_nested(out_mask) else [out_mask] * len(flat)
    if len(masks) != len(flat):
        masks = [masks[0]] * len(flat)
    symbolic = []
    for value, again in zip(flat, other):
        if not isinstance(value, Tensor):
            raise _NotTensors(type(value).__name__)
        shape = tuple(
            None if i == 0 or n != m else int(n) for i, (n, m) in enumerate(zip(value.shape, again.shape))
        )
        symbolic.append(SymbolicTensor(shape, value.dtype, layer.name))
    packed = nest.pack_sequence_as(outputs, symbolic) if nest.is_nested(outputs) else symbolic[0]
    return packed, [m is not None for m in masks]


class _NotTensors(Exception):
    """A probed layer returned something other than tensors (the type's name)."""


def _mask_flags(layer: Any, args: tuple[Any, ...], count: int) -> list[bool]:
    """Whether each of a rule's outputs has a mask, by ``compute_mask`` on the symbolic inputs
    and the markers of their masks."""
    compute_mask = getattr(layer, "compute_mask", None)
    if not callable(compute_mask):
        return [False] * count
    out_mask = compute_mask(args[0] if args else None, _first_masks(args))
    masks = nest.flatten(out_mask) if nest.is_nested(out_mask) else [out_mask] * count
    if len(masks) != count:
        masks = [masks[0]] * count
    return [m is not None for m in masks]


def _input_shapes(args: Any) -> str:
    shapes = [format_shape(v.shape) for v in nest.flatten(args) if isinstance(v, SymbolicTensor)]
    return shapes[0] if len(shapes) == 1 else "[" + ", ".join(shapes) + "]"


def _outputs(
    layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any], pass_mask: bool
) -> tuple[Any, list[bool]]:
    kind = _rule(layer)
    if kind is None:
        return _probed(layer, args, kwargs, pass_mask)
    call_kwargs = dict(kwargs)
    if pass_mask:
        call_kwargs["mask"] = _first_masks(args)
    outputs = _from_rule(layer, args, call_kwargs, kind)
    return outputs, _mask_flags(layer, args, len(nest.flatten(outputs)))


def symbolic_outputs(layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What ``layer(*args, **kwargs)`` gives for symbolic arguments, as symbolic tensors that
    belong to no node: by the layer's rule, else by a probe. Builds the layer. Containers
    (``Sequential``, a functional ``Model``) call it for the layers they hold.

    Raises:
        ValueError: the layer refuses the inputs' shapes; the message names the layer and
            the shapes it was given, then the layer's own words.
        TypeError: the layer returned something other than tensors.
    """
    first = args[0] if args else None
    firsts = [v for v in nest.flatten(first) if isinstance(v, SymbolicTensor)]
    pass_mask = "mask" not in kwargs and takes_mask(layer) and any(v.has_mask for v in firsts)
    try:
        outputs, flags = _outputs(layer, args, kwargs, pass_mask)
    except _NotTensors as error:
        raise TypeError(
            f"{type(layer).__name__} '{layer.name}' returned {error}, not tensors; "
            "the functional API needs layers that return tensors"
        ) from None
    except (ValueError, TypeError, IndexError) as error:
        message = str(error).split("\n")[0]
        raise ValueError(
            f"{type(layer).__name__} '{layer.name}' cannot be called on inputs of shape "
            f"{_input_shapes(args)}: {message}"
        ) from None
    flat = nest.flatten(outputs)
    marked = [
        SymbolicTensor(v.shape, v.dtype, f"{layer.name}_{i}", has_mask=flag)
        for i, (v, flag) in enumerate(zip(flat, flags))
    ]
    return nest.pack_sequence_as(outputs, marked) if nest.is_nested(outputs) else marked[0]


def record_call(layer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Records ``layer(*args, **kwargs)`` on symbolic tensors and returns symbolic outputs that
    remember the call (``symbolic_outputs``, then a ``Node``).

    Raises:
        ValueError: the layer refuses the inputs' shapes (named, as ``symbolic_outputs``).
    """
    first = args[0] if args else None
    firsts = [v for v in nest.flatten(first) if isinstance(v, SymbolicTensor)]
    pass_mask = "mask" not in kwargs and takes_mask(layer) and any(v.has_mask for v in firsts)
    node = Node(layer, args, kwargs, pass_mask)
    outputs = symbolic_outputs(layer, args, kwargs)
    flat = [
        SymbolicTensor(v.shape, v.dtype, v.name, node, index, v.has_mask)
        for index, v in enumerate(nest.flatten(outputs))
    ]
    node.outputs = nest.pack_sequence_as(outputs, flat) if nest.is_nested(outputs) else flat[0]
    layer._output_shape = _map(lambda t: t.shape, node.outputs)
    return node.outputs
