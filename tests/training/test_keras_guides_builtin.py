"""Keras's developer guides "Training & evaluation with the built-in methods" and "Writing your
own callbacks", translated into tapefit and compared with Keras 3's numbers on the same weights
and data (saved by ``scripts/keras_reference_builtin.py``; CI has no Keras).

Each test is one code block of the guides, shrunk as the script shrinks it (random data in
MNIST's place, narrower layers, no shuffling) and translated line by line: ``keras`` -> ``tp``,
``keras.ops``/``tf`` -> ``tp``, ``keras.callbacks.<Built-in>`` -> ``tp.plugins.<twin>``. Where a
line could not be translated as it stands, a comment says what stands in for it. A Keras
callback subclasses ``keras.callbacks.Callback``; tapefit runs any object with Keras's
``on_*`` methods, so the translation's base is ``Callback`` below (a plain class).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp

REFERENCE = dict(np.load(Path(__file__).parent / "data" / "keras_builtin.npz", allow_pickle=False))
FIT = {"batch_size": 32, "shuffle": False, "verbose": 0}
RTOL, ATOL = 2e-4, 1e-6
FEATURES = 20
keras = tp  # `import keras`
layers = tp.layers  # `from keras import layers`
ops = tp  # `from keras import ops`


class Callback:
    """``keras.callbacks.Callback``'s place: a plain base (tapefit sets ``model`` on it)."""


def data(case):
    prefix = f"{case}/data/"
    return {k[len(prefix) :]: v for k, v in REFERENCE.items() if k.startswith(prefix)}


def layer_weights(case, part):
    """``{layer name: [arrays]}`` of Keras's weights, in the order the script saved them."""
    prefix = f"{case}/{part}/"
    found: dict[str, list[np.ndarray]] = {}
    for key, value in REFERENCE.items():
        if key.startswith(prefix):
            name, _ = key[len(prefix) :].rsplit("/", 1)
            found.setdefault(name, []).append(value)
    return found


def _with_weights(model):
    return [layer for layer in model.layers if layer.get_weights()]


def set_weights(case, model, part="w0"):
    """Keras's starting weights, layer by layer in model order (Keras's automatic layer names
    differ from tapefit's, so the order pairs them; shapes are checked by ``set_weights``)."""
    saved = list(layer_weights(case, part).values())
    ours = _with_weights(model)
    assert len(ours) == len(saved), f"{case}: {len(ours)} layers with weights against Keras's {len(saved)}"
    for layer, arrays in zip(ours, saved):
        layer.set_weights(arrays)


def assert_weights(case, part, model, atol=ATOL):
    saved = list(layer_weights(case, part).values())
    ours = _with_weights(model)
    assert len(ours) == len(saved)
    for layer, arrays in zip(ours, saved):
        for i, (a, e) in enumerate(zip(layer.get_weights(), arrays, strict=True)):
            np.testing.assert_allclose(a, e, rtol=RTOL, atol=atol, err_msg=f"{case} {part} {layer.name}/{i}")


def assert_values(case, key, actual, rtol=RTOL):
    expected = REFERENCE[f"{case}/{key}"]
    actual = np.asarray(actual, np.float64)
    assert actual.shape == expected.shape, (
        f"{case} {key}: shape {actual.shape} against Keras's {expected.shape}"
    )
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=ATOL, err_msg=f"{case} {key}")


def assert_logs(case, group, logs, rtol=RTOL, ignore=()):
    """``logs`` (a History's or evaluate's) has Keras's keys and values for ``group`` (but the
    keys in ``ignore``); every difference is named at once."""
    prefix = f"{case}/{group}/"
    expected = {k[len(prefix) :]: v for k, v in REFERENCE.items() if k.startswith(prefix)}
    expected = {k: v for k, v in expected.items() if k not in ignore}
    problems = (
        [f"keys {sorted(logs)} against Keras's {sorted(expected)}"]
        if sorted(logs) != sorted(expected)
        else []
    )
    for key in sorted(set(expected) & set(logs)):
        actual = np.asarray(logs[key], np.float64)
        if actual.shape != expected[key].shape or not np.allclose(
            actual, expected[key], rtol=rtol, atol=ATOL
        ):
            problems.append(f"{key}: {actual.tolist()} against Keras's {expected[key].tolist()}")
    assert not problems, f"{case} {group}: " + "; ".join(problems)


