"""``@tp.custom_gradient``: a function that supplies its own gradient."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from tapefit.core import nest
from tapefit.core.record import Op, current_tapes, pause_recording, record_op
from tapefit.core.tape import GradientTape
from tapefit.core.tensor import Tensor, _wrap, as_tensor


def custom_gradient(f: Callable[..., Any]) -> Callable[..., Any]:
    """Decorates ``f(*xs) -> (y, grad_fn)`` so that tapes use ``grad_fn`` for its gradient.

    ``grad_fn(*dys)`` returns one gradient per input (a tuple, or one tensor for one
    input). If ``f`` reads trainable Variables other than its inputs, ``grad_fn`` must
    take a keyword argument ``variables`` (the list of those Variables) and return
    ``(input_grads, variable_grads)``, as in TensorFlow.

    On a method, ``self`` is bound as usual and is not one of the inputs.
    """

    @functools.wraps(f)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        inputs = tuple(as_tensor(a) for a in args)
        if not current_tapes():
            return _checked(f, f(*inputs, **kwargs))[0]
        # Run f unrecorded by the outer tapes; an inner tape finds the variables it reads.
        with pause_recording(), GradientTape() as inner:
            result, grad_fn = _checked(f, f(*inputs, **kwargs))
        # As in TensorFlow, ``variables`` are the ones f reads that are not among its inputs.
        variables = tuple(v for v in inner.watched_variables() if all(v is not x for x in inputs))
        if variables and not _takes_variables(grad_fn):
            raise TypeError(
                f"@custom_gradient function {f.__name__!r} reads Variables "
                f"({', '.join(v.name for v in variables)}), so its grad_fn must accept a "
                "keyword argument 'variables'"
            )
        flat = nest.flatten(result)
        outputs = tuple(_wrap(as_tensor(y)._value) for y in flat)

        def grad(op: Op, *dys: Tensor) -> list[Any]:
            if variables:
                input_grads, variable_grads = grad_fn(*dys, variables=list(variables))
            else:
                input_grads, variable_grads = grad_fn(*dys), []
            input_grads = list(input_grads) if isinstance(input_grads, (list, tuple)) else [input_grads]
            if len(input_grads) != len(inputs):
                raise ValueError(
                    f"@custom_gradient function {f.__name__!r}: grad_fn returned {len(input_grads)} "
                    f"gradients for {len(inputs)} inputs"
                )
            return input_grads + list(variable_grads)

        record_op("CustomGradient", inputs + tuple(variables), outputs, {}, (), False, grad_fn=grad)
        return nest.pack_sequence_as(result, list(outputs))

    return _Bindable(wrapped, f)


class _Bindable:
    """A decorated function that binds like one: ``instance.method`` binds ``self`` before
    the arguments are converted to Tensors (``self`` is no Tensor), as TensorFlow's ``Bind``."""

    def __init__(self, wrapped: Callable[..., Any], f: Callable[..., Any]) -> None:
        functools.update_wrapper(self, f)
        self._wrapped, self._f = wrapped, f

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return custom_gradient(self._f.__get__(instance, owner))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._wrapped(*args, **kwargs)


def _checked(f: Callable[..., Any], returned: Any) -> tuple[Any, Callable[..., Any]]:
    """``returned`` as ``(outputs, grad_fn)``, or a TypeError naming what ``f`` returned instead."""
    if isinstance(returned, (tuple, list)) and len(returned) == 2 and callable(returned[1]):
        return returned[0], returned[1]
    got = f"a {type(returned).__name__}"
    if isinstance(returned, (tuple, list)):
        got += f" of {len(returned)} items" + ("" if len(returned) != 2 else " whose second is not callable")
    raise TypeError(
        f"@custom_gradient function {getattr(f, '__name__', f)!r} must return (outputs, grad_fn), got {got}"
    )


def _takes_variables(grad_fn: Callable[..., Any]) -> bool:
    parameters = inspect.signature(grad_fn).parameters
    return "variables" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())
