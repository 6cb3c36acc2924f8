"""Keras's developer guides on writing one's own training step, translated into tapefit and
compared with Keras 3's numbers on the same weights, data and random draws (saved by
``scripts/keras_reference_steps.py``; CI has no Keras).

Each test is one code block of the guides to customizing ``fit()`` with TensorFlow, to a
training loop from scratch, to making layers and models by subclassing and to training with
built-in methods, or of the endpoint-layer and VAE examples, shrunk as the script shrinks it
and translated line by line: ``keras`` -> ``tp``, ``tf.GradientTape`` -> ``tp.GradientTape``,
``tf.*``/``ops.*`` -> ``tp.*``. Where a line could not be translated as it stands, a comment
says what stands in for it. The random draws a step makes (a GAN's latent vectors, a VAE's
epsilon) are replayed from the reference file through ``tp.random.normal``/``uniform``.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp
from tapefit.utils import unpack_x_y_sample_weight

REFERENCE = dict(np.load(Path(__file__).parent / "data" / "keras_steps.npz", allow_pickle=False))
FIT = {"epochs": 2, "batch_size": 32, "shuffle": False, "verbose": 0}
RTOL, ATOL = 2e-4, 1e-6
LATENT_DIM = 4
keras_layers = tp.layers  # `from keras import layers`


def data(case):
    prefix = f"{case}/data/"
    return {k[len(prefix) :]: v for k, v in REFERENCE.items() if k.startswith(prefix)}


def weights(case, part):
    """``part``'s saved weights (``w0``, ``d1``, ...) in Keras's ``get_weights`` order."""
    count = sum(1 for k in REFERENCE if k.startswith(f"{case}/{part}/"))
    return [REFERENCE[f"{case}/{part}/{i}"] for i in range(count)]


def relative_difference(actual, expected):
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    return float(np.max(np.abs(actual - expected) / (np.abs(expected) + ATOL / RTOL), initial=0.0))


def assert_close(case, what, actual, expected):
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, f"{case} {what}: shape {actual.shape} against {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL, err_msg=f"{case} {what}")


def assert_logs(case, group, logs):
    """``logs`` (a History's or evaluate's) has Keras's keys and values for ``group``; every
    difference is named at once."""
    prefix = f"{case}/{group}/"
    expected = {k[len(prefix) :]: v for k, v in REFERENCE.items() if k.startswith(prefix)}
    problems = (
        [f"keys {sorted(logs)} against Keras's {sorted(expected)}"]
        if sorted(logs) != sorted(expected)
        else []
    )
    for key in sorted(set(expected) & set(logs)):
        actual = np.asarray(logs[key], np.float64)
        if actual.shape != expected[key].shape or not np.allclose(
            actual, expected[key], rtol=RTOL, atol=ATOL
        ):
            problems.append(f"{key}: {actual.tolist()} against Keras's {expected[key].tolist()}")
    assert not problems, f"{case} {group}: " + "; ".join(problems)


def assert_weights(case, part, model):
    expected = weights(case, part)
    actual = model.get_weights()
    assert len(actual) == len(expected), f"{case} {part}"
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        assert_close(case, f"{part}/{i}", a, e)


class Replay:
    """Keras's recorded random draws, given back in order by ``tp.random.normal``/``uniform``."""

    def __init__(self, case, monkeypatch):
        count = sum(1 for k in REFERENCE if k.startswith(f"{case}/draws/"))
        self.queue = [REFERENCE[f"{case}/draws/{i}"] for i in range(count)]
        self.monkeypatch = monkeypatch

    def draw(self, shape, *args, **kwargs):
        assert self.queue, "the step drew more often than Keras's did"
        drawn = self.queue.pop(0)
        assert tuple(int(s) for s in shape) == drawn.shape
        return tp.constant(drawn)

    @contextmanager
    def armed(self):
        with self.monkeypatch.context() as patch:
            patch.setattr(tp.random, "normal", self.draw)
            patch.setattr(tp.random, "uniform", self.draw)
            yield
        assert not self.queue, f"{len(self.queue)} of Keras's draws were not used"


