"""A variational autoencoder on the 8x8 digits: the KL term joins the loss through ``add_loss``.

The encoder maps an image to the mean and log-variance of a Gaussian over a small latent space;
a sample of it goes through the decoder, which gives each pixel's intensity. The compiled loss
scores the reconstruction; the KL divergence between the encoder's Gaussian and the standard
normal is computed in ``call`` and handed to ``self.add_loss``, so ``fit`` adds it to the loss
with no step of our own. The digits ship with scikit-learn (``pip install -e ".[digits]"``).
Run: ``python -m examples.vae`` (``--tiny`` for a run of a few seconds).
"""

from __future__ import annotations

import sys

import numpy as np

import tapefit as tp


def reconstruction_loss(y_true: tp.Tensor, y_pred: tp.Tensor) -> tp.Tensor:
    """Binary cross-entropy summed over an image's 64 pixels, averaged over the batch."""
    return tp.reduce_mean(64.0 * tp.losses.binary_crossentropy(y_true, y_pred))


class VAE(tp.Model):
    """Dense encoder and decoder around a ``latent_dim``-dimensional Gaussian."""

    def __init__(self, latent_dim: int = 4, units: int = 64, name: str | None = None) -> None:
        super().__init__(name=name)
        self.latent_dim = latent_dim
        self.hidden = tp.layers.Dense(units, activation="relu")
        self.mean = tp.layers.Dense(latent_dim)
        self.log_var = tp.layers.Dense(latent_dim)
        self.decoder = tp.layers.Sequential(
            [tp.layers.Dense(units, activation="relu"), tp.layers.Dense(64, activation="sigmoid")],
            name="decoder",
        )

    # --8<-- [start:call]
    def call(self, x: tp.Tensor) -> tp.Tensor:
        h = self.hidden(x)
        mean, log_var = self.mean(h), self.log_var(h)
        # KL(N(mean, var) || N(0, 1)), summed over the latent axes and averaged over the batch
        kl = -0.5 * tp.reduce_sum(1.0 + log_var - tp.square(mean) - tp.exp(log_var), axis=1)
        self.add_loss(tp.reduce_mean(kl))
        # the reparameterization: a sample that the gradient can flow through
        z = mean + tp.exp(0.5 * log_var) * tp.random.normal(mean.shape)
        return self.decoder(z)

    # --8<-- [end:call]

    def generate(self, n: int) -> np.ndarray:
        """``n`` new 8x8 images, decoded from draws of the standard normal."""
        return self.decoder(tp.random.normal((n, self.latent_dim))).numpy().reshape(n, 8, 8)


def main(tiny: bool = False) -> dict[str, list[float]]:
    """Trains the VAE to rebuild its input and returns its history (loss and val_loss per epoch:
    reconstruction plus KL, in nats per image)."""
    tp.random.set_seed(0)
    x, _ = tp.data.load_digits()  # (1797, 64) pixels in [0, 1]; the labels are not used
    x = x[:400] if tiny else x
    # --8<-- [start:fit]
    model = VAE()
    model.compile(optimizer=tp.optimizers.Adam(learning_rate=0.003), loss=reconstruction_loss)
    history = model.fit(x, x, epochs=4 if tiny else 20, batch_size=32, validation_split=0.2, verbose=0)
    # --8<-- [end:fit]
    logs = history.history
    print(f"validation loss {logs['val_loss'][-1]:.2f} nats per image (from {logs['val_loss'][0]:.2f})")
    print("a generated digit's pixel range:", np.ptp(model.generate(1)).round(2))
    return logs


if __name__ == "__main__":
    main(tiny="--tiny" in sys.argv)
