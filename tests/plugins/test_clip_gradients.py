"""Gradient clipping: the pure functions' invariants and the plugin inside fit."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp
from tapefit.plugins.clip_gradients import (
    ClipGradients,
    clip_grads_by_global_norm,
    clip_grads_by_norm,
    clip_grads_by_value,
    global_norm,
)


def grads(scale=1.0):
    rng = np.random.default_rng(3)
    return [
        tp.constant(rng.normal(size=(3, 4)).astype(np.float32) * scale),
        None,
        tp.constant(rng.normal(size=(4,)).astype(np.float32) * scale),
    ]


def numpy_norm(gs):
    return float(np.sqrt(sum(np.sum(np.asarray(g, np.float64) ** 2) for g in gs if g is not None)))


def test_global_norm_matches_numpy_and_skips_none():
    gs = grads()
    assert float(global_norm(gs)) == pytest.approx(numpy_norm(gs), rel=1e-6)
    with pytest.raises(ValueError, match="every gradient is None"):
        global_norm([None])


def test_clip_by_global_norm_is_tp_clip_by_global_norm_and_meets_its_invariants():
    gs = grads(scale=2.0)
    clipped, norm = clip_grads_by_global_norm(gs, 1.0)
    expected, expected_norm = tp.clip_by_global_norm(gs, 1.0)
    assert float(norm) == float(expected_norm) == pytest.approx(numpy_norm(gs), rel=1e-6)
    assert clipped[1] is None
    for c, e in zip(clipped, expected):
        if e is not None:
            np.testing.assert_array_equal(c.numpy(), e.numpy())
    assert numpy_norm(clipped) == pytest.approx(1.0, rel=1e-5)  # the bound after clipping
    again, _ = clip_grads_by_global_norm(clipped, 1.0)  # idempotent
    for a, c in zip(again, clipped):
        if c is not None:
            np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-6)
    small = grads(scale=0.01)
    unchanged, _ = clip_grads_by_global_norm(small, 1.0)  # below the bound: no change
    for u, s in zip(unchanged, small):
        if s is not None:
            np.testing.assert_array_equal(u.numpy(), s.numpy())


def test_clip_by_norm_bounds_each_tensor():
    gs = grads(scale=5.0)
    clipped = clip_grads_by_norm(gs, 0.5)
    assert clipped[1] is None
    for c, g in zip(clipped, gs):
        if g is not None:
            assert np.linalg.norm(c.numpy()) == pytest.approx(0.5, rel=1e-5)
            np.testing.assert_array_equal(c.numpy(), tp.clip_by_norm(g, 0.5).numpy())
    unchanged = clip_grads_by_norm(gs, 1e6)  # TF's t * c / max(norm, c): equal up to rounding
    np.testing.assert_allclose(unchanged[0].numpy(), gs[0].numpy(), rtol=1e-6)


def test_clip_by_value_bounds_each_element():
    gs = grads(scale=3.0)
    clipped = clip_grads_by_value(gs, 0.25)
    assert clipped[1] is None
    for c, g in zip(clipped, gs):
        if g is not None:
            np.testing.assert_array_equal(c.numpy(), np.clip(g.numpy(), -0.25, 0.25))


def test_plugin_options_are_checked():
    with pytest.raises(ValueError, match="exactly one of global_norm, norm, value; got none"):
        ClipGradients()
    with pytest.raises(ValueError, match=r"got \['global_norm', 'value'\]"):
        ClipGradients(global_norm=1.0, value=1.0)
    with pytest.raises(ValueError, match="norm must be a finite number > 0, got -1"):
        ClipGradients(norm=-1)


class Snapshot:
    """Records the gradients it sees in the transform chain."""

    def __init__(self):
        self.seen = []

    @tp.hookimpl
    def transform_gradients(self, grads_and_vars):
        self.seen.append([None if g is None else np.array(g) for g, _ in grads_and_vars])


def fit(plugins, make_trainer, make_data):
    """One epoch of 3 batches; returns the batch logs."""
    x, y = make_data(12)
    trainer = make_trainer(plugins, metrics=())
    batch_logs = []

    class KeepLogs:
        @tp.hookimpl
        def on_train_batch_end(self, logs):
            batch_logs.append(dict(logs))

    trainer.plugins.register(KeepLogs())
    trainer.fit(x, y, epochs=1, batch_size=4)
    return batch_logs


def test_in_fit_gradients_after_equal_clip_by_global_norm_of_before(make_trainer, make_data):
    before, after = Snapshot(), Snapshot()
    logs = fit([before, ClipGradients(global_norm=0.05), after], make_trainer, make_data)
    assert len(before.seen) == len(after.seen) == 3
    for raw, clipped, batch_logs in zip(before.seen, after.seen, logs):
        expected, norm = tp.clip_by_global_norm([tp.constant(g) for g in raw], 0.05)
        assert norm > 0.05  # the bound really bites
        for c, e in zip(clipped, expected):
            np.testing.assert_array_equal(c, e.numpy())
        assert batch_logs["grad_global_norm"] == pytest.approx(float(norm), rel=1e-6)


def test_two_clipping_plugins_compose(make_trainer, make_data):
    before, after = Snapshot(), Snapshot()
    first, second = ClipGradients(global_norm=0.05), ClipGradients(value=0.004)
    logs = fit([before, first, second, after], make_trainer, make_data)
    for raw, clipped, batch_logs in zip(before.seen, after.seen, logs):
        by_norm, norm = tp.clip_by_global_norm([tp.constant(g) for g in raw], 0.05)
        expected = [np.clip(g.numpy(), -0.004, 0.004) for g in by_norm]
        assert any(np.abs(g.numpy()).max() > 0.004 for g in by_norm)  # the second clip bites too
        for c, e in zip(clipped, expected):
            np.testing.assert_array_equal(c, e)
        # The logs keep the norm before any clipping.
        assert batch_logs["grad_global_norm"] == pytest.approx(float(norm), rel=1e-6)


def test_none_gradients_pass_through_in_fit(make_data):
    x, y = make_data(8)
    tp.random.set_seed(0)

    class WithUnused(tp.Module):
        def __init__(self):
            super().__init__()
            self.dense = tp.layers.Dense(3)
            self.unused = tp.Variable(tp.zeros((2,)))

        def call(self, x):
            return self.dense(x)

    after = Snapshot()
    model = WithUnused()
    trainer = tp.Trainer(
        model,
        "sgd",
        tp.losses.SparseCategoricalCrossentropy(from_logits=True),
        plugins=[ClipGradients(norm=0.1), after],
    )
    trainer.fit(x, y, epochs=1, batch_size=8)
    unused_index = [v is model.unused for v in model.trainable_variables].index(True)
    assert after.seen[0][unused_index] is None
    assert all(g is not None for i, g in enumerate(after.seen[0]) if i != unused_index)