def dense_model(case, cls):
    inputs = tp.Input(shape=(32,))
    outputs = tp.layers.Dense(1)(inputs)
    model = cls(inputs, outputs)
    model.set_weights(weights(case, "w0"))
    return model


# -- customizing what happens in fit() ----------------------------------------------------


def test_custom_model_compute_loss_and_metric_loop():
    case = "custom_fit"

    class CustomModel(tp.Model):
        def train_step(self, data):
            x, y = data
            with tp.GradientTape() as tape:
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

    d = data(case)
    model = dense_model(case, CustomModel)
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    history = model.fit(d["x"], d["y"], **FIT)
    assert_weights(case, "w1", model)
    assert_logs(case, "history", history.history)
    assert_logs(case, "evaluate", model.evaluate(d["x"], d["y"]))


def test_lower_level_custom_model_with_its_own_metrics():
    case = "lower_level"

    class CustomModel(tp.Model):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.loss_tracker = tp.metrics.Mean(name="loss")
            self.mae_metric = tp.metrics.MeanAbsoluteError(name="mae")
            self.loss_fn = tp.losses.MeanSquaredError()

        def train_step(self, data):
            x, y = data
            with tp.GradientTape() as tape:
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

    d = data(case)
    model = dense_model(case, CustomModel)
    model.compile(optimizer="adam")
    history = model.fit(d["x"], d["y"], **FIT)
    assert_weights(case, "w1", model)
    assert_logs(case, "history", history.history)


def _sample_weight_step_by_len(self, data):
    # The guide's unpacking.
    if len(data) == 3:
        x, y, sample_weight = data
    else:
        sample_weight = None
        x, y = data
    return x, y, sample_weight


def _sample_weight_step_by_unpack(self, data):
    # keras.utils.unpack_x_y_sample_weight
    return unpack_x_y_sample_weight(data)


@pytest.mark.parametrize("unpack", [_sample_weight_step_by_len, _sample_weight_step_by_unpack])
def test_custom_model_supporting_sample_weight(unpack):
    case = "sample_weight"

    class CustomModel(tp.Model):
        def train_step(self, data):
            x, y, sample_weight = unpack(self, data)
            with tp.GradientTape() as tape:
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

    d = data(case)
    model = dense_model(case, CustomModel)
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])
    history = model.fit(d["x"], d["y"], sample_weight=d["sw"], **FIT)
    assert_weights(case, "w1", model)
    assert_logs(case, "history", history.history)
    assert_logs(case, "evaluate", model.evaluate(d["x"], d["y"], sample_weight=d["sw"]))


def test_custom_test_step_runs_in_evaluate():
    case = "test_step"

    class CustomModel(tp.Model):
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

    d = data(case)
    model = dense_model(case, CustomModel)
    model.compile(loss="mse", metrics=["mae"])
    assert_logs(case, "evaluate", model.evaluate(d["x"], d["y"], batch_size=32))


def LeakyReLU(negative_slope):
    # tapefit has no LeakyReLU layer (keras.layers.LeakyReLU); an Activation stands in.
    return tp.layers.Activation(lambda x: tp.nn.leaky_relu(x, alpha=negative_slope))


def gan_parts(case):
    layers = keras_layers
    # tp.layers.Sequential takes no tp.Input as its first item: it is built by a call instead.
    discriminator = tp.layers.Sequential(
        [layers.Dense(8), LeakyReLU(negative_slope=0.2), layers.Dense(1)], name="discriminator"
    )
    generator = tp.layers.Sequential(
        [layers.Dense(8), LeakyReLU(negative_slope=0.2), layers.Dense(16, activation="sigmoid")],
        name="generator",
    )
    discriminator(np.zeros((1, 16), np.float32))
    generator(np.zeros((1, LATENT_DIM), np.float32))
    discriminator.set_weights(weights(case, "d0"))
    generator.set_weights(weights(case, "g0"))
    return discriminator, generator


