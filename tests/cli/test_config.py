"""Config files: loading, --set overrides and validation with one-line errors naming the key."""

import os
import textwrap
from typing import Literal

import pytest

from tapefit.cli import config as cfg
from tapefit.cli.config import ConfigError, Kind, Schema

# --------------------------------------------------------------------------- a small schema of fake types


def load_points(n: int = 10, noise: float = 0.1, seed: int = 0):
    """A data type taking the common keys' ``seed`` too."""


def load_file(path: str, key: str = "x"):
    """A data type with a required key."""


class Adam:
    def __init__(self, learning_rate: float = 0.001, beta_1: float = 0.9, amsgrad: bool = False):
        pass


class Anything:
    def __init__(self, level: int = 0, **kwargs):
        pass


class Base:
    def __init__(self, name: str | None = None, clipnorm: float | None = None):
        pass


class SGD(Base):
    def __init__(self, learning_rate: float = 0.01, momentum: float = 0.0, **kwargs):
        super().__init__(**kwargs)


class Cosine:
    def __init__(self, initial_learning_rate: float, decay_steps: int, alpha: float = 0.0):
        pass


class Checkpoint:
    def __init__(
        self, every_n_epochs: int = 1, keep_last: int | None = 3, mode: Literal["min", "max"] = "min"
    ):
        pass


class Clip:
    def __init__(self, global_norm: float | None = None, directory: str = "x"):
        pass


def mlp(hidden_units: list[int] = (64,), activation: str = "relu"):
    """A model type."""


def _kinds():
    return {
        "data": Kind(
            "data", lambda: {"points": load_points, "file": load_file}, common=dict(cfg.DATA_COMMON)
        ),
        "model": Kind("model", lambda: {"mlp": mlp}),
        "loss": Kind("loss", lambda: {"mse": lambda: None, "sparse_categorical_crossentropy": lambda: None}),
        "metric": Kind("metric", lambda: {"accuracy": lambda: None}),
        "optimizer": Kind(
            "optimizer",
            lambda: {"adam": Adam, "sgd": SGD, "anything": Anything},
            nested={"learning_rate": "schedule"},
        ),
        "schedule": Kind("schedule", lambda: {"cosine_decay": Cosine}),
        "plugin": Kind(
            "plugin",
            lambda: {"checkpoint": Checkpoint, "clip_gradients": Clip, "progress": object},
            skip=("directory",),
        ),
    }


SCHEMA = Schema(_kinds(), default_optimizer="sgd")


def base(**changes):
    config = {
        "name": "demo",
        "data": {"type": "points"},
        "model": {"type": "mlp", "hidden_units": [8]},
        "loss": "mse",
        "optimizer": {"type": "adam"},
    }
    config.update(changes)
    return config


def error_of(config):
    with pytest.raises(ConfigError) as info:
        cfg.resolve_config(config, SCHEMA)
    message = str(info.value)
    assert "\n" not in message
    return message, info.value.key


# --------------------------------------------------------------------------- loading


