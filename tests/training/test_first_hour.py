"""What a Keras user types in the first hour: fit(callbacks=...), misspelt plugin options, labels."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp


def make_trainer(plugins=()):
    tp.random.set_seed(0)
    model = tp.layers.Sequential([tp.layers.Dense(4, activation="tanh"), tp.layers.Dense(2)])
    return tp.Trainer(
        model,
        tp.optimizers.SGD(0.1),
        tp.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        plugins=list(plugins),
    )


def make_data(n=24):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.int64)


class Seen:
    def __init__(self, key=None):
        self.key, self.seen = key, []

    @tp.hookimpl
    def on_epoch_end(self, epoch, logs):
        if self.key is not None:
            logs[self.key] = float(epoch)
        self.seen.append(dict(logs))


def test_callbacks_are_plugins_for_one_fit():
    own = Seen()
    trainer = make_trainer([own])
    adds = Seen("added")
    x, y = make_data()
    history = trainer.fit(x, y, epochs=2, batch_size=8, verbose=0, callbacks=[adds])
    assert len(adds.seen) == 2 and history.history["added"] == [0.0, 1.0]
    assert own.seen[-1]["added"] == 1.0  # a callback's key reaches the trainer's plugins
    assert trainer.plugins.get_plugin(trainer.plugins.get_name(adds) or "seen-2") is None
    trainer.fit(x, y, epochs=1, batch_size=8, verbose=0)
    assert len(adds.seen) == 2 and len(own.seen) == 3  # gone after its fit, the trainer's stay


def test_callbacks_stop_a_fit_as_keras_early_stopping_does():
    x, y = make_data()
    stop = tp.plugins.EarlyStopping(monitor="loss", patience=0, min_delta=10.0)
    history = make_trainer().fit(x, y, epochs=5, batch_size=8, verbose=0, callbacks=[stop])
    assert len(history.history["loss"]) == 2


def test_callbacks_that_are_not_a_list_or_not_plugins_are_named():
    x, y = make_data()
    trainer = make_trainer()
    with pytest.raises(TypeError, match=r"callbacks must be a list of plugins, got EarlyStopping"):
        trainer.fit(x, y, verbose=0, callbacks=tp.plugins.EarlyStopping())

    class HalfMarked:  # a hook method marked, another left unmarked: a slip, not Keras's style
        @tp.hookimpl
        def on_fit_start(self):
            pass

        def on_epoch_end(self, epoch, logs=None):
            pass

    with pytest.raises(
        Exception, match=r"on_epoch_end is not marked as a hook; decorate it with @tp.hookimpl"
    ):
        trainer.fit(x, y, verbose=0, callbacks=[HalfMarked()])
    assert len(trainer.plugins.get_plugins()) == len(make_trainer().plugins.get_plugins())
    for bad, shown in ((None, "None"), (3, "3")):
        with pytest.raises(TypeError, match=rf"plugin 1: got {shown} \(\w+\), which is not a plugin"):
            trainer.fit(x, y, verbose=0, callbacks=[tp.plugins.TerminateOnNaN(), bad])
        # all or nothing: the list's valid member is not left registered either
        assert trainer.plugins.get_plugin("terminate_on_nan") is None


def test_a_keras_style_callback_runs_as_keras_runs_it():
    calls = []

    class KerasStyle:  # keras.callbacks.Callback's methods, no hooks
        def set_model(self, model):
            calls.append(("set_model", model is trainer.model))

        def on_train_begin(self, logs=None):
            calls.append(("train_begin",))

        def on_epoch_end(self, epoch, logs=None):
            calls.append(("epoch_end", epoch, sorted(logs)))

        def on_batch_end(self, batch, logs=None):
            calls.append(("batch_end", batch))

        def on_train_end(self, logs=None):
            calls.append(("train_end", sorted(logs)))

    x, y = make_data()
    trainer = make_trainer()
    trainer.fit(x, y, epochs=2, batch_size=len(x), verbose=0, callbacks=[KerasStyle()])
    assert calls == [
        ("set_model", True),
        ("train_begin",),
        ("batch_end", 0),
        ("epoch_end", 0, ["accuracy", "loss"]),
        ("batch_end", 0),
        ("epoch_end", 1, ["accuracy", "loss"]),
        ("train_end", ["accuracy", "loss"]),
    ]


def test_fit_called_from_inside_a_fit_is_refused_and_the_outer_fit_goes_on():
    x, y = make_data()
    trainer = make_trainer()
    errors = []

    class Refits:
        @tp.hookimpl
        def on_epoch_end(self, trainer, epoch):
            try:
                trainer.fit(x, y, epochs=1, verbose=0)
            except RuntimeError as error:
                errors.append(str(error))

    history = trainer.fit(x, y, epochs=2, verbose=0, callbacks=[Refits()])
    assert history.epoch == [0, 1]
    assert errors and "fit: this trainer's fit is running" in errors[0]


BUILTIN_PLUGINS = [
    "Checkpoint",
    "ClipGradients",
    "CSVLogger",
    "Distributed",
    "EarlyStopping",
    "Progress",
    "ReduceLROnPlateau",
    "TensorBoard",
    "TerminateOnNaN",
]


@pytest.mark.parametrize("name", BUILTIN_PLUGINS)
def test_a_misspelt_plugin_option_gets_did_you_mean(name):
    cls = getattr(tp.plugins, name)
    with pytest.raises(TypeError) as error:
        cls(verbosee=1)
    message = str(error.value)
    assert message.startswith(f"{name}: unknown argument 'verbosee'") and "\n" not in message
    assert "it takes: " in message


def test_early_stopping_suggests_the_argument_meant():
    with pytest.raises(TypeError, match=r"unknown argument 'patiense' \(did you mean 'patience'\?\)"):
        tp.plugins.EarlyStopping(patiense=3)
    assert tp.plugins.EarlyStopping(patience=3).patience == 3


@pytest.mark.parametrize(
    ("x", "y", "named"),
    [
        (
            None,
            np.array(["cat", "dog"] * 12),
            r"^y holds strings \(dtype <U3\).*y = np.unique\(y, return_inverse=True\)",
        ),
        (None, ["cat", "dog"] * 12, r"^y holds strings"),
        ({"a": "float", "b": np.array(["q"] * 24)}, None, r"^x\['b'\] holds strings"),
        (None, np.array([None] * 24), r"^y holds Python objects \(dtype object\)"),
    ],
)
def test_labels_a_model_cannot_take_name_the_argument_and_the_fix(x, y, named):
    features, labels = make_data()
    if isinstance(x, dict):
        x = {"a": features, "b": x["b"]}
    with pytest.raises(TypeError, match=named):
        make_trainer().fit(features if x is None else x, labels if y is None else y, verbose=0)


def test_validation_labels_are_named_too():
    x, y = make_data()
    with pytest.raises(TypeError, match=r"^validation_data y holds strings"):
        make_trainer().fit(x, y, validation_data=(x, y.astype(str)), verbose=0)


@pytest.mark.parametrize("one_hot", [False, True])
def test_validation_split_of_rows_sorted_by_class_warns(one_hot):
    x, _ = make_data(40)
    y = np.repeat([0, 1], 20)  # sorted: the last 20% are all of class 1
    labels = np.eye(2, dtype=np.float32)[y] if one_hot else y
    trainer = make_trainer()
    if one_hot:
        trainer = tp.Trainer(trainer.model, "sgd", tp.losses.CategoricalCrossentropy(from_logits=True))
    with pytest.warns(UserWarning, match=r"all of class 1: the rows look sorted by class.*shuffle x and y"):
        trainer.fit(x, labels, validation_split=0.2, verbose=0)


def test_validation_split_of_mixed_rows_does_not_warn(recwarn):
    x, y = make_data(40)
    make_trainer().fit(x, y, validation_split=0.2, verbose=0)
    assert not [w for w in recwarn if "sorted by class" in str(w.message)]


def test_validation_freq_and_validation_batch_size_as_keras():
    x, y = make_data(24)
    validated, rows = [], []

    class Validated:
        @tp.hookimpl
        def on_validation_end(self, epoch, logs):
            validated.append(epoch)

    def seen(t, training=False):
        if not training:
            rows.append(t.shape[0])
        return t

    trainer = make_trainer([Validated()])
    trainer.model = tp.layers.Sequential([tp.layers.Lambda(seen), trainer.model])
    history = trainer.fit(
        x,
        y,
        epochs=4,
        batch_size=8,
        validation_data=(x, y),
        validation_freq=2,
        validation_batch_size=5,
        verbose=0,
    )
    assert validated == [1, 3]  # after every 2nd epoch
    assert np.isnan(history.history["val_loss"][0]) and not np.isnan(history.history["val_loss"][1])
    assert rows[-5:] == [5, 5, 5, 5, 4]  # 24 validation rows in batches of 5
    with pytest.raises(ValueError, match="validation_freq must be a positive integer, got 0"):
        make_trainer().fit(x, y, validation_freq=0, verbose=0)