def test_gan_with_its_own_compile_and_two_optimizers(monkeypatch):
    case = "gan_fit"

    class GAN(tp.Model):
        def __init__(self, discriminator, generator, latent_dim):
            super().__init__()
            self.discriminator = discriminator
            self.generator = generator
            self.latent_dim = latent_dim
            self.d_loss_tracker = tp.metrics.Mean(name="d_loss")
            self.g_loss_tracker = tp.metrics.Mean(name="g_loss")
            self.seed_generator = tp.random.SeedGenerator(1337)

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
            batch_size = real_images.shape[0]  # tf.shape(real_images)[0]: tapefit has no tp.shape
            random_latent_vectors = tp.random.normal(
                shape=(batch_size, self.latent_dim), seed=self.seed_generator
            )
            generated_images = self.generator(random_latent_vectors)
            combined_images = tp.concat([generated_images, real_images], axis=0)
            labels = tp.concat([tp.ones((batch_size, 1)), tp.zeros((batch_size, 1))], axis=0)
            labels += 0.05 * tp.random.uniform(labels.shape, seed=self.seed_generator)
            with tp.GradientTape() as tape:
                predictions = self.discriminator(combined_images)
                d_loss = self.loss_fn(labels, predictions)
            grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
            self.d_optimizer.apply(grads, self.discriminator.trainable_weights)
            random_latent_vectors = tp.random.normal(
                shape=(batch_size, self.latent_dim), seed=self.seed_generator
            )
            misleading_labels = tp.zeros((batch_size, 1))
            with tp.GradientTape() as tape:
                predictions = self.discriminator(self.generator(random_latent_vectors))
                g_loss = self.loss_fn(misleading_labels, predictions)
            grads = tape.gradient(g_loss, self.generator.trainable_weights)
            self.g_optimizer.apply(grads, self.generator.trainable_weights)
            self.d_loss_tracker.update_state(d_loss)
            self.g_loss_tracker.update_state(g_loss)
            return {"d_loss": self.d_loss_tracker.result(), "g_loss": self.g_loss_tracker.result()}

    discriminator, generator = gan_parts(case)
    gan = GAN(discriminator=discriminator, generator=generator, latent_dim=LATENT_DIM)
    gan.compile(
        d_optimizer=tp.optimizers.Adam(learning_rate=0.0003),
        g_optimizer=tp.optimizers.Adam(learning_rate=0.0003),
        loss_fn=tp.losses.BinaryCrossentropy(from_logits=True),
    )
    with Replay(case, monkeypatch).armed():
        history = gan.fit(data(case)["real"], **FIT)
    assert_weights(case, "d1", discriminator)
    assert_weights(case, "g1", generator)
    assert_logs(case, "history", history.history)


