"""The ``Optimizer`` base class: gradient checks, clipping, weight decay, slots, state.

A subclass only says which slot variables it keeps per model variable
(``slot_initial_values``) and how one variable is updated (``update_step``), as in Keras 3.
``update_step`` changes variables only through ``Variable.assign``, ``assign_add`` and
``assign_sub``; the arithmetic runs in NumPy on the variables' arrays with as few
temporaries as it can, in the variable's dtype. After every update of a step, the base class
assigns ``variable.constraint(variable)`` to each updated variable that has a constraint.
"""

from __future__ import annotations

import inspect
import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from tapefit.core.function import guarded, host_call, tracing, unchanged
from tapefit.core.messages import shown
from tapefit.core.record import active_tapes, pause_recording
from tapefit.core.tape import GradientTape
from tapefit.core.tensor import Tensor, Variable, _wrap
from tapefit.optimizers import _config, schedules

logger = logging.getLogger("tapefit")

__all__ = ["Optimizer", "value_array"]

LearningRate = float | schedules.LearningRateSchedule | Callable[..., Any] | Mapping[str, Any]


def value_array(t: Tensor) -> np.ndarray:
    """The array behind a Tensor or Variable, without a copy.

    Only read it, and do not keep it across an ``assign*`` of the same variable:
    ``assign*`` write in place only while nothing else holds the array (otherwise they
    swap in a new one, which costs an allocation but is never wrong).
    """
    return t._value


# Optimizer updates are never recorded (as in TF); kept under this name for subclasses.
recording_paused = pause_recording


def global_norm(arrays: Sequence[np.ndarray]) -> float:
    """``sqrt(sum of squares)`` over all arrays, accumulated in float64."""
    total = 0.0
    for a in arrays:
        total += float(np.sum(np.square(a, dtype=np.float64)))
    return math.sqrt(total)


def clip_by_norm(g: np.ndarray, clip_norm: float) -> np.ndarray:
    """``g * clip_norm / max(norm(g), clip_norm)``: unchanged when its norm is within the bound."""
    norm = global_norm([g])
    if norm <= clip_norm:
        return g
    return g * (clip_norm / norm)  # nan/inf norms give nan, as in Keras


def clip_by_global_norm(grads: Sequence[np.ndarray], clip_norm: float) -> list[np.ndarray]:
    """Scales all arrays by ``clip_norm / max(global_norm, clip_norm)``."""
    norm = global_norm(grads)
    if norm <= clip_norm:
        return list(grads)
    scale = clip_norm / norm if math.isfinite(norm) else math.nan
    return [g * scale for g in grads]