# -- Training & evaluation with the built-in methods ---------------------------------------


def get_uncompiled_model():
    inputs = keras.Input(shape=(FEATURES,), name="digits")
    x = layers.Dense(16, activation="relu", name="dense_1")(inputs)
    x = layers.Dense(16, activation="relu", name="dense_2")(x)
    outputs = layers.Dense(10, activation="softmax", name="predictions")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    return model


def get_compiled_model():
    model = get_uncompiled_model()
    model.compile(
        optimizer="rmsprop",
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
    )
    return model


def test_a_first_end_to_end_example():
    case = "end_to_end"
    d = data(case)
    x_train, y_train = d["x"][:96], d["y"][:96]
    x_val, y_val = d["x"][96:128], d["y"][96:128]
    x_test, y_test = d["x"][128:], d["y"][128:]
    model = get_uncompiled_model()
    set_weights(case, model)
    model.compile(
        optimizer=keras.optimizers.RMSprop(),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
    history = model.fit(x_train, y_train, epochs=2, validation_data=(x_val, y_val), **FIT)
    assert_logs(case, "history", history.history)
    results = model.evaluate(x_test, y_test, batch_size=128, verbose=0)
    assert_logs(case, "evaluate", results)
    predictions = model.predict(x_test[:3])
    assert predictions.shape == (3, 10)
    assert_values(case, "predictions", predictions)
    assert_weights(case, "w1", model)


def test_compile_by_string_identifiers():
    case = "string_compile"
    d = data(case)
    model = get_compiled_model()
    set_weights(case, model)
    history = model.fit(d["x"], d["y"], epochs=2, **FIT)
    assert_logs(case, "history", history.history)
    assert_weights(case, "w1", model)


def test_a_custom_loss_function():
    case = "custom_loss_fn"
    d = data(case)

    def custom_mean_squared_error(y_true, y_pred):
        return ops.reduce_mean(ops.square(y_true - y_pred), axis=-1)  # ops.mean

    model = get_uncompiled_model()
    set_weights(case, model)
    model.compile(optimizer=keras.optimizers.Adam(), loss=custom_mean_squared_error)
    # ops.one_hot(y_train, num_classes=10): tp.one_hot takes integer indices and `depth`
    y_train_one_hot = ops.one_hot(d["y"].astype(np.int64), depth=10)
    history = model.fit(d["x"], y_train_one_hot, epochs=1, **FIT)
    assert_logs(case, "history", history.history)
    assert_weights(case, "w1", model)


def test_a_custom_loss_class():
    case = "custom_loss_class"
    d = data(case)

    class CustomMSE(keras.losses.Loss):
        def __init__(self, regularization_factor=0.1, name="custom_mse"):
            super().__init__(name=name)
            self.regularization_factor = regularization_factor

        def call(self, y_true, y_pred):
            mse = ops.reduce_mean(ops.square(y_true - y_pred), axis=-1)
            reg = ops.reduce_mean(ops.square(0.5 - y_pred), axis=-1)
            return mse + reg * self.regularization_factor

    model = get_uncompiled_model()
    set_weights(case, model)
    model.compile(optimizer=keras.optimizers.Adam(), loss=CustomMSE())
    y_train_one_hot = ops.one_hot(d["y"].astype(np.int64), depth=10)
    history = model.fit(d["x"], y_train_one_hot, epochs=1, **FIT)
    assert_logs(case, "history", history.history)
    assert_weights(case, "w1", model)


def test_a_custom_metric():
    case = "custom_metric"
    d = data(case)

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
            self.true_positives.assign_add(ops.reduce_sum(values))  # ops.sum

        def result(self):
            return self.true_positives

        def reset_state(self):
            self.true_positives.assign(0.0)

    model = get_uncompiled_model()
    set_weights(case, model)
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=[CategoricalTruePositives()],
    )
    history = model.fit(d["x"], d["y"], epochs=3, **FIT)
    assert_logs(case, "history", history.history)
    assert_weights(case, "w1", model)


def test_automatically_setting_apart_a_validation_holdout_set():
    case = "validation_split"
    d = data(case)
    model = get_compiled_model()
    set_weights(case, model)
    history = model.fit(d["x"], d["y"], validation_split=0.2, epochs=1, **FIT)
    assert_logs(case, "history", history.history)
    assert_weights(case, "w1", model)