def test_gan_training_loop_from_scratch(monkeypatch):
    case = "gan_loop"
    discriminator, generator = gan_parts(case)
    latent_dim = LATENT_DIM
    d_optimizer = tp.optimizers.Adam(learning_rate=0.0003)
    g_optimizer = tp.optimizers.Adam(learning_rate=0.0004)
    loss_fn = tp.losses.BinaryCrossentropy(from_logits=True)

    def train_step(real_images):
        random_latent_vectors = tp.random.normal(shape=(batch_size, latent_dim))
        generated_images = generator(random_latent_vectors)
        combined_images = tp.concat([generated_images, real_images], axis=0)
        labels = tp.concat([tp.ones((batch_size, 1)), tp.zeros((real_images.shape[0], 1))], axis=0)
        labels += 0.05 * tp.random.uniform(labels.shape)
        with tp.GradientTape() as tape:
            predictions = discriminator(combined_images)
            d_loss = loss_fn(labels, predictions)
        grads = tape.gradient(d_loss, discriminator.trainable_weights)
        d_optimizer.apply(grads, discriminator.trainable_weights)
        random_latent_vectors = tp.random.normal(shape=(batch_size, latent_dim))
        misleading_labels = tp.zeros((batch_size, 1))
        with tp.GradientTape() as tape:
            predictions = discriminator(generator(random_latent_vectors))
            g_loss = loss_fn(misleading_labels, predictions)
        grads = tape.gradient(g_loss, generator.trainable_weights)
        g_optimizer.apply(grads, generator.trainable_weights)
        return d_loss, g_loss, generated_images

    batch_size = 32
    real = data(case)["real"]
    dataset = [real[i : i + batch_size] for i in range(0, len(real), batch_size)]  # tf.data's batches
    d_losses, g_losses, generated = [], [], []
    with Replay(case, monkeypatch).armed():
        for real_images in dataset:
            d_loss, g_loss, generated_images = train_step(real_images)
            d_losses.append(float(d_loss))
            g_losses.append(float(g_loss))
            generated.append(np.asarray(generated_images))
    assert_close(case, "d_loss", d_losses, REFERENCE[f"{case}/steps/d_loss"])
    assert_close(case, "g_loss", g_losses, REFERENCE[f"{case}/steps/g_loss"])
    assert_close(case, "generated", np.stack(generated), REFERENCE[f"{case}/steps/generated"])
    assert_weights(case, "d1", discriminator)
    assert_weights(case, "g1", generator)


# -- add_loss, endpoint layers --------------------------------------------------------------


def test_activity_regularization_layer_add_loss_with_and_without_a_compiled_loss():
    case = "add_loss"

    class ActivityRegularizationLayer(tp.layers.Layer):
        def __init__(self, rate=1e-2):
            super().__init__()
            self.rate = rate

        def call(self, inputs):
            self.add_loss(self.rate * tp.reduce_mean(inputs))
            return inputs

    d = data(case)
    inputs = tp.Input(shape=(3,))
    outputs = ActivityRegularizationLayer()(inputs)
    model = tp.Model(inputs, outputs)
    model.compile(optimizer="adam", loss="mse")
    # The guide's model has no weights: Keras warns and trains nothing, tapefit refuses a step
    # that updates nothing (Keras's numbers for it are kept in the reference file all the same).
    with pytest.raises(ValueError, match=r"no \(gradient, variable\) pairs"):
        model.fit(d["x"], d["y"], **FIT)
    model = tp.Model(inputs, ActivityRegularizationLayer()(inputs))
    model.compile(optimizer="adam")
    with pytest.raises(ValueError, match=r"no \(gradient, variable\) pairs"):
        model.fit(d["x2"], d["y2"], **FIT)


