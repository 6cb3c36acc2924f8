"""``tp.models``: whole-model files saved and loaded, exact, and refused when crafted."""

from __future__ import annotations

import json
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tapefit as tp
from tapefit.cli import app
from tapefit.layers import saving

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"


@tp.register_serializable(name="tests.Scale")
class Scale(tp.layers.Layer):
    """A user's layer with a weight of its own: ``x * factor * gain``."""

    def __init__(self, factor: float = 2.0, name: str | None = None) -> None:
        super().__init__(name=name)
        self.factor = factor

    def build(self, input_shape: Any) -> None:
        self.gain = self.add_weight((input_shape[-1],), "ones", name="gain")

    def call(self, x: Any) -> Any:
        return x * self.gain * self.factor


def _functional() -> tp.Model:
    tp.random.set_seed(1)
    inputs = tp.Input((6,), name="features")
    h = tp.layers.Dense(8, activation="relu", name="hidden")(inputs)
    h = tp.layers.Add(name="skip")([h, Scale(0.5, name="scale")(h)])
    h = tp.layers.Reshape((8, 1), name="to_steps")(h)
    h = tp.layers.Flatten(name="flat")(tp.layers.ZeroPadding1D(1, name="pad")(h))
    return tp.Model(inputs, tp.layers.Dense(3, activation="softmax", name="probs")(h), name="net")


def _data(n: int = 48) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 6)).astype(np.float32), rng.integers(0, 3, n)


