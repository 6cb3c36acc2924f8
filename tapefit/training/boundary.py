"""The last consistent boundary of a fit, and the interrupt guard around what passes it.

Exact resume needs a checkpoint to hold a whole state, whenever it is taken. Between two
boundaries a fit is not whole: a step has read its batch and moved the random generators
before it updates the model, and an epoch's end validates and runs hooks that count a plateau
or cut a rate. ``Boundary`` keeps what a checkpoint taken there must hold instead:

* ``snapshot_step(source)`` takes the data's and the plugins' states before a batch is read;
  ``counted()`` drops them once the step is counted;
* ``with step():`` holds a Ctrl-C (SIGINT), SIGTERM or SIGHUP from the forward pass to the end
  of the step's ``on_train_batch_end`` hooks, and ``update_in_progress`` says, from the update
  on, that no state is whole (a checkpoint is then not taken);
* ``with epoch_end():`` takes the whole contents before an epoch's end; ``with committing():``
  holds interrupts around the epoch-end hooks and, once they all ran, makes the current state
  the boundary again;
* ``checkpoint_contents()`` is the state at the boundary, and ``position()`` where it resumes.

Lightning keeps restart state in its progress objects the same way.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from tapefit.training.state import TrainState

__all__ = ["STOP_SIGNALS", "Boundary", "Terminated", "raise_terminated"]


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (``signum``), raised where Ctrl-C raises ``KeyboardInterrupt``, so that
    a run they end stops as a Ctrl-C stops it: at the next safe point, with an interrupted
    checkpoint. ``train`` installs ``raise_terminated`` for them; ``fit`` then holds them as
    it holds Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


def raise_terminated(signum: int, frame: Any) -> None:
    """A signal handler that raises ``Terminated(signum)``."""
    raise Terminated(signum)


def _interruption(signum: int) -> KeyboardInterrupt:
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGINT") if hasattr(signal, name)
)
"""A scheduler's SIGTERM, a closed terminal's SIGHUP and Ctrl-C: each stops a run at its next
safe point, the same way; when processes were stopped by different ones, they agree on the first."""


class _InterruptGuard:
    """During ``fit``, holds back a Ctrl-C (SIGINT), SIGTERM or SIGHUP that arrives inside a
    critical section.

    Installed for a whole fit, and only over Python's own SIGINT handler and ``train``'s
    ``raise_terminated`` in the main thread (a program with its own handler keeps it, and
    SIGTERM's default, which ends the process, stays outside ``train``). Outside ``hold`` it
    raises at once (``KeyboardInterrupt``, or ``Terminated``), as those handlers do; inside,
    the interrupt waits for ``release``, and a second one raises at once (a step that never
    ends can still be stopped). Setting a flag per step costs nothing next to swapping
    handlers per step.
    """

    def __init__(self) -> None:
        self.hold = False
        self.held = 0  # the signal held back, or 0
        self.agree: Any = None  # with several processes: (signal held here) -> signal held on any, or 0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _InterruptGuard:
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in STOP_SIGNALS:
            ours = signal.default_int_handler if signum == signal.SIGINT else raise_terminated
            if signal.getsignal(signum) is ours:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        # With several processes every one is always holding: they stop together, at a
        # release where all agree, so none is left waiting for the others at a collective.
        if (self.hold or self.agree is not None) and not self.held:
            self.held = signum
            return
        self.held = 0  # a second signal inside the section: raised now, not again at release
        raise _interruption(signum)

    def release(self) -> None:
        """Ends a critical section; raises the interrupt that arrived inside it, if any.

        With several processes (``agree`` set) the processes first agree whether any of them
        was interrupted, and by which signal, and all raise or none; while an exception is on
        its way out, no agreement is sought (the others may never get here).
        """
        self.hold = False
        if self.agree is not None:
            if sys.exc_info()[0] is None:
                signum = self.agree(self.held)
                if signum:
                    self.held = 0
                    raise _interruption(signum)
            return
        if self.held:
            signum, self.held = self.held, 0
            raise _interruption(signum)

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        self.hold = False
        self.held = 0
        self.agree = None
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}


class Boundary:
    """The last consistent state of a fit and the interrupt guard (see the module docstring).

    Args:
        contents: the checkpoint contents of the current state (``on_save_checkpoint`` hooks
            included).
        plugin_states: the plugins' states as a checkpoint taken now would hold them.
    """

    def __init__(
        self, contents: Callable[[], dict[str, Any]], plugin_states: Callable[[], dict[str, Any]]
    ) -> None:
        self._contents = contents
        self._plugin_states = plugin_states
        self.interrupts = _InterruptGuard()
        self.update_in_progress = False
        self.before_step: dict[str, Any] | None = None
        self.before_epoch_end: dict[str, Any] | None = None

    def reset(self) -> None:
        """A new fit starts at a boundary."""
        self.before_step = self.before_epoch_end = None
        self.update_in_progress = False

    def guard(self, agree: Callable[[int], int] | None = None) -> _InterruptGuard:
        """The interrupt guard for a fit; ``agree`` (several processes) maps the signal held here
        to the one held on any process, so that all stop together."""
        self.interrupts.agree = agree
        return self.interrupts

    # -- a step ------------------------------------------------------------------

    def snapshot_step(self, source: Any) -> None:
        """Keeps the data's and the plugins' states from before a batch is read: until the step
        is counted, a checkpoint holds them, so a resume runs the step again."""
        self.before_step = {"data": source.get_state(), "plugins": self._plugin_states()}

    def no_step(self) -> None:
        """The data had no batch: nothing was read past the boundary."""
        self.before_step = None

    def counted(self) -> None:
        """The step is counted: the current position is the boundary for the data again."""
        self.before_step = None

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """From a step's forward pass to the end of its ``on_train_batch_end`` hooks: a stop
        signal waits, so an interrupted checkpoint is the state before the step or after every
        plugin saw it. On an exception ``update_in_progress`` stays set until the exception's
        hooks have run (``fit`` clears it)."""
        self.interrupts.hold = True
        try:
            yield
            self.update_in_progress = False
        finally:
            self.interrupts.release()

    def updating(self) -> None:
        """The optimizer update starts: until the step's batch-end hooks end, no state is whole
        (the plugins after a failing hook never see the step)."""
        self.update_in_progress = True

    # -- an epoch's end ----------------------------------------------------------

    @contextlib.contextmanager
    def epoch_end(self) -> Iterator[None]:
        """An epoch's end (validation, ``on_epoch_end``): a checkpoint taken inside is the state
        before it, so a resume runs it again."""
        self.before_epoch_end = self._contents()
        yield

    @contextlib.contextmanager
    def committing(self) -> Iterator[None]:
        """The epoch-end hooks and bookkeeping: a stop signal waits for them; once they all ran,
        the current state is the boundary."""
        self.interrupts.hold = True
        try:
            yield
            self.before_epoch_end = None
        finally:
            self.interrupts.release()

    # -- what a checkpoint holds ---------------------------------------------------

    def data_state(self, current: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """The data's state at the boundary (``current()`` when the fit is at one)."""
        return self.before_step["data"] if self.before_step is not None else current()

    def position(self, current: tuple[int, int, int]) -> tuple[int, int, int]:
        """``(epoch, batch in epoch, step)`` a checkpoint taken now would resume at."""
        if self.before_epoch_end is not None:
            return TrainState.from_dict(self.before_epoch_end).position()
        return current

    def checkpoint_contents(self) -> dict[str, Any]:
        """The contents of a checkpoint taken now: the state at the boundary."""
        if self.before_epoch_end is not None:
            return {**self.before_epoch_end, "plugins": dict(self.before_epoch_end["plugins"])}
        contents = self._contents()
        if self.before_step is not None:
            contents["plugins"] = self.before_step["plugins"]
        return contents