def test_yaml_and_toml_give_the_same_config(tmp_path):
    (tmp_path / "c.yaml").write_text(
        textwrap.dedent(
            """\
            name: demo
            data: {type: points, validation_split: 0.25}
            optimizer: {type: adam, learning_rate: 1e-3}
            plugins:
              - progress
              - {type: checkpoint, keep_last: 2}
            """
        )
    )
    (tmp_path / "c.toml").write_text(
        textwrap.dedent(
            """\
            name = "demo"
            plugins = ["progress", {type = "checkpoint", keep_last = 2}]
            data = {type = "points", validation_split = 0.25}

            [optimizer]
            type = "adam"
            learning_rate = 1e-3
            """
        )
    )
    from_yaml = cfg.load_config_file(str(tmp_path / "c.yaml"))
    from_toml = cfg.load_config_file(str(tmp_path / "c.toml"))
    assert from_yaml == from_toml
    assert from_yaml["optimizer"]["learning_rate"] == 0.001  # YAML 1.1 would read the string '1e-3'


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("c.json", "{}", r"unknown format '\.json'; use \.yaml, \.yml or \.toml"),
        ("c.yaml", "a: [1, 2\nb: 3\n", r"not valid YAML at line \d+, column \d+"),
        ("c.toml", "a = \n", r"not valid TOML"),
        ("c.yaml", "- 1\n- 2\n", r"the config must be a mapping of keys .* got a list"),
        # PyYAML keeps the last of two equal keys silently; a config must not.
        (
            "c.yaml",
            "trainer: {epochs: 1}\nseed: 0\ntrainer: {epochs: 3}\n",
            r"c\.yaml: not valid YAML at line 3, column 1: the key 'trainer' appears twice \(first at line 1\)",
        ),
        (
            "c.yaml",
            "model:\n  hidden_units: [8]\n  hidden_units: [16]\n",
            r"at line 3, column 3: the key 'hidden_units' appears twice \(first at line 2\)",
        ),
        ("c.yaml", "trainer: {epochs: 1, epochs: 2}\n", r"line 1, column 22: the key 'epochs' appears twice"),
        ("c.toml", "[trainer]\nepochs = 1\n[trainer]\nepochs = 2\n", r"not valid TOML"),
    ],
)
def test_unreadable_config_files(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        cfg.load_config_file(str(path))
    assert "\n" not in str(info.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match=r"config file '.*nope\.yaml' does not exist"):
        cfg.load_config_file(str(tmp_path / "nope.yaml"))


def test_yaml_merge_keys_may_override(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("base: &b {epochs: 1, batch_size: 8}\ntrainer:\n  <<: *b\n  epochs: 3\n")
    assert cfg.load_config_file(str(path))["trainer"] == {"epochs": 3, "batch_size": 8}


def test_empty_file_is_an_empty_config(tmp_path):
    (tmp_path / "e.yml").write_text("# nothing yet\n")
    assert cfg.load_config_file(str(tmp_path / "e.yml")) == {}


# --------------------------------------------------------------------------- --set


def test_key_paths_parse_both_list_spellings():
    assert cfg.parse_key_path("plugins[2].global_norm") == ["plugins", 2, "global_norm"]
    assert cfg.parse_key_path("plugins.2.global_norm") == ["plugins", 2, "global_norm"]
    assert cfg.format_key_path(["plugins", 2, "global_norm"]) == "plugins[2].global_norm"
    with pytest.raises(ConfigError, match="not a key path"):
        cfg.parse_key_path("trainer..epochs")


def test_overrides_parse_yaml_scalars_and_create_keys():
    config = {"trainer": {"epochs": 20}, "optimizer": "adam", "plugins": ["progress", {"type": "checkpoint"}]}
    result = cfg.apply_overrides(
        config,
        [
            "trainer.epochs=3",
            "trainer.shuffle=false",
            "trainer.output_dir=out/run",
            "optimizer.learning_rate=1e-2",
            "plugins[1].keep_last=null",
            "plugins.0.leave=true",
            "model.hidden_units=[32, 16]",
            "name=run-2",
        ],
    )
    assert result == {
        "trainer": {"epochs": 3, "shuffle": False, "output_dir": "out/run"},
        "optimizer": {"type": "adam", "learning_rate": 0.01},
        "plugins": [{"type": "progress", "leave": True}, {"type": "checkpoint", "keep_last": None}],
        "model": {"hidden_units": [32, 16]},
        "name": "run-2",
    }
    assert config["trainer"]["epochs"] == 20  # the original is untouched


def test_overrides_one_past_the_end_of_a_list_append():
    config = {"plugins": ["progress"], "metrics": ["accuracy"]}
    result = cfg.apply_overrides(
        config,
        ["plugins[1]=tensorboard", "plugins[2].type=checkpoint", "plugins[2].keep_last=2", "data.x[0]=5"],
    )
    assert result["plugins"] == ["progress", "tensorboard", {"type": "checkpoint", "keep_last": 2}]
    assert result["data"] == {"x": [5]}  # a missing list indexed at 0 is made
    assert cfg.apply_overrides({}, ["plugins[0]=progress"]) == {"plugins": ["progress"]}


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.epochs", r"--set 'trainer.epochs': expected KEY=VALUE"),
        ("=3", r"expected KEY=VALUE"),
        (
            "plugins[5].x=1",
            r"plugins has 2 entries, there is no \[5\] \(plugins\[2\]=\.\.\. adds one at the end\)",
        ),
        ("plugins.x=1", r"plugins is a list; index it"),
        ("trainer.epochs.x=1", r"trainer\.epochs is an integer, not a mapping"),
        ("trainer.epochs=[1", r"the value is not valid YAML"),
    ],
)
def test_bad_overrides(override, message):
    with pytest.raises(ConfigError, match=message):
        cfg.apply_overrides({"trainer": {"epochs": 1}, "plugins": ["a", "b"]}, [override])