def _trainer(model: Any, optimizer: Any = None) -> tp.Trainer:
    return tp.Trainer(
        model,
        optimizer or tp.optimizers.Adam(tp.optimizers.schedules.CosineDecay(0.01, 20)),
        "sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )


def _fit(trainer: tp.Trainer, x: np.ndarray, y: np.ndarray) -> None:
    tp.random.set_seed(7)
    trainer.fit(x, y, epochs=1, batch_size=16, shuffle=False, verbose=0)


def test_model_save_and_load_model_give_bit_identical_predictions(tmp_path: Path) -> None:
    model = _functional()
    x, _ = _data()
    model.save(tmp_path / "m.tapefit")
    loaded = tp.models.load_model(tmp_path / "m.tapefit")
    assert type(loaded) is tp.Model and loaded.name == "net"
    assert isinstance(loaded.get_layer("scale"), Scale) and loaded.get_layer("scale").factor == 0.5
    np.testing.assert_array_equal(loaded(x).numpy(), model(x).numpy())
    with zipfile.ZipFile(tmp_path / "m.tapefit") as archive:
        assert archive.namelist() == ["config.json", "model.safetensors"]
        config = json.loads(archive.read("config.json"))
    assert config["compile_config"] is None and config["optimizer"] is None


def test_fitting_continues_after_save_and_load_as_if_uninterrupted(tmp_path: Path) -> None:
    x, y = _data()
    straight = _trainer(_functional())
    _fit(straight, x, y)
    _fit(straight, x, y)

    first = _trainer(_functional())
    _fit(first, x, y)
    first.save(tmp_path / "t.tapefit")
    again = tp.Trainer.load(tmp_path / "t.tapefit")
    assert isinstance(again.optimizer.get_config()["learning_rate"], dict)  # the schedule came back
    assert int(again.optimizer.iterations) == int(first.optimizer.iterations) > 0
    _fit(again, x, y)
    for a, b in zip(straight.model.get_weights(), again.model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_sequential_with_dropout_and_batchnorm_round_trips(tmp_path: Path) -> None:
    x = np.random.default_rng(1).normal(size=(5, 4, 4, 2)).astype(np.float32)
    model = tp.layers.Sequential(
        [
            tp.layers.Conv2D(3, 3, padding="same", kernel_regularizer="l2"),
            tp.layers.BatchNormalization(),
            tp.layers.MaxPool2D(2),
            tp.layers.Flatten(),
            tp.layers.Dropout(0.5),
            tp.layers.Dense(2),
        ]
    )
    model(x, training=True)  # moves BatchNormalization's statistics
    model.save(tmp_path / "s.tapefit")
    loaded = tp.models.load_model(tmp_path / "s.tapefit")
    np.testing.assert_array_equal(loaded(x).numpy(), model(x).numpy())
    assert [float(v.numpy()) for v in loaded.losses] == [float(v.numpy()) for v in model.losses]


def model_inputs(model: Any, x: np.ndarray) -> np.ndarray:
    """What ``model`` is called on: the data, or, for a model whose own train_step feeds its
    forward something else (a GAN's noise), zeros of the input it was built for."""
    if type(model).train_step is tp.Module.train_step:
        return x
    return np.zeros((len(x), *model._build_input_shape[1:]), np.float32)


def _prepared(name: str, tmp_path: Path) -> app.Run:
    args = app.build_parser("train").parse_args(
        ["--config", str(CONFIGS / name), "--set", f"trainer.output_dir={tmp_path / 'run'}"]
    )
    args.prog = "train"
    sys.path.insert(0, str(REPO))  # the configs' examples package, as train finds it
    try:
        run = app.prepare(args)
    finally:
        sys.path.remove(str(REPO))
    assert run.lock is not None
    run.lock.release(undo=True)
    return run


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_every_shipped_configs_model_round_trips_and_continues_exactly(name: str, tmp_path: Path) -> None:
    run = _prepared(name, tmp_path)
    x, y = run.data.x_train[:32], run.data.y_train[:32]
    trainer = tp.Trainer(run.model, run.optimizer, run.loss, run.metrics)
    _fit(trainer, x, y)
    trainer.save(tmp_path / "model.tapefit")
    loaded = tp.Trainer.load(tmp_path / "model.tapefit")
    assert type(loaded.model) is type(run.model)
    inputs = model_inputs(run.model, x[:8])
    np.testing.assert_array_equal(
        loaded.model(inputs, training=False).numpy(), run.model(inputs, training=False).numpy()
    )
    _fit(trainer, x, y)
    _fit(loaded, x, y)
    for a, b in zip(trainer.model.get_weights(), loaded.model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_train_export_writes_a_whole_model_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    common = [
        "--config",
        str(CONFIGS / "spirals_mlp.yaml"),
        "--set",
        f"trainer.output_dir={tmp_path / 'run'}",
    ]
    assert app.main([*common, "--set", "trainer.epochs=2"]) == 0
    capsys.readouterr()
    assert app.main([*common, "--export", str(tmp_path / "spirals.tapefit")]) == 0
    assert "exported the model of" in capsys.readouterr().out
    trainer = tp.Trainer.load(tmp_path / "spirals.tapefit")
    exported = tp.models.load_model(tmp_path / "spirals.tapefit")
    final = tp.models.load_model(tmp_path / "spirals.tapefit")
    final.load_weights(tmp_path / "run" / "model.safetensors")  # the run's own final weights
    for a, b in zip(exported.get_weights(), final.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert int(trainer.optimizer.iterations) > 0


# -- crafted files -------------------------------------------------------------------------


def _write_zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in members.items():
            archive.writestr(member, data)
    return path


def _saved(tmp_path: Path) -> tuple[Path, dict[str, Any], bytes]:
    path = tmp_path / "good.tapefit"
    tp.layers.Sequential([tp.layers.Dense(2)])(np.zeros((1, 3), np.float32))
    model = tp.layers.Sequential([tp.layers.Dense(2)])
    model(np.zeros((1, 3), np.float32))
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        return path, json.loads(archive.read("config.json")), archive.read("model.safetensors")


def _with_config(tmp_path: Path, change: Any) -> Path:
    _, config, weights = _saved(tmp_path)
    change(config)
    return _write_zip(
        tmp_path / "bad.tapefit", {"config.json": json.dumps(config).encode(), "model.safetensors": weights}
    )


def _layer(config: dict[str, Any]) -> dict[str, Any]:
    return config["model"]["config"]["layers"][0]  # type: ignore[no-any-return]


def _refused(path: Path, match: str) -> str:
    with pytest.raises(tp.models.ModelFileError, match=match) as caught:
        tp.models.load_model(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    return message


def test_an_unknown_class_is_refused_naming_it(tmp_path: Path) -> None:
    path = _with_config(tmp_path, lambda c: _layer(c).update(class_name="Dense3000"))
    _refused(
        path,
        r"'Dense3000' is not a class of tapefit\.layers; a class of your own needs @tp\.register_serializable",
    )


def test_an_unregistered_custom_class_is_named_with_the_fix(tmp_path: Path) -> None:
    path = _with_config(tmp_path, lambda c: _layer(c).update(module="custom", class_name="MyLayer"))
    _refused(
        path,
        r"the class 'MyLayer' is not registered; import the module that defines it, decorated with @tp\.register_serializable",
    )


@pytest.mark.parametrize("module", ["tapefit.layers", "custom"])
def test_an_import_path_is_refused_and_never_imported(tmp_path: Path, module: str) -> None:
    name = "tests_never_imported_module:Payload"
    path = _with_config(tmp_path, lambda c: _layer(c).update(module=module, class_name=name))
    _refused(path, "import")
    assert "tests_never_imported_module" not in sys.modules


def test_a_module_outside_the_namespaces_is_refused(tmp_path: Path) -> None:
    path = _with_config(tmp_path, lambda c: _layer(c).update(module="os", class_name="system"))
    _refused(path, "unknown module 'os'")


def test_unknown_keys_are_refused_naming_them(tmp_path: Path) -> None:
    _refused(_with_config(tmp_path, lambda c: c.update(extra=1)), "unknown key 'extra' in config.json")
    _refused(
        _with_config(tmp_path, lambda c: _layer(c)["config"].update(unitz=3)), "Dense: unknown key 'unitz'"
    )
    _refused(
        _with_config(tmp_path, lambda c: _layer(c).update(registered_name="x")),
        "unknown key 'registered_name'",
    )


def test_huge_json_is_refused_before_it_is_read(tmp_path: Path) -> None:
    _, _, weights = _saved(tmp_path)
    path = tmp_path / "huge.tapefit"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", b" " * (saving.MAX_CONFIG_BYTES + 1))
        archive.writestr("model.safetensors", weights)
    _refused(path, r"config\.json is 16777217 bytes, more than the 16777216 allowed")


def test_deeply_nested_json_is_refused(tmp_path: Path) -> None:
    _, _, weights = _saved(tmp_path)
    for depth in (150, 100_000):
        text = ("[" * depth + "]" * depth).encode()
        path = _write_zip(
            tmp_path / f"deep{depth}.tapefit", {"config.json": text, "model.safetensors": weights}
        )
        _refused(path, "nested")


def test_a_member_whose_size_lies_is_refused(tmp_path: Path) -> None:
    path, _, _ = _saved(tmp_path)
    data = bytearray(path.read_bytes())
    # The central directory's record of config.json: its uncompressed size field (offset 24).
    record = data.rfind(b"PK\x01\x02", 0, data.rfind(b"model.safetensors"))
    size = int.from_bytes(data[record + 24 : record + 28], "little")
    data[record + 24 : record + 28] = (size + 1000).to_bytes(4, "little")
    (tmp_path / "lies.tapefit").write_bytes(bytes(data))
    _refused(tmp_path / "lies.tapefit", "declares")
    data[record + 20 : record + 28] = (2**31).to_bytes(4, "little") * 2  # a size beyond the file
    (tmp_path / "lies2.tapefit").write_bytes(bytes(data))
    _refused(tmp_path / "lies2.tapefit", "more than the file's")


def test_a_compressed_member_is_refused(tmp_path: Path) -> None:
    _, config, weights = _saved(tmp_path)
    path = tmp_path / "deflated.tapefit"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("config.json", json.dumps(config))
        archive.writestr("model.safetensors", weights)
    _refused(path, "is compressed")


def test_a_non_zip_and_a_truncated_file_are_refused(tmp_path: Path) -> None:
    path, _, _ = _saved(tmp_path)
    (tmp_path / "text.tapefit").write_text("import os; os.system('touch pwned')\n")
    _refused(tmp_path / "text.tapefit", "not a tapefit model file")
    data = path.read_bytes()
    for cut in (len(data) // 2, len(data) - 10, 30):
        (tmp_path / "cut.tapefit").write_bytes(data[:cut])
        _refused(tmp_path / "cut.tapefit", "not a tapefit model file|cannot be read|declares")


def test_an_unknown_member_and_corrupt_weights_are_refused(tmp_path: Path) -> None:
    _, config, weights = _saved(tmp_path)
    text = json.dumps(config).encode()
    path = _write_zip(
        tmp_path / "x.tapefit", {"config.json": text, "model.safetensors": weights, "run.py": b"1"}
    )
    _refused(path, "unknown member 'run.py'")
    path = _write_zip(tmp_path / "y.tapefit", {"config.json": text, "model.safetensors": weights[:-4]})
    _refused(path, "model.safetensors declares")
    path = _write_zip(tmp_path / "z.tapefit", {"config.json": text})
    _refused(path, "it has no model.safetensors")


def test_weights_that_do_not_fit_are_refused(tmp_path: Path) -> None:
    path = _with_config(tmp_path, lambda c: _layer(c)["config"].update(use_bias=False))
    _refused(path, "the weights do not fit the model")


def test_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        tp.models.load_model(tmp_path / "absent.tapefit")


def test_save_needs_the_suffix_and_a_registered_class(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"must end in '\.tapefit'"):
        tp.layers.Dense(2).save(tmp_path / "m.keras")

    class Unregistered(tp.Module):
        def call(self, x: Any) -> Any:
            return x

    with pytest.raises(
        ValueError, match=r"Unregistered is not a built-in class; decorate it with @tp\.register_serializable"
    ):
        Unregistered().save(tmp_path / "m.tapefit")
    assert not (tmp_path / "m.tapefit").exists()


def test_trainer_load_refuses_a_model_only_file(tmp_path: Path) -> None:
    _functional().save(tmp_path / "m.tapefit")
    with pytest.raises(tp.models.ModelFileError, match="without an optimizer and loss"):
        tp.Trainer.load(tmp_path / "m.tapefit")


def test_a_loaded_model_has_the_weight_paths_of_the_model_built_by_code(tmp_path: Path) -> None:
    def build() -> tp.layers.Sequential:
        return tp.layers.Sequential([tp.layers.Dense(3), tp.layers.Dense(2, name="head")], name="net")

    model = build()
    model(np.ones((1, 4), np.float32))
    model.save(tmp_path / "m.tapefit")
    loaded = tp.models.load_model(tmp_path / "m.tapefit")
    assert (
        list(loaded.state_dict())
        == list(model.state_dict())
        == ["net/dense/kernel", "net/dense/bias", "net/head/kernel", "net/head/bias"]
    )
    loaded.save_weights(tmp_path / "w.safetensors")
    again = build()
    again(np.ones((1, 4), np.float32))
    again.load_weights(tmp_path / "w.safetensors")
    for a, b in zip(again.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_nested_models_shared_layers_masks_and_lists_round_trip(tmp_path: Path) -> None:
    inner_input = tp.Input((5,), name="inner_in")
    inner = tp.Model(inner_input, tp.layers.Dense(4, activation="tanh")(inner_input), name="inner")
    ids, features = tp.Input((None,), dtype="int32", name="ids"), tp.Input((5,), name="feats")
    embedded = tp.layers.Embedding(10, 5, mask_zero=True)(ids)  # its mask reaches the recurrent layers
    block = tp.layers.Sequential([tp.layers.Dense(5), tp.layers.Activation("relu")], name="block")
    both = tp.layers.Concatenate()([inner(block(features)), inner(tp.layers.LSTM(5)(embedded))])
    outputs = [tp.layers.Dense(2)(both), tp.layers.Bidirectional(tp.layers.GRU(3))(embedded)]
    model = tp.Model([ids, features], outputs, name="outer")
    x = [
        np.array([[1, 2, 0, 0], [3, 0, 0, 0]], np.int32),
        np.random.default_rng(0).random((2, 5), np.float32),
    ]
    model.save(tmp_path / "n.tapefit")
    loaded = tp.models.load_model(tmp_path / "n.tapefit")
    for a, b in zip(model(x), loaded(x), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert list(loaded.state_dict()) == list(model.state_dict())
    assert (
        type(loaded.get_layer("inner")) is tp.Model
        and type(loaded.get_layer("block")) is tp.layers.Sequential
    )


@pytest.mark.parametrize(
    ("learning_rate", "match"),
    [
        (
            {"type": "tests_never_imported_schedule:Payload"},
            "learning_rate must be a number or a schedule's entry",
        ),
        (
            {
                "module": "tapefit.optimizers.schedules",
                "class_name": "tests_never_imported_schedule:X",
                "config": {},
            },
            "is an import path",
        ),
    ],
)
def test_a_crafted_learning_rate_is_refused_and_never_imported(
    tmp_path: Path, learning_rate: dict[str, Any], match: str
) -> None:
    x, y = _data(16)
    trainer = _trainer(_functional(), tp.optimizers.SGD(0.1))
    _fit(trainer, x, y)
    trainer.save(tmp_path / "t.tapefit")
    with zipfile.ZipFile(tmp_path / "t.tapefit") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    config = json.loads(members["config.json"])
    config["optimizer"]["config"]["learning_rate"] = learning_rate
    members["config.json"] = json.dumps(config).encode()
    _refused(_write_zip(tmp_path / "bad.tapefit", members), match)
    assert "tests_never_imported_schedule" not in sys.modules


def test_unknown_keys_inside_a_functional_config_are_named(tmp_path: Path) -> None:
    _functional().save(tmp_path / "m.tapefit")
    with zipfile.ZipFile(tmp_path / "m.tapefit") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    config = json.loads(members["config.json"])
    config["model"]["config"]["calls"][0]["training"] = True
    members["config.json"] = json.dumps(config).encode()
    _refused(_write_zip(tmp_path / "bad.tapefit", members), r"calls\[0\]: unknown key 'training'")


def test_a_config_asking_for_more_weights_than_the_file_holds_allocates_nothing(tmp_path: Path) -> None:
    path = _with_config(tmp_path, lambda c: _layer(c)["config"].update(units=10**9))
    _refused(
        path,
        r"Dense 'dense(_\d+)?' asks for a weight of shape \(3, 1000000000\), more than the weights the model file holds",
    )
    _functional().save(tmp_path / "f.tapefit")
    with zipfile.ZipFile(tmp_path / "f.tapefit") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    config = json.loads(members["config.json"])
    config["model"]["config"]["layers"][0]["config"]["units"] = 10**9
    members["config.json"] = json.dumps(config).encode()
    _refused(_write_zip(tmp_path / "g.tapefit", members), "more than the weights the model file holds")


def test_an_error_quotes_a_short_prefix_of_a_huge_value(tmp_path: Path) -> None:
    model = tp.layers.Sequential([tp.layers.Conv1D(2, 3)])
    model(np.zeros((1, 8, 2), np.float32))
    model.save(tmp_path / "conv.tapefit")
    with zipfile.ZipFile(tmp_path / "conv.tapefit") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    for key, value in (
        ("kernel_size", [3] * 200_000),
        ("padding", "x" * 200_000),
        ("activation", "y" * 200_000),
    ):
        config = json.loads(members["config.json"])
        config["model"]["config"]["layers"][0]["config"][key] = value
        path = _write_zip(tmp_path / "bad.tapefit", {**members, "config.json": json.dumps(config).encode()})
        message = _refused(path, key if key != "padding" else "padding must be")
        assert len(message) < 1000 and repr(value)[:100] not in message, message[:300]


def _many_layers(tmp_path: Path, layers: int, width: int, sequential: bool) -> Path:
    """A file of ``layers`` ReLU layers on inputs of ``width`` features, made by editing a small one."""
    if sequential:
        model: Any = tp.layers.Sequential([tp.layers.Activation("relu")])
        model(np.zeros((1, 4), np.float32))
    else:
        inputs = tp.Input((4,), name="x")
        model = tp.Model(inputs, tp.layers.Activation("relu", name="a0")(inputs))
    model.save(tmp_path / "small.tapefit")
    with zipfile.ZipFile(tmp_path / "small.tapefit") as archive:
        config = json.loads(archive.read("config.json"))
        weights = archive.read("model.safetensors")
    inner = config["model"]["config"]
    entry = inner["layers"][0]
    inner["layers"] = [
        {**entry, "config": {**entry["config"], "name": f"a{i}"}, **({} if sequential else {"name": f"a{i}"})}
        for i in range(layers)
    ]
    if sequential:
        config["build_config"]["input_spec"] = [[None, width], "float32"]
    else:
        inner["inputs"]["items"][0]["shape"] = [width]
        inner["calls"] = [
            {"layer": f"a{i}", "args": [{"tensor": [f"a{i - 1}", 0, 0] if i else ["x", 0, 0]}], "kwargs": {}}
            for i in range(layers)
        ]
        inner["outputs"]["items"] = [{"tensor": [f"a{layers - 1}", 0, 0]}]
    members = {"config.json": json.dumps(config).encode(), "model.safetensors": weights}
    return _write_zip(tmp_path / f"many{layers}x{width}.tapefit", members)


@pytest.mark.parametrize("sequential", [True, False])
def test_a_file_asking_for_a_huge_build_is_refused_quickly(tmp_path: Path, sequential: bool) -> None:
    path = _many_layers(tmp_path, 2000, 2**22, sequential)
    assert path.stat().st_size < 500_000
    start = time.perf_counter()
    key = "build_config.input_spec" if sequential else "the shape of the input 'x'"
    _refused(path, f"{key} asks for 4194304 elements a sample, too many for 2001 layers")
    assert time.perf_counter() - start < 2.0
    _refused(_many_layers(tmp_path, 2, 2**25, sequential), "more than the 16777216 allowed")
    _refused(_many_layers(tmp_path, 10_001, 4, sequential), "it describes 10002 layers, more than the 10000")
    loaded = tp.models.load_model(_many_layers(tmp_path, 300, 64, sequential))
    assert len(loaded.layers) == 300 + (not sequential)  # a functional model lists its input layer


def _trainer_file(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A file ``Trainer.save`` wrote after one epoch of SGD with momentum, and its members."""
    x, y = _data(16)
    trainer = _trainer(_functional(), tp.optimizers.SGD(0.1, momentum=0.9))
    _fit(trainer, x, y)
    path = tmp_path / "t.tapefit"
    trainer.save(path)
    with zipfile.ZipFile(path) as archive:
        return path, {name: archive.read(name) for name in archive.namelist()}


def _refused_by_both(path: Path, match: str) -> None:
    _refused(path, match)
    with pytest.raises(tp.models.ModelFileError, match=match) as caught:
        tp.Trainer.load(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_an_encrypted_member_or_an_unknown_zip_version_is_a_model_file_error(tmp_path: Path) -> None:
    path, _ = _trainer_file(tmp_path)
    data = path.read_bytes()
    record = data.find(b"PK\x01\x02")  # the central directory's first record
    encrypted = bytearray(data)
    encrypted[record + 8] |= 1  # general purpose flags: bit 0, encrypted
    (tmp_path / "encrypted.tapefit").write_bytes(bytes(encrypted))
    _refused_by_both(tmp_path / "encrypted.tapefit", "the member 'config.json' is encrypted")
    version = bytearray(data)
    version[record + 6] = 99  # the version needed to extract: 9.9
    (tmp_path / "version.tapefit").write_bytes(bytes(version))
    _refused_by_both(tmp_path / "version.tapefit", r"not a tapefit model file \(zip file version 9\.9\)")


@pytest.mark.parametrize(
    "place, name",
    [
        ("layer", "Module"),
        ("layer", "Layer"),
        ("optimizer", "Optimizer"),
        ("schedule", "LearningRateSchedule"),
    ],
)
def test_a_base_class_named_in_a_file_is_refused_at_load(tmp_path: Path, place: str, name: str) -> None:
    _, members = _trainer_file(tmp_path)
    config = json.loads(members["config.json"])
    if place == "layer":
        config["model"]["config"]["layers"][0] = {
            "module": "tapefit.layers",
            "class_name": name,
            "config": {},
        }
    elif place == "optimizer":
        config["optimizer"]["class_name"] = name
        del config["optimizer"]["config"]["momentum"], config["optimizer"]["config"]["nesterov"]
    else:
        config["optimizer"]["config"]["learning_rate"] = {
            "module": "tapefit.optimizers.schedules",
            "class_name": name,
            "config": {},
        }
    members["config.json"] = json.dumps(config).encode()
    _refused_by_both(_write_zip(tmp_path / "base.tapefit", members), f"'{name}' is not a class of")


def _optimizer_state(members: dict[str, bytes], change: dict[str, np.ndarray]) -> dict[str, bytes]:
    import safetensors.numpy

    state = {**safetensors.numpy.load(members["optimizer.safetensors"]), **change}
    return {**members, "optimizer.safetensors": safetensors.numpy.save(state)}


@pytest.mark.parametrize(
    "change, match",
    [
        (
            {"momentum/0": np.zeros(999, np.float32)},
            r"slot 'momentum/0' has shape \(999,\), but the variable",
        ),
        ({"momentum/9": np.zeros(3, np.float32)}, "holds slots for variable 9, but there are 5 variables"),
        ({"learning_rate": np.array(np.inf)}, "`learning_rate` must be a finite number, got inf"),
        ({"iterations": np.array(-5)}, r"'iterations' must be a count of steps \(>= 0\), got -5"),
    ],
)
def test_an_optimizer_state_that_does_not_fit_the_model_is_refused_at_load(
    tmp_path: Path, change: dict[str, np.ndarray], match: str
) -> None:
    _, members = _trainer_file(tmp_path)
    path = _write_zip(tmp_path / "state.tapefit", _optimizer_state(members, change))
    _refused_by_both(path, "the optimizer's state: .*" + match)


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("loss", 5, r"compile_config\.loss: expected a name, a Loss or a registered function, got int 5"),
        ("metrics", [0], r"compile_config\.metrics\[0\]: expected a name, a Metric .*got int 0"),
        (
            "loss",
            {"module": "tapefit.layers", "class_name": "Dense", "config": {"units": 2}},
            r"compile_config\.loss: expected a name, a Loss .*got Dense",
        ),
        ("loss", "nope", r"compile_config\.loss: unknown loss 'nope'"),
        ("metrics", ["accuracy", "nope"], r"compile_config\.metrics\[1\]: unknown metric 'nope'"),
        ("loss_weights", [1.0, "x"], r"compile_config\.loss_weights\[1\]: expected a finite number, got 'x'"),
    ],
)
def test_a_compile_config_a_trainer_cannot_take_is_refused_at_load(
    tmp_path: Path, key: str, value: Any, match: str
) -> None:
    _, members = _trainer_file(tmp_path)
    config = json.loads(members["config.json"])
    config["compile_config"][key] = value
    members["config.json"] = json.dumps(config).encode()
    _refused_by_both(_write_zip(tmp_path / "compile.tapefit", members), match)


@tp.register_serializable(name="tests.TwoParts")
class TwoParts(tp.Model):
    """A subclassed model whose step calls its parts, never the model itself (a GAN's shape)."""

    def __init__(self, units: int = 3, name: str | None = None) -> None:
        super().__init__(name=name)
        self.encoder = tp.layers.Sequential([tp.layers.Dense(units)], name="encoder")
        self.decoder = tp.layers.Dense(2, name="decoder")

    def call(self, x: Any) -> Any:
        return self.decoder(self.encoder(x))


def test_a_subclassed_model_built_by_calling_its_parts_round_trips(tmp_path: Path) -> None:
    model = TwoParts(units=4)
    x = np.random.default_rng(0).normal(size=(5, 6)).astype(np.float32)
    model.decoder(model.encoder(x))  # as a custom step would: the model itself is never called
    model.save(tmp_path / "parts.tapefit")
    with zipfile.ZipFile(tmp_path / "parts.tapefit") as archive:
        config = json.loads(archive.read("config.json"))
    assert config["model"]["config"] == {"units": 4, "name": model.name}  # its constructor's arguments
    assert config["build_config"] == {
        "layers": {"encoder": [[None, 6], "float32"], "decoder": [[None, 4], "float32"]}
    }
    loaded = tp.models.load_model(tmp_path / "parts.tapefit")
    assert type(loaded) is TwoParts
    np.testing.assert_array_equal(loaded(x).numpy(), model(x).numpy())


@pytest.mark.parametrize(
    "build, match",
    [
        ({"layers": {"encoder": [[None, 6], "float32"], "nope": [[None, 4], "float32"]}}, "no layer 'nope'"),
        ({"layers": [1]}, "build_config.layers must be an object"),
        ({"layers": {}, "input_spec": [[None, 6], "float32"]}, "one of 'input_spec' and 'layers'"),
        ({"layers": {"decoder": [[None, 5], "float32"]}}, "the weights do not fit the model"),
    ],
)
def test_a_build_config_of_layers_that_do_not_fit_is_refused(
    tmp_path: Path, build: dict[str, Any], match: str
) -> None:
    model = TwoParts(units=4)
    model.decoder(model.encoder(np.zeros((1, 6), np.float32)))
    model.save(tmp_path / "parts.tapefit")
    with zipfile.ZipFile(tmp_path / "parts.tapefit") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    config = json.loads(members["config.json"])
    config["build_config"] = build
    members["config.json"] = json.dumps(config).encode()
    _refused(_write_zip(tmp_path / "bad.tapefit", members), match)


@tp.register_serializable(package="tests.Models")
class _Halves(tp.layers.Layer):
    def call(self, x: Any) -> Any:
        return x * 0.5


def _small_functional() -> Any:
    inputs = tp.Input((3,), name="x")
    return tp.Model(inputs, tp.layers.Dense(2, name="head")(_Halves(name="halves")(inputs)))


def test_register_serializable_with_a_package_names_the_class_as_keras() -> None:
    entry = tp.layers.serialize(_Halves(name="h"))
    assert entry["class_name"] == "tests.Models>_Halves"
    assert isinstance(tp.layers.deserialize(entry), _Halves)


def test_load_model_takes_custom_objects_by_their_short_names(tmp_path: Path) -> None:
    model = _small_functional()
    model.save(tmp_path / "m.tapefit")

    class StandIn(_Halves):  # any class the caller maps the name to
        pass

    loaded = tp.models.load_model(tmp_path / "m.tapefit", custom_objects={"_Halves": StandIn})
    assert type(loaded.get_layer("halves")) is StandIn
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(loaded(x).numpy(), model(x).numpy())
    assert type(tp.models.load_model(tmp_path / "m.tapefit").get_layer("halves")) is _Halves  # scope closed
    with pytest.raises(TypeError, match="custom_objects must map names"):
        tp.models.load_model(tmp_path / "m.tapefit", custom_objects={"_Halves": 3})


def test_clone_model_has_the_same_graph_and_new_weights() -> None:
    model = _small_functional()
    clone = tp.models.clone_model(model)
    assert [layer.name for layer in clone.layers] == ["x", "halves", "head"]
    assert [w.shape for w in clone.get_weights()] == [w.shape for w in model.get_weights()]
    assert not any(a is b for a, b in zip(clone.variables, model.variables))
    clone.set_weights(model.get_weights())
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(clone(x).numpy(), model(x).numpy())
    stack = tp.layers.Sequential([tp.Input((4,)), tp.layers.Dense(1)])
    assert tp.models.clone_model(stack).get_weights()[0].shape == (4, 1)


def test_to_json_and_model_from_json_make_the_model_again() -> None:
    stack = tp.layers.Sequential([tp.Input((32,)), tp.layers.Dense(1)])
    again = tp.models.model_from_json(stack.to_json())
    assert type(again) is tp.layers.Sequential and again.get_weights()[0].shape == (32, 1)
    model = _small_functional()
    copy = tp.models.model_from_json(model.to_json(indent=2))
    assert [layer.name for layer in copy.layers] == ["x", "halves", "head"]
    with pytest.raises(ValueError, match="model_from_json: not JSON"):
        tp.models.model_from_json("{")
    with pytest.raises(ValueError, match=r"'Nope' is not a class of tapefit\.layers"):
        tp.models.model_from_json(
            json.dumps(tp.layers.serialize(tp.layers.Dense(1))).replace("Dense", "Nope")
        )
