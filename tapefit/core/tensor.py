"""``Tensor``, ``Variable`` and the conversions into them.

A Tensor wraps one ndarray and has an id that tapes use to follow it. Operators
(``+``, ``@``, ``[]``, ...) are bound in ``core/operators.py`` once the ops exist.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from tapefit.core import dtypes as _dt

_next_id = itertools.count(1).__next__
# The tp.function trace being written, if any (see core/capture.py): ops, assigns and
# values turned into Python values report to it.
_traces: list[Any] = []
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


class Tensor:
    """An immutable n-d array value; the result of every tapefit op.

    Create tensors with ``tp.constant`` or ``tp.convert_to_tensor``. NumPy
    defers to a Tensor in binary operators (``ndarray + tensor`` is recorded)
    and ``np.asarray(tensor)`` gives its value.
    """

    __slots__ = ("_value", "_tid", "__weakref__")
    _value: np.ndarray
    _tid: int  # set on first use of _id
    # Higher than ndarray's, so NumPy calls our reflected operators.
    __array_priority__ = 100
    _is_variable = False

    def __init__(self, value: Any, dtype: _dt.DTypeLike = None) -> None:
        self._value = to_array(value, dtype)

    @property
    def _id(self) -> int:
        """The id tapes know this tensor by, given on first use: most tensors never need one,
        and an op with no tape active then costs one counter step less."""
        try:
            return self._tid
        except AttributeError:
            self._tid = tid = _next_id()
            return tid

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape as a tuple of ints."""
        return self._value.shape

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype."""
        return self._value.dtype

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return self._value.ndim

    @property
    def size(self) -> int:
        """The number of elements."""
        return self._value.size

    def numpy(self) -> np.ndarray:
        """The value as a read-only ndarray view."""
        if _traces:
            _traces[-1].value_read(self)
        view = self._value.view()
        view.flags.writeable = False
        return view

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if dtype is None and not copy:
            return self.numpy()  # read-only: writing through np.asarray(t) would change the tensor
        if _traces:
            _traces[-1].value_read(self)
        value = self._value if dtype is None else self._value.astype(dtype)
        return value.copy() if copy else value

    def __len__(self) -> int:
        if not self._value.ndim:
            raise TypeError("len() of a scalar tensor (shape ())")
        return len(self._value)

    def __iter__(self) -> Iterator[Tensor]:
        if not self._value.ndim:
            raise TypeError("iteration over a scalar tensor (shape ())")
        for i in range(len(self._value)):
            yield self[i]

    def _scalar(self, kind: str) -> Any:
        if _traces:
            _traces[-1].value_read(self)
        if self._value.size != 1:
            raise ValueError(
                f"{kind}() of a tensor needs exactly one element, got shape {self.shape}; "
                "use tp.reduce_any/tp.reduce_all or index one element first"
            )
        return self._value.reshape(()).item()

    def __bool__(self) -> bool:
        return builtins_bool(self._scalar("bool"))

    def __float__(self) -> float:
        return float(self._scalar("float"))

    def __int__(self) -> int:
        return int(self._scalar("int"))

    def __index__(self) -> int:
        if self._value.dtype.kind not in "iu":
            raise TypeError(f"only integer tensors can be used as an index, got {self.dtype.name}")
        return int(self._scalar("index"))

    def __repr__(self) -> str:
        return f"<tp.Tensor shape={self.shape} dtype={self.dtype.name} numpy={_numpy_repr(self._value)}>"

    def __str__(self) -> str:
        # str(), not an f-string: a 0-d float32 array formats with float32's precision then.
        return f"tp.Tensor({self._value!s}, shape={self.shape}, dtype={self.dtype.name})"

    def __format__(self, format_spec: str) -> str:
        """``f"{loss:.4f}"`` formats the value of a one-element tensor, as TensorFlow's do."""
        if not format_spec:
            return str(self)
        if self._value.size != 1:
            raise TypeError(
                f"format spec {format_spec!r} needs a tensor with exactly one element, got shape {self.shape}"
            )
        return format(self._value.reshape(())[()], format_spec)

    def __hash__(self) -> int:
        raise TypeError("Tensor is unhashable (== is elementwise); use id(tensor) as a key")

    if TYPE_CHECKING:
        # Bound in tapefit.core.operators (they need the ops, and the ops need Tensor); declared
        # here so that type checkers see them in users' code.
        def __add__(self, other: Any) -> Tensor: ...
        def __radd__(self, other: Any) -> Tensor: ...
        def __sub__(self, other: Any) -> Tensor: ...
        def __rsub__(self, other: Any) -> Tensor: ...
        def __mul__(self, other: Any) -> Tensor: ...
        def __rmul__(self, other: Any) -> Tensor: ...
        def __truediv__(self, other: Any) -> Tensor: ...
        def __rtruediv__(self, other: Any) -> Tensor: ...
        def __floordiv__(self, other: Any) -> Tensor: ...
        def __rfloordiv__(self, other: Any) -> Tensor: ...
        def __mod__(self, other: Any) -> Tensor: ...
        def __rmod__(self, other: Any) -> Tensor: ...
        def __pow__(self, other: Any) -> Tensor: ...
        def __rpow__(self, other: Any) -> Tensor: ...
        def __matmul__(self, other: Any) -> Tensor: ...
        def __rmatmul__(self, other: Any) -> Tensor: ...
        def __and__(self, other: Any) -> Tensor: ...
        def __rand__(self, other: Any) -> Tensor: ...
        def __or__(self, other: Any) -> Tensor: ...
        def __ror__(self, other: Any) -> Tensor: ...
        def __lt__(self, other: Any) -> Tensor: ...
        def __le__(self, other: Any) -> Tensor: ...
        def __gt__(self, other: Any) -> Tensor: ...
        def __ge__(self, other: Any) -> Tensor: ...
        def __eq__(self, other: object) -> Tensor: ...  # type: ignore[override]
        def __ne__(self, other: object) -> Tensor: ...  # type: ignore[override]
        def __neg__(self) -> Tensor: ...
        def __abs__(self) -> Tensor: ...
        def __invert__(self) -> Tensor: ...
        def __getitem__(self, key: Any) -> Tensor: ...


