"""tapefit.optimizers (package ``__init__``): names, ``get``, ``serialize``/``deserialize``."""

from __future__ import annotations

import pytest

import tapefit as tp

O = tp.optimizers


@pytest.mark.parametrize(
    "name, cls",
    [
        ("sgd", O.SGD),
        ("SGD", O.SGD),
        ("adam", O.Adam),
        ("AdamW", O.AdamW),
        ("rmsprop", O.RMSprop),
        ("RMSprop", O.RMSprop),
        ("adagrad", O.Adagrad),
    ],
)
def test_get_by_name_gives_keras_defaults(name, cls):
    opt = O.get(name)
    assert type(opt) is cls
    assert opt.get_config() == cls().get_config()


def test_get_instance_and_config_dict():
    opt = O.Adam(0.1)
    assert O.get(opt) is opt
    built = O.get({"type": "rmsprop", "learning_rate": 0.01, "momentum": 0.9, "centered": True})
    assert isinstance(built, O.RMSprop) and (built.learning_rate, built.momentum, built.centered) == (
        0.01,
        0.9,
        True,
    )
    scheduled = O.get(
        {
            "type": "adam",
            "learning_rate": {"type": "cosine_decay", "initial_learning_rate": 0.1, "decay_steps": 100},
        }
    )
    assert isinstance(scheduled.get_config()["learning_rate"], dict)
    assert scheduled.learning_rate == pytest.approx(0.1)


def test_serialize_round_trip():
    opt = O.SGD(0.05, momentum=0.8, nesterov=True, clipvalue=1.0)
    config = O.serialize(opt)
    assert config["type"] == "sgd"
    again = O.deserialize(config)
    assert type(again) is O.SGD and again.get_config() == opt.get_config()


def test_import_path_type():
    opt = O.get({"type": "tapefit.optimizers.adagrad:Adagrad", "learning_rate": 0.3})
    assert isinstance(opt, O.Adagrad) and opt.learning_rate == 0.3


@pytest.mark.parametrize(
    "identifier, error, message",
    [
        ("adma", ValueError, "unknown optimizer 'adma'; known: adagrad, adam, adamw, rmsprop, sgd"),
        (
            {"type": "adam", "lr": 0.1},
            ValueError,
            "optimizer 'adam': .*'lr'.*it accepts: learning_rate, beta_1",
        ),
        ({"learning_rate": 0.1}, ValueError, "needs a 'type' key"),
        (
            {
                "type": "tapefit.optimizers.schedules:CosineDecay",
                "initial_learning_rate": 0.1,
                "decay_steps": 3,
            },
            TypeError,
            "not a tapefit Optimizer",
        ),
        (3, TypeError, "expected an Optimizer, a name"),
    ],
)
def test_get_errors(identifier, error, message):
    with pytest.raises(error, match=message):
        O.get(identifier)


def test_public_names():
    for name in ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Optimizer", "schedules", "get"]:
        assert hasattr(tp.optimizers, name)
    assert issubclass(O.AdamW, O.Adam)
