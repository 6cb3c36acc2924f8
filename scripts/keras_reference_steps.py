"""Keras 3's numbers for models that write their own training step, saved for CI.

CI has no Keras, so tapefit's step methods (``train_step``, ``test_step``, ``add_loss``, a
GAN's two optimizers) are compared there with the numbers this script computed once with
Keras 3 (TensorFlow backend) and saved in ``tests/training/data/keras_steps.npz``. Only NumPy,
TensorFlow and Keras are used, not tapefit. ``tests/training/test_keras_guides_steps.py``
translates the same models into tapefit and compares.

Each case of ``CASES`` is a small version of one code block of Keras's developer guides
(customizing ``fit()`` with TensorFlow, a training loop from scratch, making layers and models
by subclassing, training with built-in methods) or of its examples (the endpoint layer pattern,
the variational autoencoder): tiny dense networks on random data, trained two epochs in batches
of 32 without shuffling, from weights made here. For a case ``<case>``:

- ``<case>/data/<name>``: the arrays the case trains and evaluates on;
- ``<case>/<part>0/<i>`` and ``<case>/<part>1/<i>``: each model part's weights before and after
  training, in Keras's ``get_weights`` order (``w`` for the model, ``d`` and ``g`` for a GAN's
  discriminator and generator);
- ``<case>/history/<key>``: ``History.history`` per epoch (``<case>/history2/<key>`` for a
  second ``fit``); ``<case>/evaluate/<key>``: ``evaluate(..., return_dict=True)``;
  ``<case>/steps/<key>``: the values a hand-written loop returned per step;
- ``<case>/draws/<i>``: every random draw a step made, in order. While a case trains, this
  script replaces ``keras.random.normal``/``uniform`` and ``tf.random.normal``/``uniform`` by
  draws from NumPy that it records (the models run eagerly so that each step draws anew); the
  test replays them through ``tp.random.normal``/``uniform``.

    python scripts/keras_reference_steps.py          # writes the file (needs tensorflow and keras)
    python scripts/keras_reference_steps.py --check  # compares, exit 1 if not equal
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

PATH = Path(__file__).resolve().parents[1] / "tests" / "training" / "data" / "keras_steps.npz"

N = 96
"""Samples per case: three batches of 32."""
FIT = {"epochs": 2, "batch_size": 32, "shuffle": False, "verbose": 0}


class Draws:
    """Replaces Keras's and TensorFlow's random normal and uniform draws by NumPy draws it keeps."""

    def __init__(self, keras: Any, tf: Any, seed: int) -> None:
        self.keras, self.tf = keras, tf
        self.rng = np.random.default_rng(seed)
        self.drawn: list[np.ndarray] = []

    def _keep(self, array: np.ndarray) -> Any:
        array = array.astype(np.float32)
        self.drawn.append(array)
        return self.tf.constant(array)

    def _shape(self, shape: Any) -> tuple[int, ...]:
        return tuple(int(s) for s in shape)

    def normal(
        self, shape: Any, mean: float = 0.0, stddev: float = 1.0, dtype: Any = None, seed: Any = None
    ) -> Any:
        return self._keep(mean + stddev * self.rng.standard_normal(self._shape(shape)))

    def uniform(
        self, shape: Any, minval: float = 0.0, maxval: float = 1.0, dtype: Any = None, seed: Any = None
    ) -> Any:
        return self._keep(minval + (maxval - minval) * self.rng.random(self._shape(shape)))

    @contextmanager
    def armed(self) -> Iterator[None]:
        """Draws come from here inside the block."""
        modules = (self.keras.random, self.tf.random)
        saved = [(m, m.normal, m.uniform) for m in modules]
        for module in modules:
            module.normal, module.uniform = self.normal, self.uniform
        try:
            yield
        finally:
            for module, normal, uniform in saved:
                module.normal, module.uniform = normal, uniform


def _weights(prefix: str, model: Any) -> dict[str, np.ndarray]:
    return {f"{prefix}/{i}": np.asarray(w, np.float32) for i, w in enumerate(model.get_weights())}


def _logs(prefix: str, logs: dict[str, Any]) -> dict[str, np.ndarray]:
    return {f"{prefix}/{k}": np.asarray(v, np.float64) for k, v in logs.items()}


def _regression(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "x": rng.random((N, 32), dtype=np.float32),
        "y": rng.random((N, 1), dtype=np.float32),
        "sw": rng.random((N, 1), dtype=np.float32),
    }


# -- customizing what happens in fit() ----------------------------------------------------


def custom_fit(keras: Any, tf: Any, rng: np.random.Generator, draws: Draws) -> dict[str, np.ndarray]:
    """The guide's first CustomModel: compute_loss and the metric loop."""

    class CustomModel(keras.Model):
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(y=y, y_pred=y_pred)
            trainable_vars = self.trainable_variables
            gradients = tape.gradient(loss, trainable_vars)
            self.optimizer.apply(gradients, trainable_vars)
            for metric in self.metrics:
                if metric.name == "loss":
                    metric.update_state(loss)
                else:
                    metric.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}

    data = _regression(rng)
    inputs = keras.Input(shape=(32,))
    model = CustomModel(inputs, keras.layers.Dense(1)(inputs))
    out = _weights("w0", model)
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    history = model.fit(data["x"], data["y"], **FIT)
    out.update(_logs("history", history.history))
    out.update(_weights("w1", model))
    out.update(_logs("evaluate", model.evaluate(data["x"], data["y"], verbose=0, return_dict=True)))
    return {**out, **{f"data/{k}": v for k, v in data.items()}}