builtins_bool = bool


def _wrap(value: np.ndarray) -> Tensor:
    """A new Tensor around an ndarray the caller gives up (no checks, no copy)."""
    t = Tensor.__new__(Tensor)
    t._value = value if value.__class__ is np.ndarray else np.asarray(value)
    return t


class Variable(Tensor):
    """Mutable state that behaves as a Tensor in every op.

    Args:
        initial_value: a Python number, nested list, ``range``, ndarray, Tensor,
            or a zero-argument callable returning one of those.
        trainable: whether tapes watch it automatically and models list it in
            ``trainable_variables``.
        name: a name for summaries and checkpoints (default ``"Variable"``).
        dtype: the dtype to convert ``initial_value`` to.
        constraint: ``None`` or a callable ``(variable) -> Tensor`` (a
            ``tp.layers.constraints`` object); optimizers assign its result to the variable
            right after each update, as Keras 3 does.

    ``assign*`` write into the stored array only when nothing else holds it; while a
    tape, a view or an ``np.asarray`` result holds it they swap in a new array, so a
    value saved for a backward pass never changes (as in TensorFlow).
    """

    __slots__ = ("_trainable", "_name", "_constraint")
    _is_variable = True

    def __init__(
        self,
        initial_value: Any,
        trainable: bool = True,
        name: str | None = None,
        dtype: _dt.DTypeLike = None,
        constraint: Callable[[Any], Any] | None = None,
    ) -> None:
        if callable(initial_value) and not isinstance(initial_value, (Tensor, np.ndarray)):
            initial_value = initial_value()
        value = to_array(initial_value, dtype)
        if value is initial_value:
            value = value.copy()  # never alias the caller's array
        self._value = value
        self._tid = _next_id()
        self._trainable = builtins_bool(trainable)
        self._name = "Variable" if name is None else str(name)
        self.constraint = constraint

    @property
    def constraint(self) -> Callable[[Any], Any] | None:
        """The projection optimizers apply after each update (``None``: none)."""
        return self._constraint

    @constraint.setter
    def constraint(self, value: Callable[[Any], Any] | None) -> None:
        if value is not None and not callable(value):
            raise TypeError(f"Variable: constraint must be None or a callable, got {value!r}")
        self._constraint = value

    @property
    def trainable(self) -> bool:
        """Whether tapes watch it automatically."""
        return self._trainable

    @trainable.setter
    def trainable(self, value: bool) -> None:
        self._trainable = builtins_bool(value)

    @property
    def name(self) -> str:
        """The variable's name."""
        return self._name

    def numpy(self) -> np.ndarray:
        """A copy of the current value."""
        if _traces:
            _traces[-1].value_read(self)
        return self._value.copy()

    def _checked(self, value: Any, method: str) -> np.ndarray:
        if isinstance(value, (Tensor, np.ndarray, np.generic)):
            array = value._value if isinstance(value, Tensor) else np.asarray(value)
            if array.dtype != self._value.dtype:
                raise ValueError(
                    f"{method}: variable '{self._name}' has dtype {self.dtype.name}, "
                    f"got a value of dtype {array.dtype.name}; use tp.cast first"
                )
        else:
            array = to_array(value, self._value.dtype)
        if array.shape != self._value.shape:
            raise ValueError(
                f"{method}: variable '{self._name}' has shape {self.shape}, "
                f"got a value of shape {array.shape}"
            )
        return array

    def _owns_value(self) -> bool:
        """Whether nothing but this variable holds its array, so writing into it is safe.

        A tape's saved value, a Tensor from ``identity``/``reshape`` (views) or an array a
        user got from ``np.asarray`` all hold a reference; then ``assign*`` swap arrays instead.
        A view (``Variable(x[0:2])``) is never written: its memory belongs to another array.
        """
        # No local name for the array here: it would add a reference to the count.
        return (
            _refcount is not None
            and _value_refs(self) <= _SOLE_OWNER_REFS
            and self._value.base is None
            and self._value.flags.writeable
        )

    def assign(self, value: Any) -> Variable:
        """Sets the value (same shape and dtype) and returns the variable."""
        array = self._checked(value, "assign")
        if self._owns_value():
            np.copyto(self._value, array)
        else:
            # A Tensor's array is immutable; anything else may be changed by its owner later.
            self._value = array if isinstance(value, Tensor) else array.copy()
        if _traces:
            _traces[-1].assign(self, "assign", value)
        return self

    def assign_add(self, delta: Any) -> Variable:
        """Adds ``delta`` (same shape and dtype) and returns the variable."""
        if _traces:
            _traces[-1].assign(self, "assign_add", delta)
        delta = self._checked(delta, "assign_add")
        if self._owns_value():
            np.add(self._value, delta, out=self._value)
        else:
            self._value = self._value + delta
        return self

    def assign_sub(self, delta: Any) -> Variable:
        """Subtracts ``delta`` (same shape and dtype) and returns the variable."""
        if _traces:
            _traces[-1].assign(self, "assign_sub", delta)
        delta = self._checked(delta, "assign_sub")
        if self._owns_value():
            np.subtract(self._value, delta, out=self._value)
        else:
            self._value = self._value - delta
        return self

    def _subtract_product(self, array: np.ndarray, factor: Any, work: np.ndarray) -> Variable:
        """``assign_sub(array * factor)`` for an optimizer's step, with the same bits.

        ``array`` has the variable's shape and dtype (the optimizer checked it) and ``work`` is
        scratch of that shape. When the variable's array can be written in place, the product is
        formed a block at a time in the start of ``work`` and subtracted at once: a product as
        large as the variable would be out of the cache by the time the subtraction read it back.
        """
        if _traces or not (self._owns_value() and self._value.flags.c_contiguous):
            return self.assign_sub(np.multiply(array, factor, out=work))
        flat, source = self._value.reshape(-1), array.reshape(-1)
        block = work.reshape(-1)[:_BLOCK]
        for start in range(0, flat.size, _BLOCK):
            target = flat[start : start + _BLOCK]
            product = np.multiply(source[start : start + _BLOCK], factor, out=block[: target.size])
            np.subtract(target, product, out=target)
        return self

    def __str__(self) -> str:
        return repr(self)  # as TensorFlow prints a Variable

    def __hash__(self) -> int:
        return id(self)  # a Variable is state with an identity, usable as a dict key

    def __repr__(self) -> str:
        return (
            f"<tp.Variable '{self._name}' shape={self.shape} dtype={self.dtype.name}, "
            f"numpy={_numpy_repr(self._value)}>"
        )


