"""A model's own step methods inside fit, evaluate and predict: what the step reaches, the one
point its updates pass through, several optimizers in checkpoints, compiled steps, errors."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.gan import GAN
from tapefit.layers.metrics import _call_method
from tapefit.training.step import pack_x_y_sample_weight, unpack_x_y_sample_weight


def regression_data(n=64, features=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = (x @ rng.normal(size=(features, 1))).astype(np.float32)
    return x, y


class Regressor(tp.Model):
    def __init__(self):
        super().__init__()
        self.hidden = tp.layers.Dense(8, activation="tanh")
        self.out = tp.layers.Dense(1)

    def call(self, x):
        return self.out(self.hidden(x))


class GuideStep(Regressor):
    """The default step, written out as the Keras guide writes its first custom step."""

    calls = 0

    def train_step(self, data):
        type(self).calls += 1
        x, y = data
        with tp.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
        variables = self.trainable_variables
        self.optimizer.apply(tape.gradient(loss, variables), variables)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss, sample_weight=x.shape[0])
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


def fit_model(model, compile=False, epochs=2, plugins=(), **kwargs):
    x, y = regression_data()
    trainer = tp.Trainer(
        model, tp.optimizers.SGD(0.05), "mse", metrics=["mae"], compile=compile, plugins=list(plugins)
    )
    history = trainer.fit(x, y, epochs=epochs, batch_size=16, shuffle=False, verbose=0, **kwargs)
    return trainer, history


def test_an_overridden_train_step_runs_and_equals_the_default_step_it_spells_out():
    tp.random.set_seed(0)
    default = Regressor()
    _, expected = fit_model(default)
    tp.random.set_seed(0)
    GuideStep.calls = 0
    custom = GuideStep()
    _, history = fit_model(custom)
    assert GuideStep.calls == 8  # 4 batches in each of 2 epochs
    for key, values in expected.history.items():  # a metric's result is float32, as in Keras
        np.testing.assert_allclose(history.history[key], values, rtol=1e-6)
    for a, b in zip(custom.get_weights(), default.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_the_step_reaches_the_trainers_objects_by_keras_names():
    tp.random.set_seed(0)
    model = Regressor()
    trainer = tp.Trainer(model, "adam", "mse", metrics=["mae"])
    assert model.optimizer is trainer.optimizer
    assert [m.name for m in model.metrics] == ["loss", "compile_metrics"]  # as Keras lists them
    model.own = tp.metrics.Mean(name="own")
    assert [m.name for m in model.metrics] == ["loss", "compile_metrics", "own"]
    x, y = regression_data(8)
    y_pred = model(tp.constant(x))
    np.testing.assert_allclose(
        float(model.compute_loss(y=tp.constant(y), y_pred=y_pred)),
        float(np.mean((np.asarray(y_pred) - y) ** 2)),
        rtol=1e-6,
    )
    logs = model.compute_metrics(x, y, y_pred)
    assert set(logs) == {"loss", "mae", "own"} and float(logs["mae"]) > 0
    model.reset_metrics()
    assert float(model.metrics[1].result()["mae"]) == 0.0


def test_a_model_without_a_trainer_says_how_to_get_one():
    model = Regressor()
    assert model.optimizer is None
    with pytest.raises(RuntimeError, match=r"Regressor.compute_loss needs a trainer: call model.compile"):
        model.compute_loss(y=1.0, y_pred=1.0)


def test_compile_fit_evaluate_predict_on_the_model():
    tp.random.set_seed(0)
    x, y = regression_data()
    model = Regressor()
    model.compile(optimizer=tp.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    history = model.fit(x, y, epochs=3, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert set(model.evaluate(x, y)) == {"loss", "mae"}
    assert model.predict(x).shape == (64, 1)
    fresh = Regressor()
    assert fresh.predict(x[:5]).shape == (5, 1)  # predicting needs no compile, as in Keras


def test_a_step_override_with_the_wrong_signature_is_named():
    class TwoArguments(Regressor):
        def train_step(self, x, y):
            return {}

    with pytest.raises(TypeError, match=r"TwoArguments.train_step\(x, y\) cannot be called with one batch"):
        fit_model(TwoArguments())


def test_a_step_that_returns_no_mapping_or_updates_nothing_is_named():
    class ReturnsLoss(Regressor):
        def train_step(self, data):
            with tp.GradientTape() as tape:
                loss = self.compute_loss(y=data[1], y_pred=self(data[0]))
            self.optimizer.apply(tape.gradient(loss, self.trainable_variables), self.trainable_variables)
            return loss

    class UpdatesNothing(Regressor):
        def train_step(self, data):
            return {"loss": 0.0}

    class VectorLog(Regressor):
        def train_step(self, data):
            with tp.GradientTape() as tape:
                loss = self.compute_loss(y=data[1], y_pred=self(data[0]))
            self.optimizer.apply(tape.gradient(loss, self.trainable_variables), self.trainable_variables)
            return {"pred": self(data[0])}

    with pytest.raises(TypeError, match=r"ReturnsLoss.train_step returned Tensor; a step returns a dict"):
        fit_model(ReturnsLoss())
    with pytest.raises(ValueError, match=r"UpdatesNothing.train_step applied no update"):
        fit_model(UpdatesNothing())
    with pytest.raises(
        ValueError, match=r"VectorLog.train_step returned a value of shape \(16, 1\) for 'pred'"
    ):
        fit_model(VectorLog())


def test_test_step_and_predict_step_overrides_run_in_evaluate_and_predict():
    class Custom(Regressor):
        def test_step(self, data):
            x, y = data
            error = tp.reduce_mean(tp.abs(self(x, training=False) - y))
            self.tracker.update_state(error)
            return {"error": self.tracker.result()}

        def predict_step(self, data):
            return self(data, training=False) * 2.0

    tp.random.set_seed(0)
    model = Custom()
    model.tracker = tp.metrics.Mean(name="error")
    x, y = regression_data()
    model.compile(optimizer="sgd", loss="mse")
    logs = model.evaluate(x, y, batch_size=64)
    np.testing.assert_allclose(logs["error"], np.mean(np.abs(np.asarray(model(x)) - y)), rtol=1e-5)
    np.testing.assert_allclose(model.predict(x), 2.0 * np.asarray(model(x)), rtol=1e-6)


def test_add_loss_is_collected_per_call_and_can_be_the_whole_loss():
    class ActivityPenalty(tp.layers.Layer):
        def call(self, inputs):
            self.add_loss(0.1 * tp.reduce_sum(inputs * inputs))
            return inputs

    class Penalized(tp.Model):
        def __init__(self):
            super().__init__()
            self.dense = tp.layers.Dense(3)
            self.penalty = ActivityPenalty()

        def call(self, x):
            return self.penalty(self.dense(x))

    tp.random.set_seed(0)
    model = Penalized()
    x = np.ones((4, 2), np.float32)
    out = np.asarray(model(x))
    assert len(model.losses) == 1
    np.testing.assert_allclose(float(model.losses[0]), 0.1 * np.sum(out**2), rtol=1e-6)
    model(x)
    assert len(model.losses) == 1  # each outermost call starts them afresh
    # With no compiled loss, add_loss is the whole loss: fit takes x alone and shrinks it.
    trainer = tp.Trainer(model, tp.optimizers.SGD(0.05))
    history = trainer.fit(x, epochs=5, batch_size=4, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    np.testing.assert_allclose(history.history["loss"][0], 0.1 * np.sum(out**2), rtol=1e-5)


def test_a_trainer_with_no_loss_at_all_is_one_clear_error():
    tp.random.set_seed(0)
    trainer = tp.Trainer(Regressor(), "sgd")
    with pytest.raises(ValueError, match=r"Regressor: there is no loss to minimize: give the trainer a loss"):
        trainer.fit(*regression_data(), verbose=0)


def test_data_is_packed_and_unpacked_as_keras_does():
    x, y, w = np.zeros(2), np.ones(2), np.full(2, 0.5)
    assert pack_x_y_sample_weight(x) is x
    assert pack_x_y_sample_weight([x, x])[0] == [x, x]
    assert unpack_x_y_sample_weight(pack_x_y_sample_weight(x, y, w)) == (x, y, w)
    assert unpack_x_y_sample_weight((x, y)) == (x, y, None)
    with pytest.raises(ValueError, match="a tuple of 4 items"):
        unpack_x_y_sample_weight((x, y, w, w))


def gan_data(n=96, seed=0):
    return np.random.default_rng(seed).normal(size=(n, 64)).astype(np.float32)


def make_gan_trainer(seed=0, **kwargs):
    tp.random.set_seed(seed)
    return tp.Trainer(GAN(), **kwargs)


def test_a_gans_two_optimizers_each_update_through_the_trainers_one_point():
    seen = []

    class Recorder:
        @tp.hookimpl
        def transform_gradients(self, trainer, grads_and_vars):
            seen.append(len(grads_and_vars))

    trainer = make_gan_trainer(plugins=[Recorder(), {"type": "clip_gradients", "global_norm": 1e-3}])
    assert list(trainer.optimizers) == ["d_optimizer", "g_optimizer"]
    history = trainer.fit(gan_data(), epochs=1, batch_size=32, verbose=0)
    assert seen == [4, 4] * 3  # the discriminator's and the generator's kernels and biases, each batch
    assert set(history.history) == {"d_loss", "g_loss", "grad_global_norm"}  # the plugin logs too
    assert int(trainer.model.d_optimizer.iterations) == int(trainer.model.g_optimizer.iterations) == 3
    # The clipping plugin bounded every update: Adam's first steps move each weight by about lr.
    assert trainer.learning_rate == pytest.approx(3e-4)


def test_a_compiled_custom_step_replays_bit_for_bit_what_eager_computes():
    eager = make_gan_trainer()
    eager_history = eager.fit(gan_data(), epochs=2, batch_size=32, verbose=0)
    compiled = make_gan_trainer(compile=True)
    with np.errstate(all="raise"):
        compiled_history = compiled.fit(gan_data(), epochs=2, batch_size=32, verbose=0)
    assert compiled._custom_steps["train_step"].eager is False
    assert compiled_history.history == eager_history.history
    for a, b in zip(compiled.model.get_weights(), eager.model.get_weights()):
        np.testing.assert_array_equal(a, b)


def _replay_source(trainer):
    (program,) = trainer._custom_steps["train_step"]._programs.values()
    return program._replay.source


@pytest.mark.parametrize("clipped", [False, True], ids=["no-transform", "clipping"])
def test_a_compiled_step_traces_its_updates_unless_a_hook_transforms_gradients(clipped):
    plugins = [{"type": "clip_gradients", "global_norm": 0.5}] if clipped else []
    eager = make_gan_trainer(plugins=plugins)
    eager_history = eager.fit(gan_data(), epochs=2, batch_size=32, verbose=0)
    compiled = make_gan_trainer(compile=True, plugins=plugins)
    compiled_history = compiled.fit(gan_data(), epochs=2, batch_size=32, verbose=0)
    assert compiled_history.history == eager_history.history
    for a, b in zip(compiled.model.get_weights(), eager.model.get_weights()):
        np.testing.assert_array_equal(a, b)
    source = _replay_source(compiled)
    # Traced: each Adam update is ops on the variables (their assign_add/assign_sub in place);
    # with clipping, the hooks and both updates are host calls of the trainer's apply. The two
    # loss trackers (Mean) add to their total and count in the replay either way.
    in_place = source.count("(_w, _v, out=_w)")
    assert in_place == (0 if clipped else 2 * (4 * 3 + 1)) + 2 * 2  # 4 variables x 3 updates, iterations
    (program,) = compiled._custom_steps["train_step"]._programs.values()
    # No metric method runs as a host call.
    assert all(value is not _call_method for value in program._replay.__globals__.values())


def test_a_transforming_plugin_added_after_tracing_makes_the_step_trace_again():
    class Halve:
        @tp.hookimpl
        def transform_gradients(self, grads_and_vars):
            return [(None if g is None else g * 0.5, v) for g, v in grads_and_vars]

    class AddHalveAfterTheFirstEpoch:
        @tp.hookimpl
        def on_epoch_end(self, trainer, epoch):
            if epoch == 0:
                trainer.plugins.register(Halve())

    runs = {}
    for compiled in (False, True):
        trainer = make_gan_trainer(compile=compiled, plugins=[AddHalveAfterTheFirstEpoch()])
        trainer.fit(gan_data(), epochs=2, batch_size=32, verbose=0)  # one fit: the step is traced once
        runs[compiled] = trainer.model.get_weights()
    for a, b in zip(runs[True], runs[False]):
        np.testing.assert_array_equal(a, b)


def test_a_gan_interrupted_between_its_two_updates_resumes_bit_for_bit(tmp_path):
    reference = make_gan_trainer()
    reference.fit(gan_data(), epochs=2, batch_size=32, verbose=0)

    trainer = make_gan_trainer(plugins=[{"type": "checkpoint", "dirpath": str(tmp_path)}])
    g_apply = trainer.model.g_optimizer.apply_gradients
    calls = []

    def apply_with_ctrl_c(pairs):
        calls.append(1)
        if len(calls) == 2:  # epoch 1's second batch: its discriminator has already updated
            os.kill(os.getpid(), signal.SIGINT)
        return g_apply(pairs)

    trainer.model.g_optimizer.apply_gradients = apply_with_ctrl_c
    with pytest.raises(KeyboardInterrupt):
        trainer.fit(gan_data(), epochs=2, batch_size=32, verbose=0)
    assert trainer.step == 2 and not trainer.update_in_progress
    contents = tp.checkpointing.load_checkpoint(tmp_path / "interrupted.npz")
    assert sorted(contents["optimizers"]) == ["d_optimizer", "g_optimizer"]
    assert contents["optimizers"]["g_optimizer"]["iterations"] == 2

    resumed = make_gan_trainer(seed=99)
    history = resumed.fit(
        gan_data(), epochs=2, batch_size=32, verbose=0, resume_from=tmp_path / "interrupted.npz"
    )
    assert history.history == reference.history.history
    for a, b in zip(resumed.model.get_weights(), reference.model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_a_checkpoint_without_the_models_optimizers_is_refused(tmp_path):
    x = gan_data()
    make_gan_trainer(plugins=[{"type": "checkpoint", "dirpath": str(tmp_path)}]).fit(
        x, batch_size=32, verbose=0
    )
    contents = tp.checkpointing.load_checkpoint(tmp_path)
    del contents["optimizers"]["g_optimizer"]
    tp.checkpointing.save_checkpoint(tmp_path / "edited.npz", contents)
    with pytest.raises(
        tp.checkpointing.CheckpointError,
        match=r"edited.npz: optimizers: the checkpoint holds the states of \['d_optimizer'\], the model holds "
        r"the optimizers \['d_optimizer', 'g_optimizer'\]",
    ):
        make_gan_trainer().fit(x, epochs=2, batch_size=32, verbose=0, resume_from=tmp_path / "edited.npz")


def test_a_steps_own_optimizers_are_found_in_lists_and_layers():
    class Holder(tp.layers.Layer):
        def __init__(self):
            super().__init__()
            self.dense = tp.layers.Dense(1)
            self.optimizer_of_layer = tp.optimizers.SGD(0.1)

        def call(self, x):
            return self.dense(x)

    class Model(tp.Model):
        def __init__(self):
            super().__init__()
            self.holder = Holder()
            self.extra = [tp.optimizers.Adam(0.01)]

        def call(self, x):
            return self.holder(x)

        def train_step(self, data):
            x, y, sample_weight = tp.utils.unpack_x_y_sample_weight(data)
            with tp.GradientTape() as tape:
                loss = tp.reduce_mean(sample_weight * tp.reduce_sum((self(x) - y) ** 2, axis=-1))
            variables = self.trainable_variables
            self.holder.optimizer_of_layer.apply(tape.gradient(loss, variables), variables)
            self.extra[0].apply([tp.zeros_like(v) for v in variables], variables)
            return {"loss": loss}

    model = Model()
    trainer = tp.Trainer(model)
    x, y = regression_data(8)
    # a custom step takes sample_weight without a compiled loss: it weighs the batch itself
    trainer.fit(x, y, sample_weight=np.ones(8, np.float32), batch_size=8, verbose=0)
    assert list(trainer.optimizers) == ["holder.optimizer_of_layer", "extra.0"]
    assert int(model.holder.optimizer_of_layer.iterations) == int(model.extra[0].iterations) == 1