def lower_level(keras: Any, tf: Any, rng: np.random.Generator, draws: Draws) -> dict[str, np.ndarray]:
    """The guide's lower-level CustomModel: its own loss tracker, MAE metric and metrics."""

    class CustomModel(keras.Model):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.loss_tracker = keras.metrics.Mean(name="loss")
            self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")
            self.loss_fn = keras.losses.MeanSquaredError()

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.loss_fn(y, y_pred)
            trainable_vars = self.trainable_variables
            gradients = tape.gradient(loss, trainable_vars)
            self.optimizer.apply(gradients, trainable_vars)
            self.loss_tracker.update_state(loss)
            self.mae_metric.update_state(y, y_pred)
            return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}

        @property
        def metrics(self):
            return [self.loss_tracker, self.mae_metric]

    data = _regression(rng)
    inputs = keras.Input(shape=(32,))
    model = CustomModel(inputs, keras.layers.Dense(1)(inputs))
    out = _weights("w0", model)
    model.compile(optimizer="adam")
    history = model.fit(data["x"], data["y"], **FIT)
    out.update(_logs("history", history.history))
    out.update(_weights("w1", model))
    return {**out, **{f"data/{k}": v for k, v in data.items()}}


def sample_weight(keras: Any, tf: Any, rng: np.random.Generator, draws: Draws) -> dict[str, np.ndarray]:
    """The guide's CustomModel that unpacks sample_weight and passes it on."""

    class CustomModel(keras.Model):
        def train_step(self, data):
            if len(data) == 3:
                x, y, sample_weight = data
            else:
                sample_weight = None
                x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(y=y, y_pred=y_pred, sample_weight=sample_weight)
            trainable_vars = self.trainable_variables
            gradients = tape.gradient(loss, trainable_vars)
            self.optimizer.apply(gradients, trainable_vars)
            for metric in self.metrics:
                if metric.name == "loss":
                    metric.update_state(loss)
                else:
                    metric.update_state(y, y_pred, sample_weight=sample_weight)
            return {m.name: m.result() for m in self.metrics}

    data = _regression(rng)
    inputs = keras.Input(shape=(32,))
    model = CustomModel(inputs, keras.layers.Dense(1)(inputs))
    out = _weights("w0", model)
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    history = model.fit(data["x"], data["y"], sample_weight=data["sw"], **FIT)
    out.update(_logs("history", history.history))
    out.update(_weights("w1", model))
    results = model.evaluate(data["x"], data["y"], sample_weight=data["sw"], verbose=0, return_dict=True)
    out.update(_logs("evaluate", results))
    return {**out, **{f"data/{k}": v for k, v in data.items()}}