class Optimizer:
    """Base class of the optimizers, after ``keras.optimizers.Optimizer`` (Keras 3).

    Each ``apply_gradients`` call: drops pairs whose gradient is ``None``, checks the
    gradients' shapes, clips them (``clipnorm``, ``clipvalue`` or ``global_clipnorm``),
    applies decoupled weight decay (``w -= lr * weight_decay * w``), calls
    ``update_step(gradient, variable, learning_rate)`` per variable, then adds 1 to
    ``iterations``. The learning rate of a step is a float, or a schedule called with
    ``iterations`` before the increment (0 for the first step).

    Slot variables (Adam's moments, ...) are created the first time a variable is passed
    (with a gradient or ``None``), in the variable's dtype. ``get_state`` numbers variables
    in the order the optimizer first saw them, and ``set_state`` matches slots to variables
    by that order.

    Subclasses define ``slot_initial_values()`` and ``update_step``, and extend
    ``get_config``.

    Args:
        learning_rate: a float, a ``schedules.LearningRateSchedule`` (or its config dict
            ``{"type": "cosine_decay", ...}``), or a callable: one taking an argument is
            called with the step, one taking none is called as is (Keras 3).
        weight_decay: decoupled weight decay coefficient, or ``None``.
        clipnorm: clip each gradient to this L2 norm.
        clipvalue: clip each gradient's elements to ``[-clipvalue, clipvalue]``.
        global_clipnorm: clip all gradients together to this global L2 norm.
        name: the optimizer's name.

    Raises:
        ValueError: more than one of ``clipnorm``, ``clipvalue``, ``global_clipnorm`` is set.
    """

    def __init__(
        self,
        learning_rate: LearningRate,
        weight_decay: float | None = None,
        clipnorm: float | None = None,
        clipvalue: float | None = None,
        global_clipnorm: float | None = None,
        name: str | None = None,
    ) -> None:
        self.name = type(self).__name__.lower() if name is None else str(name)
        self._rates: dict[np.dtype, Variable] = {}  # see _rate_variable
        self._set_learning_rate(_learning_rate_arg(learning_rate))
        self.weight_decay = (
            None if weight_decay is None else _config.check_float("weight_decay", weight_decay, low=0)
        )
        self.clipnorm = _optional_positive("clipnorm", clipnorm)
        self.clipvalue = _optional_positive("clipvalue", clipvalue)
        self.global_clipnorm = _optional_positive("global_clipnorm", global_clipnorm)
        if sum(c is not None for c in (self.clipnorm, self.clipvalue, self.global_clipnorm)) > 1:
            raise ValueError(
                "only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be set; got "
                f"clipnorm={shown(clipnorm)}, clipvalue={shown(clipvalue)}, global_clipnorm={shown(global_clipnorm)}"
            )
        self._iterations = Variable(np.int64(0), trainable=False, name="iteration")
        self._variables: list[Variable] = []  # in first-seen order: the positions of get_state
        self._positions: dict[int, int] = {}  # id(variable) -> position; _variables keeps ids alive
        self._slots: list[dict[str, Variable]] = []
        self._restored: dict[int, dict[str, np.ndarray]] = {}  # set_state slots of positions not seen yet
        self._no_decay_ids: set[int] = set()
        self._no_decay_pattern: re.Pattern[str] | None = None
        self._warned_missing: set[int] = set()
        self._lent: tuple[np.ndarray, ...] = ()  # gradients update_step may overwrite (_apply_lent)
        self._work_flat: dict[tuple[int, np.dtype], np.ndarray] = {}  # see _work
        self._work_views: dict[tuple[int, tuple[int, ...], np.dtype], np.ndarray] = {}

    # -- what subclasses define ------------------------------------------

    def slot_initial_values(self) -> dict[str, float]:
        """The slot variables kept per model variable: ``{slot name: initial fill value}``."""
        return {}

    def update_step(self, gradient: np.ndarray, variable: Variable, learning_rate: float) -> None:
        """Updates one variable through ``assign*``.

        Args:
            gradient: the (clipped) gradient, an ndarray of the variable's shape and dtype.
            variable: the variable to update.
            learning_rate: the learning rate of this step.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement update_step")

    # -- properties --------------------------------------------------------

    @property
    def iterations(self) -> Variable:
        """The number of ``apply_gradients`` calls so far: an int64 Variable (``int()`` it)."""
        return self._iterations

    @property
    def learning_rate(self) -> float:
        """The learning rate the next step will use (a schedule evaluated at ``iterations``).

        A Python float (Keras returns a variable; ``float()`` works on both). Assigning a
        number changes a float learning rate; assigning a schedule replaces the rate.
        """
        return self._learning_rate_at(int(self._iterations))

    @learning_rate.setter
    def learning_rate(self, value: LearningRate) -> None:
        new = _learning_rate_arg(value)
        if isinstance(new, float) and not isinstance(self._learning_rate, float):
            raise TypeError(
                f"this optimizer's learning rate is the schedule {shown(self._learning_rate)}, so it cannot be "
                "set to a number; create the optimizer with a float learning_rate to change it during training"
            )
        self._set_learning_rate(new)

    @property
    def variables(self) -> list[Variable]:
        """``iterations`` and every slot variable, by position."""
        return [self._iterations] + [slot for slots in self._slots for slot in slots.values()]

    def get_slot_names(self) -> list[str]:
        """The names of the slot variables kept per model variable."""
        return list(self.slot_initial_values())

    def get_slot(self, variable: Variable, slot_name: str) -> Variable:
        """The slot variable ``slot_name`` of ``variable``.

        Raises:
            ValueError: the optimizer has not updated ``variable`` yet, or has no such slot.
        """
        position = self._positions.get(id(variable))
        if position is None:
            raise ValueError(
                f"the optimizer has not updated variable '{variable.name}' yet, so it has no slots"
            )
        slots = self._slots[position]
        if slot_name not in slots:
            raise ValueError(
                f"{type(self).__name__} has no slot {shown(slot_name)}; its slots: {list(slots)}"
            )
        return slots[slot_name]

    def exclude_from_weight_decay(
        self, var_list: Iterable[Variable] | None = None, var_names: Iterable[str] | None = None
    ) -> None:
        """Exempts variables from weight decay: those in ``var_list`` and those whose name
        contains one of ``var_names`` (regular expressions, searched as in Keras)."""
        # A new set, not an update: a compiled step's guard sees the change by identity.
        self._no_decay_ids = self._no_decay_ids | {id(v) for v in var_list or ()}
        names = list(var_names or ())
        if names:
            self._no_decay_pattern = re.compile("|".join(names))

    # -- applying gradients -------------------------------------------------

    def build(self, var_list: Iterable[Variable]) -> None:
        """Creates the slots of ``var_list`` now, in this order (otherwise done on first update)."""
        self._register([_check_variable(v, i) for i, v in enumerate(var_list)])

    _through: Callable[[Optimizer, Any], Variable] | None = None
    """While a ``tp.Trainer`` fits, its ``apply``: every update then passes the trainer's gradient
    transforms and boundary, whoever calls ``apply_gradients`` (a custom ``train_step``)."""

    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Variable]]) -> Variable:
        """Applies one update step (through the trainer's ``apply`` while a ``fit`` runs).

        Args:
            grads_and_vars: ``(gradient, variable)`` pairs, e.g. ``zip(grads, variables)``; a
                gradient is a Tensor, ndarray or nested list of the variable's shape, or
                ``None`` (that pair is skipped). Floating gradients of another precision are
                cast to the variable's dtype (as Keras does).

        Returns:
            ``iterations``, after the increment.

        Raises:
            ValueError: every gradient is ``None``, or a gradient's shape differs from its variable's.
            TypeError: an entry is not a pair, a variable is not a floating ``tp.Variable``, or a
                gradient is not floating.
        """
        through = self._through
        if through is not None:
            return through(self, grads_and_vars)
        return self._apply_unbound(grads_and_vars)

    def _apply_unbound(self, grads_and_vars: Iterable[tuple[Any, Variable]]) -> Variable:
        """``apply_gradients`` itself, whoever holds the optimizer."""
        if tracing():
            pairs = list(grads_and_vars)
            if self._inline_gradients(pairs) is not None:
                return self._traced_update(pairs)
            # In a tp.function the update runs as Python on every call, with that step's
            # learning rate and slots; the trace passes it the gradients of the call.
            return host_call(self._apply_lent, pairs, scratch=True, replay=self._replay_lent)
        grads, variables, every = self._checked_pairs(grads_and_vars)
        # Variables without a gradient get their positions too (Keras 3 builds on them all), so
        # positions follow the order of the pairs, not which gradients happened to be None.
        if any(id(v) not in self._positions for v in every):
            self._register(every)
        return self._update(grads, variables)

    def _update(self, grads: list[np.ndarray], variables: list[Variable]) -> Variable:
        """The step proper, on checked gradients of registered variables."""
        if active_tapes:  # with no tape active anywhere there is nothing to pause
            with pause_recording():
                self._step(grads, variables)
        else:
            self._step(grads, variables)
        return self._iterations

    def _step(self, grads: list[np.ndarray], variables: list[Variable]) -> None:
        lr = self._learning_rate_at(int(self._iterations._value))
        if self.clipnorm is not None or self.global_clipnorm is not None or self.clipvalue is not None:
            grads = self._clip(grads)
        self._apply_weight_decay(variables, lr)
        update_step = self.update_step
        for g, v in zip(grads, variables):
            update_step(g, v, lr)
        _apply_constraints(variables)
        self._iterations.assign_add(_ONE)

    def _apply_lent(
        self, grads_and_vars: list[tuple[Any, Variable]], scratch: tuple[np.ndarray, ...] = ()
    ) -> Variable:
        """``apply_gradients`` as a ``tp.function`` replay calls it: the arrays in ``scratch``
        are gradients nothing reads after this call, which ``update_step`` may overwrite
        (``_lent_gradient``); never kept past the call."""
        self._lent = scratch
        try:
            return self._apply_unbound(grads_and_vars)
        finally:
            self._lent = ()

    # -- updates as traced ops ---------------------------------------------------

    def _inline_form(self) -> Any:
        """The name of the update ``_inline_update`` traces, or ``None`` when this optimizer's
        update must run as a host call (the default: ``update_step`` is Python)."""
        return None

    def _inline_attributes(self) -> tuple[str, ...]:
        """The names of the attributes ``_inline_form`` and ``_inline_update`` read (a trace's
        guard watches them: a change traces again)."""
        return ()

    def _inline_update(self, grads: list[Tensor], variables: list[Variable], rate: Tensor) -> None:
        """``update_step`` for every pair as tapefit ops on Tensors (so a ``tp.function`` trace
        writes the arithmetic into its program), bit for bit what ``update_step`` computes.
        ``rate``: the step's learning rate, a 0-d Tensor of the variables' dtype."""
        raise NotImplementedError

    def _inline_config(self, variables: list[Variable]) -> Any:
        """The state an inline update was traced on: ``None`` when it cannot be inline."""
        form = self._inline_form()
        if form is None or self.clipnorm is not None or self.clipvalue is not None:
            return None
        if self.global_clipnorm is not None:
            return None
        for variable in variables:
            if variable.constraint is not None:
                return None
        return form, isinstance(self._learning_rate, float)  # a float rate is read, a schedule called

    def _inline_gradients(self, pairs: list[Any]) -> list[Variable] | None:
        """The variables of ``pairs`` when a trace can write their update as ops: well-formed
        pairs of floating Variables of one dtype and Tensors of their shapes and dtypes (or
        ``None``, not all), and an inline config. Anything else goes the checked way."""
        every: list[Variable] = []
        dtypes = set()
        for item in pairs:
            if not isinstance(item, (tuple, list)) or len(item) != 2 or not isinstance(item[1], Variable):
                return None
            grad, variable = item
            if grad is not None:
                if (
                    grad.__class__ is not Tensor
                    or grad.dtype != variable.dtype
                    or grad.shape != variable.shape
                ):
                    return None
                dtypes.add(variable.dtype)
            every.append(variable)
        if len(dtypes) != 1 or next(iter(dtypes)).kind != "f" or self._inline_config(every) is None:
            return None
        return every

    def _traced_update(self, pairs: list[tuple[Any, Variable]]) -> Variable:
        """The step as a trace writes it: the learning rate read from a Variable (a float rate)
        or from a host call (a schedule), the update as ops (the planned replay writes them
        into the gradients' buffers), and a guard that traces again when the optimizer's
        configuration no longer gives this update."""
        every = [variable for _, variable in pairs]
        if any(id(v) not in self._positions for v in every):
            self._register(every)
        grads = [grad for grad, _ in pairs if grad is not None]
        variables = [variable for grad, variable in pairs if grad is not None]
        # The attributes _inline_config read: while they hold, it would choose the same again.
        names = (
            "weight_decay",
            "clipnorm",
            "clipvalue",
            "global_clipnorm",
            "_rate_is_float",
            "_no_decay_ids",
            "_no_decay_pattern",
        )
        check = unchanged(
            *[(self, name) for name in names + self._inline_attributes()],
            *[(v, "constraint") for v in every],
        )
        # A host call earlier in the call may change them: then the replay updates as eager code.
        with guarded(check, self._apply_lent, pairs):
            dtype = variables[0].dtype
            rate = (
                self._rate_variable(dtype)
                if isinstance(self._learning_rate, float)
                else host_call(self._rate, dtype)
            )
            with pause_recording():
                if self.weight_decay:
                    factor = host_call(self._decay_factor, dtype)
                    for variable in variables:
                        if self._use_weight_decay(variable):
                            variable.assign_sub(variable * factor)
                self._inline_update(grads, variables, rate)
                self._iterations.assign_add(_ONE)
        return self._iterations

    def _decay_factor(self, dtype: np.dtype) -> Tensor:
        """This step's ``learning_rate * weight_decay``, as a 0-d Tensor of ``dtype``."""
        rate = self._learning_rate_at(int(self._iterations._value))
        return _wrap(np.asarray(rate * (self.weight_decay or 0.0), dtype))

    def _owns_update_step(self, cls: type[Optimizer]) -> bool:
        """Whether ``update_step`` is ``cls``'s own (not a subclass's or the instance's), so
        that an inline update computes what eager steps compute."""
        return getattr(self.update_step, "__func__", None) is cls.update_step

    def _set_learning_rate(self, value: float | schedules.LearningRateSchedule | Callable[..., Any]) -> None:
        self._learning_rate = value
        self._rate_is_float = isinstance(value, float)  # what a traced update's guard watches
        if isinstance(value, float):
            for dtype, rate in self._rates.items():
                rate._value = np.asarray(value, dtype)  # a new array: never written in place, never traced

    def _rate_variable(self, dtype: np.dtype) -> Variable:
        """A float learning rate as a 0-d Variable of ``dtype`` (as a ufunc casts it), which
        follows every change of the rate: a traced update reads it instead of calling Python."""
        rate = self._rates.get(dtype)
        if rate is None:
            rate = self._rates[dtype] = Variable(np.asarray(self._learning_rate, dtype), trainable=False)
        return rate

    def _rate(self, dtype: np.dtype) -> Tensor:
        """The learning rate of this step, as a 0-d Tensor of ``dtype`` (as a ufunc casts it)."""
        return _wrap(np.asarray(self._learning_rate_at(int(self._iterations._value)), dtype))

    def _replay_lent(
        self, grads_and_vars: list[tuple[Any, Variable]], scratch: tuple[np.ndarray, ...] = ()
    ) -> Variable:
        """``_apply_lent`` as a ``tp.function`` replay calls it (see ``host_call``'s ``replay``):
        the trace's call checked these pairs and registered their variables, and a replay's
        gradients have the trace's shapes and dtypes, so only the step itself runs."""
        grads: list[np.ndarray] = []
        variables: list[Variable] = []
        lent = {id(array) for array in scratch}
        for grad, variable in grads_and_vars:
            if grad is not None:
                if grad.__class__ is not Tensor or grad._value.dtype != variable._value.dtype:
                    grads.append(_gradient_array(grad, variable))
                elif id(grad._value) in lent:
                    grads.append(grad._value)  # lent: update_step may write into it anyway
                else:
                    grads.append(grad.numpy())  # read-only, as eager updates get it
                variables.append(variable)
        self._lent = scratch
        try:
            return self._update(grads, variables)
        finally:
            self._lent = ()

    def _lent_gradient(self, gradient: np.ndarray) -> np.ndarray | None:
        """``gradient``'s own array, writable, when the caller lent it for this step (see
        ``_apply_lent``), else ``None``: then the gradient is the caller's, never written."""
        base = gradient.base
        for array in self._lent:
            if gradient is array:
                return array
            if base is array and gradient.shape == array.shape and gradient.dtype == array.dtype:
                return array
        return None

    def _work(self, like: np.ndarray, index: int = 0) -> np.ndarray:
        """Work array ``index`` for an update of ``like``'s shape and dtype: a view of a buffer the
        optimizer keeps (one per index and dtype, shared by all variables, as large as the
        largest), so that a step allocates nothing. Valid until the next ``_work`` of ``index``."""
        key = (index, like.shape, like.dtype)
        view = self._work_views.get(key)
        if view is None:
            flat = self._work_flat.get((index, like.dtype))
            if flat is None or flat.size < like.size:
                flat = self._work_flat[(index, like.dtype)] = np.empty(like.size, like.dtype)
                for stale in [k for k in self._work_views if k[0] == index and k[2] == like.dtype]:
                    del self._work_views[stale]
            view = self._work_views[key] = flat[: like.size].reshape(like.shape)
        return view

    def apply(self, grads: Sequence[Any], trainable_variables: Sequence[Variable] | None = None) -> Variable:
        """Keras 3's form: ``apply_gradients(zip(grads, trainable_variables))``.

        Without ``trainable_variables``, the variables the optimizer was built with, in order.
        """
        if trainable_variables is None:
            trainable_variables = list(self._variables)
        grads, trainable_variables = list(grads), list(trainable_variables)
        if len(grads) != len(trainable_variables):
            raise ValueError(f"apply: got {len(grads)} gradients for {len(trainable_variables)} variables")
        return self.apply_gradients(zip(grads, trainable_variables))

    def minimize(
        self,
        loss: Tensor | Callable[[], Tensor],
        var_list: Sequence[Variable] | Callable[[], Sequence[Variable]],
        tape: GradientTape | None = None,
    ) -> Variable:
        """Computes the gradients of ``loss`` for ``var_list`` and applies them.

        Args:
            loss: a scalar Tensor recorded on ``tape``, or a zero-argument callable that
                computes it (then evaluated under a new tape that watches ``var_list``).
            var_list: the variables to update, or a zero-argument callable returning them.
            tape: the tape that recorded ``loss`` (needed when ``loss`` is a Tensor).

        Returns:
            ``iterations``, after the increment.
        """
        if callable(var_list) and not isinstance(var_list, (list, tuple)):
            var_list = var_list()
        var_list = list(var_list)
        if callable(loss) and not isinstance(loss, Tensor):
            with GradientTape() as tape:
                tape.watch(var_list)
                loss = loss()
        elif tape is None:
            raise ValueError(
                "minimize: `tape` is required when `loss` is a Tensor; pass the GradientTape that "
                "recorded it, or pass `loss` as a zero-argument callable"
            )
        grads = tape.gradient(loss, var_list)
        return self.apply_gradients(zip(grads, var_list))

    # -- state ---------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """The optimizer's state as plain values, for checkpoints (JSON + npz friendly).

        Returns:
            ``{"iterations": int, "learning_rate": float (only for a float learning rate),
            "<slot>/<position>": ndarray, ...}``, e.g. ``"momentum/0"``; positions number
            variables in the order the optimizer first saw them. Arrays are copies.
        """
        state: dict[str, Any] = {"iterations": int(self._iterations)}
        if isinstance(self._learning_rate, float):
            state["learning_rate"] = self._learning_rate
        for position, slots in enumerate(self._slots):
            for name, slot in slots.items():
                state[f"{name}/{position}"] = slot.numpy()
        for position, arrays in sorted(self._restored.items()):
            for name, array in arrays.items():
                state[f"{name}/{position}"] = array.copy()
        return state

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restores what ``get_state`` returned; the optimizer then continues exactly.

        Slots are matched to variables by position: the order in which this optimizer
        first sees (or was built with) the variables must be the one of the run that
        saved the state. Slots for variables not seen yet wait until they are. Arrays may
        come back from npz as 0-d arrays for the numbers.

        Raises:
            ValueError: an entry is missing, unexpected, or of the wrong shape (all checked
                before anything changes).
        """
        iterations, learning_rate, by_position = self._parsed_state(state)
        restored: dict[int, dict[str, np.ndarray]] = {}
        for position, arrays in by_position.items():
            if position < len(self._variables):
                variable = self._variables[position]
                for name, array in arrays.items():
                    _check_slot_shape(name, position, array, variable)
            else:
                restored[position] = {name: a.copy() for name, a in arrays.items()}
        # Everything checked: now change the state.
        self._iterations.assign(np.int64(iterations))
        if learning_rate is not None:
            self._set_learning_rate(learning_rate)
        initial = self.slot_initial_values()
        for position, slots in enumerate(self._slots):
            saved = by_position.get(position)
            for name, slot in slots.items():
                if saved is None:  # saved before this variable was first seen
                    slot.assign(np.full(slot.shape, initial[name], slot.dtype))
                else:
                    slot.assign(np.asarray(saved[name], slot.dtype))
        self._restored = restored

    def check_state(self, state: Mapping[str, Any], variables: Iterable[Variable] | None = None) -> None:
        """Checks ``state`` as ``set_state`` would take it, changing nothing.

        Args:
            state: what ``get_state`` returned (from a file, say).
            variables: the variables this optimizer will update, in the order it will first
                see them (a model's ``trainable_variables``); each saved slot must then belong
                to one of them and have its shape, as ``set_state`` checks for the variables
                seen already.

        Raises:
            ValueError: the first entry that ``set_state`` would refuse or that does not fit
                ``variables`` (named).
        """
        _, _, by_position = self._parsed_state(state)
        if variables is None:
            return
        variables = list(variables)
        for position, arrays in sorted(by_position.items()):
            if position >= len(variables):
                raise ValueError(
                    f"set_state: the state holds slots for variable {position}, but there are "
                    f"{len(variables)} variables to update"
                )
            for name, array in arrays.items():
                _check_slot_shape(name, position, array, variables[position])

    def _parsed_state(
        self, state: Mapping[str, Any]
    ) -> tuple[int, float | None, dict[int, dict[str, np.ndarray]]]:
        """``state``'s iterations, float learning rate (or ``None``) and slots by position."""
        if not isinstance(state, Mapping):
            raise TypeError(f"set_state expects the dict get_state returned, got {type(state).__name__}")
        if "iterations" not in state:
            raise ValueError("set_state: the state has no 'iterations' entry")
        iterations = _state_int("iterations", state["iterations"])
        if iterations < 0:
            raise ValueError(f"set_state: 'iterations' must be a count of steps (>= 0), got {iterations}")
        learning_rate = None
        if "learning_rate" in state:
            if not isinstance(self._learning_rate, float):
                raise ValueError(
                    "set_state: the state holds a float 'learning_rate' but this optimizer uses the "
                    f"schedule {shown(self._learning_rate)}"
                )
            learning_rate = _config.check_float("learning_rate", state["learning_rate"], low=0, finite=True)
        return (
            iterations,
            learning_rate,
            _parse_state_slots(state, self.get_slot_names(), type(self).__name__),
        )

    # -- configs ---------------------------------------------------------------

    def get_config(self) -> dict[str, Any]:
        """The constructor's keyword arguments (a schedule in its config-dict form; a plain
        callable learning rate is returned as is, so such a config is not plain data)."""
        lr = self._learning_rate
        config_lr = schedules.serialize(lr) if isinstance(lr, schedules.LearningRateSchedule) else lr
        return {
            "name": self.name,
            "learning_rate": config_lr,
            "weight_decay": self.weight_decay,
            "clipnorm": self.clipnorm,
            "clipvalue": self.clipvalue,
            "global_clipnorm": self.global_clipnorm,
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Optimizer:
        """An optimizer from the keyword arguments ``get_config`` returned."""
        return cls(**config)

    def __repr__(self) -> str:
        return f"<tp.optimizers.{type(self).__name__} '{self.name}' learning_rate={self._learning_rate!r}>"

    # -- internals ---------------------------------------------------------------

    def _learning_rate_at(self, step: int) -> float:
        lr = self._learning_rate
        if isinstance(lr, float):
            return lr
        fn: Callable[..., Any] = lr  # a schedule, or a callable of the step or of nothing
        value = fn(step) if _takes_step(fn) else fn()
        return float(value)

    def _checked_pairs(
        self, grads_and_vars: Iterable[tuple[Any, Variable]]
    ) -> tuple[list[np.ndarray], list[Variable], list[Variable]]:
        """The gradients and their variables without the ``None`` pairs, and every variable in order."""
        try:
            items = list(grads_and_vars)
        except TypeError:
            raise TypeError(
                "apply_gradients expects an iterable of (gradient, variable) pairs such as "
                f"zip(grads, variables), got {type(grads_and_vars).__name__}"
            ) from None
        if not items:
            raise ValueError("apply_gradients: got no (gradient, variable) pairs")
        grads: list[np.ndarray] = []
        variables: list[Variable] = []
        missing: list[Variable] = []
        every: list[Variable] = []
        for i, item in enumerate(items):
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise TypeError(
                    f"apply_gradients: entry {i} is not a (gradient, variable) pair: {type(item).__name__}"
                )
            grad, variable = item
            every.append(_check_variable(variable, i))
            if grad is None:
                missing.append(variable)
                continue
            grads.append(_gradient_array(grad, variable))
            variables.append(variable)
        if not variables:
            names = ", ".join(repr(v.name) for v in missing)
            raise ValueError(
                f"apply_gradients: no gradients provided for any variable ({names}); the loss does not "
                "depend on them as recorded (check that it was computed inside the GradientTape from "
                "these variables with tapefit ops)"
            )
        unwarned = [v for v in missing if id(v) not in self._warned_missing]
        if unwarned:
            self._warned_missing.update(id(v) for v in unwarned)
            logger.warning(
                "Gradients do not exist for variables %s when minimizing the loss; they are not updated",
                [v.name for v in unwarned],
            )
        return grads, variables, every

    def _register(self, variables: list[Variable]) -> None:
        """Gives new variables their positions and slots (restored ones if set_state left some)."""
        unique = {id(v): v for v in variables if id(v) not in self._positions}
        variables = list(unique.values())
        start = len(self._variables)
        for offset, variable in enumerate(variables):  # check all before changing anything
            for name, array in self._restored.get(start + offset, {}).items():
                _check_slot_shape(name, start + offset, array, variable)
        initial = self.slot_initial_values()
        for variable in variables:
            position = len(self._variables)
            restored = self._restored.pop(position, {})
            slots = {}
            for name, value in initial.items():
                if name in restored:
                    array = np.asarray(restored[name], variable.dtype)
                else:
                    array = np.full(variable.shape, value, variable.dtype)
                slots[name] = Variable(array, trainable=False, name=f"{variable.name}/{name}")
            self._variables.append(variable)
            self._positions[id(variable)] = position
            self._slots.append(slots)

    def _slots_of(self, variable: Variable) -> dict[str, Variable]:
        return self._slots[self._positions[id(variable)]]

    def _clip(self, grads: list[np.ndarray]) -> list[np.ndarray]:
        if self.clipnorm is not None:
            grads = [clip_by_norm(g, self.clipnorm) for g in grads]
        elif self.global_clipnorm is not None:
            grads = clip_by_global_norm(grads, self.global_clipnorm)
        elif self.clipvalue is not None:
            grads = [np.clip(g, -self.clipvalue, self.clipvalue) for g in grads]
        return [np.asarray(g) for g in grads]  # NumPy gives scalars for 0-d arrays; update steps need arrays

    def _use_weight_decay(self, variable: Variable) -> bool:
        if id(variable) in self._no_decay_ids:
            return False
        return self._no_decay_pattern is None or self._no_decay_pattern.search(variable.name) is None

    def _apply_weight_decay(self, variables: list[Variable], learning_rate: float) -> None:
        if not self.weight_decay:
            return
        factor = learning_rate * self.weight_decay
        for variable in variables:
            if self._use_weight_decay(variable):
                # No local name for the array: assign_sub writes in place only if nothing else holds it.
                variable.assign_sub(
                    np.multiply(value_array(variable), factor, out=self._work(value_array(variable)))
                )


# The increment of ``iterations``: an array of its dtype, which ``assign_add`` takes as it is.
_ONE = np.int64(1)


def _apply_constraints(variables: list[Variable]) -> None:
    """Assigns ``variable.constraint(variable)`` to each updated variable that has a constraint,
    after every update of the step (Keras 3's ``optimizer.apply``), whatever the optimizer."""
    for variable in variables:
        constraint = variable.constraint
        if constraint is not None:
            value = constraint(variable)
            array = value._value if isinstance(value, Tensor) else np.asarray(value)
            variable.assign(np.asarray(array, dtype=value_array(variable).dtype))


def _learning_rate_arg(value: Any) -> float | schedules.LearningRateSchedule | Callable[..., Any]:
    if isinstance(value, Mapping):
        return schedules.get(value)
    if isinstance(value, schedules.LearningRateSchedule):
        return value
    if callable(value) and not isinstance(value, Tensor):
        return value
    return _config.check_float("learning_rate", value, low=0, finite=True)


def _takes_step(fn: Callable[..., Any]) -> bool:
    """Whether a learning-rate callable takes the step (a schedule) or nothing (Keras 3's callables)."""
    if isinstance(fn, schedules.LearningRateSchedule):
        return True
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
        and (p.default is p.empty or p.kind is p.VAR_POSITIONAL)
        for p in parameters
    )


def _optional_positive(name: str, value: Any) -> float | None:
    return None if value is None else _config.check_float(name, value, low=0.0, low_open=True)


def _check_variable(variable: Any, index: int) -> Variable:
    if not isinstance(variable, Variable):
        hint = (
            " (a tp.Tensor is immutable; optimizers update tp.Variable objects)"
            if isinstance(variable, Tensor)
            else ""
        )
        raise TypeError(
            f"entry {index}: expected a tp.Variable to update, got {type(variable).__name__}{hint}"
        )
    if variable.dtype.kind != "f":
        raise TypeError(
            f"variable '{variable.name}' has dtype {variable.dtype.name}; optimizers update floating variables only"
        )
    return variable


def _gradient_array(grad: Any, variable: Variable) -> np.ndarray:
    """The gradient as an ndarray in the variable's dtype (never the caller's array written to)."""
    if isinstance(grad, (Tensor, np.ndarray, np.generic)):
        array = np.asarray(grad)
        if array.dtype.kind != "f":
            raise TypeError(
                f"the gradient for variable '{variable.name}' has dtype {array.dtype.name}; gradients must be floating"
            )
    else:
        try:
            array = np.asarray(grad, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(
                f"the gradient for variable '{variable.name}' must be a Tensor, ndarray or list of numbers, "
                f"got {type(grad).__name__}"
            ) from None
    if array.shape != variable.shape:
        raise ValueError(
            f"the gradient for variable '{variable.name}' has shape {array.shape}, "
            f"but the variable has shape {variable.shape}"
        )
    return array if array.dtype == variable.dtype else array.astype(variable.dtype)


def _check_slot_shape(name: str, position: int, array: np.ndarray, variable: Variable) -> None:
    if array.shape != variable.shape:
        raise ValueError(
            f"set_state: slot '{name}/{position}' has shape {array.shape}, but the variable at position "
            f"{position} ('{variable.name}') has shape {variable.shape}; slots are matched to variables in "
            "the order the optimizer first saw them"
        )


def _state_int(key: str, value: Any) -> int:
    array = np.asarray(value)
    if array.shape != () or array.dtype.kind not in "iu":
        raise ValueError(f"set_state: {shown(key)} must be an integer, got {shown(value)}")
    return int(array)


def _slot_key(key: str) -> tuple[str, int] | None:
    name, sep, position = key.rpartition("/")
    if not sep or not position.isdigit():
        return None
    return name, int(position)


def _parse_state_slots(
    state: Mapping[str, Any], slot_names: list[str], kind: str
) -> dict[int, dict[str, np.ndarray]]:
    by_position: dict[int, dict[str, np.ndarray]] = {}
    unexpected = []
    for key, value in state.items():
        if key in ("iterations", "learning_rate"):
            continue
        parsed = _slot_key(str(key))
        if parsed is None or parsed[0] not in slot_names:
            unexpected.append(key)
            continue
        array = np.asarray(value)
        if array.dtype.kind != "f":
            raise ValueError(
                f"set_state: slot {shown(key)} must be a floating array, got dtype {array.dtype.name}"
            )
        by_position.setdefault(parsed[1], {})[parsed[0]] = array
    if unexpected:
        raise ValueError(
            f"set_state: unexpected entries {unexpected} for {kind}, which keeps the slots {slot_names} "
            "(keys '<slot>/<position>') besides 'iterations' and 'learning_rate'"
        )
    for position, arrays in sorted(by_position.items()):
        absent = [f"{name}/{position}" for name in slot_names if name not in arrays]
        if absent:
            raise ValueError(f"set_state: the state is missing {absent}")
    return by_position
