"""Keras's training methods on ``tp.Module``: the step methods and what a step reaches.

A model subclass overrides ``train_step(data)``, ``test_step(data)`` or ``predict_step(data)``
as with ``keras.Model``; ``tp.Trainer`` (and ``model.fit``) runs them. Inside a step the model
reaches what its trainer holds by Keras's names: ``self.optimizer``, ``self.compute_loss``,
``self.compute_metrics``, ``self.metrics`` and ``self.reset_metrics``. The trainer binds
itself to the model when it is made and when its ``fit``, ``evaluate`` or ``predict`` starts;
``compile`` makes one. The training package stands above the layers, so it is imported only
inside the methods that make a trainer.
"""

from __future__ import annotations

import weakref
from typing import Any

__all__ = ["TrainingMethods", "held_metrics", "held_optimizers"]

# What the trainer keeps on a model: not the model's own metrics.
_NOT_HELD = frozenset(["_trainer", "_compiled", "_optimizer"])


def _is_metric(value: Any) -> bool:
    return all(callable(getattr(value, m, None)) for m in ("update_state", "result", "reset_state"))


def held_metrics(root: Any) -> list[Any]:
    """The metric objects held as attributes (or in lists, tuples and dict values of them) of
    ``root`` and its submodules, each once, in attribute order (Keras 3 tracks them so)."""
    found: list[Any] = []
    seen: set[int] = set()
    for module in (root, *root.submodules):
        for key, value in vars(module).items():
            if key in _NOT_HELD:
                continue
            items = (
                value.values()
                if isinstance(value, dict)
                else value
                if isinstance(value, (list, tuple))
                else (value,)
            )
            for item in items:
                if _is_metric(item) and id(item) not in seen:
                    seen.add(id(item))
                    found.append(item)
    return found


def _is_optimizer(value: Any) -> bool:
    return hasattr(value, "apply_gradients") and hasattr(value, "get_state") and not isinstance(value, type)


def held_optimizers(model: Any) -> dict[str, Any]:
    """The optimizers ``model`` and the modules below it hold as attributes, directly or in
    lists, tuples and dict values, each once, in attribute order; not the trainer's, nor one
    assigned to ``model.optimizer``. Checkpoints and model files keep their states by these
    names: the attribute path from the model, joined by dots (``d_optimizer``,
    ``encoder.optimizer``, ``optimizers.0``), which depends on the model's structure only."""
    from tapefit.layers.module import _INTERNAL, Module

    found: dict[str, Any] = {}
    seen: set[int] = {id(model)}
    stack: list[tuple[str, Any]] = [("", model)]
    while stack:
        prefix, owner = stack.pop(0)
        items = (
            list(owner.items())
            if isinstance(owner, dict)
            else list(enumerate(owner))
            if isinstance(owner, (list, tuple))
            else [(k, v) for k, v in vars(owner).items() if k not in _NOT_HELD and k not in _INTERNAL]
            if hasattr(owner, "__dict__")
            else []
        )
        for key, value in items:
            name = f"{prefix}{key}"
            if _is_optimizer(value):
                if all(value is not o for o in found.values()):
                    found[name] = value
            elif isinstance(value, (Module, list, tuple, dict)) and id(value) not in seen:
                seen.add(id(value))
                stack.append((name + ".", value))
    return found