def custom_test_step(keras: Any, tf: Any, rng: np.random.Generator, draws: Draws) -> dict[str, np.ndarray]:
    """The guide's CustomModel with its own test_step, run by evaluate."""

    class CustomModel(keras.Model):
        def test_step(self, data):
            x, y = data
            y_pred = self(x, training=False)
            loss = self.compute_loss(y=y, y_pred=y_pred)
            for metric in self.metrics:
                if metric.name == "loss":
                    metric.update_state(loss)
                else:
                    metric.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}

    data = _regression(rng)
    inputs = keras.Input(shape=(32,))
    model = CustomModel(inputs, keras.layers.Dense(1)(inputs))
    out = _weights("w0", model)
    model.compile(loss="mse", metrics=["mae"])
    out.update(
        _logs("evaluate", model.evaluate(data["x"], data["y"], batch_size=32, verbose=0, return_dict=True))
    )
    return {**out, **{f"data/{k}": v for k, v in data.items()}}


LATENT_DIM = 4


def _gan_parts(keras: Any) -> tuple[Any, Any]:
    """The guides' discriminator and generator, with Dense layers for the convolutions."""
    layers = keras.layers
    discriminator = keras.Sequential(
        [keras.Input(shape=(16,)), layers.Dense(8), layers.LeakyReLU(negative_slope=0.2), layers.Dense(1)],
        name="discriminator",
    )
    generator = keras.Sequential(
        [
            keras.Input(shape=(LATENT_DIM,)),
            layers.Dense(8),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Dense(16, activation="sigmoid"),
        ],
        name="generator",
    )
    return discriminator, generator