def test_training_and_evaluation_with_a_py_dataset():
    case = "py_dataset"
    d = data(case)

    class ExamplePyDataset:  # keras.utils.PyDataset: tapefit takes any __len__/__getitem__ object
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

    train_py_dataset = ExamplePyDataset(d["x"][:96], d["y"][:96], batch_size=32)
    val_py_dataset = ExamplePyDataset(d["x"][96:], d["y"][96:], batch_size=32)
    model = get_compiled_model()
    set_weights(case, model)
    history = model.fit(train_py_dataset, validation_data=val_py_dataset, epochs=1, shuffle=False, verbose=0)
    assert_logs(case, "history", history.history)
    assert_logs(case, "evaluate", model.evaluate(val_py_dataset, verbose=0))
    assert_weights(case, "w1", model)


class Batched:
    """``tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)``'s place: a re-iterable
    stream of its batches, in order (not a list, which ``validation_data`` would take for
    ``(x_val, y_val)``)."""

    def __init__(self, x, y, batch_size):
        self.batches = [(x[i : i + batch_size], y[i : i + batch_size]) for i in range(0, len(x), batch_size)]

    def __len__(self):
        return len(self.batches)

    def __iter__(self):
        return iter(self.batches)


def batched(x, y, batch_size):
    return Batched(x, y, batch_size)


def test_training_and_evaluation_with_datasets():
    case = "datasets"
    d = data(case)
    x_train, y_train = d["x"][:96], d["y"][:96]
    x_val, y_val = d["x"][96:160], d["y"][96:160]
    x_test, y_test = d["x"][160:], d["y"][160:]
    # the guide shuffles with .shuffle(buffer_size=1024); both sides leave it out here
    train_dataset = batched(x_train, y_train, 32)
    test_dataset = batched(x_test, y_test, 32)
    val_dataset = batched(x_val, y_val, 32)
    model = get_compiled_model()
    set_weights(case, model)
    assert_logs(case, "fit", model.fit(train_dataset, epochs=3, verbose=0).history)
    assert_logs(case, "evaluate", model.evaluate(test_dataset, verbose=0))

    model = get_compiled_model()
    set_weights(case, model)
    history = model.fit(train_dataset, epochs=3, steps_per_epoch=2, verbose=0)
    assert_logs(case, "steps", history.history)

    model = get_compiled_model()
    set_weights(case, model)
    history = model.fit(train_dataset, epochs=1, validation_data=val_dataset, verbose=0)
    assert_logs(case, "val", history.history)

    model = get_compiled_model()
    set_weights(case, model)
    history = model.fit(train_dataset, epochs=1, validation_data=val_dataset, validation_steps=1, verbose=0)
    assert_logs(case, "val_steps", history.history)


def test_training_and_evaluation_with_pytorch_dataloaders():
    torch = pytest.importorskip("torch")
    case = "datasets"  # the same batches, in order, as the data set section's validated fit
    d = data(case)

    class ExampleTorchDataset(torch.utils.data.Dataset):
        def __init__(self, x, y):
            self.x = x
            self.y = y

        def __len__(self):
            return len(self.x)

        def __getitem__(self, idx):
            return self.x[idx], self.y[idx]

    train_torch_dataset = ExampleTorchDataset(d["x"][:96], d["y"][:96])
    val_torch_dataset = ExampleTorchDataset(d["x"][96:160], d["y"][96:160])
    # the guide shuffles (shuffle=True); in order here, to meet Keras's numbers
    train_dataloader = torch.utils.data.DataLoader(train_torch_dataset, batch_size=32, shuffle=False)
    val_dataloader = torch.utils.data.DataLoader(val_torch_dataset, batch_size=32, shuffle=False)
    model = get_compiled_model()
    set_weights(case, model)
    history = model.fit(train_dataloader, batch_size=64, validation_data=val_dataloader, epochs=1, verbose=0)
    assert_logs(case, "val", history.history)
    logs = model.evaluate(val_dataloader, verbose=0)
    assert logs["loss"] == pytest.approx(float(REFERENCE[f"{case}/val/val_loss"][0]), rel=RTOL)