def _numpy_repr(value: np.ndarray) -> str:
    """``numpy=6.0`` for a scalar, as TensorFlow shows it; the array's repr otherwise."""
    return str(value) if value.ndim == 0 else repr(value)


# Elements per block of Variable._subtract_product: 256 KB of float32, in a core's L2 cache with
# room to spare (64K and 128K measured alike on a 784x512 kernel; 8K paid the calls' overhead).
_BLOCK = 65536

try:
    from sys import getrefcount as _refcount
except ImportError:  # not CPython: assign* always swap arrays
    _refcount = None  # type: ignore[assignment]


def _value_refs(holder: Tensor) -> int:
    return _refcount(holder._value)


def _python_dtype(array: np.ndarray) -> np.dtype:
    """TensorFlow's defaults for data that came from Python numbers."""
    kind = array.dtype.kind
    if kind == "f":
        return _dt.float32
    if kind in "iu":
        fits = array.size == 0 or (array.min() >= _INT32_MIN and array.max() <= _INT32_MAX)
        return _dt.int32 if fits else _dt.int64
    if kind == "b":
        return _dt.bool
    raise TypeError(f"cannot convert a value of NumPy dtype {array.dtype} to a tensor")


def _owned(array: np.ndarray, value: Any) -> np.ndarray:
    """``array``, copied if it is the caller's writable array: a tensor must not change when
    its source array is written to later (tensors are immutable, tapes save them)."""
    return array.copy() if array is value and array.flags.writeable else array