def gan_fit(keras: Any, tf: Any, rng: np.random.Generator, draws: Draws) -> dict[str, np.ndarray]:
    """The guide's GAN: compile overridden with two optimizers and a loss, trained by fit."""

    class GAN(keras.Model):
        def __init__(self, discriminator, generator, latent_dim):
            super().__init__()
            self.discriminator = discriminator
            self.generator = generator
            self.latent_dim = latent_dim
            self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
            self.g_loss_tracker = keras.metrics.Mean(name="g_loss")
            self.seed_generator = keras.random.SeedGenerator(1337)

        @property
        def metrics(self):
            return [self.d_loss_tracker, self.g_loss_tracker]

        def compile(self, d_optimizer, g_optimizer, loss_fn):
            super().compile()
            self.d_optimizer = d_optimizer
            self.g_optimizer = g_optimizer
            self.loss_fn = loss_fn

        def train_step(self, real_images):
            if isinstance(real_images, tuple):
                real_images = real_images[0]
            batch_size = tf.shape(real_images)[0]
            random_latent_vectors = keras.random.normal(
                shape=(batch_size, self.latent_dim), seed=self.seed_generator
            )
            generated_images = self.generator(random_latent_vectors)
            combined_images = tf.concat([generated_images, real_images], axis=0)
            labels = tf.concat([tf.ones((batch_size, 1)), tf.zeros((batch_size, 1))], axis=0)
            labels += 0.05 * keras.random.uniform(tf.shape(labels), seed=self.seed_generator)
            with tf.GradientTape() as tape:
                predictions = self.discriminator(combined_images)
                d_loss = self.loss_fn(labels, predictions)
            grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
            self.d_optimizer.apply(grads, self.discriminator.trainable_weights)
            random_latent_vectors = keras.random.normal(
                shape=(batch_size, self.latent_dim), seed=self.seed_generator
            )
            misleading_labels = tf.zeros((batch_size, 1))
            with tf.GradientTape() as tape:
                predictions = self.discriminator(self.generator(random_latent_vectors))
                g_loss = self.loss_fn(misleading_labels, predictions)
            grads = tape.gradient(g_loss, self.generator.trainable_weights)
            self.g_optimizer.apply(grads, self.generator.trainable_weights)
            self.d_loss_tracker.update_state(d_loss)
            self.g_loss_tracker.update_state(g_loss)
            return {"d_loss": self.d_loss_tracker.result(), "g_loss": self.g_loss_tracker.result()}

    real = rng.random((N, 16), dtype=np.float32)
    discriminator, generator = _gan_parts(keras)
    out = {**_weights("d0", discriminator), **_weights("g0", generator)}
    gan = GAN(discriminator=discriminator, generator=generator, latent_dim=LATENT_DIM)
    gan.compile(
        d_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
        g_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
        loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    gan.run_eagerly = True
    with draws.armed():
        history = gan.fit(real, **FIT)
    out.update(_logs("history", history.history))
    out.update({**_weights("d1", discriminator), **_weights("g1", generator)})
    return {**out, "data/real": real}


def gan_loop(keras: Any, tf: Any, rng: np.random.Generator, draws: Draws) -> dict[str, np.ndarray]:
    """The GAN of the guide to a training loop from scratch in TensorFlow (run eagerly, without
    ``tf.function``, so that its draws are recorded; one pass over three batches)."""
    discriminator, generator = _gan_parts(keras)
    out = {**_weights("d0", discriminator), **_weights("g0", generator)}
    latent_dim = LATENT_DIM
    d_optimizer = keras.optimizers.Adam(learning_rate=0.0003)
    g_optimizer = keras.optimizers.Adam(learning_rate=0.0004)
    loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)

    def train_step(real_images):
        random_latent_vectors = tf.random.normal(shape=(batch_size, latent_dim))
        generated_images = generator(random_latent_vectors)
        combined_images = tf.concat([generated_images, real_images], axis=0)
        labels = tf.concat([tf.ones((batch_size, 1)), tf.zeros((real_images.shape[0], 1))], axis=0)
        labels += 0.05 * tf.random.uniform(labels.shape)
        with tf.GradientTape() as tape:
            predictions = discriminator(combined_images)
            d_loss = loss_fn(labels, predictions)
        grads = tape.gradient(d_loss, discriminator.trainable_weights)
        d_optimizer.apply(grads, discriminator.trainable_weights)
        random_latent_vectors = tf.random.normal(shape=(batch_size, latent_dim))
        misleading_labels = tf.zeros((batch_size, 1))
        with tf.GradientTape() as tape:
            predictions = discriminator(generator(random_latent_vectors))
            g_loss = loss_fn(misleading_labels, predictions)
        grads = tape.gradient(g_loss, generator.trainable_weights)
        g_optimizer.apply(grads, generator.trainable_weights)
        return d_loss, g_loss, generated_images

    batch_size = 32
    real = rng.random((N, 16), dtype=np.float32)
    dataset = tf.data.Dataset.from_tensor_slices(real).batch(batch_size)
    d_losses, g_losses, generated = [], [], []
    with draws.armed():
        for real_images in dataset:
            d_loss, g_loss, generated_images = train_step(real_images)
            d_losses.append(float(d_loss))
            g_losses.append(float(g_loss))
            generated.append(np.asarray(generated_images))
    out.update({"steps/d_loss": np.asarray(d_losses), "steps/g_loss": np.asarray(g_losses)})
    out["steps/generated"] = np.stack(generated).astype(np.float32)
    out.update({**_weights("d1", discriminator), **_weights("g1", generator)})
    return {**out, "data/real": real}


# -- add_loss, endpoint layers --------------------------------------------------------------


