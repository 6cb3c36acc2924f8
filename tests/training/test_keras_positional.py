"""Keras's positional order of ``fit``/``evaluate``/``predict`` is not tapefit's: the arguments
whose places differ are keyword-only, so a Keras call by position fails instead of meaning
another thing; and ``evaluate(return_dict=...)`` is taken as Keras's scripts pass it."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp


def _trainer() -> tp.Trainer:
    tp.random.set_seed(0)
    model = tp.layers.Sequential([tp.layers.Dense(2)])
    return tp.Trainer(model, "sgd", tp.losses.SparseCategoricalCrossentropy(from_logits=True))


X = np.random.default_rng(0).standard_normal((16, 3)).astype(np.float32)
Y = (X[:, 0] > 0).astype(np.int64)


def test_fit_takes_no_positional_epochs_or_batch_size():
    # Keras: fit(x, y, batch_size=8, epochs=2); tapefit's old order read epochs=8, batch_size=2
    with pytest.raises(TypeError, match="positional"):
        _trainer().fit(X, Y, 8, 2)


def test_evaluate_and_predict_take_steps_by_keyword_only():
    trainer = _trainer()
    with pytest.raises(TypeError, match="positional"):
        trainer.evaluate(X, Y, 8, 0)  # Keras: verbose=0
    with pytest.raises(TypeError, match="positional"):
        trainer.predict(X, 8, 0)  # Keras: verbose=0
    assert trainer.predict(X, 8).shape == (16, 2)
    assert sorted(trainer.evaluate(X, Y, 8)) == ["loss"]


def test_evaluate_takes_return_dict_and_refuses_the_list():
    trainer = _trainer()
    assert trainer.evaluate(X, Y, return_dict=True) == trainer.evaluate(X, Y)
    with pytest.raises(ValueError, match="return_dict=False"):
        trainer.evaluate(X, Y, return_dict=False)
