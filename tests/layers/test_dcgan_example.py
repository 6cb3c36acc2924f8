"""The keras.io example "DCGAN to generate face images", translated line by line (``keras`` ->
``tp``, ``ops.*``/``tf.*`` -> ``tp.*``): its generator (Conv2DTranspose) and discriminator
build at full size (``keras.Sequential`` is ``tp.layers.Sequential``) with Keras's parameter counts and shapes (saved by
``scripts/keras_reference_conv.py``), and, shrunk to 16x16 images, train through ``fit`` with the
example's own ``train_step``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import tapefit as tp

keras = tp  # `import keras`
layers = tp.layers  # `from keras import layers`
SAVED = dict(np.load(Path(__file__).parent / "data" / "keras_conv.npz"))


def discriminator_of(size: int, width: int) -> tp.layers.Sequential:
    return tp.layers.Sequential(  # keras.Sequential
        [
            keras.Input(shape=(size, size, 3)),
            layers.Conv2D(width, kernel_size=4, strides=2, padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2D(2 * width, kernel_size=4, strides=2, padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2D(2 * width, kernel_size=4, strides=2, padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Flatten(),
            layers.Dropout(0.2),
            layers.Dense(1, activation="sigmoid"),
        ],
        name="discriminator",
    )


def generator_of(latent_dim: int, size: int, width: int) -> tp.layers.Sequential:
    start = size // 8
    return tp.layers.Sequential(  # keras.Sequential
        [
            keras.Input(shape=(latent_dim,)),
            layers.Dense(start * start * 2 * width),
            layers.Reshape((start, start, 2 * width)),
            layers.Conv2DTranspose(2 * width, kernel_size=4, strides=2, padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2DTranspose(4 * width, kernel_size=4, strides=2, padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2DTranspose(8 * width, kernel_size=4, strides=2, padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2D(3, kernel_size=5, padding="same", activation="sigmoid"),
        ],
        name="generator",
    )


def params(model: tp.layers.Sequential) -> int:
    return sum(int(np.prod(v.shape)) for v in model.trainable_variables)


def test_the_full_size_models_have_keras_parameters_and_shapes():
    # the example's sizes: 64x64 images, latent_dim 128, 64 filters first
    discriminator, generator = discriminator_of(64, 64), generator_of(128, 64, 64)
    assert params(discriminator) == int(SAVED["dcgan/discriminator/params"])
    assert params(generator) == int(SAVED["dcgan/generator/params"])
    assert generator.layers[-1].output.shape[1:] == tuple(SAVED["dcgan/generator/shape"])
    assert discriminator.layers[-1].output.shape[1:] == tuple(SAVED["dcgan/discriminator/shape"])


class GAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.seed_generator = 1337  # keras.random.SeedGenerator(1337): tapefit's op seeds are ints

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn
        self.d_loss_metric = keras.metrics.Mean(name="d_loss")
        self.g_loss_metric = keras.metrics.Mean(name="g_loss")

    @property
    def metrics(self):
        return [self.d_loss_metric, self.g_loss_metric]

    def train_step(self, real_images):
        # Sample random points in the latent space
        batch_size = tp.shape(real_images)[0]
        random_latent_vectors = keras.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator
        )
        # Decode them to fake images
        generated_images = self.generator(random_latent_vectors)
        # Combine them with real images
        combined_images = tp.concat([generated_images, real_images], axis=0)
        # Assemble labels discriminating real from fake images
        labels = tp.concat([tp.ones((batch_size, 1)), tp.zeros((tp.shape(real_images)[0], 1))], axis=0)
        # Add random noise to the labels - important trick!
        labels += 0.05 * tp.random.uniform(tp.shape(labels), seed=self.seed_generator)
        # Train the discriminator
        with tp.GradientTape() as tape:
            predictions = self.discriminator(combined_images)
            d_loss = self.loss_fn(labels, predictions)
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
        # Sample random points in the latent space
        random_latent_vectors = keras.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator
        )
        # Assemble labels that say "all real images"
        misleading_labels = tp.zeros((batch_size, 1))
        # Train the generator (note that we should *not* update the weights of the discriminator)!
        with tp.GradientTape() as tape:
            predictions = self.discriminator(self.generator(random_latent_vectors))
            g_loss = self.loss_fn(misleading_labels, predictions)
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
        # Update metrics
        self.d_loss_metric.update_state(d_loss)
        self.g_loss_metric.update_state(g_loss)
        return {"d_loss": self.d_loss_metric.result(), "g_loss": self.g_loss_metric.result()}


def test_the_example_trains_with_its_own_train_step():
    tp.random.set_seed(0)
    latent_dim = 8
    discriminator, generator = discriminator_of(16, 4), generator_of(latent_dim, 16, 4)
    before = {id(v): v.numpy().copy() for v in [*discriminator.variables, *generator.variables]}
    gan = GAN(discriminator=discriminator, generator=generator, latent_dim=latent_dim)
    gan.compile(
        d_optimizer=keras.optimizers.Adam(learning_rate=0.0001),
        g_optimizer=keras.optimizers.Adam(learning_rate=0.0001),
        loss_fn=keras.losses.BinaryCrossentropy(),
    )
    dataset = np.random.default_rng(0).uniform(size=(8, 16, 16, 3)).astype(np.float32)
    history = gan.fit(dataset, epochs=2, batch_size=4, verbose=0)
    for key in ("d_loss", "g_loss"):
        assert len(history.history[key]) == 2 and np.all(np.isfinite(history.history[key]))
    transposed = [layer for layer in generator.layers if isinstance(layer, layers.Conv2DTranspose)]
    assert len(transposed) == 3
    for variable in [*discriminator.trainable_variables, *generator.trainable_variables]:
        assert not np.array_equal(variable.numpy(), before[id(variable)]), variable.name
    images = generator.predict(np.zeros((2, latent_dim), np.float32), verbose=0)
    assert images.shape == (2, 16, 16, 3) and np.all((images > 0) & (images < 1))