def add_loss(keras: Any, tf: Any, rng: np.random.Generator, draws: Draws) -> dict[str, np.ndarray]:
    """The subclassing guide's ActivityRegularizationLayer, fit with a compiled loss, then
    without one (the layer's loss alone)."""
    ops = keras.ops

    class ActivityRegularizationLayer(keras.layers.Layer):
        def __init__(self, rate=1e-2):
            super().__init__()
            self.rate = rate

        def call(self, inputs):
            self.add_loss(self.rate * ops.mean(inputs))
            return inputs

    data = {k: rng.random((N, 3), dtype=np.float32) for k in ("x", "y", "x2", "y2")}
    inputs = keras.Input(shape=(3,))
    outputs = ActivityRegularizationLayer()(inputs)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="mse")
    out = _logs("history", model.fit(data["x"], data["y"], **FIT).history)
    # The guide compiles the same model again without a loss; Keras 3.15 (TensorFlow) then
    # still trains with the first compile's MSE, so a second model stands for it here.
    model = keras.Model(inputs, ActivityRegularizationLayer()(inputs))
    model.compile(optimizer="adam")
    out.update(_logs("history2", model.fit(data["x2"], data["y2"], **FIT).history))
    return {**out, **{f"data/{k}": v for k, v in data.items()}}


def add_loss_mlp(keras: Any, tf: Any, rng: np.random.Generator, draws: Draws) -> dict[str, np.ndarray]:
    """The built-in methods guide's MLP with an activity regularization layer (RMSprop)."""
    layers, ops = keras.layers, keras.ops

    class ActivityRegularizationLayer(layers.Layer):
        def call(self, inputs):
            self.add_loss(ops.sum(inputs) * 0.1)
            return inputs

    data = {"x": rng.random((N, 16), dtype=np.float32), "y": rng.integers(0, 10, N).astype(np.int32)}
    inputs = keras.Input(shape=(16,), name="digits")
    x = layers.Dense(8, activation="relu", name="dense_1")(inputs)
    x = ActivityRegularizationLayer()(x)
    x = layers.Dense(8, activation="relu", name="dense_2")(x)
    outputs = layers.Dense(10, name="predictions")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    out = _weights("w0", model)
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    out.update(_logs("history", model.fit(data["x"], data["y"], **FIT).history))
    out.update(_weights("w1", model))
    out.update(_logs("evaluate", model.evaluate(data["x"], data["y"], verbose=0, return_dict=True)))
    return {**out, **{f"data/{k}": v for k, v in data.items()}}


def endpoint_builtin(keras: Any, tf: Any, rng: np.random.Generator, draws: Draws) -> dict[str, np.ndarray]:
    """The built-in methods guide's LogisticEndpoint(targets, logits): compiled without a loss."""
    ops = keras.ops

    class LogisticEndpoint(keras.layers.Layer):
        def __init__(self, name=None):
            super().__init__(name=name)
            self.loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)

        def call(self, targets, logits, sample_weights=None):
            loss = self.loss_fn(targets, logits, sample_weights)
            self.add_loss(loss)
            return ops.softmax(logits)

    data = {"inputs": rng.random((N, 3), dtype=np.float32), "targets": rng.random((N, 10), dtype=np.float32)}
    inputs = keras.Input(shape=(3,), name="inputs")
    targets = keras.Input(shape=(10,), name="targets")
    logits = keras.layers.Dense(10)(inputs)
    predictions = LogisticEndpoint(name="predictions")(targets, logits)
    model = keras.Model(inputs=[inputs, targets], outputs=predictions)
    out = _weights("w0", model)
    model.compile(optimizer="adam")
    out.update(_logs("history", model.fit(data, **FIT).history))
    out.update(_weights("w1", model))
    return {**out, **{f"data/{k}": v for k, v in data.items()}}


def _endpoint_layer(keras: Any, tf: Any) -> Any:
    class LogisticEndpoint(keras.layers.Layer):
        def __init__(self, name=None):
            super().__init__(name=name)
            self.loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
            self.accuracy_metric = keras.metrics.BinaryAccuracy(name="accuracy")

        def call(self, logits, targets=None, sample_weight=None):
            if targets is not None:
                loss = self.loss_fn(targets, logits, sample_weight)
                self.add_loss(loss)
                self.accuracy_metric.update_state(targets, logits, sample_weight)
            return tf.nn.softmax(logits)

    return LogisticEndpoint


