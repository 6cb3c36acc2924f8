"""A GAN with its own training step and two optimizers, for ``configs/gan_digits.yaml``.

The discriminator learns to tell the data's samples from the generator's, then the generator
learns to fool it: two updates per batch, each by its own optimizer, as in Keras's GAN
examples. ``train`` builds ``GAN(...)`` from the config's model keys; ``fit`` runs its
``train_step``, and both optimizers' updates pass the trainer's plugins (clipping, MPI), go
into checkpoints and resume exactly.
Run: ``python -m examples.gan`` (``--tiny`` for a run of a few seconds; the digits need the
``digits`` extra).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

import tapefit as tp


@tp.register_serializable
class GAN(tp.Model):
    """A generator and a discriminator of small Dense networks.

    Args:
        features: the size of a sample (64 for the 8x8 digits).
        latent_dim: the size of the generator's random input.
        units: the width of both networks' hidden layer.
        d_learning_rate: the discriminator's Adam learning rate.
        g_learning_rate: the generator's Adam learning rate.
        name: the model's name.
    """

    def __init__(
        self,
        features: int = 64,
        latent_dim: int = 16,
        units: int = 64,
        d_learning_rate: float = 3e-4,
        g_learning_rate: float = 3e-4,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        self.latent_dim = latent_dim
        self.discriminator = tp.layers.Sequential(
            [tp.layers.Dense(units, activation="leaky_relu"), tp.layers.Dense(1)], name="discriminator"
        )
        self.generator = tp.layers.Sequential(
            [tp.layers.Dense(units, activation="relu"), tp.layers.Dense(features)], name="generator"
        )
        self.d_optimizer = tp.optimizers.Adam(learning_rate=d_learning_rate)
        self.g_optimizer = tp.optimizers.Adam(learning_rate=g_learning_rate)
        self.loss_fn = tp.losses.BinaryCrossentropy(from_logits=True)
        self.d_loss_tracker = tp.metrics.Mean(name="d_loss")
        self.g_loss_tracker = tp.metrics.Mean(name="g_loss")
        # Built now, as Keras's GAN example builds them with an Input first: the model's own
        # input is the generator's noise (what predict and export take), not the data.
        self.discriminator.build((None, features))
        self.generator.build((None, latent_dim))
        self.build((None, latent_dim))

    def call(self, z: Any) -> Any:
        return self.generator(z)

    # --8<-- [start:step]
    def train_step(self, data: Any) -> dict[str, Any]:
        real = data[0] if isinstance(data, tuple) else data  # the labels, if any, are not used
        batch = real.shape[0]
        # The discriminator: generated samples are labelled 1, real ones 0 (with a little noise).
        generated = self.generator(tp.random.normal((batch, self.latent_dim)))
        combined = tp.concat([generated, real], axis=0)
        labels = tp.concat([tp.ones((batch, 1)), tp.zeros((batch, 1))], axis=0)
        labels = labels + 0.05 * tp.random.uniform((2 * batch, 1))
        with tp.GradientTape() as tape:
            d_loss = self.loss_fn(labels, self.discriminator(combined))
        weights = self.discriminator.trainable_weights
        self.d_optimizer.apply_gradients(zip(tape.gradient(d_loss, weights), weights))
        # The generator: its samples should be taken for real ones (label 0).
        z = tp.random.normal((batch, self.latent_dim))
        with tp.GradientTape() as tape:
            g_loss = self.loss_fn(tp.zeros((batch, 1)), self.discriminator(self.generator(z)))
        weights = self.generator.trainable_weights
        self.g_optimizer.apply_gradients(zip(tape.gradient(g_loss, weights), weights))
        self.d_loss_tracker.update_state(d_loss)
        self.g_loss_tracker.update_state(g_loss)
        return {"d_loss": self.d_loss_tracker.result(), "g_loss": self.g_loss_tracker.result()}

    # --8<-- [end:step]


def sample_gap(model: GAN, real: np.ndarray, n: int = 500) -> float:
    """How far the generator's samples are from the data: the mean absolute difference of their
    per-pixel means plus that of their per-pixel standard deviations (0 for a perfect match)."""
    z = np.random.default_rng(1).normal(size=(n, model.latent_dim)).astype(np.float32)
    fake = model(z).numpy()
    return float(np.mean(np.abs(fake.mean(0) - real.mean(0))) + np.mean(np.abs(fake.std(0) - real.std(0))))


class _RecordGap:
    """A Keras-style callback: the sample gap after every epoch."""

    def __init__(self, model: GAN, real: np.ndarray) -> None:
        self.model, self.real, self.gaps = model, real, []

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        self.gaps.append(sample_gap(self.model, self.real))


def main(tiny: bool = False) -> dict[str, list[float]]:
    """Trains the GAN on the digits (pixels scaled to [-1, 1]) and returns its history: d_loss
    and g_loss per epoch, and the sample gap after each epoch."""
    tp.random.set_seed(0)
    x, _ = tp.data.load_digits()  # the labels are not used
    x = 2.0 * x[: 512 if tiny else None] - 1.0
    model = GAN(features=64, latent_dim=16, units=64, d_learning_rate=1e-3, g_learning_rate=1e-3)
    model.compile(optimizer=None)  # the model brings its two optimizers; train_step says how
    before = sample_gap(model, x)
    record = _RecordGap(model, x)
    history = model.fit(x, epochs=4 if tiny else 30, batch_size=64, callbacks=[record], verbose=0)
    logs = {**history.history, "sample_gap": record.gaps}
    print(f"sample gap {before:.3f} before training, {record.gaps[-1]:.3f} after")
    return logs


if __name__ == "__main__":
    main(tiny="--tiny" in sys.argv)
