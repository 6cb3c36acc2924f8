"""The fit loop: hook order and counts, logs, History, stop_training, evaluate/predict, errors."""

from __future__ import annotations

import math
import os
import signal

import numpy as np
import pytest

import tapefit as tp


def make_data(n=10, features=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5], np.float32)[:features] > 0).astype(np.int64)
    return x, y


def make_trainer(plugins=(), metrics=("accuracy",), seed=0, **kwargs):
    tp.random.set_seed(seed)
    model = tp.layers.Sequential(
        [tp.layers.Dense(6, activation="tanh"), tp.layers.Dropout(0.2), tp.layers.Dense(2)]
    )
    return tp.Trainer(
        model,
        tp.optimizers.SGD(learning_rate=0.1),
        tp.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=list(metrics),
        plugins=list(plugins),
        **kwargs,
    )


class HookCounter:
    """Records every hook call with its step/epoch."""

    def __init__(self):
        self.calls = []

    @tp.hookimpl
    def on_fit_start(self, trainer):
        self.calls.append(("fit_start",))

    @tp.hookimpl
    def on_epoch_start(self, epoch):
        self.calls.append(("epoch_start", epoch))

    @tp.hookimpl
    def on_train_batch_start(self, trainer, step):
        assert trainer.step == step
        self.calls.append(("batch_start", step))

    @tp.hookimpl
    def on_train_batch_end(self, trainer, step, logs):
        assert trainer.step == step + 1
        self.calls.append(("batch_end", step))

    @tp.hookimpl
    def on_validation_end(self, epoch, logs):
        self.calls.append(("validation_end", epoch))

    @tp.hookimpl
    def on_epoch_end(self, epoch, logs):
        self.calls.append(("epoch_end", epoch))

    @tp.hookimpl
    def on_fit_end(self):
        self.calls.append(("fit_end",))


def expected_calls(epochs, batches, validation=False):
    calls = [("fit_start",)]
    step = 0
    for epoch in range(epochs):
        calls.append(("epoch_start", epoch))
        for _ in range(batches):
            calls += [("batch_start", step), ("batch_end", step)]
            step += 1
        if validation:
            calls.append(("validation_end", epoch))
        calls.append(("epoch_end", epoch))
    return [*calls, ("fit_end",)]


@pytest.mark.parametrize(("n", "batch_size", "epochs"), [(10, 4, 3), (12, 4, 2), (5, 32, 1), (7, 1, 2)])
def test_hook_counts_and_order(n, batch_size, epochs):
    x, y = make_data(n)
    counter = HookCounter()
    make_trainer([counter]).fit(x, y, epochs=epochs, batch_size=batch_size)
    batches = math.ceil(n / batch_size)
    assert counter.calls == expected_calls(epochs, batches)
    kinds = [c[0] for c in counter.calls]
    assert (kinds.count("fit_start"), kinds.count("fit_end")) == (1, 1)
    assert kinds.count("epoch_start") == kinds.count("epoch_end") == epochs
    assert kinds.count("batch_start") == kinds.count("batch_end") == batches * epochs
    steps = [c[1] for c in counter.calls if c[0] == "batch_start"]
    assert steps == list(range(batches * epochs))


def test_hook_order_with_validation_and_drop_last():
    x, y = make_data(10)
    counter = HookCounter()
    trainer = make_trainer([counter])
    trainer.fit(x, y, epochs=2, batch_size=4, validation_data=make_data(6, seed=1), drop_last=True)
    assert counter.calls == expected_calls(2, 2, validation=True)
    assert int(trainer.optimizer.iterations) == 4


