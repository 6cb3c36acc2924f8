"""fit's sample_weight and class_weight, with Keras's loss reduction."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp
from tests.plugins.conftest import make_data, make_trainer


def one_step(sample_weight=None, class_weight=None, x=None, y=None):
    x, y = make_data() if x is None else (x, y)
    trainer = make_trainer(metrics=())
    trainer.fit(
        x,
        y,
        epochs=1,
        batch_size=len(x),
        shuffle=False,
        verbose=0,
        sample_weight=sample_weight,
        class_weight=class_weight,
    )
    return trainer


def test_the_weighted_loss_is_the_weighted_sum_over_the_batch_size():
    x, y = make_data()
    weights = np.linspace(0.0, 2.0, len(x)).astype(np.float32)
    tp.random.set_seed(0)
    model = tp.layers.Dense(3)
    per_sample = tp.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")(y, model(x))
    expected = float(tp.reduce_sum(per_sample * weights)) / len(x)  # Keras's sum_over_batch_size
    trainer = tp.Trainer(model, "sgd", tp.losses.SparseCategoricalCrossentropy(from_logits=True))
    trainer.fit(x, y, epochs=1, batch_size=len(x), shuffle=False, verbose=0, sample_weight=weights)
    assert trainer.history.history["loss"][0] == pytest.approx(expected, rel=1e-5)


def test_class_weight_equals_the_sample_weight_of_each_samples_class():
    _, y = make_data()
    table = {0: 0.5, 1: 2.0, 2: 1.0}
    by_class = one_step(class_weight=table)
    by_sample = one_step(np.array([table[int(c)] for c in y], np.float32))
    a, b = by_class.model.state_dict(), by_sample.model.state_dict()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    unweighted = one_step()
    assert not np.array_equal(unweighted.model.state_dict()[next(iter(a))], a[next(iter(a))])


def test_bad_weights_are_named():
    x, y = make_data()
    with pytest.raises(ValueError, match=r"one weight per sample, shape \(24,\), got \(3,\)"):
        one_step(np.ones(3))
    with pytest.raises(ValueError, match="finite and non-negative"):
        one_step(-np.ones(len(x)))
    trainer = tp.Trainer(tp.layers.Dense(3), "sgd", lambda t, p: tp.reduce_mean(p))
    with pytest.raises(TypeError, match=r"need a tp\.losses\.Loss"):
        trainer.fit(x, y, sample_weight=np.ones(len(x)), verbose=0)
