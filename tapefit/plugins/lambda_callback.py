"""The ``lambda_callback`` plugin: plain functions called at a fit's events, as Keras's ``LambdaCallback``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tapefit.core.naming import configured_callable, suggest_keywords
from tapefit.plugins.hookspecs import hookimpl

_Fn = Callable[..., Any] | str | None


@suggest_keywords
class LambdaCallback:
    """Calls plain functions at a fit's events (config name ``lambda_callback``), with Keras's
    ``LambdaCallback`` names and arguments.

    ``epoch`` and ``batch`` count from 0; ``batch`` is the batch's index in its epoch; ``logs``
    are the dicts the hooks get (a batch's start has none: ``{}``). Each function may be the
    import path of a ``@tp.configurable`` function in a config. For anything these do not
    cover, write a plugin with ``@tp.hookimpl`` methods.

    Args:
        on_epoch_begin: ``(epoch, logs)`` at each epoch's start.
        on_epoch_end: ``(epoch, logs)`` at each epoch's end, with the epoch's logs.
        on_train_begin: ``(logs)`` when ``fit`` starts.
        on_train_end: ``(logs)`` when ``fit`` ends well, with the last epoch's logs.
        on_train_batch_begin: ``(batch, logs)`` before each training batch.
        on_train_batch_end: ``(batch, logs)`` after each training batch.
    """

    plugin_name = "lambda_callback"
    # no adds_log_keys (hookspecs.py): its functions may add any key to the epoch's logs

    def __init__(
        self,
        on_epoch_begin: _Fn = None,
        on_epoch_end: _Fn = None,
        on_train_begin: _Fn = None,
        on_train_end: _Fn = None,
        on_train_batch_begin: _Fn = None,
        on_train_batch_end: _Fn = None,
    ) -> None:
        given = {
            "on_epoch_begin": on_epoch_begin,
            "on_epoch_end": on_epoch_end,
            "on_train_begin": on_train_begin,
            "on_train_end": on_train_end,
            "on_train_batch_begin": on_train_batch_begin,
            "on_train_batch_end": on_train_batch_end,
        }
        self.functions = {
            name: configured_callable(fn, f"lambda_callback: {name}")
            for name, fn in given.items()
            if fn is not None
        }
        self._last_logs: dict[str, float] = {}

    def _call(self, name: str, *args: Any) -> None:
        fn = self.functions.get(name)
        if fn is not None:
            fn(*args)

    @hookimpl
    def on_fit_start(self) -> None:
        self._last_logs = {}
        self._call("on_train_begin", {})

    @hookimpl
    def on_epoch_start(self, epoch: int) -> None:
        self._call("on_epoch_begin", epoch, {})

    @hookimpl
    def on_train_batch_start(self, trainer: Any) -> None:
        self._call("on_train_batch_begin", trainer.batch_in_epoch, {})

    @hookimpl
    def on_train_batch_end(self, trainer: Any, logs: dict[str, float]) -> None:
        self._call("on_train_batch_end", trainer.batch_in_epoch - 1, logs)

    @hookimpl
    def on_epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
        self._last_logs = logs
        self._call("on_epoch_end", epoch, logs)

    @hookimpl
    def on_fit_end(self) -> None:
        self._call("on_train_end", dict(self._last_logs))


KERAS_METHODS = {
    "on_train_begin": "on_train_begin",
    "on_train_end": "on_train_end",
    "on_epoch_begin": "on_epoch_begin",
    "on_epoch_end": "on_epoch_end",
    "on_train_batch_begin": "on_train_batch_begin",
    "on_train_batch_end": "on_train_batch_end",
    "on_batch_begin": "on_train_batch_begin",  # Keras's older names for the training batches
    "on_batch_end": "on_train_batch_end",
}
# and on_test_* and on_predict_*, which KerasCallback calls itself
"""A Keras callback's methods that a fit calls, by the ``LambdaCallback`` argument they fill."""


class KerasCallback(LambdaCallback):
    """A Keras-style callback object (``on_epoch_end(epoch, logs)``, ``on_batch_end(batch,
    logs)``, ... without ``@tp.hookimpl``) run as Keras runs it: ``fit(callbacks=[...])`` wraps
    such an object in this plugin. Before the fit starts the object gets ``set_model(model)``
    and ``set_params(params)`` when it has them, else the ``model`` and ``params`` attributes,
    as ``keras.callbacks.Callback`` holds them.

    Args:
        callback: the object.
    """

    plugin_name = "keras_callback"

    def __init__(self, callback: Any) -> None:
        methods: dict[str, Any] = {}
        for name, argument in KERAS_METHODS.items():
            method = getattr(callback, name, None)
            if callable(method) and argument not in methods:
                methods[argument] = method
        super().__init__(**methods)
        self.callback = callback

    @hookimpl(tryfirst=True)
    def on_fit_start(self, trainer: Any) -> None:  # type: ignore[override]
        params = dict(trainer.history.params)
        for name, value in (("model", trainer.model), ("params", params)):
            setter = getattr(self.callback, f"set_{name}", None)
            if callable(setter):
                setter(value)
            else:
                setattr(self.callback, name, value)
        super().on_fit_start()

    def _keras(self, name: str, *args: Any) -> None:
        method = getattr(self.callback, name, None)
        if callable(method):
            method(*args)

    @hookimpl
    def on_test_start(self) -> None:
        self._keras("on_test_begin", {})

    @hookimpl
    def on_test_batch_start(self, batch: int) -> None:
        self._keras("on_test_batch_begin", batch, {})

    @hookimpl
    def on_test_batch_end(self, batch: int, logs: dict[str, float]) -> None:
        self._keras("on_test_batch_end", batch, logs)

    @hookimpl
    def on_test_end(self, logs: dict[str, float]) -> None:
        self._keras("on_test_end", logs)

    @hookimpl
    def on_predict_start(self) -> None:
        self._keras("on_predict_begin", {})

    @hookimpl
    def on_predict_batch_start(self, batch: int) -> None:
        self._keras("on_predict_batch_begin", batch, {})

    @hookimpl
    def on_predict_batch_end(self, batch: int, outputs: Any) -> None:
        self._keras("on_predict_batch_end", batch, {"outputs": outputs})

    @hookimpl
    def on_predict_end(self) -> None:
        self._keras("on_predict_end", {})