def test_class_weights():
    case = "class_weight"
    d = data(case)
    class_weight = {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 2.0, 6: 1.0, 7: 1.0, 8: 1.0, 9: 1.0}
    model = get_compiled_model()
    set_weights(case, model)
    history = model.fit(d["x"], d["y"], class_weight=class_weight, epochs=1, **FIT)
    assert_logs(case, "history", history.history)
    assert_weights(case, "w1", model)


def test_sample_weights_with_arrays_and_in_a_dataset():
    case = "sample_weight"
    d = data(case)
    x_train, y_train = d["x"], d["y"]
    sample_weight = np.ones(shape=(len(y_train),))
    sample_weight[y_train == 5] = 2.0
    model = get_compiled_model()
    set_weights(case, model)
    history = model.fit(x_train, y_train, sample_weight=sample_weight, epochs=1, **FIT)
    assert_logs(case, "history", history.history)
    assert_weights(case, "w1", model)

    # tf.data.Dataset.from_tensor_slices((x, y, sample_weight)).batch(32): its batches
    train_dataset = [
        (x_train[i : i + 32], y_train[i : i + 32], sample_weight[i : i + 32])
        for i in range(0, len(x_train), 32)
    ]
    model = get_compiled_model()
    set_weights(case, model)
    history = model.fit(train_dataset, epochs=1, verbose=0)
    assert_logs(case, "dataset", history.history)
    assert_weights(case, "w1_dataset", model)


def test_weighted_metrics_beside_metrics_of_the_same_name():
    case = "weighted_metrics"
    d = data(case)
    x, y, w = d["x"][:96], d["y"][:96], d["sw"][:96]
    val = (d["x"][96:], d["y"][96:], d["sw"][96:])
    model = get_uncompiled_model()
    set_weights(case, model)
    model.compile(
        optimizer="rmsprop",
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
        weighted_metrics=["sparse_categorical_accuracy", "sparse_categorical_crossentropy"],
    )
    history = model.fit(x, y, sample_weight=w, validation_data=val, epochs=2, **FIT)
    assert_logs(case, "history", history.history)
    assert_logs(case, "evaluate", model.evaluate(val[0], val[1], sample_weight=val[2], verbose=0))
    assert_weights(case, "w1", model)


def multi_io_model():
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


def test_passing_data_to_multi_input_multi_output_models():
    case = "multi_io"
    d = data(case)
    img_data, ts_data, score_targets, class_targets = d["img"], d["ts"], d["score"], d["class"]
    model = multi_io_model()
    set_weights(case, model)
    model.compile(
        optimizer=keras.optimizers.RMSprop(1e-3),
        loss=[keras.losses.MeanSquaredError(), keras.losses.CategoricalCrossentropy()],
        metrics=[
            [keras.metrics.MeanAbsolutePercentageError(), keras.metrics.MeanAbsoluteError()],
            [keras.metrics.CategoricalAccuracy()],
        ],
    )
    history = model.fit([img_data, ts_data], [score_targets, class_targets], epochs=1, **FIT)
    assert_logs(case, "lists", history.history)
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
    history = model.fit(
        {"img_input": img_data, "ts_input": ts_data},
        {"score_output": score_targets, "class_output": class_targets},
        epochs=1,
        **FIT,
    )
    assert_logs(case, "dicts", history.history)
    model.compile(
        optimizer=keras.optimizers.RMSprop(1e-3), loss=[None, keras.losses.CategoricalCrossentropy()]
    )
    history = model.fit([img_data, ts_data], [score_targets, class_targets], epochs=1, **FIT)
    # Keras 3 keeps the last compile's metrics objects built on the model; its logs of this fit
    # still name the score output's metrics, and so do tapefit's only if they are compiled again
    expected = {k.split("/", 2)[2] for k in REFERENCE if k.startswith(f"{case}/none_loss/")}
    assert {"loss", "class_output_categorical_accuracy"} <= expected
    assert history.history["loss"] == pytest.approx(REFERENCE[f"{case}/none_loss/loss"].tolist(), rel=RTOL)
    model.compile(
        optimizer=keras.optimizers.RMSprop(1e-3),
        loss=[keras.losses.MeanSquaredError(), keras.losses.CategoricalCrossentropy()],
    )
    # tf.data.Dataset.from_tensor_slices((x_dict, y_dict)).batch(64): one batch of the 64 samples
    train_dataset = [
        (
            {"img_input": img_data, "ts_input": ts_data},
            {"score_output": score_targets, "class_output": class_targets},
        )
    ]
    history = model.fit(train_dataset, epochs=1, verbose=0)
    # Keras 3 still logs the metrics of the first two compiles here (their objects stay tracked
    # by the model); this compile has none, and tapefit logs none
    stale = {"class_output_categorical_accuracy", "score_output_mean_absolute_error"}
    stale |= {"score_output_mean_absolute_percentage_error"}
    assert {"loss", "score_output_loss", "class_output_loss"} | stale == {
        k.split("/", 2)[2] for k in REFERENCE if k.startswith(f"{case}/dataset/")
    }
    assert_logs(case, "dataset", history.history, ignore=stale)
    # five fits of RMSprop, whose first steps are about lr * sign(gradient): float rounding
    # (between the libraries, and between BLAS runs) shows in the fourth digit of a weight or two
    assert_weights(case, "w1", model, atol=1e-3)