# --------------------------------------------------------------------------- validation


def test_resolved_config_fills_defaults_and_expands_shorthands():
    resolved = cfg.resolve_config(
        base(metrics=["accuracy"], plugins=["progress", {"type": "checkpoint"}]), SCHEMA
    )
    assert list(resolved) == list(cfg.TOP_LEVEL_KEYS)
    assert resolved["seed"] == 0
    assert resolved["data"] == {
        "type": "points",
        "validation_split": 0.2,
        "standardize": False,
        "seed": 0,  # the top-level seed
        "workers": 0,
        "prefetch": 2,
        "map": None,
        "n": 10,
        "noise": 0.1,
    }
    assert resolved["loss"] == {"type": "mse"}
    assert resolved["metrics"] == [{"type": "accuracy"}]
    assert resolved["optimizer"] == {"type": "adam", "learning_rate": 0.001, "beta_1": 0.9, "amsgrad": False}
    assert resolved["trainer"] == {
        "epochs": 1,
        "batch_size": 32,
        "shuffle": True,
        "drop_last": False,
        "output_dir": None,
        "compile": False,
        "verbose": "auto",
        "threads": None,
        "steps_per_epoch": None,
        "validation_steps": None,
        "validation_batch_size": None,
        "validation_freq": 1,
    }
    assert resolved["plugins"] == [
        {"type": "progress"},
        {"type": "checkpoint", "every_n_epochs": 1, "keep_last": 3, "mode": "min"},
    ]
    assert cfg.parse_yaml(cfg.dump_config(resolved)) == resolved


def test_name_and_optimizer_defaults():
    config = base()
    del config["name"], config["optimizer"]
    resolved = cfg.resolve_config(config, SCHEMA, default_name="my_file")
    assert resolved["name"] == "my_file"
    assert resolved["optimizer"]["type"] == "sgd"
    assert Schema({}).default_optimizer == "rmsprop"  # Keras's compile() default


def test_unknown_keys_suggest_the_closest_valid_key():
    assert error_of(base(optimizer={"type": "adam", "learnig_rate": 0.1})) == (
        "optimizer.learnig_rate: unknown key; did you mean 'optimizer.learning_rate'?",
        "optimizer.learnig_rate",
    )
    assert error_of(base(trainer={"epoch": 3})) == (
        "trainer.epoch: unknown key; did you mean 'trainer.epochs'?",
        "trainer.epoch",
    )
    assert error_of({**base(), "optimiser": "adam"})[0] == "optimiser: unknown key; did you mean 'optimizer'?"
    message, _ = error_of(base(plugins=["progress", {"type": "checkpoint", "keep_lst": 1}]))
    assert message == "plugins[1].keep_lst: unknown key; did you mean 'plugins[1].keep_last'?"
    message, _ = error_of(base(model={"type": "mlp", "zzz": 1}))
    assert message == "model.zzz: unknown key; model type 'mlp' takes: hidden_units, activation"


