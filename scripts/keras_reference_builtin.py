"""Keras 3's numbers for the guides to the built-in training methods and to callbacks, saved for CI.

CI has no Keras, so ``tests/training/test_keras_guides_builtin.py`` compares tapefit with the
numbers this script computed once with Keras 3 (TensorFlow backend) and saved in
``tests/training/data/keras_builtin.npz``. Only NumPy, TensorFlow and Keras are used here.

Each case of ``CASES`` is a small version of a code block of Keras's developer guides
"Training & evaluation with the built-in methods" and "Writing your own callbacks" (plus
``weighted_metrics``, which the first guide names but does not run): MNIST becomes random data
of the same kind (20 features in [0, 1), labels 0-9 as float32), layers are narrower, and
every fit runs without shuffling. For a case ``<case>``:

- ``<case>/data/<name>``: the arrays it trains and evaluates on;
- ``<case>/w0/<layer>/<i>`` and ``<case>/w1/<layer>/<i>``: each layer's weights before and after
  training, by layer name (so the order of a model's layers does not matter);
- ``<case>/<fit>/<key>``: ``History.history`` of a fit, ``<case>/evaluate/<key>``:
  ``evaluate(..., return_dict=True)``, and whatever else a case records (a callback's values,
  the events it saw as strings ``hook:index:keys``).

    python scripts/keras_reference_builtin.py          # writes the file (needs tensorflow and keras)
    python scripts/keras_reference_builtin.py --check  # compares, exit 1 if not equal
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

PATH = Path(__file__).resolve().parents[1] / "tests" / "training" / "data" / "keras_builtin.npz"

N = 96
"""Training samples per case: three batches of 32."""
FEATURES = 20
FIT = {"batch_size": 32, "shuffle": False, "verbose": 0}


def _weights(prefix: str, model: Any) -> dict[str, np.ndarray]:
    out = {}
    for layer in model.layers:
        for i, w in enumerate(layer.get_weights()):
            out[f"{prefix}/{layer.name}/{i}"] = np.asarray(w, np.float32)
    return out


def _logs(prefix: str, logs: dict[str, Any]) -> dict[str, np.ndarray]:
    return {f"{prefix}/{k}": np.asarray(v, np.float64) for k, v in logs.items()}


def _digits(rng: np.random.Generator, n: int = N) -> dict[str, np.ndarray]:
    """MNIST's stand-in: flat float32 images in [0, 1) and labels 0-9 as float32."""
    return {
        "x": rng.random((n, FEATURES), dtype=np.float32),
        "y": rng.integers(0, 10, n).astype(np.float32),
    }


