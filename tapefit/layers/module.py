"""``Module``: the base of every layer and of user models.

A Module finds its Variables and sub-Modules by walking its attributes (and the
lists, tuples and dicts in them) whenever it is asked, the way ``tf.Module``
does, so a layer appended to a list later, or an attribute replaced, is seen on
the next walk. The walk is depth-first in attribute order, uses an explicit
stack and visits every object once. Attribute assignment is intercepted for one
thing only: replacing (or deleting) an attribute that held ``add_weight``
weights stops tracking them.

Calling a module runs ``build(input_shape)`` once, then ``call(...)``, the way
a Keras layer does; ``training=`` reaches the sublayers whose ``call`` takes it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import os
import re
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core import nest
from tapefit.core.messages import shown
from tapefit.core.naming import to_snake_case
from tapefit.core.ops.math import cast
from tapefit.core.tensor import Tensor, Variable, as_tensor
from tapefit.layers import constraints, initializers, regularizers
from tapefit.layers.symbolic import format_shape, has_symbolic, record_call
from tapefit.layers.training_methods import TrainingMethods

# Attributes of Module itself that hold no user state and are not walked.
_INTERNAL = frozenset(
    [
        "_name",
        "_name_given",
        "_trainable",
        "_built",
        "_added_weights",
        "_output_shape",
        "_regularizers",
        "_init_args",
        "_build_input",
    ]
)
_INTERNAL |= {"_build_input_shape"}  # the first call's input shape, which export traces with
_INTERNAL |= {"_trainer", "_compiled", "_optimizer"}  # what the trainer keeps (training_methods)
_INTERNAL |= {"_input_shape_arg"}  # Keras's input_shape= of a first layer (declared_input_shape)
_INTERNAL |= {"_symbolic_calls"}  # the functional graph's calls of this module (input / output)

_name_counts: dict[str, int] = {}
_name_lock = threading.Lock()


def unique_name(base: str) -> str:
    """``base`` the first time it is asked for, then ``base_1``, ``base_2``, ... (as Keras)."""
    with _name_lock:
        count = _name_counts.get(base, 0)
        _name_counts[base] = count + 1
    return base if count == 0 else f"{base}_{count}"


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise TypeError(f"a module name must be a non-empty string, got {shown(name)}")
    if "/" in name:
        raise ValueError(
            f"a module name may not contain '/' (it separates variable paths), got {shown(name)}"
        )
    return name


class _CallContext(threading.local):
    """The ``training`` values of the module calls in progress in this thread, outermost first."""

    def __init__(self) -> None:
        self.training: list[bool | None] = []
        # Told (module, entering) around every module call while set; see observe_calls.
        self.call_observer: Callable[[Module, bool], None] | None = None


_context = _CallContext()

# Whether any layer has had an activity regularizer: until then an outermost call skips the
# walk that clears the previous call's activity penalties.
_activity_seen = False


def _clear_activity_losses(root: Module) -> None:
    """Forgets the activity penalties of ``root`` and the modules below it (Keras clears a
    layer's losses when a call of it starts that no other layer's call encloses)."""
    for module in (root, *root._walk(paths=False)[1]):
        if module.__dict__.get("_activity_losses"):
            module.__dict__["_activity_losses"] = []


def _record_activity(module: Module, outputs: Any) -> None:
    """Keras 3's activity regularization: ``regularizer(output)`` for each Tensor output,
    divided by the output's batch size (0 for an empty batch) when it has axes, kept for
    ``losses`` until the next outermost call."""
    global _activity_seen
    regularizer = module.__dict__.get("activity_regularizer")
    if regularizer is None:
        return
    _activity_seen = True
    penalties = module.__dict__.setdefault("_activity_losses", [])
    for output in nest.flatten(outputs):
        if isinstance(output, Tensor):
            penalties.append(activity_penalty(regularizer, output))


def activity_penalty(regularizer: Callable[[Tensor], Any], output: Tensor) -> Tensor:
    """``regularizer(output)``, divided by the batch size (the first axis; 0 for an empty
    batch) when ``output`` has axes: Keras 3's activity penalty."""
    penalty = as_tensor(regularizer(output))
    if output.ndim > 0:
        batch = output.shape[0]
        penalty = penalty / float(batch) if batch else penalty * 0.0
    return penalty


@contextlib.contextmanager
def observe_calls(observer: Callable[[Module, bool], None]) -> Iterator[None]:
    """Calls ``observer(module, True)`` when a module call starts and ``observer(module, False)``
    when it ends, in this thread, inside the ``with`` block (the TensorBoard graph uses it to
    name ops by the modules that ran them). Costs one attribute read per call otherwise."""
    previous = _context.call_observer
    _context.call_observer = observer
    try:
        yield
    finally:
        _context.call_observer = previous


class _WeightBudget(threading.local):
    """How many more weight elements ``add_weight`` may make in this thread (``None``: any)."""

    def __init__(self) -> None:
        self.remaining: int | None = None


_budget = _WeightBudget()


@contextlib.contextmanager
def weight_budget(elements: int) -> Iterator[None]:
    """Inside the ``with`` block, ``add_weight`` refuses to make more than ``elements`` weight
    elements in all: a model file's config cannot ask for more weights than the file holds,
    so a crafted config cannot make the loader allocate without bound."""
    previous = _budget.remaining
    _budget.remaining = int(elements)
    try:
        yield
    finally:
        _budget.remaining = previous


_training_params: dict[Callable[..., Any], tuple[bool, int | None]] = {}


def _training_param(call: Callable[..., Any]) -> tuple[bool, int | None]:
    """Whether ``call`` (a function taking ``self`` first) takes ``training``, and the index among
    the positional arguments after ``self`` where it may be given, if it may."""
    found = _training_params.get(call)
    if found is None:
        params = list(inspect.signature(call).parameters.values())
        accepts = any(p.name == "training" or p.kind is p.VAR_KEYWORD for p in params)
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        index = next((i - 1 for i, p in enumerate(positional) if p.name == "training" and i > 0), None)
        found = _training_params[call] = (accepts, index)
    return found


