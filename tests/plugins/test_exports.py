"""Every built-in plugin class is importable from ``tapefit.plugins`` by its class name."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tapefit as tp
from tapefit.plugins.manager import BUILTIN_PLUGINS, default_plugin_name, resolve_plugin

CLASS_NAMES = {
    "progress": "Progress",
    "csv_logger": "CSVLogger",
    "tensorboard": "TensorBoard",
    "mlflow": "MLFlowLogger",
    "clip_gradients": "ClipGradients",
    "checkpoint": "Checkpoint",
    "early_stopping": "EarlyStopping",
    "terminate_on_nan": "TerminateOnNaN",
    "reduce_lr_on_plateau": "ReduceLROnPlateau",
    "learning_rate_scheduler": "LearningRateScheduler",
    "lambda_callback": "LambdaCallback",
    "keras_callback": "KerasCallback",
}


@pytest.mark.parametrize("short_name", sorted(CLASS_NAMES))
def test_class_is_the_one_the_config_name_resolves_to(short_name):
    cls = getattr(tp.plugins, CLASS_NAMES[short_name])
    assert cls is resolve_plugin(short_name)
    assert CLASS_NAMES[short_name] in tp.plugins.__all__
    assert CLASS_NAMES[short_name] in dir(tp.plugins)


def test_every_builtin_is_exported_under_one_naming_scheme():
    exported = {name: tp.plugins._PLUGIN_CLASSES[name] for name in tp.plugins._PLUGIN_CLASSES}
    assert set(BUILTIN_PLUGINS) <= set(CLASS_NAMES) | {"distributed"}
    assert len(exported) == len(BUILTIN_PLUGINS)
    assert set(exported) <= set(tp.plugins.__all__)
    # Keras's names: no "Plugin" suffix on one of them.
    assert not [name for name in exported if name.endswith("Plugin")]


def test_from_import_and_use_in_a_trainer(make_trainer, data):
    from tapefit.plugins import EarlyStopping, TerminateOnNaN

    stopper = EarlyStopping(monitor="loss", patience=1)
    assert default_plugin_name(stopper) == "early_stopping"
    trainer = make_trainer([stopper, TerminateOnNaN()])
    trainer.fit(*data, epochs=2, batch_size=8)
    assert trainer.plugins.get_plugin("early_stopping") is stopper


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'ProgressPlugin'"):
        tp.plugins.ProgressPlugin
    with pytest.raises(ImportError):
        from tapefit.plugins import Tensorboard  # noqa: F401


def test_plugin_modules_are_imported_only_when_used():
    code = (
        "import sys, tapefit as tp\n"
        "lazy = ['tapefit.plugins.progress', 'tapefit.plugins.tensorboard', 'tqdm', 'tensorboardX', 'mlflow']\n"
        "print([m for m in lazy if m in sys.modules])\n"
        "tp.plugins.Progress\n"
        "print('tapefit.plugins.progress' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["[]", "True"]