def _endpoint_data(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "inputs": rng.random((N, 8), dtype=np.float32),
        "targets": rng.integers(0, 2, (N, 1)).astype(np.float32),  # the example's are uniform
        "sample_weight": rng.random((N, 1), dtype=np.float32),
    }


def endpoint(keras: Any, tf: Any, rng: np.random.Generator, draws: Draws) -> dict[str, np.ndarray]:
    """The endpoint layer pattern example, functional: loss and accuracy from the layer."""
    LogisticEndpoint = _endpoint_layer(keras, tf)
    data = _endpoint_data(rng)
    inputs = keras.Input((8,), name="inputs")
    logits = keras.layers.Dense(1)(inputs)
    targets = keras.Input((1,), name="targets")
    sample_weight = keras.Input((1,), name="sample_weight")
    preds = LogisticEndpoint()(logits, targets, sample_weight)
    model = keras.Model([inputs, targets, sample_weight], preds)
    out = _weights("w0", model)
    model.compile(keras.optimizers.Adam(1e-3))
    out.update(_logs("history", model.fit(data, **FIT).history))
    out.update(_weights("w1", model))
    return {**out, **{f"data/{k}": v for k, v in data.items()}}


def endpoint_subclass(keras: Any, tf: Any, rng: np.random.Generator, draws: Draws) -> dict[str, np.ndarray]:
    """The endpoint layer pattern example, in a subclassed model (LogReg)."""
    LogisticEndpoint = _endpoint_layer(keras, tf)

    class LogReg(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)
            self.logistic_endpoint = LogisticEndpoint()

        def call(self, inputs):
            logits = self.dense(inputs["inputs"])
            preds = self.logistic_endpoint(
                logits=logits, targets=inputs["targets"], sample_weight=inputs["sample_weight"]
            )
            return preds

    data = _endpoint_data(rng)
    model = LogReg()
    model({k: v[:1] for k, v in data.items()})  # builds the weights
    out = _weights("w0", model)
    model.compile(keras.optimizers.Adam(1e-3))
    out.update(_logs("history", model.fit(data, **FIT).history))
    out.update(_weights("w1", model))
    return {**out, **{f"data/{k}": v for k, v in data.items()}}


# -- the variational autoencoders -------------------------------------------------------------