def _resolve_training(
    args: tuple[Any, ...], kwargs: dict[str, Any], fn: Callable[..., Any]
) -> tuple[tuple[Any, ...], bool | None]:
    """The arguments and ``training`` value of a call: the value given (by keyword or by position),
    else the enclosing call's. It is put into or taken out of ``kwargs`` depending on whether
    ``fn`` takes it; a value given by position stays there (``None`` is then replaced)."""
    accepts, index = _training_param(fn)
    inherited = _context.training[-1] if _context.training else None
    if index is not None and len(args) > index:
        training = args[index]
        if training is None and inherited is not None:
            training = inherited
            args = (*args[:index], training, *args[index + 1 :])
        return args, training
    training = kwargs.get("training")
    if training is None:
        training = inherited
    if accepts:
        if training is not None:
            kwargs["training"] = training
    else:
        kwargs.pop("training", None)
    return args, training


def _call_override(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps a subclass's own ``__call__`` (the ``tf.Module`` style) so that it, too, takes
    ``training=`` only if it declares it, passes the flag on to the modules it calls, and
    records its output shape for ``summary``."""

    @functools.wraps(fn)
    def __call__(self: Module, *args: Any, **kwargs: Any) -> Any:
        if has_symbolic(args, kwargs):
            symbolic = record_call(self, args, kwargs)
            node = next((getattr(v, "node", None) for v in nest.flatten(symbolic)), None)
            if node is not None and node.layer is self:
                self._symbolic_calls.append(node)
            return symbolic
        args, training = _resolve_training(args, kwargs, fn)
        if not _context.training and _activity_seen:
            _clear_activity_losses(self)
        _context.training.append(training)
        observer = _context.call_observer
        if observer is not None:
            observer(self, True)
        try:
            outputs = fn(self, *args, **kwargs)
            _record_activity(self, outputs)
        finally:
            _context.training.pop()
            if observer is not None:
                observer(self, False)
        self._output_shape = _shape_of(outputs)
        return outputs

    __call__._tapefit_call_override = True  # type: ignore[attr-defined]
    return __call__


def in_call() -> bool:
    """Whether a module call is in progress in this thread (a ``build`` called from it is the
    call's own; one called outside builds the module by itself)."""
    return bool(_context.training)


# Keras's constructor arguments that declare a first layer's input (``Dense(2, input_shape=(4,))``).
_INPUT_ARGUMENTS = ("input_shape", "input_dim", "batch_shape", "batch_input_shape", "batch_size")


def declared_input_shape(
    kwargs: dict[str, Any], owner: str, own: frozenset[str] = frozenset()
) -> tuple[int | None, ...] | None:
    """Removes Keras's input arguments from ``kwargs`` (but those in ``own``, arguments of the
    layer's own, such as ``Embedding``'s ``input_dim``); the batch shape they declare, if any.

    Raises:
        ValueError: two of them, or one that is not a shape (named).
    """
    given = {k: kwargs.pop(k) for k in _INPUT_ARGUMENTS if k in kwargs and k not in own}
    batch_size = given.pop("batch_size", None)
    if not given:
        return None
    if len(given) > 1:
        raise ValueError(f"{owner}: give one of {sorted(given)}, they say the same")
    ((key, value),) = given.items()
    if key == "input_dim":
        value = (value,)
    shape = _as_shape(value if not isinstance(value, (int, np.integer)) else (value,))
    if shape is None or (key.startswith("batch") and not shape):
        raise ValueError(f"{owner}: {key} must be a shape (a tuple of ints or None), got {shown(value)}")
    return shape if key.startswith("batch") else (batch_size, *shape)


def _input_arguments(init: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps a layer class's ``__init__`` so that it takes Keras's input arguments and keeps the
    shape they declare (a ``Sequential`` builds from its first layer's)."""

    try:
        own = frozenset(inspect.signature(init).parameters)
    except (TypeError, ValueError):
        own = frozenset()

    @functools.wraps(init)
    def __init__(self: Layer, *args: Any, **kwargs: Any) -> None:
        shape = declared_input_shape(kwargs, type(self).__name__, own)
        init(self, *args, **kwargs)
        if shape is not None:
            self.__dict__["_input_shape_arg"] = shape

    __init__._tapefit_input_arguments = True  # type: ignore[attr-defined]
    return __init__


def _build_override(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps a subclass's own ``build`` so that calling it builds the module, as a first call
    does (Keras's ``build`` marks the layer built)."""

    @functools.wraps(fn)
    def build(self: Module, input_shape: Any = None, *args: Any, **kwargs: Any) -> Any:
        result = fn(self, input_shape, *args, **kwargs)
        _mark_built(self, input_shape)
        return result

    build._tapefit_build = True  # type: ignore[attr-defined]
    return build


def _mark_built(module: Module, input_shape: Any) -> None:
    """Marks ``module`` built for ``input_shape``, keeping that shape as its first call would
    (what a model file rebuilds from and export traces with) unless a call set them."""
    if module._built:
        return
    module.__dict__["_built"] = True
    if module.__dict__.get("_build_input") is None:
        dtype = getattr(module, "dtype", None)
        module.__dict__["_build_input"] = _spec_of_shape(input_shape, _dt.as_dtype(dtype or _dt.float32).name)
        if module.__dict__.get("_build_input_shape") is None:
            module.__dict__["_build_input_shape"] = _as_shape(input_shape)


def _as_shape(value: Any) -> Any:
    """``value`` as a shape tuple (``None`` for unknown axes), nested as given; ``None`` if it is
    not one."""
    if isinstance(value, (tuple, list)) and all(
        n is None or (isinstance(n, (int, np.integer)) and not isinstance(n, bool)) for n in value
    ):
        return tuple(None if n is None else int(n) for n in value)
    if isinstance(value, (tuple, list)) and value:
        shapes = [_as_shape(v) for v in value]
        return None if any(s is None for s in shapes) else type(value)(shapes)
    return None


def _spec_of_shape(shape: Any, dtype: str) -> Any:
    """``_spec_of`` for a shape given to ``build`` (the batch axis made ``None``)."""
    shape = _as_shape(shape)
    if shape is None or not shape:
        return None
    if all(n is None or isinstance(n, int) for n in shape):
        return ((None, *shape[1:]), dtype)
    return [_spec_of_shape(s, dtype) for s in shape]


def _shape_of(value: Any) -> Any:
    """The shape of a tensor-like value, or the nested shapes of a list/tuple/dict of them."""
    if isinstance(value, (Tensor, np.ndarray, np.generic)):
        return tuple(value.shape)
    if isinstance(value, (int, float, bool)):
        return ()
    if isinstance(value, dict) or (
        isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) for v in value)
    ):
        try:
            return nest.pack_sequence_as(value, [_shape_of(v) for v in nest.flatten(value)])
        except TypeError:  # dict keys that do not sort
            return None
    if isinstance(value, (list, tuple)):
        try:
            return tuple(np.shape(value))
        except ValueError:  # ragged nested lists
            return None
    return None


def _spec_of(value: Any) -> Any:
    """``(shape with the batch axis None, dtype name)`` of a tensor-like value, in the nesting of
    lists, tuples and dicts of them; ``None`` for anything else (a model file rebuilds the
    model's variables by calling it on zeros of this spec)."""
    if isinstance(value, (Tensor, np.ndarray)) and value.ndim >= 1:
        # strings of any length are one input dtype, "str" (a preprocessing layer's input)
        name = _dt.string.name if value.dtype.kind in "US" else value.dtype.name
        return ((None, *value.shape[1:]), name)
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _spec_of(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_spec_of(v) for v in value]
    return None


def _container_items(value: Any) -> Iterator[tuple[Any, Any]] | None:
    """The (key, item) pairs of a dict, list or tuple (keys as they are: paths format them), or
    of an object that names what it holds with ``_tracked_items()`` (a ``SeedGenerator``)."""
    if isinstance(value, dict):
        return iter(value.items())
    if isinstance(value, (list, tuple)):
        return enumerate(value)
    tracked = getattr(type(value), "_tracked_items", None)  # tp.random.SeedGenerator's state
    return iter(tracked(value)) if tracked is not None else None


# What the walk does with an attribute value, by its type: skip it, take it as a variable, go
# into it as a module, or go into it as a container. Known per type after its first value, so
# an initializer or a dtype costs the walk one dict lookup.
_SKIP, _VARIABLE, _MODULE, _CONTAINER = "skip", "variable", "module", "container"
_KINDS: dict[type, str] = dict.fromkeys(
    [int, float, bool, str, bytes, type(None), types.FunctionType, types.BuiltinFunctionType], _SKIP
)


def _kind_of(cls: type) -> str:
    if issubclass(cls, Variable):
        kind = _VARIABLE
    elif issubclass(cls, Module):
        kind = _MODULE
    elif issubclass(cls, (dict, list, tuple)) or getattr(cls, "_tracked_items", None) is not None:
        kind = _CONTAINER
    else:
        kind = _SKIP
    _KINDS[cls] = kind
    return kind


class _Entry:
    """One variable found by the walk: its path, and whether every module above it is trainable."""

    __slots__ = ("path", "variable", "modules_trainable")

    def __init__(self, path: str, variable: Variable, modules_trainable: bool) -> None:
        self.path = path
        self.variable = variable
        self.modules_trainable = modules_trainable


def _one_or_list(tensors: list[Any]) -> Any:
    """A call's tensors as Keras's ``input`` and ``output`` give them: one alone, several as a list."""
    return tensors[0] if len(tensors) == 1 else list(tensors)


class Module(TrainingMethods):
    """A container of Variables and sub-Modules; the base of layers and user models.

    Assign Variables and Modules as attributes (directly or inside lists, tuples
    and dicts) and they are tracked: ``variables``, ``trainable_variables``,
    ``submodules``, ``state_dict()`` and ``summary()`` find them. Subclasses
    define ``call(...)`` (and optionally ``build(input_shape)``, run once before
    the first call), or override ``__call__`` as with ``tf.Module``.

    Args:
        name: the module's name; by default the snake-case class name made unique
            (``dense``, ``dense_1``, ...), as in Keras. It may not contain ``/``.

    Variable paths (the keys of ``state_dict``) are one segment per module from
    this one down, then the attribute path inside the owning module:
    ``sequential/dense/kernel``, ``my_model/extra/w``, ``my_model/weights/0``. A
    module's segment is the name it was given, else its snake-case class name
    made unique among its siblings (``dense``, ``dense_1``), as Keras 3's weight
    files do: the paths of a model depend on its structure only, so the same
    model built in another process, or a second copy built in this one, has the
    same paths even though its default ``name`` (``dense_7``) differs.
    """

    # Set by __new__ (not __init__), so declared here.
    _name: str | None
    _name_given: bool
    _trainable: bool
    _built: bool
    _added_weights: list[Variable]
    _output_shape: Any
    _init_args: tuple[tuple[Any, ...], dict[str, Any]]
    _build_input: Any
    _symbolic_calls: list[Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> Module:
        # State lives here, so a subclass that forgets super().__init__() still works. The
        # constructor's arguments are kept as given: get_config rebuilds the module from them.
        self = super().__new__(cls)
        self.__dict__.update(
            _name=None,
            _name_given=False,
            _trainable=True,
            _built=False,
            _added_weights=[],
            _output_shape=None,
            _init_args=(args, dict(kwargs)),
            _build_input=None,
            _symbolic_calls=[],
        )
        return self

    def __init__(self, name: str | None = None) -> None:
        if name is not None:
            self._name = _check_name(name)
            self._name_given = True

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _INTERNAL and self._added_weights:
            old = self.__dict__.get(name)
            if old is not None and old is not value:
                self._forget_added_weights(old)
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if name not in _INTERNAL and self._added_weights and name in self.__dict__:
            self._forget_added_weights(self.__dict__[name])
        object.__delattr__(self, name)

    def _forget_added_weights(self, old: Any) -> None:
        """Stops tracking the ``add_weight`` weights in ``old``, an attribute value being replaced.

        They were tracked through that attribute; without this the weights list would keep the
        replaced ones (a replaced ``layer.kernel`` would still be trained and saved). Weights
        still held by another attribute stay tracked through it.
        """
        dropped: set[int] = set()
        stack, seen = [old], set()
        while stack:
            value = stack.pop()
            if isinstance(value, Variable):
                dropped.add(id(value))
            elif isinstance(value, (list, tuple, dict)) and id(value) not in seen:
                seen.add(id(value))
                stack.extend(value.values() if isinstance(value, dict) else value)
        if dropped:
            self._added_weights[:] = [w for w in self._added_weights if id(w) not in dropped]

    # -- identity ------------------------------------------------------------

    @property
    def name(self) -> str:
        """The module's name."""
        if self._name is None:
            self._name = unique_name(_class_snake_name(type(self)))
        return self._name

    @property
    def trainable(self) -> bool:
        """Whether this module's variables are listed in ``trainable_variables``.

        Setting it sets it on every submodule too (as in Keras); the Variables'
        own ``trainable`` flags are left alone, so unfreezing restores exactly
        what was there.
        """
        return self._trainable

    @trainable.setter
    def trainable(self, value: bool) -> None:
        value = bool(value)
        self._trainable = value
        for module in self.submodules:
            module._trainable = value

    @property
    def built(self) -> bool:
        """Whether ``build`` has run."""
        return self._built

    @built.setter
    def built(self, value: bool) -> None:
        self._built = bool(value)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name!r}>"

    # -- the functional graph ------------------------------------------------------

    @property
    def input(self) -> Any:
        """The symbolic input of this module's first call on symbolic tensors (Keras's
        ``layer.input``): one tensor, or a list when that call took several.

        Raises:
            AttributeError: the module was never called on symbolic tensors (naming it).
        """
        return _one_or_list(self._first_symbolic_call("input").inputs)

    @property
    def output(self) -> Any:
        """The symbolic output of this module's first call on symbolic tensors (Keras's
        ``layer.output``): one tensor, or a list when that call gave several.

        Raises:
            AttributeError: the module was never called on symbolic tensors (naming it).
        """
        return _one_or_list(self._first_symbolic_call("output").flat_outputs)

    def _first_symbolic_call(self, what: str) -> Any:
        if not self._symbolic_calls:
            raise AttributeError(
                f"The layer '{self.name}' has never been called on symbolic tensors (tp.Input and "
                f"what layers made of it), so it has no {what}"
            )
        return self._symbolic_calls[0]

    # -- tracking --------------------------------------------------------------

    def _walk(self, paths: bool = True) -> tuple[list[_Entry], list[Module], list[tuple[Module, int]]]:
        """Every reachable variable (with its path), every submodule, and each submodule's depth.

        Depth-first, in attribute order, each object once; no recursion. ``paths=False``
        leaves the paths empty, for the hot properties (``trainable_variables`` and ``losses``
        are read at every training step).
        """
        entries: list[_Entry] = []
        modules: list[Module] = []
        depths: list[tuple[Module, int]] = []
        seen: set[int] = {id(self)}
        # A frame: (items to visit, module path, attribute path prefix, modules above are trainable,
        # depth, path segments taken by the owning module's children so far)
        root = self._path_segment(set()) if paths else ""
        stack: list[tuple[Iterator[tuple[str, Any]], str, str, bool, int, set[str]]] = [
            (self._own_items(), root, "", self._trainable, 0, set())
        ]
        while stack:
            items, module_path, prefix, trainable, depth, taken = stack[-1]
            # Going down into a module or container leaves this loop by `break`; the frame's
            # iterator resumes where it stopped once the child's frame is done.
            for key, value in items:
                kind = _KINDS.get(value.__class__)
                if kind is None:
                    kind = _kind_of(value.__class__)
                if kind is _SKIP:
                    continue
                if kind is _VARIABLE:
                    if id(value) not in seen:
                        seen.add(id(value))
                        path = f"{module_path}/{prefix}{key}" if paths else ""
                        entries.append(_Entry(path, value, trainable))
                elif kind is _MODULE:
                    if id(value) not in seen:
                        seen.add(id(value))
                        modules.append(value)
                        depths.append((value, depth + 1))
                        path = f"{module_path}/{value._path_segment(taken)}" if paths else ""
                        stack.append(
                            (value._own_items(), path, "", trainable and value._trainable, depth + 1, set())
                        )
                        break
                else:
                    children = _container_items(value)
                    if children is not None and id(value) not in seen:
                        seen.add(id(value))
                        stack.append((children, module_path, f"{prefix}{key}/", trainable, depth, taken))
                        break
            else:
                stack.pop()
        return entries, modules, depths

    def _path_segment(self, taken: set[str]) -> str:
        """This module's part of variable paths: its name if one was given, else the snake-case
        class name made unique among its siblings (``dense``, ``dense_1``), so that paths depend
        on the model's structure only, not on how many layers the process made before."""
        if self._name_given:
            segment = self.name
        else:
            base = _class_snake_name(type(self))
            segment, k = base, 0
            while segment in taken:
                k += 1
                segment = f"{base}_{k}"
        taken.add(segment)
        return segment

    def _own_items(self) -> Iterator[tuple[str, Any]]:
        """This module's attributes in assignment order, then weights only ``add_weight`` knows."""
        items = [(key, value) for key, value in vars(self).items() if key not in _INTERNAL]
        # Those already reached through an attribute are skipped by the walk's `seen` set.
        items += [(variable.name, variable) for variable in self._added_weights]
        return iter(items)

    @property
    def variables(self) -> list[Variable]:
        """Every Variable of this module and its submodules, each once, in assignment order."""
        return [e.variable for e in self._walk(paths=False)[0]]

    @property
    def trainable_variables(self) -> list[Variable]:
        """The trainable Variables not inside a frozen (``trainable = False``) module."""
        entries = self._walk(paths=False)[0]
        return [e.variable for e in entries if e.modules_trainable and e.variable.trainable]

    def _variable_lists(self) -> tuple[list[Variable], list[Variable]]:
        """``variables`` and ``trainable_variables`` from one walk (a training step needs both)."""
        entries = self._walk(paths=False)[0]
        return [e.variable for e in entries], [
            e.variable for e in entries if e.modules_trainable and e.variable.trainable
        ]

    @property
    def non_trainable_variables(self) -> list[Variable]:
        """The Variables that are not in ``trainable_variables``."""
        entries = self._walk(paths=False)[0]
        return [e.variable for e in entries if not (e.modules_trainable and e.variable.trainable)]

    @property
    def weights(self) -> list[Variable]:
        """Keras's name for ``variables``."""
        return self.variables

    @property
    def trainable_weights(self) -> list[Variable]:
        """Keras's name for ``trainable_variables``."""
        return self.trainable_variables

    @property
    def non_trainable_weights(self) -> list[Variable]:
        """Keras's name for ``non_trainable_variables``."""
        return self.non_trainable_variables

    @property
    def submodules(self) -> list[Module]:
        """Every Module below this one (not itself), each once, depth-first in assignment order."""
        return self._walk(paths=False)[1]

    @property
    def losses(self) -> list[Tensor]:
        """The losses of this module and its submodules: the weights' penalties, computed now,
        and the last call's activity penalties (``activity_regularizer``) and ``add_loss`` losses.

        Read it inside the ``GradientTape`` so the penalties are differentiated:
        ``loss = loss_fn(y, model(x)) + tp.add_n(model.losses)``.
        """
        result = list(self._regularization_losses())
        for module in self._walk(paths=False)[1]:
            result.extend(module._regularization_losses())
        return result

    def _regularization_losses(self) -> list[Tensor]:
        """This module's own penalties (layers with regularizers add theirs): what ``add_loss``
        added during the last call."""
        return list(self.__dict__.get("_activity_losses", ()))

    def add_loss(self, loss: Any) -> None:
        """Adds ``loss`` to ``losses`` until the next outermost call (Keras's ``add_loss``).

        Call it inside ``call`` with a value computed there (an endpoint layer's loss, a VAE's
        KL term); the default step and ``compute_loss`` add the sum of each to the loss.
        """
        global _activity_seen
        _activity_seen = True
        self.__dict__.setdefault("_activity_losses", []).append(as_tensor(loss))

    def named_variables(self) -> list[tuple[str, Variable]]:
        """``(path, variable)`` for every variable, as ``state_dict`` names them."""
        return [(e.path, e.variable) for e in self._walk()[0]]

    def add_weight(
        self,
        shape: Any = (),
        initializer: Any = None,
        dtype: Any = None,
        trainable: bool = True,
        name: str | None = None,
        constraint: Any = None,
    ) -> Variable:
        """Creates a Variable owned by this module (Keras's ``add_weight``).

        Args:
            shape: the variable's shape (``None``: a scalar).
            initializer: an initializer name (``"zeros"``, ``"glorot_uniform"``, ...) or
                a callable ``(shape, dtype) -> value``; ``None`` (default) is
                ``"glorot_uniform"`` for a floating dtype and ``"zeros"`` otherwise, as in Keras 3.
            dtype: the dtype; by default the module's ``dtype`` (float32).
            trainable: whether it is trainable.
            name: the variable's name (``kernel``, ``bias``, ...).
            constraint: ``None``, a constraint name (``"max_norm"``, ...) or a callable; the
                optimizers apply it after each update (``Variable.constraint``).

        The variable is tracked even when it is not assigned to an attribute.
        """
        dtype = _dt.as_dtype(dtype if dtype is not None else getattr(self, "dtype", None) or _dt.float32)
        shape = () if shape is None else tuple(int(n) for n in shape)
        if _budget.remaining is not None:
            size = math.prod(shape)
            if size > _budget.remaining:
                raise ValueError(
                    f"{type(self).__name__} '{self.name}' asks for a weight of shape {shape}, more than "
                    "the weights the model file holds"
                )
            _budget.remaining -= size
        if initializer is None:
            initializer = "glorot_uniform" if dtype.kind == "f" else "zeros"
        init = initializers.get(initializer)
        variable = Variable(
            lambda: init(shape, dtype=dtype),
            trainable=trainable,
            name=name or "Variable",
            dtype=dtype,
            constraint=constraints.get(constraint),
        )
        self._added_weights.append(variable)
        return variable

    # -- calling ---------------------------------------------------------------

    def build(self, input_shape: Any) -> None:
        """Creates the variables once the input shape is known; runs once, before the first ``call``.

        Calling it directly (``layer.build((None, 4))``) builds the module as its first call
        would: the module is then built, and its first call keeps the variables (and the
        weights ``set_weights`` gave them), as in Keras. A subclass's own ``build`` gets the same.

        Args:
            input_shape: the shape of the first positional argument (a tuple, or
                nested tuples for a list/dict of tensors).
        """
        _mark_built(self, input_shape)

    def compute_output_shape(self, input_shape: Any) -> Any:
        """The shape of the output for inputs of ``input_shape`` (batch axis first, ``None`` for
        unknown axes), as Keras's. A layer with a rule of its own overrides this; here, without
        one, the module is built and probed once on zeros of the smallest batch its shape allows
        (nothing of that run is kept).

        Raises:
            ValueError: the module refuses inputs of that shape.
        """
        from tapefit.layers.symbolic import SymbolicTensor, symbolic_outputs

        def symbolic(shape: Any) -> Any:
            if isinstance(shape, tuple) and all(n is None or isinstance(n, int) for n in shape):
                return SymbolicTensor(shape, getattr(self, "dtype", None) or _dt.float32, "input")
            if isinstance(shape, (list, tuple)):
                return [symbolic(s) for s in shape]
            raise ValueError(f"{type(self).__name__}: not a shape: {shown(shape)}")

        outputs = symbolic_outputs(self, (symbolic(_as_shape(input_shape) or input_shape),), {})
        return nest.pack_sequence_as(outputs, [t.shape for t in nest.flatten(outputs)])

    compute_output_shape._no_rule = True  # type: ignore[attr-defined]

    def call(self, *args: Any, **kwargs: Any) -> Any:
        """The forward computation; subclasses define it (or override ``__call__``)."""
        raise NotImplementedError(f"{type(self).__name__} defines neither call(...) nor __call__(...)")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Builds the module on its first call, then runs ``call``.

        ``training`` resolves as in Keras: the value passed here (by keyword, or
        by position where ``call`` declares it); else the value the enclosing
        module's call received; else it is not passed (``call``'s default
        applies). It is passed only to a ``call`` that takes it.

        Called on symbolic tensors (``tp.Input`` and what layers made of it), it records
        the call for ``tp.Model`` and returns symbolic outputs (the functional API).
        """
        if has_symbolic(args, kwargs):
            symbolic = record_call(self, args, kwargs)
            node = next((getattr(v, "node", None) for v in nest.flatten(symbolic)), None)
            if node is not None and node.layer is self:
                self._symbolic_calls.append(node)
            return symbolic
        args, training = _resolve_training(args, kwargs, type(self).call)
        if not _context.training and _activity_seen:
            _clear_activity_losses(self)
        _context.training.append(training)
        observer = _context.call_observer
        if observer is not None:
            observer(self, True)
        try:
            if not self._built:
                first = args[0] if args else kwargs.get("inputs")
                self._build_input = _spec_of(first)  # what a model file rebuilds from
                self._build_input_shape = _shape_of(first)  # what export traces with by default
                self.build(self._build_input_shape)
                self._built = True
            outputs = self.call(*args, **kwargs)
            _record_activity(self, outputs)
        finally:
            _context.training.pop()
            if observer is not None:
                observer(self, False)
        self._output_shape = _shape_of(outputs)
        return outputs

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__call__")
        if own is not None and not getattr(own, "_tapefit_call_override", False):
            cls.__call__ = _call_override(own)  # type: ignore[method-assign]
        build = cls.__dict__.get("build")
        if build is not None and not getattr(build, "_tapefit_build", False):
            cls.build = _build_override(build)  # type: ignore[method-assign]

    # -- state ---------------------------------------------------------------

    def state_dict(self) -> dict[str, np.ndarray]:
        """``{variable path: value copy}`` for every variable, in the order of ``variables``.

        Raises:
            ValueError: two variables share a path (two sibling layers with the same name).
        """
        entries = self._walk()[0]
        _check_unique_paths([e.path for e in entries])
        return {e.path: e.variable.numpy() for e in entries}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Assigns the values of ``state_dict`` to this module's variables.

        Keys are matched by path. Entries left over whose paths differ only in the
        root's name and in ``_<number>`` suffixes (``net_2/block_1/kernel`` against
        ``net/block/kernel``) are then matched by that stripped path, in order.
        Nothing is assigned unless every entry matches.

        Raises:
            ValueError: naming every missing, unexpected, mis-shaped and non-numeric entry,
                and every non-integral one for an integer variable.
        """
        if not isinstance(state_dict, dict):
            raise TypeError(f"load_state_dict needs a dict of arrays, got {type(state_dict).__name__}")
        entries, submodules, _ = self._walk()
        paths = [e.path for e in entries]
        _check_unique_paths(paths)
        pairs, missing, unexpected = _match_by_structure(entries, list(state_dict))
        problems = []
        values = []
        for entry, key in pairs:
            try:
                value = np.asarray(state_dict[key])
            except (TypeError, ValueError) as error:
                problems.append(f"entry '{key}' is not an array ({error})")
                continue
            if value.dtype.kind not in "biuf":
                problems.append(f"entry '{key}' is not a number array (dtype {value.dtype})")
                continue
            if value.shape != entry.variable.shape:
                shown = key if key == entry.path else f"{key}' (for '{entry.path})"
                problems.append(
                    f"entry '{shown}' has shape {value.shape}, the variable has {entry.variable.shape}"
                )
            dtype = entry.variable.dtype
            # The cast below would truncate 2.7 to 2 (and NaN to some integer) without a word.
            if dtype.kind in "iub" and value.dtype.kind == "f" and not np.all(np.mod(value, 1) == 0):
                problems.append(f"entry '{key}' has non-integral values for a variable of dtype {dtype.name}")
            values.append((entry.variable, value))
        if missing:
            problems.append("missing: " + ", ".join(missing))
        if unexpected:
            problems.append("unexpected: " + ", ".join(unexpected))
            # Lazy layers make their variables in build, on their first call.
            unbuilt = [
                m.name for m in [self, *submodules] if not m.built and type(m).build is not Module.build
            ]
            if unbuilt:
                problems.append(
                    f"{', '.join(map(repr, unbuilt))} not built yet (layers make their variables on "
                    "their first call): call the model on a batch first"
                )
        if problems:
            raise ValueError(f"load_state_dict into '{self.name}' failed; " + "; ".join(problems))
        for variable, value in values:
            if value.dtype != variable.dtype:
                value = value.astype(variable.dtype)
            variable.assign(value)

    def save_weights(self, path: str | os.PathLike[str]) -> None:
        """Writes the weights to a ``.safetensors`` file, keyed by the ``state_dict`` paths.

        The file opens with ``safetensors.numpy.load_file`` (and PyTorch's and Hugging Face's
        safetensors tools); it is written atomically (a temporary file, then a rename).

        Args:
            path: the file; its name must end in ``.safetensors`` (as Keras requires
                ``.weights.h5``), and its folder must exist.
        """
        from tapefit.layers import saving

        saving.save_weights(self, path)

    def load_weights(self, path: str | os.PathLike[str]) -> None:
        """Loads a ``.safetensors`` weights file, matching entries as ``load_state_dict`` does.

        Raises:
            FileNotFoundError: there is no such file.
            ValueError: the file is not a safetensors file, or (naming the file and every
                entry) entries are missing, unexpected, mis-shaped or not numbers. Nothing is
                assigned then.
        """
        from tapefit.layers import saving

        saving.load_weights(self, path)

    def get_config(self) -> dict[str, Any]:
        """The config that rebuilds this module with ``from_config`` (Keras's ``get_config``).

        It is the arguments the constructor was called with, defaults filled in, with
        ``name``, ``trainable`` and ``dtype`` as they are now, as plain JSON values: activations
        by name; layers, initializers and regularizers as ``{"module", "class_name", "config"}``.
        A subclass whose constructor takes something else (a function, an array) overrides
        it, and ``from_config`` with it.

        Raises:
            ValueError: (``ConfigError``) an argument that a file cannot hold, named.
        """
        from tapefit.layers import serialization

        args, kwargs = self._init_args
        config = serialization.constructor_config(self, args, kwargs)
        return serialization.to_plain(config, f"{type(self).__name__} '{self.name}'")

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Module:
        """A new module from what ``get_config`` returned (its weights are new ones).

        Raises:
            ValueError: (``ConfigError``) a key the constructor does not take, or a nested
                object that is neither built in nor registered.
        """
        from tapefit.layers import serialization

        return serialization.from_constructor_config(cls, config)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes the whole model to one ``.tapefit`` file: its config, its weights and the
        states of the optimizers it holds as attributes (a GAN's two), as Keras's
        ``model.save`` keeps a model's own optimizers.

        ``tp.models.load_model(path)`` rebuilds it without the code that built it (a class
        of your own must be registered with ``@tp.register_serializable``). To save the
        trainer's optimizer, loss and metrics too, use ``Trainer.save``.

        Args:
            path: the file; its name must end in ``.tapefit``, and its folder must exist.

        Raises:
            ValueError: the model holds something a file cannot describe (an unregistered
                class, a plain function), named.
        """
        from tapefit.layers import saving

        saving.save_model(self, path)

    def to_json(self, **kwargs: Any) -> str:
        """The model's architecture as JSON text (Keras's ``to_json``): its serialized config and,
        once it has been called or built, its ``build_config`` (the input spec of its first call),
        from which ``tp.models.model_from_json`` makes a new model with new weights.

        Args:
            **kwargs: passed to ``json.dumps`` (``indent=2``).

        Raises:
            ValueError: (``ConfigError``) the model holds what a config cannot describe (named).
        """
        import json

        from tapefit.layers import saving, serialization

        entry = serialization.serialize(self, f"to_json: {type(self).__name__}")
        return json.dumps({**entry, "build_config": saving.build_config(self)}, **kwargs)

    def export(self, path: str | os.PathLike[str], format: str = "onnx", input_signature: Any = None) -> None:
        """Writes the forward pass in inference mode for serving; see ``tapefit.export.to_onnx``.

        Args:
            path: the file to write.
            format: only ``"onnx"``.
            input_signature: the inputs' shapes (batch axis first) or sample batches; not
                needed for a functional model or a model called before.

        Raises:
            ValueError: another ``format``, or a layer or op with no ONNX form.
        """
        if format != "onnx":
            raise ValueError(f"export: format must be 'onnx', got {shown(format)}")
        from tapefit.export import to_onnx  # export reads layers: imported only when used

        to_onnx(self, path, input_signature=input_signature)

    def get_weights(self) -> list[np.ndarray]:
        """Copies of the weights' values, in the order of ``variables`` (Keras's ``get_weights``)."""
        return [variable.numpy().copy() for variable in self.variables]

    def set_weights(self, weights: list[Any] | tuple[Any, ...]) -> None:
        """Sets the weights from a list of arrays in the order of ``variables`` (as ``get_weights``).

        Raises:
            ValueError: the list's length differs from the number of variables, or an array's
                shape differs from its variable's, or it holds no numbers; nothing is assigned then.
        """
        if not isinstance(weights, (list, tuple)):
            raise TypeError(f"set_weights needs a list of arrays, got {type(weights).__name__}")
        named = self.named_variables()
        if len(weights) != len(named):
            hint = ""
            if any(_awaits_build(m) for m in [self, *self.submodules]):
                hint = " (some layers are not built yet: call the model on a batch first)"
            raise ValueError(
                f"set_weights on '{self.name}': got a list of {len(weights)} arrays, "
                f"the model has {len(named)} weights{hint}"
            )
        problems, values = [], []
        for i, ((path, variable), weight) in enumerate(zip(named, weights)):
            value = np.asarray(weight)
            if value.dtype.kind not in "biuf":
                problems.append(f"weight {i} ('{path}') is not a number array (dtype {value.dtype})")
            elif value.shape != variable.shape:
                problems.append(
                    f"weight {i} ('{path}') has shape {value.shape}, the variable has {variable.shape}"
                )
            elif (
                variable.dtype.kind in "iub" and value.dtype.kind == "f" and not np.all(np.mod(value, 1) == 0)
            ):
                problems.append(
                    f"weight {i} ('{path}') has non-integral values for a variable of dtype {variable.dtype.name}"
                )
            values.append((variable, value))
        if problems:
            raise ValueError(f"set_weights on '{self.name}' failed; " + "; ".join(problems))
        for variable, value in values:
            variable.assign(value.astype(variable.dtype, copy=False))

    # -- summary ---------------------------------------------------------------

    def summary(self, line_length: int = 80, print_fn: Callable[[str], Any] | None = None) -> None:
        """Prints a table of the layers, their output shapes and parameter counts, as Keras does.

        One row per direct sublayer (nested models count as one row) and per
        variable held directly by this module. Output shapes are known once the
        model has been called; the batch axis is shown as ``None``.

        Args:
            line_length: the table width.
            print_fn: where lines go (default ``print``).
        """
        print_fn = print_fn or print
        entries, _, depths = self._walk()
        direct = [m for m, depth in depths if depth == 1]
        rows: list[tuple[str, str, str]] = []
        counted: set[int] = set()
        for module in direct:
            n = 0
            for variable in [*module.variables]:
                if id(variable) not in counted:
                    counted.add(id(variable))
                    n += variable.size
            unbuilt = not n and any(_awaits_build(m) for m in [module, *module.submodules])
            params = "0 (unbuilt)" if unbuilt else str(n)
            rows.append(
                (f"{module.name} ({type(module).__name__})", _format_shape(module._output_shape), params)
            )
        for e in entries:
            if id(e.variable) not in counted:
                counted.add(id(e.variable))
                rows.append(
                    (
                        f"{e.path.split('/', 1)[1]} (Variable)",
                        _format_shape(e.variable.shape, batch=False),
                        str(e.variable.size),
                    )
                )
        trainable = sum(e.variable.size for e in entries if e.variable.trainable and e.modules_trainable)
        total = sum(e.variable.size for e in entries)
        # Columns fit the longest entry (plus a gap), and the table is at least line_length wide.
        col = [
            max([len("Layer (type)"), *[len(r[0]) for r in rows]]) + 2,
            max([len("Output Shape"), *[len(r[1]) for r in rows]]) + 2,
            max([len("Param #"), *[len(r[2]) for r in rows]]),
        ]
        col[0] = max(col[0], int(line_length * 0.45))
        col[1] = max(col[1], int(line_length * 0.33))
        col[2] = max(col[2], line_length - col[0] - col[1])
        width = sum(col)

        def line(a: str, b: str, c: str) -> str:
            return f"{a:<{col[0]}}{b:<{col[1]}}{c:>{col[2]}}"

        print_fn(f'Model: "{self.name}"')
        print_fn("_" * width)
        print_fn(line("Layer (type)", "Output Shape", "Param #"))
        print_fn("=" * width)
        for k, (name, shape, params) in enumerate(rows):
            print_fn(line(name, shape, params))
            if k < len(rows) - 1:
                print_fn("_" * width)
        print_fn("=" * width)
        print_fn(f"Total params: {total:,}")
        print_fn(f"Trainable params: {trainable:,}")
        print_fn(f"Non-trainable params: {total - trainable:,}")
        print_fn("_" * width)


class Layer(Module):
    """A Module with a ``dtype``: the base of the built-in layers (``keras.layers.Layer``).

    Args:
        trainable: whether its variables are trainable (``layer.trainable = False`` freezes it).
        name: the layer's name (default: the snake-case class name, made unique).
        dtype: the dtype of its variables and computations (default float32). Inputs
            are cast to it, as Keras autocasts (integer inputs of ``Dense`` included).
    """

    activity_regularizer: Callable[[Tensor], Any] | None
    """Applied to each output Tensor of every call; the penalties, divided by the batch size,
    go to ``losses`` until the next outermost call (Keras 3's rule). ``None``: none."""
    _activity_losses: list[Tensor]

    def __new__(cls, *args: Any, **kwargs: Any) -> Layer:
        # As Module.__new__: a subclass that forgets super().__init__() gets the defaults.
        self = super().__new__(cls, *args, **kwargs)
        self.__dict__.update(
            dtype=_dt.float32, _regularizers={}, activity_regularizer=None, _activity_losses=[]
        )
        return self  # type: ignore[return-value]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_tapefit_input_arguments", False):
            cls.__init__ = _input_arguments(init)  # type: ignore[method-assign]

    def __init__(self, trainable: bool = True, name: str | None = None, dtype: Any = None) -> None:
        super().__init__(name=name)
        dtype = _dt.float32 if dtype is None else _dt.as_dtype(dtype)
        if dtype.kind != "f":
            raise TypeError(f"{type(self).__name__}: dtype must be floating, got {dtype.name}")
        self.dtype = dtype
        self._trainable = bool(trainable)
        self._regularizers: dict[str, Callable[[Tensor], Tensor]] = {}

    supports_masking = False
    """Whether a mask of the input's steps passes through this layer unchanged (Keras's flag)."""

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        """The mask of this layer's output steps, for the next layer (Keras's ``compute_mask``):
        ``mask`` itself when ``supports_masking``, else ``None`` (the steps end here)."""
        return mask if self.supports_masking else None

    def _add_regularizer(self, attribute: str, regularizer: Any) -> None:
        """Penalizes the variable held in ``attribute`` with ``regularizer`` (a name or callable)."""
        fn = regularizers.get(regularizer)
        if fn is not None:
            self._regularizers[attribute] = fn

    def _set_activity_regularizer(self, regularizer: Any) -> None:
        """Sets ``activity_regularizer`` (``None``, a name or a callable): each call then adds
        ``regularizer(output) / batch size`` to ``losses``, as Keras 3 does."""
        global _activity_seen
        self.activity_regularizer = regularizers.get(regularizer)
        if self.activity_regularizer is not None:
            _activity_seen = True

    def _add_activity_penalty(self, regularizer: Callable[[Tensor], Any], output: Tensor) -> None:
        """Adds ``regularizer(output) / batch size`` to this call's ``losses`` (for an activity
        penalty on an inner result, as Keras's sublayers add theirs)."""
        global _activity_seen
        _activity_seen = True
        self._activity_losses.append(activity_penalty(regularizer, output))

    def _regularization_losses(self) -> list[Tensor]:
        weights = [
            fn(getattr(self, attr))
            for attr, fn in self._regularizers.items()
            if getattr(self, attr, None) is not None
        ]
        return [*self.__dict__.get("_activity_losses", ()), *weights]

    def _cast_input(self, inputs: Any) -> Tensor:
        """``inputs`` as a Tensor of the layer's dtype."""
        x = as_tensor(inputs)
        if x.dtype != self.dtype:
            x = cast(x, self.dtype)
        return x


def rank_of(layer: Any, input_shape: Any, ranks: Any, what: str = "inputs") -> tuple[int | None, ...]:
    """``input_shape`` as a tuple, checked to have a rank in ``ranks`` (an int or a range).

    Raises:
        ValueError: not a shape, or another rank (the message names the layer).
    """
    allowed = range(ranks, ranks + 1) if isinstance(ranks, int) else ranks
    shape = _as_shape(input_shape)
    if shape is None or not all(n is None or isinstance(n, int) for n in shape) or len(shape) not in allowed:
        need = f"rank {ranks}" if isinstance(ranks, int) else f"rank >= {allowed.start}"
        raise ValueError(
            f"{type(layer).__name__} '{layer.name}' needs {what} of {need}, got shape {input_shape}"
        )
    return shape


def known_size(layer: Any, shape: tuple[int | None, ...], axis: int, what: str) -> int:
    """The size of ``axis`` of ``shape``, which the layer's weights need known.

    Raises:
        ValueError: the size is unknown (``None``).
    """
    size = shape[axis]
    if size is None:
        raise ValueError(
            f"{type(layer).__name__} '{layer.name}' needs a known size for {what} (axis {axis % len(shape)}), "
            f"got shape {format_shape(shape)}"
        )
    return size


def _awaits_build(module: Module) -> bool:
    """Whether ``module`` defines ``build`` and has not run it yet (its variables may be missing)."""
    return not module._built and type(module).build is not Module.build


def _class_snake_name(cls: type) -> str:
    """``to_snake_case`` of a class's name, worked out once per name (paths need it on every walk)."""
    return _snake_name(cls.__name__)


@functools.cache
def _snake_name(name: str) -> str:
    return to_snake_case(name)


def _format_shape(shape: Any, batch: bool = True) -> str:
    if shape is None:
        return "?"
    if isinstance(shape, tuple) and all(isinstance(n, int) for n in shape):
        dims = ["None" if batch and i == 0 else str(n) for i, n in enumerate(shape)]
        return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
    return str(shape)


def _check_unique_paths(paths: list[str]) -> None:
    seen: set[str] = set()
    twice = sorted({p for p in paths if p in seen or seen.add(p)})  # type: ignore[func-returns-value]
    if twice:
        raise ValueError(
            "several variables share the path(s) "
            + ", ".join(twice)
            + "; give the sibling layers distinct names"
        )


_NUMBER_SUFFIX = re.compile(r"_\d+$")


def _without_root(path: str) -> str:
    """``path`` without the root's name: ``net_2/dense/kernel`` -> ``dense/kernel``."""
    return path.partition("/")[2]


def _stripped(path: str) -> str:
    """``path`` without the root's name and without default-name numbers: ``dense_3`` -> ``dense``."""
    return "/".join(_NUMBER_SUFFIX.sub("", p) for p in _without_root(path).split("/"))


def _match_by_structure(
    entries: list[_Entry], keys: list[str]
) -> tuple[list[tuple[_Entry, str]], list[str], list[str]]:
    """Pairs variables with ``keys``: equal paths first, then equal paths below the root, then
    stripped paths (``_stripped``) in order. Each stage only sees what the earlier ones left,
    so the order of ``keys`` matters only where paths differ in more than the root's name.

    Returns (pairs, missing variable paths, unexpected keys).
    """
    pairs: list[tuple[_Entry, str]] = []
    left_entries, left_keys = list(entries), list(keys)
    for form in (str, _without_root, _stripped):
        by_form: dict[str, list[str]] = {}
        for key in left_keys:
            by_form.setdefault(form(key), []).append(key)
        unmatched = []
        for entry in left_entries:
            candidates = by_form.get(form(entry.path))
            if candidates:
                pairs.append((entry, candidates.pop(0)))
            else:
                unmatched.append(entry)
        left_entries = unmatched
        left_keys = [k for same in by_form.values() for k in same]
    # Pairs and leftovers in the order the model and the dict gave them.
    position = {id(e): i for i, e in enumerate(entries)}
    pairs.sort(key=lambda pair: position[id(pair[0])])
    unexpected = set(left_keys)
    return pairs, [e.path for e in left_entries], [k for k in keys if k in unexpected]


__all__ = ["Layer", "Module"]
