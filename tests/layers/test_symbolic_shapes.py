"""Shapes without data: layers say what they give for symbolic inputs, and a layer without a
rule is probed on the smallest batch, leaving no trace."""

from __future__ import annotations

import numpy as np

import tapefit as tp
from tapefit import layers as L


def _x(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def test_split_in_a_lambda_on_unknown_axes():
    x = tp.Input((None, None, 10))
    halves = L.Lambda(lambda t: tp.split(t, 2, axis=1))(x)
    thirds = L.Lambda(lambda t: tp.split(t, [3, 7], axis=-1))(x)
    assert [h.shape for h in halves] == [(None, None, None, 10)] * 2
    assert [t.shape for t in thirds] == [(None, None, None, 3), (None, None, None, 7)]
    model = tp.Model(x, [*halves, *thirds])
    for steps, width in ((4, 3), (6, 5)):
        outs = model(_x(2, steps, width, 10))
        assert [o.shape for o in outs] == [(2, steps // 2, width, 10)] * 2 + [
            (2, steps, width, 3),
            (2, steps, width, 7),
        ]


class _Noisy(L.Layer):
    """Draws random numbers and moves a non-trainable variable whenever it is called."""

    def build(self, input_shape):
        self.count = self.add_weight((), "zeros", trainable=False, name="count")

    def call(self, inputs):
        self.count.assign_add(np.float32(1))
        return inputs + tp.random.normal(tuple(inputs.shape))


def test_a_probe_leaves_no_trace():
    tp.random.set_seed(3)
    layer = _Noisy()
    x = tp.Input((4,))
    y = layer(x)  # built (its weights drawn and kept), then probed
    assert y.shape == (None, 4) and layer.built
    built = tp.random.get_state()
    assert float(layer.count.numpy()) == 0.0
    with tp.GradientTape() as tape:
        z = layer(y)  # probed again, under a tape: nothing drawn, moved or recorded
    assert tp.random.get_state() == built
    assert float(layer.count.numpy()) == 0.0
    assert tape.watched_variables() == ()  # the probe's call read no variable under the tape
    model = tp.Model(x, L.Dense(2)(z))
    assert model(_x(2, 4)).shape == (2, 2) and float(layer.count.numpy()) == 2.0
