"""The subpackages users see at the top (``tp.losses``) import by their dotted names too."""

from __future__ import annotations

import importlib

import pytest

import tapefit as tp


@pytest.mark.parametrize(
    "name",
    ["activations", "initializers", "losses", "math", "metrics", "nn", "random", "regularizers", "testing"],
)
def test_dotted_import_gives_the_module_behind_the_attribute(name):
    assert importlib.import_module(f"tapefit.{name}") is getattr(tp, name)


def test_all_is_the_public_api_and_tab_completion_shows_only_it():
    assert len(tp.__all__) == len(set(tp.__all__))
    assert all(hasattr(tp, name) for name in tp.__all__)
    for internal in ("cli", "core", "distributed", "training", "world", "train_state", "resume", "config"):
        assert internal not in tp.__all__ and internal not in dir(tp)
    assert {"Trainer", "Module", "GradientTape", "layers", "plugins", "checkpointing", "data"} <= set(
        tp.__all__
    )
    assert dir(tp) == sorted([*tp.__all__, "__version__"])


def test_public_subpackages_list_only_their_public_names():
    import types

    import tapefit as tp

    for name in tp.__all__:
        module = getattr(tp, name)
        if not isinstance(module, types.ModuleType):
            continue
        shown = set(dir(module))
        assert not {"Any", "Callable", "Registry", "Tensor", "np", "annotations"} & shown, name
        assert set(getattr(module, "__all__", ())) <= shown, name


def test_serialize_and_deserialize_round_trip_in_each_namespace():
    import tapefit as tp

    objects = [
        (tp.initializers, tp.initializers.HeNormal(seed=3)),
        (tp.regularizers, tp.regularizers.l1_l2(0.01, 0.02)),
        (tp.constraints, tp.constraints.MaxNorm(2.0)),
        (tp.losses, tp.losses.Hinge()),
        (tp.metrics, tp.metrics.AUC(curve="PR")),
    ]
    for module, obj in objects:
        entry = module.serialize(obj)
        assert entry["class_name"] == type(obj).__name__
        again = module.deserialize(entry)
        assert type(again) is type(obj) and again.get_config() == obj.get_config()
    assert tp.activations.serialize(tp.activations.relu) == "relu"
    assert tp.activations.deserialize("relu") is tp.activations.relu
    assert isinstance(tp.regularizers.l2(0.01), tp.regularizers.L2) and tp.regularizers.l1(0.5).l1 == 0.5