def _data(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {f"data/{k}": v for k, v in data.items()}


# -- training & evaluation with the built-in methods ----------------------------------------


def get_uncompiled_model(keras: Any) -> Any:
    layers = keras.layers
    inputs = keras.Input(shape=(FEATURES,), name="digits")
    x = layers.Dense(16, activation="relu", name="dense_1")(inputs)
    x = layers.Dense(16, activation="relu", name="dense_2")(x)
    outputs = layers.Dense(10, activation="softmax", name="predictions")(x)
    return keras.Model(inputs=inputs, outputs=outputs)


def get_compiled_model(keras: Any) -> Any:
    model = get_uncompiled_model(keras)
    model.compile(
        optimizer="rmsprop",
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
    )
    return model


def end_to_end(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The first end-to-end example: fit with validation data, evaluate, predict."""
    data = _digits(rng, N + 64 + 32)
    x_train, y_train = data["x"][:N], data["y"][:N]
    x_val, y_val = data["x"][N : N + 32], data["y"][N : N + 32]
    x_test, y_test = data["x"][N + 32 :], data["y"][N + 32 :]
    model = get_uncompiled_model(keras)
    out = _weights("w0", model)
    model.compile(
        optimizer=keras.optimizers.RMSprop(),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
    history = model.fit(x_train, y_train, epochs=2, validation_data=(x_val, y_val), **FIT)
    out.update(_logs("history", history.history))
    out.update(_logs("evaluate", model.evaluate(x_test, y_test, batch_size=128, verbose=0, return_dict=True)))
    out["predictions"] = np.asarray(model.predict(x_test[:3], verbose=0), np.float32)
    out.update(_weights("w1", model))
    return {**out, **_data(data)}


def string_compile(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """get_compiled_model: the optimizer, loss and metrics by name."""
    data = _digits(rng)
    model = get_compiled_model(keras)
    out = _weights("w0", model)
    out.update(_logs("history", model.fit(data["x"], data["y"], epochs=2, **FIT).history))
    out.update(_weights("w1", model))
    return {**out, **_data(data)}


def custom_loss_fn(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A loss function of (y_true, y_pred): mean squared error on one-hot labels."""
    ops = keras.ops

    def custom_mean_squared_error(y_true, y_pred):
        return ops.mean(ops.square(y_true - y_pred), axis=-1)

    data = _digits(rng)
    model = get_uncompiled_model(keras)
    out = _weights("w0", model)
    model.compile(optimizer=keras.optimizers.Adam(), loss=custom_mean_squared_error)
    y_train_one_hot = ops.one_hot(data["y"], num_classes=10)
    out.update(_logs("history", model.fit(data["x"], y_train_one_hot, epochs=1, **FIT).history))
    out.update(_weights("w1", model))
    return {**out, **_data(data)}


def custom_loss_class(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """CustomMSE: a Loss subclass with a parameter."""
    ops = keras.ops

    class CustomMSE(keras.losses.Loss):
        def __init__(self, regularization_factor=0.1, name="custom_mse"):
            super().__init__(name=name)
            self.regularization_factor = regularization_factor

        def call(self, y_true, y_pred):
            mse = ops.mean(ops.square(y_true - y_pred), axis=-1)
            reg = ops.mean(ops.square(0.5 - y_pred), axis=-1)
            return mse + reg * self.regularization_factor

    data = _digits(rng)
    model = get_uncompiled_model(keras)
    out = _weights("w0", model)
    model.compile(optimizer=keras.optimizers.Adam(), loss=CustomMSE())
    y_train_one_hot = ops.one_hot(data["y"], num_classes=10)
    out.update(_logs("history", model.fit(data["x"], y_train_one_hot, epochs=1, **FIT).history))
    out.update(_weights("w1", model))
    return {**out, **_data(data)}


def custom_metric(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """CategoricalTruePositives: a Metric subclass with a variable of its own."""
    ops = keras.ops

    class CategoricalTruePositives(keras.metrics.Metric):
        def __init__(self, name="categorical_true_positives", **kwargs):
            super().__init__(name=name, **kwargs)
            self.true_positives = self.add_variable(shape=(), name="ctp", initializer="zeros")

        def update_state(self, y_true, y_pred, sample_weight=None):
            y_pred = ops.reshape(ops.argmax(y_pred, axis=1), (-1, 1))
            values = ops.cast(y_true, "int32") == ops.cast(y_pred, "int32")
            values = ops.cast(values, "float32")
            if sample_weight is not None:
                sample_weight = ops.cast(sample_weight, "float32")
                values = ops.multiply(values, sample_weight)
            self.true_positives.assign_add(ops.sum(values))

        def result(self):
            return self.true_positives

        def reset_state(self):
            self.true_positives.assign(0.0)

    data = _digits(rng)
    model = get_uncompiled_model(keras)
    out = _weights("w0", model)
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=[CategoricalTruePositives()],
    )
    out.update(_logs("history", model.fit(data["x"], data["y"], epochs=3, **FIT).history))
    out.update(_weights("w1", model))
    return {**out, **_data(data)}


def validation_split(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """validation_split=0.2: the last fifth held out."""
    data = _digits(rng, 120)
    model = get_compiled_model(keras)
    out = _weights("w0", model)
    history = model.fit(data["x"], data["y"], validation_split=0.2, epochs=1, **FIT)
    out.update(_logs("history", history.history))
    out.update(_weights("w1", model))
    return {**out, **_data(data)}


def py_dataset(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """ExamplePyDataset: batches by index, as training and validation data."""

    class ExamplePyDataset(keras.utils.PyDataset):
        def __init__(self, x, y, batch_size, **kwargs):
            super().__init__(**kwargs)
            self.x = x
            self.y = y
            self.batch_size = batch_size

        def __len__(self):
            return int(np.ceil(len(self.x) / float(self.batch_size)))

        def __getitem__(self, idx):
            batch_x = self.x[idx * self.batch_size : (idx + 1) * self.batch_size]
            batch_y = self.y[idx * self.batch_size : (idx + 1) * self.batch_size]
            return batch_x, batch_y

    data = _digits(rng, N + 40)
    train_py_dataset = ExamplePyDataset(data["x"][:N], data["y"][:N], batch_size=32)
    val_py_dataset = ExamplePyDataset(data["x"][N:], data["y"][N:], batch_size=32)
    model = get_compiled_model(keras)
    out = _weights("w0", model)
    history = model.fit(train_py_dataset, validation_data=val_py_dataset, epochs=1, shuffle=False, verbose=0)
    out.update(_logs("history", history.history))
    out.update(_logs("evaluate", model.evaluate(val_py_dataset, verbose=0, return_dict=True)))
    out.update(_weights("w1", model))
    return {**out, **_data(data)}


def datasets(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """tf.data Datasets (unshuffled here) to fit and evaluate, with steps_per_epoch, as
    validation data, and with validation_steps; each fit from the same starting weights."""
    data = _digits(rng, N + 64 + 64)
    x_train, y_train = data["x"][:N], data["y"][:N]
    x_val, y_val = data["x"][N : N + 64], data["y"][N : N + 64]
    x_test, y_test = data["x"][N + 64 :], data["y"][N + 64 :]
    model = get_compiled_model(keras)
    out = _weights("w0", model)
    start = model.get_weights()
    train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(32)
    test_dataset = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(32)
    val_dataset = tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(32)
    out.update(_logs("fit", model.fit(train_dataset, epochs=3, verbose=0).history))
    out.update(_logs("evaluate", model.evaluate(test_dataset, verbose=0, return_dict=True)))
    model = get_compiled_model(keras)
    model.set_weights(start)
    out.update(_logs("steps", model.fit(train_dataset, epochs=3, steps_per_epoch=2, verbose=0).history))
    model = get_compiled_model(keras)
    model.set_weights(start)
    out.update(
        _logs("val", model.fit(train_dataset, epochs=1, validation_data=val_dataset, verbose=0).history)
    )
    model = get_compiled_model(keras)
    model.set_weights(start)
    history = model.fit(train_dataset, epochs=1, validation_data=val_dataset, validation_steps=1, verbose=0)
    out.update(_logs("val_steps", history.history))
    return {**out, **_data(data)}


def class_weight(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """class_weight: class 5 counts twice."""
    weights = {i: 1.0 for i in range(10)}
    weights[5] = 2.0
    data = _digits(rng)
    model = get_compiled_model(keras)
    out = _weights("w0", model)
    out.update(
        _logs("history", model.fit(data["x"], data["y"], class_weight=weights, epochs=1, **FIT).history)
    )
    out.update(_weights("w1", model))
    return {**out, **_data(data)}


def sample_weight(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """sample_weight with arrays, then the same weights as a dataset's third element."""
    data = _digits(rng)
    weights = np.ones(shape=(N,))
    weights[data["y"] == 5] = 2.0
    model = get_compiled_model(keras)
    out = _weights("w0", model)
    out.update(
        _logs("history", model.fit(data["x"], data["y"], sample_weight=weights, epochs=1, **FIT).history)
    )
    out.update(_weights("w1", model))
    train_dataset = tf.data.Dataset.from_tensor_slices((data["x"], data["y"], weights)).batch(32)
    model = get_compiled_model(keras)
    model.set_weights([out[k] for k in out if k.startswith("w0/")])
    out.update(_logs("dataset", model.fit(train_dataset, epochs=1, verbose=0).history))
    out.update(_weights("w1_dataset", model))
    return {**out, **_data(data), "data/sw": weights.astype(np.float32)}


def weighted_metrics(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """compile's weighted_metrics beside metrics of the same name, with validation weights."""
    data = _digits(rng, N + 32)
    weights = rng.random(N + 32).astype(np.float32) + 0.1
    x, y, w = data["x"][:N], data["y"][:N], weights[:N]
    val = (data["x"][N:], data["y"][N:], weights[N:])
    model = get_uncompiled_model(keras)
    out = _weights("w0", model)
    model.compile(
        optimizer="rmsprop",
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
        weighted_metrics=["sparse_categorical_accuracy", "sparse_categorical_crossentropy"],
    )
    history = model.fit(x, y, sample_weight=w, validation_data=val, epochs=2, **FIT)
    out.update(_logs("history", history.history))
    out.update(
        _logs("evaluate", model.evaluate(val[0], val[1], sample_weight=val[2], verbose=0, return_dict=True))
    )
    out.update(_weights("w1", model))
    return {**out, **_data(data), "data/sw": weights}


def _multi_io_model(keras: Any) -> Any:
    layers = keras.layers
    image_input = keras.Input(shape=(6, 6, 3), name="img_input")
    timeseries_input = keras.Input(shape=(None, 10), name="ts_input")
    x1 = layers.Conv2D(3, 3)(image_input)
    x1 = layers.GlobalMaxPooling2D()(x1)
    x2 = layers.Conv1D(3, 3)(timeseries_input)
    x2 = layers.GlobalMaxPooling1D()(x2)
    x = layers.concatenate([x1, x2])
    score_output = layers.Dense(1, name="score_output")(x)
    class_output = layers.Dense(5, name="class_output")(x)
    return keras.Model(inputs=[image_input, timeseries_input], outputs=[score_output, class_output])


def _multi_io_data() -> dict[str, np.ndarray]:
    """The two-input cases' data (both use it; ``multi_io`` saves it): 64 samples."""
    rng = np.random.default_rng(1234)
    return {
        "img": rng.random((64, 6, 6, 3), dtype=np.float32),
        "ts": rng.random((64, 5, 10), dtype=np.float32),
        "score": rng.random((64, 1), dtype=np.float32),
        "class": rng.random((64, 5), dtype=np.float32),
    }


def multi_io(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Two inputs, two outputs: losses and metrics as lists and dicts, loss_weights, an output
    without a loss, and a dataset of dicts; one model, fitted after each compile."""
    d = _multi_io_data()
    model = _multi_io_model(keras)
    out = _weights("w0", model)
    lists = ([d["img"], d["ts"]], [d["score"], d["class"]])
    dicts = (
        {"img_input": d["img"], "ts_input": d["ts"]},
        {"score_output": d["score"], "class_output": d["class"]},
    )
    model.compile(
        optimizer=keras.optimizers.RMSprop(1e-3),
        loss=[keras.losses.MeanSquaredError(), keras.losses.CategoricalCrossentropy()],
        metrics=[
            [keras.metrics.MeanAbsolutePercentageError(), keras.metrics.MeanAbsoluteError()],
            [keras.metrics.CategoricalAccuracy()],
        ],
    )
    out.update(_logs("lists", model.fit(*lists, epochs=1, **FIT).history))
    model.compile(
        optimizer=keras.optimizers.RMSprop(1e-3),
        loss={
            "score_output": keras.losses.MeanSquaredError(),
            "class_output": keras.losses.CategoricalCrossentropy(),
        },
        metrics={
            "score_output": [keras.metrics.MeanAbsolutePercentageError(), keras.metrics.MeanAbsoluteError()],
            "class_output": [keras.metrics.CategoricalAccuracy()],
        },
        loss_weights={"score_output": 2.0, "class_output": 1.0},
    )
    out.update(_logs("dicts", model.fit(*dicts, epochs=1, **FIT).history))
    model.compile(
        optimizer=keras.optimizers.RMSprop(1e-3), loss=[None, keras.losses.CategoricalCrossentropy()]
    )
    out.update(_logs("none_loss", model.fit(*lists, epochs=1, **FIT).history))
    # The guide's loss={"class_output": ...} (a dict without every output) is refused by Keras 3.15
    # itself at fit ("Expected keys ['score_output', 'class_output'] in loss dict"): not run here.
    model.compile(
        optimizer=keras.optimizers.RMSprop(1e-3),
        loss=[keras.losses.MeanSquaredError(), keras.losses.CategoricalCrossentropy()],
    )
    train_dataset = tf.data.Dataset.from_tensor_slices(dicts).batch(64)
    out.update(_logs("dataset", model.fit(train_dataset, epochs=1, verbose=0).history))
    out.update(_weights("w1", model))
    return {**out, **_data(d)}


def weighted_multi_io(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Per-output weighted_metrics (a dict) of the two-output model, with one weight per sample."""
    d = _multi_io_data()
    weights = rng.random(64).astype(np.float32) + 0.1
    model = _multi_io_model(keras)
    out = _weights("w0", model)
    model.compile(
        optimizer=keras.optimizers.RMSprop(1e-3),
        loss=[keras.losses.MeanSquaredError(), keras.losses.CategoricalCrossentropy()],
        metrics=[None, [keras.metrics.CategoricalAccuracy()]],
        weighted_metrics={"class_output": [keras.metrics.CategoricalAccuracy()], "score_output": ["mae"]},
    )
    history = model.fit([d["img"], d["ts"]], [d["score"], d["class"]], sample_weight=weights, epochs=2, **FIT)
    out.update(_logs("history", history.history))
    out.update(_weights("w1", model))
    return {**out, "data/sw": weights}


def early_stopping(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """EarlyStopping on val_loss (min_delta 1e-2, patience 2) with validation_split."""
    data = _digits(rng, 120)
    model = get_compiled_model(keras)
    out = _weights("w0", model)
    callbacks = [keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=1e-2, patience=2, verbose=0)]
    history = model.fit(data["x"], data["y"], epochs=20, callbacks=callbacks, validation_split=0.2, **FIT)
    out.update(_logs("history", history.history))
    out.update(_weights("w1", model))
    return {**out, **_data(data)}


def loss_history(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """LossHistory: a callback keeping each batch's logged loss."""

    class LossHistory(keras.callbacks.Callback):
        def on_train_begin(self, logs):
            self.per_batch_losses = []

        def on_batch_end(self, batch, logs):
            self.per_batch_losses.append(logs.get("loss"))

    data = _digits(rng)
    model = get_compiled_model(keras)
    out = _weights("w0", model)
    callback = LossHistory()
    model.fit(data["x"], data["y"], epochs=2, callbacks=[callback], **FIT)
    out["per_batch_losses"] = np.asarray(callback.per_batch_losses, np.float64)
    return {**out, **_data(data)}


def model_checkpoint(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """ModelCheckpoint(save_best_only=True, monitor="val_loss"): the epochs it saved."""
    data = _digits(rng, 120)
    model = get_uncompiled_model(keras)
    out = _weights("w0", model)
    model.compile(
        optimizer=keras.optimizers.RMSprop(0.05),
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
    )
    with tempfile.TemporaryDirectory() as folder:
        callbacks = [
            keras.callbacks.ModelCheckpoint(
                filepath=os.path.join(folder, "mymodel_{epoch}.keras"),
                save_best_only=True,
                monitor="val_loss",
                verbose=0,
            )
        ]
        history = model.fit(data["x"], data["y"], epochs=6, callbacks=callbacks, validation_split=0.2, **FIT)
        saved = sorted(int(name[len("mymodel_") : -len(".keras")]) for name in os.listdir(folder))
    out.update(_logs("history", history.history))
    out["saved_epochs"] = np.asarray(saved, np.int64)
    return {**out, **_data(data)}


def lr_schedule(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """An ExponentialDecay schedule as RMSprop's learning rate (decaying every two steps here)."""
    data = _digits(rng)
    schedule = keras.optimizers.schedules.ExponentialDecay(
        0.01, decay_steps=2, decay_rate=0.5, staircase=True
    )
    model = get_uncompiled_model(keras)
    out = _weights("w0", model)
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=schedule),
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
    )
    out.update(_logs("history", model.fit(data["x"], data["y"], epochs=2, **FIT).history))
    out.update(_weights("w1", model))
    return {**out, **_data(data)}


def lr_scheduler_logs(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """keras.callbacks.LearningRateScheduler, and a callback reading the rate from the logs."""

    class RateFromLogs(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.rates = []

        def on_epoch_end(self, epoch, logs=None):
            self.rates.append(logs["learning_rate"])

    data = _digits(rng)
    model = get_uncompiled_model(keras)
    out = _weights("w0", model)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    reader = RateFromLogs()
    scheduler = keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr if epoch < 1 else lr * 0.5)
    history = model.fit(data["x"], data["y"], epochs=3, callbacks=[scheduler, reader], **FIT)
    out.update(_logs("history", history.history))
    out["rates"] = np.asarray(reader.rates, np.float64)
    out.update(_weights("w1", model))
    return {**out, **_data(data)}


# -- writing your own callbacks ---------------------------------------------------------------


def get_model(keras: Any) -> Any:
    model = keras.Sequential()
    model.add(keras.layers.Dense(1))
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=0.1),
        loss="mean_squared_error",
        metrics=["mean_absolute_error"],
    )
    model.build((None, FEATURES))
    return model


def _callback_data(rng: np.random.Generator) -> dict[str, np.ndarray]:
    train, test = _digits(rng), _digits(rng, 64)
    return {"x_train": train["x"], "y_train": train["y"], "x_test": test["x"], "y_test": test["y"]}


def callback_events(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """CustomCallback: every hook of fit (with validation_split), evaluate and predict, with the
    keys of the logs it got."""
    events: list[str] = []

    def hook(name):
        def method(self, *args, logs=None):
            index = args[0] if args and not isinstance(args[0], dict) else ""
            logs = args[-1] if args and isinstance(args[-1], dict) else logs
            events.append(f"{name}:{index}:{','.join(sorted(logs.keys()))}")

        return method

    names = [
        "on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end", "on_test_begin",
        "on_test_end", "on_predict_begin", "on_predict_end", "on_train_batch_begin",
        "on_train_batch_end", "on_test_batch_begin", "on_test_batch_end",
        "on_predict_batch_begin", "on_predict_batch_end",
    ]  # fmt: skip
    CustomCallback = type("CustomCallback", (keras.callbacks.Callback,), {n: hook(n) for n in names})
    d = _callback_data(rng)
    model = get_model(keras)
    out = _weights("w0", model)
    model.fit(
        d["x_train"], d["y_train"], batch_size=32, epochs=1, verbose=0, validation_split=0.5, shuffle=False,
        callbacks=[CustomCallback()],
    )  # fmt: skip
    model.evaluate(d["x_test"], d["y_test"], batch_size=32, verbose=0, callbacks=[CustomCallback()])
    model.predict(d["x_test"], batch_size=32, verbose=0, callbacks=[CustomCallback()])
    out["events"] = np.asarray(events)
    return {**out, **_data(d)}


class _Printed:
    """What LossAndErrorPrintingCallback prints, as numbers."""

    def __init__(self) -> None:
        self.train: list[float] = []
        self.test: list[float] = []
        self.epochs: list[tuple[float, float]] = []


def _printing_callback(keras: Any, printed: _Printed) -> Any:
    class LossAndErrorPrintingCallback(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            printed.train.append(logs["loss"])

        def on_test_batch_end(self, batch, logs=None):
            printed.test.append(logs["loss"])

        def on_epoch_end(self, epoch, logs=None):
            printed.epochs.append((logs["loss"], logs["mean_absolute_error"]))

    return LossAndErrorPrintingCallback()


def _printed(out: dict[str, np.ndarray], printed: _Printed) -> None:
    out["printed/train"] = np.asarray(printed.train, np.float64)
    out["printed/test"] = np.asarray(printed.test, np.float64)
    out["printed/epochs"] = np.asarray(printed.epochs, np.float64).reshape(-1, 2)


def callback_logs(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """LossAndErrorPrintingCallback on fit and evaluate: the values it prints."""
    d = _callback_data(rng)
    model = get_model(keras)
    out = _weights("w0", model)
    printed = _Printed()
    model.fit(
        d["x_train"],
        d["y_train"],
        batch_size=32,
        epochs=2,
        verbose=0,
        shuffle=False,
        callbacks=[_printing_callback(keras, printed)],
    )
    model.evaluate(
        d["x_test"], d["y_test"], batch_size=32, verbose=0, callbacks=[_printing_callback(keras, printed)]
    )
    _printed(out, printed)
    out.update(_weights("w1", model))
    return {**out, **_data(d)}


def early_stopping_at_min_loss(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """EarlyStoppingAtMinLoss: stop_training and set_weights from a callback."""

    class EarlyStoppingAtMinLoss(keras.callbacks.Callback):
        def __init__(self, patience=0):
            super().__init__()
            self.patience = patience
            self.best_weights = None

        def on_train_begin(self, logs=None):
            self.wait = 0
            self.stopped_epoch = 0
            self.best = np.inf

        def on_epoch_end(self, epoch, logs=None):
            current = logs.get("loss")
            if np.less(current, self.best):
                self.best = current
                self.wait = 0
                self.best_weights = self.model.get_weights()
            else:
                self.wait += 1
                if self.wait >= self.patience:
                    self.stopped_epoch = epoch
                    self.model.stop_training = True
                    self.model.set_weights(self.best_weights)

    d = _callback_data(rng)
    model = get_model(keras)
    out = _weights("w0", model)
    printed = _Printed()
    stopper = EarlyStoppingAtMinLoss()
    history = model.fit(
        d["x_train"], d["y_train"], batch_size=32, epochs=30, verbose=0, shuffle=False,
        callbacks=[_printing_callback(keras, printed), stopper],
    )  # fmt: skip
    out.update(_logs("history", history.history))
    out["stopped_epoch"] = np.asarray(stopper.stopped_epoch, np.int64)
    _printed(out, printed)
    out.update(_weights("w1", model))
    return {**out, **_data(d)}


def custom_lr_scheduler(keras: Any, tf: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """CustomLearningRateScheduler: a callback setting optimizer.learning_rate each epoch."""
    rates: list[float] = []

    class CustomLearningRateScheduler(keras.callbacks.Callback):
        def __init__(self, schedule):
            super().__init__()
            self.schedule = schedule

        def on_epoch_begin(self, epoch, logs=None):
            if not hasattr(self.model.optimizer, "learning_rate"):
                raise ValueError('Optimizer must have a "learning_rate" attribute.')
            lr = self.model.optimizer.learning_rate
            scheduled_lr = self.schedule(epoch, lr)
            self.model.optimizer.learning_rate = scheduled_lr
            rates.append(float(np.array(scheduled_lr)))

    LR_SCHEDULE = [(3, 0.05), (6, 0.01), (9, 0.005), (12, 0.001)]

    def lr_schedule(epoch, lr):
        if epoch < LR_SCHEDULE[0][0] or epoch > LR_SCHEDULE[-1][0]:
            return lr
        for i in range(len(LR_SCHEDULE)):
            if epoch == LR_SCHEDULE[i][0]:
                return LR_SCHEDULE[i][1]
        return lr

    d = _callback_data(rng)
    model = get_model(keras)
    out = _weights("w0", model)
    printed = _Printed()
    history = model.fit(
        d["x_train"], d["y_train"], batch_size=32, epochs=15, verbose=0, shuffle=False,
        callbacks=[_printing_callback(keras, printed), CustomLearningRateScheduler(lr_schedule)],
    )  # fmt: skip
    out.update(_logs("history", history.history))
    out["rates"] = np.asarray(rates, np.float64)
    out.update(_weights("w1", model))
    return {**out, **_data(d)}


CASES: dict[str, Callable[..., dict[str, np.ndarray]]] = {
    "end_to_end": end_to_end,
    "string_compile": string_compile,
    "custom_loss_fn": custom_loss_fn,
    "custom_loss_class": custom_loss_class,
    "custom_metric": custom_metric,
    "validation_split": validation_split,
    "py_dataset": py_dataset,
    "datasets": datasets,
    "class_weight": class_weight,
    "sample_weight": sample_weight,
    "weighted_metrics": weighted_metrics,
    "multi_io": multi_io,
    "weighted_multi_io": weighted_multi_io,
    "early_stopping": early_stopping,
    "loss_history": loss_history,
    "model_checkpoint": model_checkpoint,
    "lr_schedule": lr_schedule,
    "lr_scheduler_logs": lr_scheduler_logs,
    "callback_events": callback_events,
    "callback_logs": callback_logs,
    "early_stopping_at_min_loss": early_stopping_at_min_loss,
    "custom_lr_scheduler": custom_lr_scheduler,
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
        arrays = run(keras, tf, np.random.default_rng(i))
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
        elif a.dtype.kind in "US":
            if not np.array_equal(a, b):
                problems.append(f"{key}: differs")
        elif not np.allclose(a, b, rtol=rtol, atol=1e-6):
            problems.append(f"{key}: differs by {np.max(np.abs(a - b)):.3g}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="recompute and compare with the saved file")
    parser.add_argument("--only", nargs="*", help="compute these cases only (with --check: compare them)")
    args = parser.parse_args(argv)
    computed = compute(args.only)
    if args.check:
        with np.load(PATH, allow_pickle=False) as file:
            saved = dict(file)
        if args.only:
            saved = {k: v for k, v in saved.items() if k.split("/")[0] in args.only}
        problems = compare(computed, saved)
        for problem in problems:
            print(problem)
        print("reproduced" if not problems else f"{len(problems)} differences")
        return 1 if problems else 0
    if args.only:
        print("--only needs --check: the file holds every case")
        return 2
    np.savez_compressed(PATH, **computed)
    print(f"wrote {PATH} ({PATH.stat().st_size} bytes, {len(computed)} arrays)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