def test_activity_regularization_in_an_mlp_with_rmsprop():
    case = "add_loss_mlp"
    layers = keras_layers

    class ActivityRegularizationLayer(layers.Layer):
        def call(self, inputs):
            self.add_loss(tp.reduce_sum(inputs) * 0.1)
            return inputs

    d = data(case)
    inputs = tp.Input(shape=(16,), name="digits")
    x = layers.Dense(8, activation="relu", name="dense_1")(inputs)
    x = ActivityRegularizationLayer()(x)
    x = layers.Dense(8, activation="relu", name="dense_2")(x)
    outputs = layers.Dense(10, name="predictions")(x)
    model = tp.Model(inputs=inputs, outputs=outputs)
    model.set_weights(weights(case, "w0"))
    model.compile(
        optimizer=tp.optimizers.RMSprop(learning_rate=1e-3),
        loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    history = model.fit(d["x"], d["y"], **FIT)
    assert_weights(case, "w1", model)
    assert_logs(case, "history", history.history)
    assert_logs(case, "evaluate", model.evaluate(d["x"], d["y"]))


def test_logistic_endpoint_of_the_built_in_methods_guide():
    case = "endpoint_builtin"

    class LogisticEndpoint(tp.layers.Layer):
        def __init__(self, name=None):
            super().__init__(name=name)
            self.loss_fn = tp.losses.BinaryCrossentropy(from_logits=True)

        def call(self, targets, logits, sample_weights=None):
            loss = self.loss_fn(targets, logits, sample_weights)
            self.add_loss(loss)
            return tp.nn.softmax(logits)

    d = data(case)
    inputs = tp.Input(shape=(3,), name="inputs")
    targets = tp.Input(shape=(10,), name="targets")
    logits = tp.layers.Dense(10)(inputs)
    predictions = LogisticEndpoint(name="predictions")(targets, logits)
    model = tp.Model(inputs=[inputs, targets], outputs=predictions)
    model.set_weights(weights(case, "w0"))
    model.compile(optimizer="adam")
    history = model.fit(d, **FIT)
    assert_weights(case, "w1", model)
    assert_logs(case, "history", history.history)


class LogisticEndpoint(tp.layers.Layer):
    def __init__(self, name=None):
        super().__init__(name=name)
        self.loss_fn = tp.losses.BinaryCrossentropy(from_logits=True)
        self.accuracy_metric = tp.metrics.BinaryAccuracy(name="accuracy")

    def call(self, logits, targets=None, sample_weight=None):
        if targets is not None:
            loss = self.loss_fn(targets, logits, sample_weight)
            self.add_loss(loss)
            self.accuracy_metric.update_state(targets, logits, sample_weight)
        return tp.nn.softmax(logits)


def test_endpoint_layer_pattern_functional():
    case = "endpoint"
    d = data(case)
    inputs = tp.Input((8,), name="inputs")
    logits = tp.layers.Dense(1)(inputs)
    targets = tp.Input((1,), name="targets")
    sample_weight = tp.Input((1,), name="sample_weight")
    preds = LogisticEndpoint()(logits, targets, sample_weight)
    model = tp.Model([inputs, targets, sample_weight], preds)
    model.set_weights(weights(case, "w0"))
    model.compile(tp.optimizers.Adam(1e-3))
    history = model.fit(d, **FIT)
    assert_weights(case, "w1", model)
    assert_logs(case, "history", history.history)


def test_endpoint_layer_pattern_subclassed():
    case = "endpoint_subclass"

    class LogReg(tp.Model):
        def __init__(self):
            super().__init__()
            self.dense = tp.layers.Dense(1)
            self.logistic_endpoint = LogisticEndpoint()

        def call(self, inputs):
            logits = self.dense(inputs["inputs"])
            preds = self.logistic_endpoint(
                logits=logits, targets=inputs["targets"], sample_weight=inputs["sample_weight"]
            )
            return preds

    d = data(case)
    model = LogReg()
    model({k: v[:1] for k, v in d.items()})
    model.set_weights(weights(case, "w0"))
    model.compile(tp.optimizers.Adam(1e-3))
    history = model.fit(d, **FIT)
    assert_weights(case, "w1", model)
    assert_logs(case, "history", history.history)


# -- the variational autoencoders -------------------------------------------------------------


def test_variational_autoencoder_with_add_loss(monkeypatch):
    case = "vae_add_loss"
    layers = keras_layers

    class Sampling(layers.Layer):
        def call(self, inputs):
            z_mean, z_log_var = inputs
            batch = z_mean.shape[0]  # ops.shape(z_mean)[0]: tapefit has no tp.shape
            dim = z_mean.shape[1]
            epsilon = tp.random.normal(shape=(batch, dim))
            return z_mean + tp.exp(0.5 * z_log_var) * epsilon

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

    class VariationalAutoEncoder(tp.Model):
        def __init__(self, original_dim, intermediate_dim=64, latent_dim=32, name="autoencoder", **kwargs):
            super().__init__(name=name, **kwargs)
            self.original_dim = original_dim
            self.encoder = Encoder(latent_dim=latent_dim, intermediate_dim=intermediate_dim)
            self.decoder = Decoder(original_dim, intermediate_dim=intermediate_dim)

        def call(self, inputs):
            z_mean, z_log_var, z = self.encoder(inputs)
            reconstructed = self.decoder(z)
            kl_loss = -0.5 * tp.reduce_mean(z_log_var - tp.square(z_mean) - tp.exp(z_log_var) + 1)
            self.add_loss(kl_loss)
            return reconstructed

    x_train = data(case)["x"]
    vae = VariationalAutoEncoder(16, 8, 4)
    vae(x_train[:1])
    vae.set_weights(weights(case, "w0"))
    optimizer = tp.optimizers.Adam(learning_rate=1e-3)
    vae.compile(optimizer, loss=tp.losses.MeanSquaredError())
    with Replay(case, monkeypatch).armed():
        history = vae.fit(x_train, x_train, **FIT)
    assert_weights(case, "w1", vae)
    assert_logs(case, "history", history.history)


def test_variational_autoencoder_example_with_its_own_train_step(monkeypatch):
    case = "vae_example"
    layers = keras_layers

    class Sampling(layers.Layer):
        def call(self, inputs):
            z_mean, z_log_var = inputs
            batch = z_mean.shape[0]  # tf.shape(z_mean)[0]: tapefit has no tp.shape
            dim = z_mean.shape[1]
            epsilon = tp.random.normal(shape=(batch, dim))
            return z_mean + tp.exp(0.5 * z_log_var) * epsilon

    latent_dim = 2
    encoder_inputs = tp.Input(shape=(4, 4, 1))
    x = layers.Flatten()(encoder_inputs)
    x = layers.Dense(16, activation="relu")(x)
    z_mean = layers.Dense(latent_dim, name="z_mean")(x)
    z_log_var = layers.Dense(latent_dim, name="z_log_var")(x)
    z = Sampling()([z_mean, z_log_var])
    encoder = tp.Model(encoder_inputs, [z_mean, z_log_var, z], name="encoder")
    latent_inputs = tp.Input(shape=(latent_dim,))
    x = layers.Dense(16, activation="sigmoid")(latent_inputs)
    decoder_outputs = layers.Reshape((4, 4, 1))(x)
    decoder = tp.Model(latent_inputs, decoder_outputs, name="decoder")
    encoder.set_weights(weights(case, "e0"))
    decoder.set_weights(weights(case, "d0"))
    # keras.losses.binary_crossentropy (the function): tapefit has the class only.
    binary_crossentropy = tp.losses.BinaryCrossentropy(reduction=None)

    class VAE(tp.Model):
        def __init__(self, encoder, decoder, **kwargs):
            super().__init__(**kwargs)
            self.encoder = encoder
            self.decoder = decoder
            self.total_loss_tracker = tp.metrics.Mean(name="total_loss")
            self.reconstruction_loss_tracker = tp.metrics.Mean(name="reconstruction_loss")
            self.kl_loss_tracker = tp.metrics.Mean(name="kl_loss")

        @property
        def metrics(self):
            return [self.total_loss_tracker, self.reconstruction_loss_tracker, self.kl_loss_tracker]

        def train_step(self, data):
            with tp.GradientTape() as tape:
                z_mean, z_log_var, z = self.encoder(data)
                reconstruction = self.decoder(z)
                reconstruction_loss = tp.reduce_mean(
                    tp.reduce_sum(binary_crossentropy(data, reconstruction), axis=(1, 2))
                )
                kl_loss = -0.5 * (1 + z_log_var - tp.square(z_mean) - tp.exp(z_log_var))
                kl_loss = tp.reduce_mean(tp.reduce_sum(kl_loss, axis=1))
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

    digits = data(case)["digits"]
    vae = VAE(encoder, decoder)
    vae.compile(optimizer=tp.optimizers.Adam())
    with Replay(case, monkeypatch).armed():
        history = vae.fit(digits, **FIT)
    assert_weights(case, "e1", encoder)
    assert_weights(case, "d1", decoder)
    assert_logs(case, "history", history.history)