def test_keys_filled_in_by_train_are_not_config_keys():
    message, _ = error_of(base(plugins=[{"type": "clip_gradients", "directory": "a"}]))
    assert message.startswith("plugins[0].directory: unknown key")


def test_kwargs_passed_to_a_base_class_are_known():
    resolved = cfg.resolve_config(base(optimizer={"type": "sgd", "clipnorm": 1.0}), SCHEMA)
    assert resolved["optimizer"] == {
        "type": "sgd",
        "learning_rate": 0.01,
        "momentum": 0.0,
        "name": None,
        "clipnorm": 1.0,
    }
    message, _ = error_of(base(optimizer={"type": "sgd", "clipnrm": 1.0}))
    assert message == "optimizer.clipnrm: unknown key; did you mean 'optimizer.clipnorm'?"
    # **kwargs that go nowhere traceable: an extra key is passed on as is, known ones still checked
    resolved = cfg.resolve_config(base(optimizer={"type": "anything", "other": [1]}), SCHEMA)
    assert resolved["optimizer"] == {"type": "anything", "level": 0, "other": [1]}
    message, _ = error_of(base(optimizer={"type": "anything", "level": "high"}))
    assert message == "optimizer.level: expected an integer, got 'high' (a string)"


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"trainer": {"epochs": "ten"}}, "trainer.epochs: expected an integer, got 'ten' (a string)"),
        ({"trainer": {"epochs": 2.5}}, "trainer.epochs: expected an integer, got 2.5 (a float)"),
        ({"trainer": {"epochs": True}}, "trainer.epochs: expected an integer, got true (a boolean)"),
        ({"trainer": {"epochs": -1}}, "trainer.epochs: must be a non-negative integer, got -1"),
        (
            {"trainer": {"shuffle": "yes please"}},
            "trainer.shuffle: expected true or false, got 'yes please' (a string)",
        ),
        ({"trainer": [1]}, "trainer: expected a mapping, got [1] (a list)"),
        ({"seed": 1.5}, "seed: expected an integer, got 1.5 (a float)"),
        ({"name": "../x"}, "name: must be a folder name of letters, digits, '.', '_' and '-', got '../x'"),
        (
            {"optimizer": {"type": "adam", "learning_rate": "fast"}},
            "optimizer.learning_rate: expected a number or a schedule mapping, got 'fast' (a string)",
        ),
        (
            {"optimizer": {"type": "adam", "amsgrad": 1}},
            "optimizer.amsgrad: expected true or false, got 1 (an integer)",
        ),
        (
            {"model": {"type": "mlp", "hidden_units": [8, "x"]}},
            "model.hidden_units: expected a list of integers, got [8, x] (a list)",
        ),
        (
            {"model": {"type": "mlp", "hidden_units": 8}},
            "model.hidden_units: expected a list of integers, got 8 (an integer)",
        ),
        (
            {"plugins": [{"type": "checkpoint", "mode": "best"}]},
            "plugins[0].mode: expected one of 'min', 'max', got 'best' (a string)",
        ),
        (
            {"plugins": [{"type": "checkpoint", "keep_last": "all"}]},
            "plugins[0].keep_last: expected an integer or null, got 'all' (a string)",
        ),
        (
            {"data": {"type": "points", "validation_split": 1.0}},
            "data.validation_split: must be in [0, 1), got 1.0",
        ),
        ({"plugins": "progress"}, "plugins: expected a list, got 'progress' (a string)"),
        (
            {"model": 3},
            "model: expected a model type name or a mapping with a 'type' key, got 3 (an integer)",
        ),
    ],
)
def test_wrong_types_name_the_key_and_the_value(changes, message):
    assert error_of(base(**changes))[0] == message


def test_integers_are_accepted_where_floats_are_expected():
    resolved = cfg.resolve_config(base(optimizer={"type": "adam", "learning_rate": 1}), SCHEMA)
    assert resolved["optimizer"]["learning_rate"] == 1