def vae_add_loss(keras: Any, tf: Any, rng: np.random.Generator, draws: Draws) -> dict[str, np.ndarray]:
    """The subclassing guide's VariationalAutoEncoder: the KL loss by add_loss, the MSE compiled."""
    layers, ops = keras.layers, keras.ops

    class Sampling(layers.Layer):
        def call(self, inputs):
            z_mean, z_log_var = inputs
            batch = ops.shape(z_mean)[0]
            dim = ops.shape(z_mean)[1]
            epsilon = keras.random.normal(shape=(batch, dim))
            return z_mean + ops.exp(0.5 * z_log_var) * epsilon

    class Encoder(layers.Layer):
        def __init__(self, latent_dim=32, intermediate_dim=64, name="encoder", **kwargs):
            super().__init__(name=name, **kwargs)
            self.dense_proj = layers.Dense(intermediate_dim, activation="relu")
            self.dense_mean = layers.Dense(latent_dim)
            self.dense_log_var = layers.Dense(latent_dim)
            self.sampling = Sampling()

        def call(self, inputs):
            x = self.dense_proj(inputs)
            z_mean = self.dense_mean(x)
            z_log_var = self.dense_log_var(x)
            z = self.sampling((z_mean, z_log_var))
            return z_mean, z_log_var, z

    class Decoder(layers.Layer):
        def __init__(self, original_dim, intermediate_dim=64, name="decoder", **kwargs):
            super().__init__(name=name, **kwargs)
            self.dense_proj = layers.Dense(intermediate_dim, activation="relu")
            self.dense_output = layers.Dense(original_dim, activation="sigmoid")

        def call(self, inputs):
            x = self.dense_proj(inputs)
            return self.dense_output(x)

    class VariationalAutoEncoder(keras.Model):
        def __init__(self, original_dim, intermediate_dim=64, latent_dim=32, name="autoencoder", **kwargs):
            super().__init__(name=name, **kwargs)
            self.original_dim = original_dim
            self.encoder = Encoder(latent_dim=latent_dim, intermediate_dim=intermediate_dim)
            self.decoder = Decoder(original_dim, intermediate_dim=intermediate_dim)

        def call(self, inputs):
            z_mean, z_log_var, z = self.encoder(inputs)
            reconstructed = self.decoder(z)
            kl_loss = -0.5 * ops.mean(z_log_var - ops.square(z_mean) - ops.exp(z_log_var) + 1)
            self.add_loss(kl_loss)
            return reconstructed

    x_train = rng.random((N, 16), dtype=np.float32)
    vae = VariationalAutoEncoder(16, 8, 4)
    vae(x_train[:1])  # builds the weights
    out = _weights("w0", vae)
    optimizer = keras.optimizers.Adam(learning_rate=1e-3)
    vae.compile(optimizer, loss=keras.losses.MeanSquaredError(), run_eagerly=True)
    with draws.armed():
        history = vae.fit(x_train, x_train, **FIT)
    out.update(_logs("history", history.history))
    out.update(_weights("w1", vae))
    return {**out, "data/x": x_train}


def vae_example(keras: Any, tf: Any, rng: np.random.Generator, draws: Draws) -> dict[str, np.ndarray]:
    """The VAE example: functional encoder and decoder (Dense for the convolutions), its own
    train_step with three loss trackers."""
    layers = keras.layers

    class Sampling(layers.Layer):
        def call(self, inputs):
            z_mean, z_log_var = inputs
            batch = tf.shape(z_mean)[0]
            dim = tf.shape(z_mean)[1]
            epsilon = keras.random.normal(shape=(batch, dim))
            return z_mean + tf.exp(0.5 * z_log_var) * epsilon

    latent_dim = 2
    encoder_inputs = keras.Input(shape=(4, 4, 1))
    x = layers.Flatten()(encoder_inputs)
    x = layers.Dense(16, activation="relu")(x)
    z_mean = layers.Dense(latent_dim, name="z_mean")(x)
    z_log_var = layers.Dense(latent_dim, name="z_log_var")(x)
    z = Sampling()([z_mean, z_log_var])
    encoder = keras.Model(encoder_inputs, [z_mean, z_log_var, z], name="encoder")
    latent_inputs = keras.Input(shape=(latent_dim,))
    x = layers.Dense(16, activation="sigmoid")(latent_inputs)
    decoder_outputs = layers.Reshape((4, 4, 1))(x)
    decoder = keras.Model(latent_inputs, decoder_outputs, name="decoder")

    class VAE(keras.Model):
        def __init__(self, encoder, decoder, **kwargs):
            super().__init__(**kwargs)
            self.encoder = encoder
            self.decoder = decoder
            self.total_loss_tracker = keras.metrics.Mean(name="total_loss")
            self.reconstruction_loss_tracker = keras.metrics.Mean(name="reconstruction_loss")
            self.kl_loss_tracker = keras.metrics.Mean(name="kl_loss")

        @property
        def metrics(self):
            return [self.total_loss_tracker, self.reconstruction_loss_tracker, self.kl_loss_tracker]

        def train_step(self, data):
            with tf.GradientTape() as tape:
                z_mean, z_log_var, z = self.encoder(data)
                reconstruction = self.decoder(z)
                reconstruction_loss = tf.reduce_mean(
                    tf.reduce_sum(keras.losses.binary_crossentropy(data, reconstruction), axis=(1, 2))
                )
                kl_loss = -0.5 * (1 + z_log_var - tf.square(z_mean) - tf.exp(z_log_var))
                kl_loss = tf.reduce_mean(tf.reduce_sum(kl_loss, axis=1))
                total_loss = reconstruction_loss + kl_loss
            grads = tape.gradient(total_loss, self.trainable_weights)
            self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
            self.total_loss_tracker.update_state(total_loss)
            self.reconstruction_loss_tracker.update_state(reconstruction_loss)
            self.kl_loss_tracker.update_state(kl_loss)
            return {
                "loss": self.total_loss_tracker.result(),
                "reconstruction_loss": self.reconstruction_loss_tracker.result(),
                "kl_loss": self.kl_loss_tracker.result(),
            }

        def call(self, x):
            _z_mean, _z_log_var, z = self.encoder(x)
            return self.decoder(z)

    digits = rng.random((N, 4, 4, 1), dtype=np.float32)
    out = {**_weights("e0", encoder), **_weights("d0", decoder)}
    vae = VAE(encoder, decoder)
    vae.compile(optimizer=keras.optimizers.Adam(), run_eagerly=True)
    with draws.armed():
        history = vae.fit(digits, **FIT)
    out.update(_logs("history", history.history))
    out.update({**_weights("e1", encoder), **_weights("d1", decoder)})
    return {**out, "data/digits": digits}