def test_per_output_weighted_metrics():
    case = "weighted_multi_io"
    d = data("multi_io")
    model = multi_io_model()
    set_weights(case, model)
    model.compile(
        optimizer=keras.optimizers.RMSprop(1e-3),
        loss=[keras.losses.MeanSquaredError(), keras.losses.CategoricalCrossentropy()],
        metrics=[None, [keras.metrics.CategoricalAccuracy()]],
        weighted_metrics={"class_output": [keras.metrics.CategoricalAccuracy()], "score_output": ["mae"]},
    )
    history = model.fit(
        [d["img"], d["ts"]], [d["score"], d["class"]], sample_weight=data(case)["sw"], epochs=2, **FIT
    )
    assert_logs(case, "history", history.history)
    assert_weights(case, "w1", model)


def test_callbacks_early_stopping():
    case = "early_stopping"
    d = data(case)
    model = get_compiled_model()
    set_weights(case, model)
    callbacks = [
        keras.plugins.EarlyStopping(  # keras.callbacks.EarlyStopping
            monitor="val_loss",
            min_delta=1e-2,
            patience=2,
            verbose=0,
        )
    ]
    history = model.fit(d["x"], d["y"], epochs=20, callbacks=callbacks, validation_split=0.2, **FIT)
    assert_logs(case, "history", history.history)
    assert_weights(case, "w1", model)


def test_writing_your_own_callback_loss_history():
    case = "loss_history"
    d = data(case)

    class LossHistory(Callback):
        def on_train_begin(self, logs):
            self.per_batch_losses = []

        def on_batch_end(self, batch, logs):
            self.per_batch_losses.append(logs.get("loss"))

    model = get_compiled_model()
    set_weights(case, model)
    callback = LossHistory()
    model.fit(d["x"], d["y"], epochs=2, callbacks=[callback], **FIT)
    assert_values(case, "per_batch_losses", callback.per_batch_losses)


def test_checkpointing_models_keeps_the_best_epochs(tmp_path):
    case = "model_checkpoint"
    d = data(case)
    model = get_uncompiled_model()
    set_weights(case, model)
    model.compile(
        optimizer=keras.optimizers.RMSprop(0.05),
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
    )
    callbacks = [
        keras.plugins.Checkpoint(  # keras.callbacks.ModelCheckpoint
            # filepath="mymodel_{epoch}.keras": a folder; a checkpoint is the whole training state
            dirpath=str(tmp_path),
            save_best_only=True,
            monitor="val_loss",
            verbose=0,
        )
    ]
    history = model.fit(d["x"], d["y"], epochs=6, callbacks=callbacks, validation_split=0.2, **FIT)
    assert_logs(case, "history", history.history)
    # Keras saved mymodel_{epoch}.keras (epochs from 1) when val_loss improved; tapefit's
    # files are epoch{E}-step{S}.npz (epochs from 0)
    saved = sorted(int(name[5:9]) + 1 for name in os.listdir(tmp_path) if name.endswith(".npz"))
    assert saved == REFERENCE[f"{case}/saved_epochs"].tolist()


