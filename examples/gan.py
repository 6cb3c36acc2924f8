"""A GAN with its own training step and two optimizers, for ``configs/gan_digits.yaml``.

The discriminator learns to tell the data's samples from the generator's, then the generator
learns to fool it: two updates per batch, each by its own optimizer, as in Keras's GAN
examples. ``train`` builds ``GAN(...)`` from the config's model keys; ``fit`` runs its
``train_step``, and both optimizers' updates pass the trainer's plugins (clipping, MPI), go
into checkpoints and resume exactly.
"""

from __future__ import annotations

from typing import Any

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