@pytest.mark.parametrize(
    "config, message, key",
    [
        (
            {"model": {"type": "mlp"}, "loss": "mse"},
            "data: missing required key (a config needs data and model)",
            "data",
        ),
        (
            {"data": {"type": "points"}, "model": "mlp"},
            "loss: missing required key (model.type 'mlp' trains with the default step, which needs a loss; "
            "only a model whose class overrides train_step may leave it out)",
            "loss",
        ),
        (
            {"data": {"validation_split": 0.1}, "model": "mlp", "loss": "mse"},
            "data.type: missing required key (one of: file, points, or 'package.module:Name')",
            "data.type",
        ),
        (
            {"data": {"type": "file"}, "model": "mlp", "loss": "mse"},
            "data.path: missing required key (data type 'file' needs it)",
            "data.path",
        ),
        (
            {
                "data": "points",
                "model": "mlp",
                "loss": "mse",
                "optimizer": {"type": "adam", "learning_rate": {"type": "cosine_decay", "decay_steps": 10}},
            },
            "optimizer.learning_rate.initial_learning_rate: missing required key (schedule type 'cosine_decay' needs it)",
            "optimizer.learning_rate.initial_learning_rate",
        ),
    ],
)
def test_missing_required_keys(config, message, key):
    assert error_of(config) == (message, key)


def test_unknown_types_list_the_known_ones():
    assert error_of(base(data={"type": "pionts"})) == (
        "data.type: unknown data type 'pionts'; did you mean 'points'? Known types: file, points, "
        "or an import path 'package.module:Name'",
        "data.type",
    )
    message, _ = error_of(base(optimizer="adamw"))
    assert message.startswith(
        "optimizer.type: unknown optimizer type 'adamw'; did you mean 'adam'? Known types: adam, anything, sgd"
    )
    message, _ = error_of(base(plugins=["progress", "zzz"]))
    assert message == (
        "plugins[1].type: unknown plugin type 'zzz'. Known types: checkpoint, clip_gradients, progress, "
        "or an import path 'package.module:Name'"
    )
    # A dotted path written without the colon gets the colon form suggested.
    message, _ = error_of(base(data={"type": "mypackage.loaders.Points"}))
    assert message.startswith(
        "data.type: unknown data type 'mypackage.loaders.Points'; did you mean the import path "
        "'mypackage.loaders:Points'? Known types: file, points, "
    )
    message, _ = error_of(base(data={"type": 3}))
    assert message == "data.type: expected a type name, got 3 (an integer)"


def test_nested_schedule_is_validated_and_resolved():
    schedule = {"type": "cosine_decay", "initial_learning_rate": 0.1, "decay_steps": 100}
    resolved = cfg.resolve_config(base(optimizer={"type": "adam", "learning_rate": schedule}), SCHEMA)
    assert resolved["optimizer"]["learning_rate"] == {**schedule, "alpha": 0.0}
    message, _ = error_of(base(optimizer={"type": "adam", "learning_rate": {**schedule, "decay_step": 1}}))
    assert (
        message
        == "optimizer.learning_rate.decay_step: unknown key; did you mean 'optimizer.learning_rate.decay_steps'?"
    )