class TrainingMethods:
    """Keras's ``Model`` training methods, mixed into ``tp.Module``."""

    __dict__: dict[str, Any]

    # -- the trainer a step reaches ---------------------------------------------

    def _bind_trainer(self, trainer: Any) -> None:
        """Makes ``trainer`` the one this model's step methods reach (a weak reference: a model
        does not keep its trainer alive, and copies of the model share none)."""
        self.__dict__["_trainer"] = weakref.ref(trainer)

    def _trainer_for(self, what: str) -> Any:
        ref = self.__dict__.get("_trainer")
        trainer = ref() if ref is not None else None
        if trainer is None:
            raise RuntimeError(
                f"{type(self).__name__}.{what} needs a trainer: call model.compile(...) first, or make a "
                "tp.Trainer(model, ...) and use it within its fit, evaluate or predict"
            )
        return trainer

    @property
    def optimizer(self) -> Any:
        """The trainer's optimizer (``compile``'s, or ``Trainer(optimizer=...)``), or one assigned
        here; ``None`` without either."""
        if "_optimizer" in self.__dict__:
            return self.__dict__["_optimizer"]
        ref = self.__dict__.get("_trainer")
        trainer = ref() if ref is not None else None
        return None if trainer is None else trainer.optimizer

    @optimizer.setter
    def optimizer(self, value: Any) -> None:
        self.__dict__["_optimizer"] = value

    @property
    def metrics(self) -> list[Any]:
        """The metrics a step updates and ``fit`` resets each epoch, as Keras lists them: the
        trainer's loss tracker (named ``loss``) and its compiled metrics as one entry (named
        ``compile_metrics``, whose ``result()`` is a dict), then the metric objects this model
        and its layers hold as attributes."""
        ref = self.__dict__.get("_trainer")
        trainer = ref() if ref is not None else None
        compiled = [] if trainer is None else trainer.compiled_metrics()
        own = [m for m in held_metrics(self) if all(m is not c for c in compiled)]
        return [*compiled, *own]

    def reset_metrics(self) -> None:
        """Resets every metric of ``metrics``."""
        for metric in self.metrics:
            metric.reset_state()

    def compute_loss(
        self,
        x: Any = None,
        y: Any = None,
        y_pred: Any = None,
        sample_weight: Any = None,
        training: bool = True,
    ) -> Any:
        """The compiled loss of ``(y, y_pred)`` (weighted by ``sample_weight``) plus ``losses``
        (the regularization and ``add_loss`` losses of the last call), as a scalar Tensor.

        Raises:
            ValueError: there is no loss at all: no compiled loss and no ``losses``.
        """
        return self._trainer_for("compute_loss").compute_loss(x, y, y_pred, sample_weight)

    def compute_metrics(self, x: Any, y: Any, y_pred: Any, sample_weight: Any = None) -> dict[str, Any]:
        """Updates the compiled metrics with ``(y, y_pred)`` and returns the result of each metric
        of ``metrics``, the compiled ones by their own names."""
        trainer = self._trainer_for("compute_metrics")
        trainer.update_compiled_metrics(y, y_pred, sample_weight)
        return trainer.metric_results(self.metrics)

    # -- the step methods ---------------------------------------------------------

    def train_step(self, data: Any) -> dict[str, Any]:
        """One training step on a batch; returns its logs. The default: the forward pass and
        ``compute_loss`` under a ``GradientTape``, the update through ``self.optimizer``, then
        ``compute_metrics``. Override it to train another way (a GAN, a VAE)."""
        return self._trainer_for("train_step").default_train_step(data)

    def test_step(self, data: Any) -> dict[str, Any]:
        """One evaluation step on a batch (the forward pass in inference mode, the loss tracker
        and the metrics); returns its logs."""
        return self._trainer_for("test_step").default_test_step(data)

    def predict_step(self, data: Any) -> Any:
        """The outputs for a batch (``self(x, training=False)``)."""
        return self._trainer_for("predict_step").default_predict_step(data)

    # -- Keras's model habits -------------------------------------------------------

    def compile(
        self,
        optimizer: Any = "rmsprop",
        loss: Any = None,
        loss_weights: Any = None,
        metrics: Any = None,
        weighted_metrics: Any = None,
        *,
        jit_compile: bool | str = False,
        **kwargs: Any,
    ) -> None:
        """Makes the trainer ``fit``, ``evaluate`` and ``predict`` use (Keras's ``compile``, with
        its arguments in its order).

        Args:
            optimizer: an optimizer or its name (Keras's default, ``"rmsprop"``); ``None`` for
                none, when the step uses optimizers the model holds itself (a GAN's two).
            loss: as ``tp.Trainer`` takes it; ``None`` when ``add_loss`` or the step gives the loss.
            loss_weights: each output's weight in the total loss, as ``tp.Trainer`` takes them.
            metrics: as ``tp.Trainer`` takes them (updated without sample weights).
            weighted_metrics: as ``tp.Trainer`` takes them (updated with the sample weights).
            jit_compile: run the training step as a ``tp.function`` (``Trainer(compile=True)``);
                ``"jit"``: with fused kernels too (``Trainer(compile="jit")``, needs Numba).
            **kwargs: the other arguments of ``tp.Trainer`` (``plugins``, ``output_dir``, ...).
        """
        from tapefit.training import Trainer  # the training package stands above the layers

        self.__dict__["_compiled"] = Trainer(
            self,
            optimizer,
            loss,
            metrics,
            loss_weights=loss_weights,
            weighted_metrics=weighted_metrics,
            compile=jit_compile,
            **kwargs,
        )

    def _compiled_trainer(self, what: str) -> Any:
        trainer = self.__dict__.get("_compiled")
        if trainer is None:
            raise RuntimeError(f"{type(self).__name__}.{what}: call model.compile(...) first")
        return trainer

    def train_on_batch(
        self,
        x: Any,
        y: Any = None,
        sample_weight: Any = None,
        class_weight: Any = None,
        return_dict: bool = False,
    ) -> Any:
        """One training step on one batch, without plugins' hooks (``Trainer.train_on_batch``)."""
        return self._compiled_trainer("train_on_batch").train_on_batch(
            x, y, sample_weight=sample_weight, class_weight=class_weight, return_dict=return_dict
        )

    def test_on_batch(
        self, x: Any, y: Any = None, sample_weight: Any = None, return_dict: bool = False
    ) -> Any:
        """The loss and metrics of one batch (``Trainer.test_on_batch``)."""
        return self._compiled_trainer("test_on_batch").test_on_batch(
            x, y, sample_weight=sample_weight, return_dict=return_dict
        )

    def predict_on_batch(self, x: Any) -> Any:
        """The outputs for one batch (``predict`` of it as one batch)."""
        from tapefit.core import nest

        return self.predict(x, batch_size=max(1, len(nest.flatten(x)[0])))

    def fit(self, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.fit`` with the trainer ``compile`` made; returns a ``History``."""
        return self._compiled_trainer("fit").fit(*args, **kwargs)

    def evaluate(self, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.evaluate`` with the trainer ``compile`` made."""
        return self._compiled_trainer("evaluate").evaluate(*args, **kwargs)

    def predict(self, *args: Any, **kwargs: Any) -> Any:
        """``Trainer.predict`` with the trainer ``compile`` made (a model never compiled predicts
        with a trainer of its own, which needs no optimizer or loss)."""
        trainer = self.__dict__.get("_compiled")
        if trainer is None:
            from tapefit.training import Trainer

            trainer = Trainer(self, None, None)
        return trainer.predict(*args, **kwargs)