def test_checkpoints_for_fault_tolerance_restore_the_run(tmp_path):
    # make_or_restore_model() loads the latest `.keras` file; a tapefit checkpoint is the whole
    # training state, so the fit resumes from it (resume_from) instead of loading a model file
    d = data("string_compile")
    checkpoint_dir = tmp_path / "ckpt"
    checkpoint_dir.mkdir()
    model = get_compiled_model()
    callbacks = [keras.plugins.Checkpoint(dirpath=str(checkpoint_dir), save_freq=2)]  # save_freq=100
    model.fit(d["x"], d["y"], epochs=1, callbacks=callbacks, **FIT)
    checkpoints = [checkpoint_dir / name for name in os.listdir(checkpoint_dir) if name.endswith(".npz")]
    assert checkpoints
    restored = get_compiled_model()
    history = restored.fit(d["x"], d["y"], epochs=1, resume_from=checkpoint_dir, **FIT)
    for ours, theirs in zip(restored.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(ours, theirs)
    assert history.epoch == [0]


def test_passing_a_schedule_to_an_optimizer():
    case = "lr_schedule"
    d = data(case)
    lr_schedule = keras.optimizers.schedules.ExponentialDecay(
        0.01, decay_steps=2, decay_rate=0.5, staircase=True
    )
    model = get_uncompiled_model()
    set_weights(case, model)
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=lr_schedule),
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
    )
    history = model.fit(d["x"], d["y"], epochs=2, **FIT)
    assert_logs(case, "history", history.history)
    assert_weights(case, "w1", model)


def test_a_learning_rate_scheduler_and_the_rate_in_the_logs():
    case = "lr_scheduler_logs"
    d = data(case)

    class RateFromLogs(Callback):
        def on_train_begin(self, logs=None):
            self.rates = []

        def on_epoch_end(self, epoch, logs=None):
            self.rates.append(logs["learning_rate"])

    model = get_uncompiled_model()
    set_weights(case, model)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    reader = RateFromLogs()
    scheduler = keras.plugins.LearningRateScheduler(lambda epoch, lr: lr if epoch < 1 else lr * 0.5)
    history = model.fit(d["x"], d["y"], epochs=3, callbacks=[scheduler, reader], **FIT)
    assert_logs(case, "history", history.history)
    assert_values(case, "rates", reader.rates)
    assert_weights(case, "w1", model)


def test_the_tensorboard_callback_takes_the_guides_arguments(tmp_path):
    # keras.callbacks.TensorBoard(..., embeddings_freq=0, ...): the embedding projector is
    # TensorFlow's, so tapefit takes no embeddings_freq (an error names it); the line drops it
    with pytest.raises(TypeError, match="TensorBoard: unknown argument 'embeddings_freq'"):
        keras.plugins.TensorBoard(
            log_dir=str(tmp_path), histogram_freq=0, embeddings_freq=0, update_freq="epoch"
        )
    callback = keras.plugins.TensorBoard(
        log_dir=str(tmp_path),
        histogram_freq=0,  # How often to log histogram visualizations
        update_freq="epoch",
    )
    model = get_compiled_model()
    d = data("string_compile")
    model.fit(d["x"], d["y"], epochs=1, callbacks=[callback], **FIT)
    written = [name for _, _, names in os.walk(tmp_path) for name in names]
    assert any(name.startswith("events.out.tfevents") for name in written)


# -- Writing your own callbacks ------------------------------------------------------------


def get_model():
    model = keras.layers.Sequential()  # keras.Sequential
    model.add(keras.layers.Dense(1))
    model.compile(
        optimizer=keras.optimizers.RMSprop(learning_rate=0.1),
        loss="mean_squared_error",
        metrics=["mean_absolute_error"],
    )
    model.build((None, FEATURES))  # the script builds Keras's model so that both start alike
    return model


def test_a_basic_example_sees_every_hook():
    case = "callback_events"
    d = data(case)
    events = []

    def hook(name):
        # CustomCallback's methods each print the hook, its batch or epoch and the logs' keys
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
    CustomCallback = type("CustomCallback", (Callback,), {n: hook(n) for n in names})
    model = get_model()
    set_weights(case, model)
    model.fit(
        d["x_train"], d["y_train"], batch_size=32, epochs=1, verbose=0, validation_split=0.5, shuffle=False,
        callbacks=[CustomCallback()],
    )  # fmt: skip
    model.evaluate(d["x_test"], d["y_test"], batch_size=32, verbose=0, callbacks=[CustomCallback()])
    model.predict(d["x_test"], batch_size=32, callbacks=[CustomCallback()])
    assert events == REFERENCE[f"{case}/events"].tolist()