def to_array(value: Any, dtype: _dt.DTypeLike = None) -> np.ndarray:
    """Converts ``value`` to an ndarray by tapefit's dtype rules (see ``constant``)."""
    want = None if dtype is None else _dt.as_dtype(dtype)
    if isinstance(value, Tensor):
        if _traces and value._is_variable:  # tp.constant(v) while tracing: a read of v
            _traces[-1].ref(value)
        array = value._value
        return array if want is None or want == array.dtype else _lossless_astype(array, want, value)
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype.kind not in "fiub":
            raise TypeError(f"cannot convert an array of dtype {array.dtype} to a tensor")
        if want is None or want == array.dtype:
            return _owned(array, value)
        return _lossless_astype(array, want, value)
    if isinstance(value, range):
        value = list(value)
    try:
        array = np.asarray(value)
    except ValueError as error:  # ragged nested lists
        raise ValueError(f"cannot convert {value!r} to a tensor: {error}") from None
    if array.dtype.kind not in "fiub":
        raise TypeError(f"cannot convert {type(value).__name__} {value!r} to a tensor")
    if want is None:
        want = _python_dtype(array)
    return _lossless_astype(array, want, value)


def _lossless_astype(array: np.ndarray, want: np.dtype, value: Any) -> np.ndarray:
    """``array`` as ``want``, refusing the silent data loss of fractions or overflow into integers."""
    if array.dtype.kind == "f" and want.kind in "iub" and not np.all(np.mod(array, 1) == 0):
        raise TypeError(
            f"cannot convert {value!r} to a tensor of dtype {want.name} without losing its fractions; "
            "use tp.cast to truncate"
        )
    if want.kind in "iu" and array.dtype.kind in "iuf" and array.size and not np.can_cast(array.dtype, want):
        info = np.iinfo(want)
        if array.min() < info.min or array.max() > info.max:
            raise ValueError(f"cannot convert {value!r} to a tensor of dtype {want.name}: out of range")
    return array.astype(want, copy=False)


def constant(value: Any, dtype: _dt.DTypeLike = None, shape: Any = None, name: str | None = None) -> Tensor:
    """Creates a Tensor (``tf.constant``).

    Python floats (and lists of them) become float32, Python ints int32 (int64
    when too large), bools bool; ndarrays keep their dtype. ``dtype`` converts. ``shape``
    fills a scalar out to that shape or reshapes a value with as many elements, as TensorFlow's;
    ``name`` is taken for TensorFlow's scripts (tapefit's tensors have no names).

    Raises:
        ValueError: ``value`` cannot take ``shape``.
    """
    if shape is not None:
        array = np.asarray(value.numpy() if isinstance(value, Tensor) else value)
        shape = tuple(int(n) for n in shape)
        if array.size == 1:
            array = np.full(shape, array.reshape(()), array.dtype)
        elif array.size == int(np.prod(shape)):
            array = array.reshape(shape)
        else:
            raise ValueError(f"constant: a value of {array.size} elements cannot take the shape {shape}")
        value = array
    return Tensor(value, dtype)