def test_import_paths(tmp_path, monkeypatch):
    package = tmp_path / "userpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "models.py").write_text(
        "class Net:\n    def __init__(self, units: int, depth: int = 2):\n        pass\n\nVALUE = 3\n"
    )
    (package / "broken.py").write_text("import not_a_module_anywhere\n")
    monkeypatch.chdir(tmp_path)  # found from the current directory, as python -m does
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", os.getcwd())])
    resolved = cfg.resolve_config(base(model={"type": "userpkg.models:Net", "units": 4}), SCHEMA)
    assert resolved["model"] == {"type": "userpkg.models:Net", "units": 4, "depth": 2}
    cases = [
        (
            "userpkg.missing:Net",
            "model.type: 'userpkg.missing:Net' does not import: ModuleNotFoundError: No module named 'userpkg.missing'",
        ),
        (
            "userpkg.broken:Net",
            "model.type: 'userpkg.broken:Net' does not import: ModuleNotFoundError: No module named 'not_a_module_anywhere'",
        ),
        (
            "userpkg.models:Nett",
            "model.type: 'userpkg.models:Nett' does not import: module 'userpkg.models' has no attribute 'Nett'",
        ),
        ("userpkg.models:VALUE", "model.type: 'userpkg.models:VALUE' is int, not a class or function"),
        (
            "userpkg.models:",
            "model.type: 'userpkg.models:' is not an import path of the form 'package.module:Name'",
        ),
    ]
    for type_name, message in cases:
        assert error_of(base(model={"type": type_name, "units": 4})) == (message, "model.type")
    message, key = error_of(base(model={"type": "userpkg.models:Net"}))
    assert (message, key) == (
        "model.units: missing required key (model type 'userpkg.models:Net' needs it)",
        "model.units",
    )


def test_missing_data_file_is_reported_before_anything_runs(tmp_path):
    message, key = error_of(base(data={"type": "file", "path": str(tmp_path / "nope.npz")}))
    assert key == "data.path"
    assert message == f"data.path: file {str(tmp_path / 'nope.npz')!r} does not exist"
    message, _ = error_of(base(data={"type": "file", "path": str(tmp_path)}))
    assert message == f"data.path: {str(tmp_path)!r} is a folder, not a regular file"


def test_the_trainer_section_is_fits_signature_and_fits_rules():
    import inspect
    import re

    import numpy as np

    import tapefit as tp
    from tapefit.cli.config import trainer_params
    from tapefit.training.trainer import FIT_RULES, Trainer

    params = trainer_params()
    fit = inspect.signature(Trainer.fit).parameters
    for name in (
        "epochs",
        "batch_size",
        "shuffle",
        "drop_last",
        "verbose",
        "steps_per_epoch",
        "validation_steps",
    ):
        assert params[name].default == fit[name].default, name
    assert {"output_dir", "compile", "threads"} <= set(params)
    assert not {"x", "y", "validation_data", "resume_from", "sample_weight"} & set(params)
    # one rule, two callers: the config refuses what fit refuses, in the same words
    for name, bad in (("epochs", -1), ("batch_size", 0), ("verbose", 3), ("steps_per_epoch", 0)):
        assert params[name].check is FIT_RULES[name]
        problem = FIT_RULES[name](bad)
        with pytest.raises(ConfigError, match=rf"^trainer\.{name}: {re.escape(problem)}, got"):
            cfg.resolve_config(base(trainer={name: bad}), SCHEMA)
        with pytest.raises(ValueError, match=rf"^{name} {re.escape(problem)}, got"):
            Trainer(tp.layers.Dense(1), "sgd", "mse").fit(
                np.zeros((4, 2), np.float32), np.zeros((4, 1), np.float32), **{name: bad}
            )
    assert FIT_RULES["epochs"](0) is None  # epochs: 0 trains nothing, in a config as in fit


def test_one_import_and_one_snake_case_serve_configs_registries_and_plugins():
    from tapefit.core.naming import to_snake_case
    from tapefit.plugins.manager import resolve_plugin

    # A class name spells a short name by the registries' snake_case ("Conv2D" is "conv2d").
    assert cfg.checking._canonical("Conv2D", {"conv2d": None}) == to_snake_case("Conv2D") == "conv2d"
    # The same words whoever imports by path.
    with pytest.raises(
        ConfigError, match=r"^model\.type: 'tapefit:Nope' does not import: module 'tapefit' has no"
    ):
        cfg.import_object("tapefit:Nope", "model.type")
    with pytest.raises(ValueError, match=r"^plugin 'tapefit:Nope' does not import: module 'tapefit' has no"):
        resolve_plugin("tapefit:Nope")