class Printed:
    """What LossAndErrorPrintingCallback prints, kept as numbers."""

    def __init__(self):
        self.train, self.test, self.epochs = [], [], []

    def check(self, case):
        assert_values(case, "printed/train", self.train)
        assert_values(case, "printed/test", self.test)
        assert_values(case, "printed/epochs", np.reshape(self.epochs, (-1, 2)))


def printing_callback(printed):
    class LossAndErrorPrintingCallback(Callback):
        def on_train_batch_end(self, batch, logs=None):
            printed.train.append(logs["loss"])  # print("Up to batch {}, the average loss is ...")

        def on_test_batch_end(self, batch, logs=None):
            printed.test.append(logs["loss"])

        def on_epoch_end(self, epoch, logs=None):
            printed.epochs.append((logs["loss"], logs["mean_absolute_error"]))

    return LossAndErrorPrintingCallback()


def test_usage_of_the_logs_dict():
    case = "callback_logs"
    d = data(case)
    model = get_model()
    set_weights(case, model)
    printed = Printed()
    model.fit(
        d["x_train"],
        d["y_train"],
        batch_size=32,
        epochs=2,
        verbose=0,
        shuffle=False,
        callbacks=[printing_callback(printed)],
    )
    model.evaluate(d["x_test"], d["y_test"], batch_size=32, verbose=0, callbacks=[printing_callback(printed)])
    printed.check(case)
    assert_weights(case, "w1", model)


def test_early_stopping_at_minimum_loss():
    case = "early_stopping_at_min_loss"
    d = data(case)

    class EarlyStoppingAtMinLoss(Callback):
        def __init__(self, patience=0):
            super().__init__()
            self.patience = patience
            self.best_weights = None

        def on_train_begin(self, logs=None):
            self.wait = 0
            self.stopped_epoch = 0
            self.best = np.inf  # np.Inf: NumPy 2 spells it np.inf

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

    model = get_model()
    set_weights(case, model)
    printed = Printed()
    stopper = EarlyStoppingAtMinLoss()
    history = model.fit(
        d["x_train"], d["y_train"], batch_size=32, epochs=30, verbose=0, shuffle=False,
        callbacks=[printing_callback(printed), stopper],
    )  # fmt: skip
    assert_logs(case, "history", history.history)
    assert stopper.stopped_epoch == int(REFERENCE[f"{case}/stopped_epoch"])
    printed.check(case)
    assert_weights(case, "w1", model)


def test_a_custom_learning_rate_scheduler():
    case = "custom_lr_scheduler"
    d = data(case)
    rates = []

    class CustomLearningRateScheduler(Callback):
        def __init__(self, schedule):
            super().__init__()
            self.schedule = schedule

        def on_epoch_begin(self, epoch, logs=None):
            if not hasattr(self.model.optimizer, "learning_rate"):
                raise ValueError('Optimizer must have a "learning_rate" attribute.')
            lr = self.model.optimizer.learning_rate
            scheduled_lr = self.schedule(epoch, lr)
            self.model.optimizer.learning_rate = scheduled_lr
            rates.append(float(np.array(scheduled_lr)))  # print(f"Epoch {epoch}: Learning rate is ...")

    LR_SCHEDULE = [(3, 0.05), (6, 0.01), (9, 0.005), (12, 0.001)]

    def lr_schedule(epoch, lr):
        if epoch < LR_SCHEDULE[0][0] or epoch > LR_SCHEDULE[-1][0]:
            return lr
        for i in range(len(LR_SCHEDULE)):
            if epoch == LR_SCHEDULE[i][0]:
                return LR_SCHEDULE[i][1]
        return lr

    model = get_model()
    set_weights(case, model)
    printed = Printed()
    history = model.fit(
        d["x_train"], d["y_train"], batch_size=32, epochs=15, verbose=0, shuffle=False,
        callbacks=[printing_callback(printed), CustomLearningRateScheduler(lr_schedule)],
    )  # fmt: skip
    assert_logs(case, "history", history.history)
    assert_values(case, "rates", rates)
    assert_weights(case, "w1", model)
