"""The terminate_on_nan plugin: stops at the first non-finite loss; the last good checkpoint stays."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import tapefit as tp
from tapefit.plugins.checkpoint import load_checkpoint
from tapefit.plugins.terminate_on_nan import TerminateOnNaN


def test_stops_at_the_first_non_finite_loss_and_names_the_step(tmp_path, make_trainer, make_data, caplog):
    x, y = make_data(12)
    x = x.copy()
    x[7] = np.nan  # in the second batch (batch size 4, no shuffling)
    folder = tmp_path / "ckpt"
    plugin = TerminateOnNaN()
    trainer = make_trainer([plugin, {"type": "checkpoint", "dirpath": str(folder), "every_n_steps": 1}])
    history = trainer.fit(x, y, epochs=3, batch_size=4, shuffle=False)
    assert plugin.stopped_step == 1
    assert trainer.step == 2  # ended after the bad batch
    assert np.isnan(history.history["loss"][0])
    assert "step 1 (epoch 1, batch 1): loss is nan, terminating training" in caplog.text
    # The step-2 state has NaN weights: never saved, so `last` is the good step-1 checkpoint.
    assert (folder / "last").read_text().strip() == "epoch0000-step00000001.npz"
    assert load_checkpoint(folder)["trainer"]["step"] == 1


def test_finite_losses_train_on(make_trainer, make_data):
    x, y = make_data(12)
    plugin = TerminateOnNaN()
    trainer = make_trainer([plugin])
    trainer.fit(x, y, epochs=2, batch_size=4)
    assert plugin.stopped_step is None and trainer.step == 6


def test_raise_error_raises_naming_the_step_and_ends_no_fit_gracefully(tmp_path, make_trainer, make_data):
    x, y = make_data(12)
    x = x.copy()
    x[7] = np.nan
    ended = []

    class Ends:
        @tp.hookimpl
        def on_fit_end(self):
            ended.append("on_fit_end")

        @tp.hookimpl
        def on_exception(self, exception):
            ended.append(type(exception).__name__)

    folder = tmp_path / "ckpt"
    trainer = make_trainer(
        [TerminateOnNaN(raise_error=True), Ends(), {"type": "checkpoint", "dirpath": str(folder)}]
    )
    with pytest.raises(
        RuntimeError, match=r"^terminate_on_nan: the loss is nan at step 1 \(epoch 1, batch 1\)$"
    ):
        trainer.fit(x, y, epochs=3, batch_size=4, shuffle=False)
    assert ended == ["RuntimeError"]  # as Keras's raise_error: no on_fit_end
    assert not (folder / "interrupted.npz").exists()  # the update with NaN was applied: nothing whole to save
    with pytest.raises(TypeError, match="raise_error must be true or false"):
        TerminateOnNaN(raise_error="yes")


def test_a_custom_steps_non_finite_named_loss_stops_the_fit(caplog):
    class TwoLosses(tp.Model):
        def __init__(self):
            super().__init__()
            self.dense = tp.layers.Dense(1)

        def call(self, x):
            return self.dense(x)

        def train_step(self, data):
            with tp.GradientTape() as tape:
                d_loss = tp.reduce_mean(self(data) ** 2)
            self.optimizer.apply(tape.gradient(d_loss, self.trainable_variables), self.trainable_variables)
            return {"d_loss": d_loss, "g_loss": float("nan") if self.optimizer.iterations >= 2 else 1.0}

    trainer = tp.Trainer(TwoLosses(), "sgd", plugins=["terminate_on_nan"])
    with caplog.at_level(logging.WARNING, logger="tapefit.plugins.terminate_on_nan"):
        trainer.fit(np.ones((8, 2), np.float32), epochs=3, batch_size=2, verbose=0)
    assert trainer.step == 2  # the second step logged g_loss NaN, and the fit ended after it
    assert "g_loss is nan" in caplog.text
