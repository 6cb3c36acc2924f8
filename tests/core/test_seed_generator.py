"""tp.random.SeedGenerator: Keras 3's moving seed, its state a Variable kept where weights go."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import tapefit as tp


def test_each_draw_moves_on_and_the_seed_repeats_the_sequence():
    first, second = tp.random.SeedGenerator(42), tp.random.SeedGenerator(42)
    a = [tp.random.normal((3, 4), seed=first).numpy() for _ in range(3)]
    b = [tp.random.normal((3, 4), seed=second).numpy() for _ in range(3)]
    for one, other in zip(a, b):
        np.testing.assert_array_equal(one, other)
    assert not np.array_equal(a[0], a[1]) and not np.array_equal(a[1], a[2])
    np.testing.assert_array_equal(first.state.numpy(), [42, 3])
    other_seed = tp.random.normal((3, 4), seed=tp.random.SeedGenerator(43)).numpy()
    assert not np.array_equal(other_seed, a[0])


def test_uniform_dropout_and_integer_draws_take_it_too():
    gen = tp.random.SeedGenerator(7)
    u = tp.random.uniform((1000,), seed=gen).numpy()
    assert 0.0 <= u.min() and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.05
    ints = tp.random.uniform((50,), minval=0, maxval=5, dtype="int32", seed=gen).numpy()
    assert ints.dtype == np.int32 and set(ints.tolist()) <= set(range(5))
    x = tp.ones((200,))
    first = tp.nn.dropout(x, 0.5, seed=gen).numpy()
    again = tp.nn.dropout(x, 0.5, seed=gen).numpy()
    assert set(np.unique(first).tolist()) == {0.0, 2.0} and not np.array_equal(first, again)
    assert int(gen.state.numpy()[1]) == 4


def test_no_seed_takes_one_from_the_global_seed():
    tp.random.set_seed(5)
    a = tp.random.normal((4,), seed=tp.random.SeedGenerator()).numpy()
    tp.random.set_seed(5)
    b = tp.random.normal((4,), seed=tp.random.SeedGenerator()).numpy()
    np.testing.assert_array_equal(a, b)


def test_next_gives_the_state_before_and_advances():
    gen = tp.random.SeedGenerator(3)
    np.testing.assert_array_equal(gen.next().numpy(), [3, 0])
    np.testing.assert_array_equal(gen.next().numpy(), [3, 1])
    assert gen.state.dtype == np.int64 and not gen.state.trainable


def test_config_round_trip_and_bad_arguments():
    gen = tp.random.SeedGenerator(11, name="noise_seed")
    assert gen.get_config() == {"seed": 11, "name": "noise_seed"}
    again = tp.random.SeedGenerator.from_config(gen.get_config())
    np.testing.assert_array_equal(
        tp.random.normal((5,), seed=gen).numpy(), tp.random.normal((5,), seed=again).numpy()
    )
    assert tp.random.SeedGenerator().get_config()["seed"] is None
    for bad in (1.5, "1", True):
        with pytest.raises(TypeError, match=r"SeedGenerator: seed must be an int or None, got"):
            tp.random.SeedGenerator(bad)
    with pytest.raises(ValueError, match="SeedGenerator: seed must fit in int64, got 18446744073709551616"):
        tp.random.SeedGenerator(2**64)
    with pytest.raises(TypeError, match="name must be a string"):
        tp.random.SeedGenerator(1, name=3)


def test_a_compiled_function_draws_afresh_each_call_as_eager_code_does():
    def noisy(x, gen):
        return x + tp.random.normal(x.shape, seed=gen)

    x = tp.zeros((2, 3))
    eager_gen, compiled_gen = tp.random.SeedGenerator(9), tp.random.SeedGenerator(9)
    compiled = tp.function(lambda x: noisy(x, compiled_gen))
    for _ in range(4):
        np.testing.assert_array_equal(compiled(x).numpy(), noisy(x, eager_gen).numpy())
    np.testing.assert_array_equal(compiled_gen.state.numpy(), [9, 4])


class Noisy(tp.layers.Layer):
    """A layer that adds noise while training, drawn through the SeedGenerator it holds."""

    def __init__(self, stddev: float = 0.5, name: str | None = None) -> None:
        super().__init__(name=name)
        self.stddev = stddev
        self.seed_generator = tp.random.SeedGenerator(1337)

    def call(self, x, training=False):
        if not training:
            return x
        return x + tp.random.normal(tp.shape(x), stddev=self.stddev, seed=self.seed_generator)

    def get_config(self):
        return {"stddev": self.stddev, "name": self.name}


tp.register_serializable(name="tests.NoisySeeded")(Noisy)


def _model(seed: int = 0) -> tp.layers.Sequential:
    tp.random.set_seed(seed)
    return tp.layers.Sequential([tp.Input((4,)), Noisy(), tp.layers.Dense(3), tp.layers.Dense(1)])


def _data():
    rng = np.random.RandomState(0)
    x = rng.randn(64, 4).astype(np.float32)
    return x, (x @ np.array([1.0, -2.0, 0.5, 3.0], np.float32))[:, None]


def test_a_module_holds_its_state_among_its_non_trainable_weights():
    model = _model()
    layer = model.layers[0]
    assert any(v is layer.seed_generator.state for v in model.non_trainable_variables)
    assert all(v is not layer.seed_generator.state for v in model.trainable_variables)
    assert "sequential/noisy/seed_generator/state" in model.state_dict()


def test_a_model_file_restores_the_state_exactly(tmp_path):
    x, y = _data()
    model = _model()
    model.compile("sgd", "mse")
    model.fit(x, y, epochs=1, batch_size=16, verbose=0)
    state = model.layers[0].seed_generator.state.numpy()
    np.testing.assert_array_equal(state, [1337, 4])  # one draw per batch
    model.save(tmp_path / "noisy.tapefit")
    loaded = tp.models.load_model(tmp_path / "noisy.tapefit")
    np.testing.assert_array_equal(loaded.layers[0].seed_generator.state.numpy(), state)
    np.testing.assert_array_equal(loaded(x[:5], training=True).numpy(), model(x[:5], training=True).numpy())


@pytest.mark.parametrize("compiled", [False, True])
def test_a_resumed_fit_draws_what_an_uninterrupted_one_draws(tmp_path, compiled):
    x, y = _data()
    reference = _model()
    reference.compile(tp.optimizers.SGD(0.01), "mse", jit_compile=compiled)
    expected = reference.fit(x, y, epochs=3, batch_size=16, shuffle=False, verbose=0).history

    class CtrlC:
        calls = 0

        @tp.hookimpl
        def on_train_batch_end(self):
            self.calls += 1
            if self.calls == 7:  # epoch 2's third batch
                os.kill(os.getpid(), signal.SIGINT)

    trainer_model = _model()
    trainer = tp.Trainer(
        trainer_model,
        tp.optimizers.SGD(0.01),
        "mse",
        plugins=[{"type": "checkpoint", "dirpath": str(tmp_path)}, CtrlC()],
        compile=compiled,
    )
    with pytest.raises(KeyboardInterrupt):
        trainer.fit(x, y, epochs=3, batch_size=16, shuffle=False, verbose=0)
    saved = tp.checkpointing.load_checkpoint(tmp_path / "interrupted.npz")
    # the signal ends the run after the step it came in: seven draws, one per batch done
    assert saved["model"]["sequential/noisy/seed_generator/state"].tolist() == [1337, 7]

    resumed_model = _model(seed=99)  # other starting weights and another global seed
    resumed = tp.Trainer(resumed_model, tp.optimizers.SGD(0.01), "mse", compile=compiled)
    resumed.fit(
        x, y, epochs=3, batch_size=16, shuffle=False, verbose=0, resume_from=tmp_path / "interrupted.npz"
    )
    assert resumed.history.history == expected
    for ours, theirs in zip(resumed_model.get_weights(), reference.get_weights()):
        np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(resumed_model.layers[0].seed_generator.state.numpy(), [1337, 12])


@pytest.mark.parametrize(
    "make", [lambda g: tp.layers.Dropout(0.5, seed=g), lambda g: tp.layers.GaussianNoise(0.5, seed=g)]
)
def test_layers_take_it_as_their_seed_and_model_files_keep_it(tmp_path, make):
    gen = tp.random.SeedGenerator(3)
    model = tp.layers.Sequential([tp.Input((4,)), make(gen), tp.layers.Dense(2)])
    x = np.ones((3, 4), np.float32)
    first, second = model(x, training=True).numpy(), model(x, training=True).numpy()
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(gen.state.numpy(), [3, 2])
    model.save(tmp_path / "seeded.tapefit")
    loaded = tp.models.load_model(tmp_path / "seeded.tapefit")
    assert loaded.layers[0].seed.get_config() == {"seed": 3, "name": "seed_generator"}
    np.testing.assert_array_equal(loaded.layers[0].seed.state.numpy(), [3, 2])
    np.testing.assert_array_equal(loaded(x, training=True).numpy(), model(x, training=True).numpy())