CASES: dict[str, Callable[..., dict[str, np.ndarray]]] = {
    "custom_fit": custom_fit,
    "lower_level": lower_level,
    "sample_weight": sample_weight,
    "test_step": custom_test_step,
    "gan_fit": gan_fit,
    "gan_loop": gan_loop,
    "add_loss": add_loss,
    "add_loss_mlp": add_loss_mlp,
    "endpoint_builtin": endpoint_builtin,
    "endpoint": endpoint,
    "endpoint_subclass": endpoint_subclass,
    "vae_add_loss": vae_add_loss,
    "vae_example": vae_example,
}


def compute(only: list[str] | None = None) -> dict[str, np.ndarray]:
    """Every reference array, by key."""
    os.environ["KERAS_BACKEND"] = "tensorflow"
    import keras
    import tensorflow as tf

    saved: dict[str, np.ndarray] = {}
    for i, (case, run) in enumerate(CASES.items()):
        if only and case not in only:
            continue
        keras.utils.set_random_seed(i)
        draws = Draws(keras, tf, seed=100 + i)
        arrays = run(keras, tf, np.random.default_rng(i), draws)
        arrays.update({f"draws/{j}": d for j, d in enumerate(draws.drawn)})
        saved.update({f"{case}/{key}": value for key, value in arrays.items()})
    return saved


def compare(computed: dict[str, np.ndarray], saved: dict[str, np.ndarray], rtol: float = 1e-5) -> list[str]:
    """What differs between two sets of references, one line each."""
    problems = [f"missing: {k}" for k in sorted(set(computed) - set(saved))]
    problems += [f"extra: {k}" for k in sorted(set(saved) - set(computed))]
    for key in sorted(set(computed) & set(saved)):
        a, b = computed[key], saved[key]
        if a.shape != b.shape:
            problems.append(f"{key}: shape {a.shape} against {b.shape}")
        elif not np.allclose(a, b, rtol=rtol, atol=1e-6):
            problems.append(f"{key}: differs by {np.max(np.abs(a - b)):.3g}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="recompute and compare with the saved file")
    args = parser.parse_args(argv)
    computed = compute()
    if args.check:
        with np.load(PATH, allow_pickle=False) as file:
            problems = compare(computed, dict(file))
        for problem in problems:
            print(problem)
        print("reproduced" if not problems else f"{len(problems)} differences")
        return 1 if problems else 0
    np.savez_compressed(PATH, **computed)
    print(f"wrote {PATH} ({PATH.stat().st_size} bytes, {len(computed)} arrays)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
