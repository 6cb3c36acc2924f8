"""A custom metric written as Keras's guide to the built-in training methods writes one
(``CategoricalTruePositives``: ``add_variable``, ``assign_add`` in ``update_state``, ``result``
from the variable, ``reset_state``) trains inside ``fit``, eager and compiled, and resumes
from a checkpoint with its state."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import tapefit as tp


class CategoricalTruePositives(tp.metrics.Metric):
    def __init__(self, name="categorical_true_positives", **kwargs):
        super().__init__(name=name, **kwargs)
        self.true_positives = self.add_variable(shape=(), name="ctp", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = tp.reshape(tp.argmax(y_pred, axis=1), (-1, 1))
        values = tp.cast(y_true, "int32") == tp.cast(y_pred, "int32")
        values = tp.cast(values, "float32")
        if sample_weight is not None:
            sample_weight = tp.cast(sample_weight, "float32")
            values = values * sample_weight
        self.true_positives.assign_add(tp.reduce_sum(values))

    def result(self):
        return self.true_positives

    def reset_state(self):
        self.true_positives.assign(0.0)


def data(n=96, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    y = (x[:, :3].argmax(axis=1)).reshape(-1, 1)
    return x, y


def make_trainer(seed=0, **kwargs):
    tp.random.set_seed(seed)
    model = tp.layers.Sequential(
        [tp.layers.Dense(16, activation="relu"), tp.layers.Dense(3, activation="softmax")]
    )
    return tp.Trainer(
        model,
        tp.optimizers.SGD(0.1),
        "sparse_categorical_crossentropy",
        metrics=[CategoricalTruePositives()],
        **kwargs,
    )


def counted(trainer, x, y):
    predictions = trainer.model(x).numpy().argmax(axis=1)
    return float((predictions == y[:, 0]).sum())


def test_the_guides_metric_trains_eager_and_compiled_alike():
    x, y = data()
    eager = make_trainer().fit(x, y, epochs=3, batch_size=32, verbose=0, shuffle=False)
    compiled_trainer = make_trainer(compile=True)
    compiled = compiled_trainer.fit(x, y, epochs=3, batch_size=32, verbose=0, shuffle=False)
    counts = eager.history["categorical_true_positives"]
    assert counts == compiled.history["categorical_true_positives"]
    # reset each epoch: a count of this epoch's samples only, and it grows as the model learns
    assert all(0 < c <= len(x) for c in counts) and counts[-1] > counts[0]
    metric = compiled_trainer.metrics[0]
    state = metric.get_state()
    assert state["variables"][0] == pytest.approx(counts[-1])
    assert float(compiled_trainer.evaluate(x, y)["categorical_true_positives"]) == counted(
        compiled_trainer, x, y
    )


def test_the_guides_metric_resumes_from_a_checkpoint_with_its_state(tmp_path):
    x, y = data()
    reference = make_trainer()
    reference.fit(x, y, epochs=2, batch_size=32, verbose=0)

    trainer = make_trainer(plugins=[{"type": "checkpoint", "dirpath": str(tmp_path)}])
    apply = trainer.optimizer.apply_gradients
    calls = []

    def apply_with_ctrl_c(pairs):
        calls.append(1)
        if len(calls) == 5:  # epoch 2's second batch: the metric counts epoch 2's first batch
            os.kill(os.getpid(), signal.SIGINT)
        return apply(pairs)

    trainer.optimizer.apply_gradients = apply_with_ctrl_c
    with pytest.raises(KeyboardInterrupt):
        trainer.fit(x, y, epochs=2, batch_size=32, verbose=0)
    contents = tp.checkpointing.load_checkpoint(tmp_path / "interrupted.npz")
    (state,) = contents["metrics"]
    assert float(state["state"]["variables"][0]) > 0  # the interrupted epoch's count so far

    resumed = make_trainer(seed=99)
    history = resumed.fit(x, y, epochs=2, batch_size=32, verbose=0, resume_from=tmp_path / "interrupted.npz")
    assert history.history == reference.history.history