def test_history_and_logs():
    x, y = make_data(10)
    batch_logs = []

    class Logs:
        @tp.hookimpl
        def on_train_batch_end(self, step, logs):
            batch_logs.append(dict(logs))

    trainer = make_trainer([Logs()])
    history = trainer.fit(x, y, epochs=2, batch_size=4, validation_data=(x, y))
    assert isinstance(history, tp.History)
    assert set(history.history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert all(len(v) == 2 for v in history.history.values())
    assert history.epoch == [0, 1]
    assert history.params == {"epochs": 2, "batch_size": 4, "steps": 3}
    # The batch logs carry the running loss and accuracy, as Keras's (the loss is the
    # sample-weighted mean of the batch losses so far: batches of 4, 4, 2); the last batch's
    # equal the epoch's.
    for epoch in range(2):
        assert batch_logs[3 * epoch + 2]["loss"] == history.history["loss"][epoch]
        first, second = batch_logs[3 * epoch]["loss"], batch_logs[3 * epoch + 1]["loss"]
        assert second != first  # a running mean, not one value repeated
    assert batch_logs[-1]["accuracy"] == pytest.approx(history.history["accuracy"][-1])
    # val_ values are exactly what evaluate gives after training.
    assert trainer.evaluate(x, y, batch_size=4) == {
        "loss": history.history["val_loss"][-1],
        "accuracy": history.history["val_accuracy"][-1],
    }


def test_stop_training_ends_fit_after_the_current_batch():
    x, y = make_data(10)

    class StopAt:
        @tp.hookimpl
        def on_train_batch_end(self, trainer, step):
            if step == 4:
                trainer.stop_training = True

    counter = HookCounter()
    trainer = make_trainer([StopAt(), counter])
    history = trainer.fit(x, y, epochs=5, batch_size=4)
    steps = [c[1] for c in counter.calls if c[0] == "batch_end"]
    assert steps == [0, 1, 2, 3, 4]
    assert int(trainer.optimizer.iterations) == 5
    # Keras: the partial epoch still ends with on_epoch_end and a History entry.
    assert counter.calls[-2:] == [("epoch_end", 1), ("fit_end",)]
    assert history.epoch == [0, 1]


def test_regularization_losses_are_added_to_the_loss_at_every_step():
    x, y = make_data(8)
    tp.random.set_seed(0)
    model = tp.layers.Sequential([tp.layers.Dense(2, kernel_regularizer="l2")])
    loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
    expected, logged, penalties = [], [], []

    class Check:
        @tp.hookimpl
        def on_train_batch_start(self, step):
            # Before the update (one full batch per epoch): the loss must include the penalty.
            penalties.append(float(tp.add_n(model.losses)))
            expected.append(float(loss_fn(y, model(x))) + penalties[-1])

        @tp.hookimpl
        def on_train_batch_end(self, step, logs):
            logged.append(logs["loss"])

    model(x)  # build, so the penalty can be computed before the first step
    tp.Trainer(model, "sgd", loss_fn, plugins=[Check()]).fit(x, y, epochs=3, batch_size=8, shuffle=False)
    assert all(p > 0 for p in penalties) and len(logged) == 3
    assert logged == pytest.approx(expected, rel=1e-6)


def test_names_for_loss_optimizer_and_metrics():
    x, y = make_data(10)
    trainer = tp.Trainer(
        tp.layers.Sequential([tp.layers.Dense(2, activation="softmax")]),
        "adam",
        "sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    assert isinstance(trainer.optimizer, tp.optimizers.Adam)
    history = trainer.fit(x, y, epochs=1, batch_size=5)
    assert set(history.history) == {"loss", "accuracy"}


def test_a_single_plugin_may_be_given_without_a_list():
    trainer = make_trainer(metrics=())
    for single in ("progress", {"type": "progress"}, HookCounter()):
        names = tp.Trainer(trainer.model, "sgd", "mse", plugins=single).plugins.list_name_plugin()
        assert len(names) == 1


def test_predict_and_evaluate_match_the_model():
    x, y = make_data(10)
    trainer = make_trainer()
    trainer.fit(x, y, epochs=1, batch_size=4)
    predictions = trainer.predict(x, batch_size=3)
    assert isinstance(predictions, np.ndarray)
    # Batches of 3 against one of 10: BLAS may round the last bit differently per call shape.
    np.testing.assert_allclose(predictions, trainer.model(x, training=False).numpy(), rtol=1e-6, atol=1e-6)
    result = trainer.evaluate(x, y, batch_size=10)
    expected = float(trainer.loss(y, trainer.model(x, training=False)))
    assert result["loss"] == pytest.approx(expected, rel=1e-6)
    accuracy = np.mean(np.argmax(predictions, axis=1) == y)
    assert result["accuracy"] == pytest.approx(accuracy)


def test_predict_keeps_the_structure_of_a_multi_output_model():
    class TwoHeads(tp.Module):
        def __init__(self):
            super().__init__()
            self.classes = tp.layers.Dense(2)
            self.value = tp.layers.Dense(1)

        def call(self, x):
            return {"classes": self.classes(x), "value": (self.value(x), self.value(x) * 2.0)}

    x, _ = make_data(10)
    model = TwoHeads()
    trainer = tp.Trainer(model, "sgd", "mse")
    predictions = trainer.predict(x, batch_size=4)
    expected = model(x)
    assert set(predictions) == {"classes", "value"} and isinstance(predictions["value"], tuple)
    # Batches of 4 against one of 10: BLAS may round the last bit differently.
    np.testing.assert_allclose(predictions["classes"], expected["classes"].numpy(), rtol=1e-6)
    np.testing.assert_allclose(predictions["value"][1], expected["value"][1].numpy(), rtol=1e-6)
    assert predictions["value"][0].shape == (10, 1)


def test_float64_inputs_train_as_float32():
    x, y = make_data(10)
    wide = make_trainer(metrics=())  # each trainer seeds the generators: build, then fit
    wide_history = wide.fit(x.astype(np.float64), y, epochs=1, batch_size=5, verbose=0)
    narrow = make_trainer(metrics=())
    narrow_history = narrow.fit(x.astype(np.float32), y, epochs=1, batch_size=5, verbose=0)
    # Read as float32, as Keras does: the same numbers as float32 inputs, bit for bit.
    assert wide_history.history == narrow_history.history
    for key, value in wide.model.state_dict().items():
        assert value.dtype == np.float32
        np.testing.assert_array_equal(value, narrow.model.state_dict()[key])


def test_one_fit_step_equals_the_step_written_by_hand():
    x, y = make_data(12)
    loss = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
    tp.random.set_seed(3)
    model = tp.layers.Sequential([tp.layers.Dense(5, activation="tanh"), tp.layers.Dense(3)])
    model(x)
    start = model.state_dict()
    trainer = tp.Trainer(model, tp.optimizers.Adam(0.05), loss)
    trainer.fit(x, y, epochs=1, batch_size=12, shuffle=False, verbose=0)

    tp.random.set_seed(3)
    by_hand = tp.layers.Sequential([tp.layers.Dense(5, activation="tanh"), tp.layers.Dense(3)])
    by_hand(x)
    by_hand.load_state_dict(start)
    optimizer = tp.optimizers.Adam(0.05)
    with tp.GradientTape() as tape:
        value = loss(y, by_hand(tp.constant(x), training=True))
    grads = tape.gradient(value, by_hand.trainable_variables)
    optimizer.apply_gradients(zip(grads, by_hand.trainable_variables))
    assert trainer.history.history["loss"] == [float(value)]
    for key, weights in by_hand.state_dict().items():
        np.testing.assert_array_equal(trainer.model.state_dict()[key], weights)


def test_transform_gradients_change_the_update():
    x, y = make_data(8)

    class Zero:
        @tp.hookimpl
        def transform_gradients(self, grads_and_vars):
            return [(None if g is None else tp.zeros_like(g), v) for g, v in grads_and_vars]

    class Double:
        @tp.hookimpl
        def transform_gradients(self, grads_and_vars):
            return [(None if g is None else g * 2.0, v) for g, v in grads_and_vars]

    def weights_after(plugins, learning_rate=0.1):
        trainer = make_trainer(plugins, metrics=())
        trainer.optimizer.learning_rate = learning_rate
        trainer.model(x)
        before = trainer.model.state_dict()
        trainer.fit(x, y, epochs=1, batch_size=4, shuffle=False, verbose=0)
        return before, trainer.model.state_dict()

    before, plain = weights_after([])
    assert any(not np.array_equal(before[k], plain[k]) for k in before)  # the fit does update
    _, zeroed = weights_after([Zero()])
    for key in before:
        np.testing.assert_array_equal(before[key], zeroed[key])
    # SGD with doubled gradients is SGD with a doubled rate: the transformed pairs are applied.
    _, doubled = weights_after([Double()])
    _, faster = weights_after([], learning_rate=0.2)
    for key in before:
        np.testing.assert_allclose(doubled[key], faster[key], rtol=1e-5, atol=1e-6)
        assert not np.allclose(doubled[key], plain[key])


def test_bad_arguments_have_clear_errors():
    x, y = make_data(10)
    trainer = make_trainer()
    with pytest.raises(ValueError, match=r"same number of samples.*\(10, 3\).*\(9,\)"):
        trainer.fit(x, y[:9])
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        trainer.fit(x, y, batch_size=0)
    with pytest.raises(ValueError, match="epochs must be a non-negative integer"):
        trainer.fit(x, y, epochs=-1)
    with pytest.raises(ValueError, match="validation_data must be a tuple"):
        trainer.fit(x, y, validation_data=x)
    # Without targets, a batch of x was unpacked as (x, y): a shape error, or silently wrong.
    with pytest.raises(ValueError, match="fit: y is None"):
        trainer.fit(x, None, batch_size=2)
    with pytest.raises(ValueError, match="validation_data: y is None"):
        trainer.fit(x, y, validation_data=(x, None))
    with pytest.raises(ValueError, match="evaluate: y is None"):
        trainer.evaluate(x, None)
    counter = HookCounter()
    trainer.plugins.register(counter)
    with pytest.raises(ValueError, match=r"validation_data: x and y must have the same number of samples"):
        trainer.fit(x, y, validation_data=(x, y[:5]))
    assert counter.calls == []  # found before any training
    with pytest.raises(TypeError, match="loss must be a loss name"):
        tp.Trainer(trainer.model, "sgd", 3)
    with pytest.raises(TypeError, match="optimizer must be an optimizer name"):
        tp.Trainer(trainer.model, object(), "mse")
    with pytest.raises(ValueError, match="unknown loss"):
        tp.Trainer(trainer.model, "sgd", "msq")
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        trainer.fit(x, y, resume_from="/nonexistent/ckpt.npz")


def test_a_class_given_instead_of_an_object_is_a_clear_error():
    model = make_trainer().model
    with pytest.raises(
        TypeError, match=r"optimizer: got the class Adam, not an optimizer; pass an instance: Adam\(\.\.\.\)"
    ):
        tp.Trainer(model, tp.optimizers.Adam, "mse")
    with pytest.raises(
        TypeError,
        match=r"loss: got the class MeanSquaredError, not a loss; pass an instance: MeanSquaredError\(\.\.\.\)",
    ):
        tp.Trainer(model, "sgd", tp.losses.MeanSquaredError)
    with pytest.raises(
        TypeError, match=r"metrics: got the class MeanAbsoluteError, not a metric; pass an instance"
    ):
        tp.Trainer(model, "sgd", "mse", metrics=[tp.metrics.MeanAbsoluteError])


def test_ctrl_c_during_the_optimizer_update_waits_for_it_and_the_state_resumes_exactly(tmp_path):
    x, y = make_data(10)
    reference = make_trainer(metrics=("accuracy",))
    reference.fit(x, y, epochs=3, batch_size=4)

    trainer = make_trainer([{"type": "checkpoint", "dirpath": str(tmp_path)}])
    apply = trainer.optimizer.apply_gradients
    calls = []

    def apply_with_ctrl_c(pairs):
        calls.append(1)
        if len(calls) == 5:  # the second batch of the second epoch
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C arriving as the update starts
        return apply(pairs)

    trainer.optimizer.apply_gradients = apply_with_ctrl_c
    with pytest.raises(KeyboardInterrupt):
        trainer.fit(x, y, epochs=3, batch_size=4)
    assert len(calls) == 5 and trainer.step == 5 and not trainer.update_in_progress
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    # The update was completed and saved, so resuming ends exactly where the full run did.
    resumed = make_trainer(seed=123)
    history = resumed.fit(x, y, epochs=3, batch_size=4, resume_from=tmp_path / "interrupted.npz")
    for key, value in reference.model.state_dict().items():
        np.testing.assert_array_equal(resumed.model.state_dict()[key], value)
    assert history.history == reference.history.history


def test_ctrl_c_during_the_forward_pass_waits_for_the_step_and_the_state_resumes_exactly(tmp_path):
    # Dropout had drawn its mask (and BatchNormalization would have moved its statistics) when
    # the KeyboardInterrupt arrived; the interrupted checkpoint kept the advanced generator, so
    # the resumed step drew another mask.
    x, y = make_data(10)
    reference = make_trainer(metrics=("accuracy",))
    reference.fit(x, y, epochs=3, batch_size=4)

    trainer = make_trainer([{"type": "checkpoint", "dirpath": str(tmp_path)}])
    loss, calls = trainer.loss, []

    def loss_with_ctrl_c(y_true, y_pred):
        calls.append(1)
        if len(calls) == 5:  # the second batch of the second epoch, after the forward pass
            os.kill(os.getpid(), signal.SIGINT)
        return loss(y_true, y_pred)

    trainer.loss = loss_with_ctrl_c
    with pytest.raises(KeyboardInterrupt):
        trainer.fit(x, y, epochs=3, batch_size=4)
    assert trainer.step == 5
    resumed = make_trainer(seed=123)
    history = resumed.fit(x, y, epochs=3, batch_size=4, resume_from=tmp_path / "interrupted.npz")
    for key, value in reference.model.state_dict().items():
        np.testing.assert_array_equal(resumed.model.state_dict()[key], value)
    assert history.history == reference.history.history


def test_ctrl_c_during_the_epoch_end_hooks_waits_for_them_and_the_state_resumes_exactly(tmp_path):
    # The interrupted checkpoint counted the epoch as done while early_stopping, whose hook had
    # not run yet, had not counted it: the resumed run's patience was one epoch off.
    x, y = make_data(10)

    class CtrlC:
        @tp.hookimpl(tryfirst=True)
        def on_epoch_end(self, epoch):
            if epoch == 1:
                os.kill(os.getpid(), signal.SIGINT)

    def stopper():
        return {"type": "early_stopping", "monitor": "loss", "patience": 9, "min_delta": 9.0}

    reference = make_trainer([stopper()])
    reference.fit(x, y, epochs=3, batch_size=4)
    trainer = make_trainer([stopper(), CtrlC(), {"type": "checkpoint", "dirpath": str(tmp_path)}])
    with pytest.raises(KeyboardInterrupt):
        trainer.fit(x, y, epochs=3, batch_size=4)
    resumed = make_trainer([stopper()], seed=123)
    history = resumed.fit(x, y, epochs=3, batch_size=4, resume_from=tmp_path / "interrupted.npz")
    assert history.history == reference.history.history
    assert resumed.plugins.state_dicts() == reference.plugins.state_dicts()


def test_a_second_ctrl_c_inside_a_step_raises_at_once():
    from tapefit.training.boundary import _InterruptGuard

    with _InterruptGuard() as guard:
        guard.hold = True
        os.kill(os.getpid(), signal.SIGINT)  # held until the step ends
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)  # the step may never end: this one goes through
        guard.release()  # the first was raised with the second, not again here


class ExceptionWatcher:
    def __init__(self):
        self.exceptions = []
        self.fit_ended = False

    @tp.hookimpl
    def on_exception(self, exception):
        self.exceptions.append(exception)

    @tp.hookimpl
    def on_fit_end(self):
        self.fit_ended = True


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_exceptions_reach_on_exception_and_propagate(error):
    x, y = make_data(10)

    class Fail:
        @tp.hookimpl
        def on_train_batch_start(self, step):
            if step == 3:
                raise error

    watcher = ExceptionWatcher()
    trainer = make_trainer([Fail(), watcher])
    with pytest.raises(type(error)):
        trainer.fit(x, y, epochs=3, batch_size=4)
    assert watcher.exceptions == [error]
    assert not watcher.fit_ended
    assert trainer.step == 3 and not trainer.update_in_progress


def test_metric_states_round_trip_and_read_the_first_releases_format():
    from tapefit.training.trainer import _load_metric_state, _metric_state

    accuracy = tp.metrics.get("accuracy")
    accuracy.update_state(np.array([0, 1, 1]), np.array([[0.9, 0.1], [0.2, 0.8], [0.7, 0.3]]))
    again = tp.metrics.get("accuracy")
    _load_metric_state(again, _metric_state(accuracy))
    assert float(again.result()) == pytest.approx(2 / 3)
    old = {  # as tapefit 0.1.0 wrote it: the numeric attributes, the chosen delegate by class name
        "attributes": {"total": 0.0, "count": 0.0},
        "nested": {
            "chosen": {
                "class": "SparseCategoricalAccuracy",
                "attributes": {"total": 3.0, "count": 4.0},
                "nested": {},
            }
        },
    }
    fresh = tp.metrics.get("accuracy")
    _load_metric_state(fresh, old)
    assert float(fresh.result()) == pytest.approx(0.75)
    fresh.update_state(np.array([1]), np.array([[0.1, 0.9]]))
    assert float(fresh.result()) == pytest.approx(0.8)


def test_evaluate_and_predict_call_their_hooks_and_fit_end_gets_the_last_logs():
    calls = []

    class Recorder:
        @tp.hookimpl
        def on_test_start(self):
            calls.append("test_start")

        @tp.hookimpl
        def on_test_batch_end(self, batch, logs):
            calls.append(("test_batch", batch, sorted(logs)))

        @tp.hookimpl
        def on_test_end(self, logs):
            calls.append(("test_end", sorted(logs)))

        @tp.hookimpl
        def on_predict_batch_end(self, batch, outputs):
            calls.append(("predict_batch", batch, tuple(np.shape(outputs))))

        @tp.hookimpl
        def on_predict_end(self):
            calls.append("predict_end")

        @tp.hookimpl
        def on_fit_end(self, logs):
            calls.append(("fit_end", sorted(logs)))

    x, y = make_data(10)
    trainer = make_trainer([Recorder()])
    trainer.fit(x, y, epochs=1, batch_size=10, validation_data=(x, y), verbose=0)
    assert calls == [
        "test_start",  # the fit's validation is an evaluate, as in Keras
        ("test_batch", 0, ["accuracy", "loss"]),
        ("test_end", ["accuracy", "loss"]),
        ("fit_end", ["accuracy", "loss", "val_accuracy", "val_loss"]),
    ]
    calls.clear()
    trainer.predict(x, batch_size=4)
    assert calls == [
        ("predict_batch", 0, (4, 2)),
        ("predict_batch", 1, (4, 2)),
        ("predict_batch", 2, (2, 2)),
        "predict_end",
    ]


def test_a_keras_style_callback_sees_validation_and_prediction():
    seen = []

    class KerasStyle:
        def on_test_begin(self, logs=None):
            seen.append("test_begin")

        def on_test_end(self, logs=None):
            seen.append(("test_end", sorted(logs)))

        def on_train_end(self, logs=None):
            seen.append(("train_end", sorted(logs)))

    x, y = make_data(10)
    trainer = make_trainer()
    trainer.fit(x, y, epochs=1, batch_size=10, validation_data=(x, y), verbose=0, callbacks=[KerasStyle()])
    assert seen == [
        "test_begin",
        ("test_end", ["accuracy", "loss"]),
        ("train_end", ["accuracy", "loss", "val_accuracy", "val_loss"]),
    ]


def test_evaluate_and_predict_take_keras_verbose():
    x, y = make_data(10)
    trainer = make_trainer()
    assert trainer.predict(x, verbose=0).shape == (10, 2)
    assert set(trainer.evaluate(x, y, verbose=0)) == {"loss", "accuracy"}
    with pytest.raises(ValueError, match=r"verbose must be 'auto', 0, 1 or 2, got 5"):
        trainer.predict(x, verbose=5)