def as_tensor(value: Any, dtype: _dt.DTypeLike = None) -> Tensor:
    """Returns ``value`` as a Tensor; Tensors and Variables are returned as they are.

    A (nested) list or tuple holding Tensors is packed with recorded ops (``stack``), as
    TensorFlow's autopacking does, so ``tp.reduce_sum([loss_a, loss_b])`` keeps its
    gradients; it takes its tensors' dtype, which Python numbers in it adopt. (``constant``
    stays a constant.) Ops convert their inputs with this function; the public
    ``tp.convert_to_tensor`` also reads a Variable's value into a Tensor.

    Raises:
        TypeError: ``value`` is a Tensor (or a packed list) of another dtype than ``dtype``.
    """
    if isinstance(value, Tensor):
        return _checked_dtype(value, dtype)
    if isinstance(value, (list, tuple)) and _first_tensor(value) is not None:
        return _checked_dtype(_pack(value), dtype)
    return Tensor(value, dtype)


def _checked_dtype(t: Tensor, dtype: _dt.DTypeLike) -> Tensor:
    if dtype is not None and _dt.as_dtype(dtype) != t._value.dtype:
        raise TypeError(
            f"convert_to_tensor: requested dtype {_dt.as_dtype(dtype).name} for a tensor of "
            f"dtype {t.dtype.name}; use tp.cast"
        )
    return t


def _first_tensor(value: list | tuple) -> Tensor | None:
    """The first Tensor in a nested list or tuple, or ``None`` (one pass, no recursion)."""
    stack = [value]
    while stack:
        for item in stack.pop():
            if item.__class__ is float or item.__class__ is int:
                continue  # the bulk of list data: keep the scan cheap
            if isinstance(item, Tensor):
                return item
            if isinstance(item, (list, tuple)):
                stack.append(item)
    return None


def _pack(value: list | tuple) -> Tensor:
    """A nested list holding Tensors as one Tensor, built with ``stack`` so tapes record it."""
    from tapefit.core.ops.shape import stack  # the ops import this module

    like = _first_tensor(value)

    def pack(node: list | tuple) -> Tensor:  # recursion only as deep as the list nesting
        if _first_tensor(node) is None:
            return weak_operand(node, like, "pack")  # type: ignore[arg-type]
        parts = [
            pack(item) if isinstance(item, (list, tuple)) else weak_operand(item, like, "pack")  # type: ignore[arg-type]
            for item in node
        ]
        return stack(parts, axis=0)

    return pack(value)


_SCALARS: dict[tuple[Any, np.dtype], np.ndarray] = {}
_MAX_SCALARS = 256


def weak_operand(value: Any, like: Tensor, op_name: str) -> Tensor:
    """Converts the non-tensor side of a binary op.

    Python numbers and lists are weakly typed and take ``like``'s dtype (a
    float into an integer tensor is an error, never a silent truncation). NumPy
    scalars count as the numbers they hold (``x * np.sqrt(2.0)`` works on float32
    ``x``, as in TensorFlow); ndarrays keep their own dtype and must match.
    """
    if isinstance(value, Tensor):
        return value
    target = like._value.dtype
    if (value.__class__ is float or value.__class__ is int) and target.kind == "f":
        # Gradients and user code repeat the same few numbers (1 - out, 2 * x, x * 0.5): their
        # read-only 0-d arrays are kept, so such an operand costs a dict lookup and a wrapper.
        array = _SCALARS.get((value, target)) if value else None
        if array is None:
            array = np.array(value, target)
            if value and len(_SCALARS) < _MAX_SCALARS:  # not 0: -0.0 == 0.0 as a key
                array.flags.writeable = False
                _SCALARS[value, target] = array
        return _wrap(array)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.ndarray):
        array = np.asarray(value)
        if array.dtype != target:
            raise _dt.mix_error(op_name, [target, array.dtype])
        return _wrap(_owned(array, value))
    if isinstance(value, (int, float)) and target.kind == "f":
        return _wrap(np.array(value, target))
    if isinstance(value, (list, tuple)) and _first_tensor(value) is not None:
        return _pack(value)  # its tensors' dtype, which the op then checks against like's
    array = to_array(value)
    if array.dtype.kind == "f" and target.kind != "f":
        raise TypeError(
            f"{op_name}: cannot combine Python float data {value!r} with a {target.name} tensor; "
            f"use tp.cast(x, tp.float32) first"
        )
    try:
        return _wrap(_lossless_astype(array, target, value))
    except ValueError as error:  # a Python int too large for the tensor's integer dtype
        raise ValueError(f"{op_name}: {error}") from None


Initializer = Callable[[], Any]


# The count _value_refs sees for an array held by one variable and nothing else, measured
# rather than assumed, since interpreters differ in the references they borrow.
_SOLE_OWNER_REFS = _value_refs(Variable(0.0)) if _refcount is not None else 0
