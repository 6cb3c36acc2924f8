"""Weight files (``save_weights``/``load_weights``, safetensors) and ``get_weights``/``set_weights``."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import safetensors.numpy

import tapefit as tp


class WithState(tp.Module):
    """Float and integer variables, trainable and not, beside a lazy Sequential."""

    def __init__(self, units=3, name=None):
        super().__init__(name=name)
        self.net = tp.layers.Sequential(
            [tp.layers.Dense(units, activation="relu"), tp.layers.BatchNormalization(), tp.layers.Dense(2)]
        )
        self.counter = tp.Variable(np.array([1, 2], dtype=np.int32), trainable=False)
        self.scale = tp.Variable(1.5)

    def call(self, x, training=False):
        return self.net(x, training=training) * self.scale


def built(seed, units=3, name=None):
    tp.random.set_seed(seed)
    model = WithState(units, name=name)
    model(np.ones((4, 5), np.float32), training=True)  # builds, and moves the BN statistics
    return model


def test_file_reads_back_with_safetensors_equal_to_state_dict(tmp_path):
    model = built(0)
    path = tmp_path / "model.safetensors"
    model.save_weights(path)
    loaded = safetensors.numpy.load_file(str(path))
    state = model.state_dict()
    assert list(loaded) and sorted(loaded) == sorted(state)
    for key, value in state.items():
        assert loaded[key].dtype == value.dtype, key
        np.testing.assert_array_equal(loaded[key], value)
    assert "with_state/counter" in loaded and loaded["with_state/counter"].dtype == np.int32


def test_load_weights_restores_another_model(tmp_path):
    source, target = built(0), built(1)
    x = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)
    assert not np.array_equal(source(x).numpy(), target(x).numpy())
    source.save_weights(str(tmp_path / "w.safetensors"))
    target.load_weights(tmp_path / "w.safetensors")
    for a, b in zip(source.variables, target.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(source(x).numpy(), target(x).numpy())


def test_save_overwrites_atomically_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "w.safetensors"
    built(0).save_weights(path)
    second = built(1)
    second.save_weights(path)
    assert [p.name for p in tmp_path.iterdir()] == ["w.safetensors"]
    np.testing.assert_array_equal(
        safetensors.numpy.load_file(str(path))["with_state/scale"], second.scale.numpy()
    )


def test_wrong_shapes_name_the_file_and_the_entries_and_assign_nothing(tmp_path):
    path = tmp_path / "small.safetensors"
    built(0, units=3).save_weights(path)
    target = built(1, units=4)
    before = target.get_weights()
    with pytest.raises(ValueError) as info:
        target.load_weights(path)
    message = str(info.value)
    assert str(path) in message
    assert "'with_state/sequential/dense/kernel' has shape (5, 3), the variable has (5, 4)" in message
    for a, b in zip(before, target.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_missing_and_unexpected_entries_are_named(tmp_path):
    path = tmp_path / "other.safetensors"
    safetensors.numpy.save_file(
        {"with_state/scale": np.array(2.0, np.float32), "with_state/extra": np.zeros(2, np.float32)},
        str(path),
    )
    with pytest.raises(ValueError, match=r"missing: .*with_state/counter.*unexpected: with_state/extra"):
        built(0).load_weights(path)


def test_integer_variable_refuses_fractions_from_a_file(tmp_path):
    model = built(0)
    state = model.state_dict()
    state["with_state/counter"] = np.array([1.5, 2.0], np.float32)
    path = tmp_path / "frac.safetensors"
    safetensors.numpy.save_file(state, str(path))
    with pytest.raises(ValueError, match=r"with_state/counter' has non-integral values.*int32"):
        model.load_weights(path)


def test_a_file_that_is_not_safetensors_is_a_clear_error(tmp_path):
    path = tmp_path / "weights.safetensors"
    np.savez(tmp_path / "weights.npz", a=np.zeros(2))
    path.write_bytes((tmp_path / "weights.npz").read_bytes())
    with pytest.raises(ValueError, match=r"'.*weights\.safetensors' is not a readable safetensors file"):
        built(0).load_weights(path)
    with pytest.raises(FileNotFoundError, match="no such file"):
        built(0).load_weights(tmp_path / "absent.safetensors")


def test_save_needs_the_suffix_and_an_existing_folder(tmp_path):
    with pytest.raises(ValueError, match=r"must end in '\.safetensors', got '.*model\.npz'"):
        built(0).save_weights(tmp_path / "model.npz")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        built(0).save_weights(tmp_path / "nope" / "model.safetensors")


def test_missing_safetensors_package_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)
    with pytest.raises(ImportError, match="pip install safetensors"):
        built(0).save_weights(tmp_path / "m.safetensors")


def test_get_weights_are_copies_in_variables_order():
    model = built(0)
    weights = model.get_weights()
    assert len(weights) == len(model.variables)
    for array, variable in zip(weights, model.variables):
        assert isinstance(array, np.ndarray) and array.dtype == variable.dtype
        np.testing.assert_array_equal(array, variable.numpy())
    weights[0][...] = 99.0
    assert not np.any(model.variables[0].numpy() == 99.0)


def test_set_weights_round_trip_and_checks():
    source, target = built(0), built(1)
    target.set_weights(source.get_weights())
    for a, b in zip(source.variables, target.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())

    weights = source.get_weights()
    with pytest.raises(ValueError, match=r"got a list of 3 arrays, the model has \d+ weights"):
        target.set_weights(weights[:3])
    bad = list(weights)
    bad[1] = np.zeros(7, np.float32)
    before = target.get_weights()
    with pytest.raises(
        ValueError,
        match=r"weight 1 \('with_state/sequential/dense/bias'\) has shape \(7,\), the variable has \(3,\)",
    ):
        target.set_weights([w + 1 for w in weights[:1]] + bad[1:])
    np.testing.assert_array_equal(target.variables[0].numpy(), before[0])  # nothing assigned
    with pytest.raises(TypeError, match="needs a list of arrays"):
        target.set_weights(source.state_dict())


def test_set_weights_on_an_unbuilt_model_says_to_build_it():
    model = tp.layers.Sequential([tp.layers.Dense(2)])
    with pytest.raises(ValueError, match="not built yet"):
        model.set_weights([np.zeros((3, 2), np.float32), np.zeros(2, np.float32)])
