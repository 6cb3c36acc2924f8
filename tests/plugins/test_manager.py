"""The plugin manager: registration, call order, names, discovery and validation."""

from __future__ import annotations

import importlib.metadata
import logging
import types

import pytest

import tapefit as tp
from tapefit.plugins import manager as manager_module
from tapefit.plugins.manager import PluginManager, PluginValidationError, create_plugin, resolve_plugin
from tapefit.plugins.terminate_on_nan import TerminateOnNaN


class Recorder:
    def __init__(self, label, log):
        self.label = label
        self.log = log

    @tp.hookimpl
    def on_epoch_start(self, epoch):
        self.log.append((self.label, epoch))


def test_misspelt_hook_is_an_error_naming_the_plugin_and_the_hook():
    class Typo:
        plugin_name = "my_typo_plugin"

        @tp.hookimpl
        def on_epoch_ends(self, trainer, epoch, logs):
            pass

    pm = PluginManager()
    with pytest.raises(
        PluginValidationError, match=r"my_typo_plugin.*'on_epoch_ends'.*did you mean 'on_epoch_end'"
    ):
        pm.register(Typo())
    assert pm.get_plugin("my_typo_plugin") is None  # not left half-registered
    pm.register(Recorder("ok", []))  # the manager still works afterwards
    pm.check_pending()


def test_unmarked_hook_method_is_an_error():
    class Forgot:
        def on_epoch_end(self, trainer, epoch, logs):
            pass

    with pytest.raises(PluginValidationError, match=r"'forgot'.*on_epoch_end is not marked.*@tp.hookimpl"):
        PluginManager().register(Forgot())


def test_hookimpl_with_an_unknown_argument_is_an_error_naming_the_plugin():
    class WrongArgs:
        plugin_name = "wrong_args"

        @tp.hookimpl
        def on_epoch_end(self, trainer, epoch, metrics):
            pass

    with pytest.raises(PluginValidationError) as info:
        PluginManager().register(WrongArgs())
    assert str(info.value) == (
        "plugin 'wrong_args': its on_epoch_end takes 'metrics', which the hook does not pass; "
        "on_epoch_end passes: trainer, epoch, logs"
    )


@pytest.mark.parametrize("option", ["wrapper", "hookwrapper"])
def test_a_wrapper_around_transform_gradients_is_refused(option):
    class Wraps:
        @tp.hookimpl(**{option: True})
        def transform_gradients(self, grads_and_vars):
            return (yield)

    with pytest.raises(
        PluginValidationError,
        match=r"plugin 'wraps': transform_gradients cannot be a wrapper; return the new pairs instead",
    ):
        PluginManager().register(Wraps())


def test_trainer_rejects_a_misspelt_hook():
    class Typo:
        @tp.hookimpl
        def on_fit_begin(self, trainer):
            pass

    with pytest.raises(PluginValidationError, match=r"'typo'.*on_fit_begin.*on_fit_start"):
        tp.Trainer(tp.layers.Dense(1), "sgd", "mse", plugins=[Typo()])


def test_hooks_run_in_list_order_and_later_registrations_first():
    log = []
    pm = PluginManager()
    names = pm.register_all([Recorder("a", log), Recorder("b", log), Recorder("c", log)])
    assert names == ["recorder", "recorder-2", "recorder-3"]
    pm.register(Recorder("late", log))
    pm.hook.on_epoch_start(trainer=None, epoch=0)
    assert [label for label, _ in log] == ["late", "a", "b", "c"]


def test_tryfirst_and_trylast_override_the_list_order():
    log = []

    class Last(Recorder):
        @tp.hookimpl(trylast=True)
        def on_epoch_start(self, epoch):
            self.log.append((self.label, epoch))

    class First(Recorder):
        @tp.hookimpl(tryfirst=True)
        def on_epoch_start(self, epoch):
            self.log.append((self.label, epoch))

    pm = PluginManager()
    pm.register_all([Last("last", log), Recorder("middle", log), First("first", log)])
    pm.hook.on_epoch_start(trainer=None, epoch=3)
    assert log == [("first", 3), ("middle", 3), ("last", 3)]


def test_module_plugins_are_registered_by_module_name():
    module = types.ModuleType("my_plugin_module")
    seen = []

    @tp.hookimpl
    def on_fit_start(trainer):
        seen.append(trainer)

    module.on_fit_start = on_fit_start
    pm = PluginManager()
    pm.register(module)
    assert pm.get_plugin("my_plugin_module") is module
    pm.hook.on_fit_start(trainer="T")
    assert seen == ["T"]


def test_builtins_by_short_name_and_config_dict():
    pm = PluginManager()
    names = pm.register_all(["progress", {"type": "clip_gradients", "global_norm": 2.0}, "terminate_on_nan"])
    assert names == ["progress", "clip_gradients", "terminate_on_nan"]
    clip = pm.get_plugin("clip_gradients")
    assert (clip.mode, clip.threshold) == ("global_norm", 2.0)
    for name in manager_module.BUILTIN_PLUGINS:
        assert isinstance(resolve_plugin(name), type), name


def test_unknown_plugin_name_suggests_the_closest():
    with pytest.raises(ValueError, match=r"unknown plugin 'tensorbord' \(did you mean 'tensorboard'\?\)"):
        create_plugin("tensorbord")
    with pytest.raises(ValueError, match="needs a 'type' key"):
        create_plugin({"global_norm": 1.0})
    with pytest.raises(TypeError, match="clip_gradients"):
        create_plugin({"type": "clip_gradients", "globalnorm": 1.0})


def test_a_class_instead_of_an_instance_is_a_clear_error():
    with pytest.raises(
        TypeError, match=r"got the class TerminateOnNaN, not a plugin object.*TerminateOnNaN\(\.\.\.\)"
    ):
        PluginManager().register_all([TerminateOnNaN])


def test_import_path_plugins():
    plugin = create_plugin("tapefit.plugins.terminate_on_nan:TerminateOnNaN")
    assert isinstance(plugin, TerminateOnNaN)
    with pytest.raises(
        ValueError,
        match=r"does not import: module 'tapefit\.plugins\.terminate_on_nan' has no attribute 'Nope'",
    ):
        create_plugin("tapefit.plugins.terminate_on_nan:Nope")


def test_entry_point_plugins(monkeypatch):
    entry = importlib.metadata.EntryPoint(
        name="nan_guard", value="tapefit.plugins.terminate_on_nan:TerminateOnNaN", group="tapefit"
    )

    def fake_entry_points(group):
        return [entry] if group == "tapefit" else []

    monkeypatch.setattr(manager_module.importlib.metadata, "entry_points", fake_entry_points)
    assert "nan_guard" in manager_module.available_plugins()
    pm = PluginManager()
    pm.register_all(["nan_guard"])
    assert isinstance(pm.get_plugin("terminate_on_nan"), TerminateOnNaN)


def test_state_dicts_round_trip_by_name(caplog):
    class Stateful:
        plugin_name = "stateful"

        def __init__(self, value):
            self.value = value

        def state_dict(self):
            return {"value": self.value}

        def load_state_dict(self, state):
            self.value = state["value"]

    pm = PluginManager()
    pm.register_all([Stateful(1), Stateful(2)])
    states = pm.state_dicts()
    assert states == {"stateful": {"value": 1}, "stateful-2": {"value": 2}}
    fresh = PluginManager()
    fresh.register_all([Stateful(0), Stateful(0)])
    fresh.load_state_dicts({**states, "gone": {}})
    assert [fresh.get_plugin(n).value for n in ("stateful", "stateful-2")] == [1, 2]
    assert "gone" in caplog.text


def test_transform_chain_passes_each_result_on_and_none_means_unchanged():
    class Add:
        def __init__(self, amount):
            self.amount = amount

        @tp.hookimpl
        def transform_gradients(self, grads_and_vars):
            return [(g + self.amount, v) for g, v in grads_and_vars]

    class Double:
        @tp.hookimpl
        def transform_gradients(self, grads_and_vars):
            return [(g * 2, v) for g, v in grads_and_vars]

    class Look:
        seen = None

        @tp.hookimpl
        def transform_gradients(self, grads_and_vars, step):
            Look.seen = (step, grads_and_vars[0][0])

    pm = PluginManager()
    pm.register_all([Add(1), Look(), Double(), Add(10)])
    out = pm.transform_gradients(None, 7, [(1, "v")], {})
    assert out == [((1 + 1) * 2 + 10, "v")]
    assert Look.seen == (7, 2)


@pytest.mark.parametrize(
    "result, shown",
    [(lambda pairs: [g for g, _ in pairs], "entry 0 is int"), (lambda pairs: 5, "got int")],
)
def test_a_transform_that_returns_no_pairs_is_named(result, shown):
    # Returning the gradients alone (a common slip) failed later in apply_gradients, naming no plugin.
    class GradsOnly:
        @tp.hookimpl
        def transform_gradients(self, grads_and_vars):
            return result(grads_and_vars)

    pm = PluginManager()
    pm.register_all([GradsOnly()])
    with pytest.raises(
        TypeError, match=rf"plugin 'grads_only': transform_gradients must return .*pairs.*{shown}"
    ):
        pm.transform_gradients(None, 0, [(1, "v")], {})


def test_call_each_runs_every_implementation_even_when_one_raises(caplog):
    log = []

    class Boom:
        @tp.hookimpl
        def on_exception(self, exception):
            raise RuntimeError("cleanup failed")

    class Fine:
        @tp.hookimpl
        def on_exception(self, exception):
            log.append(exception)

    pm = PluginManager()
    pm.register_all([Boom(), Fine()])
    error = ValueError("x")
    pm.call_each("on_exception", trainer=None, exception=error)
    assert log == [error]
    assert "cleanup failed" in caplog.text


def test_a_failed_clean_up_is_one_line_and_its_traceback_is_for_debugging(caplog):
    class Boom:
        @tp.hookimpl
        def on_exception(self):
            raise OSError(28, "No space left on device", "runs/x/own.log")

    pm = PluginManager()
    pm.register_all([Boom()])
    with caplog.at_level(logging.INFO, logger="tapefit"):
        pm.call_each("on_exception", trainer=None, exception=ValueError("x"))
    [record] = caplog.records
    assert record.getMessage().endswith(
        "raised in on_exception: OSError: [Errno 28] No space left on device: 'runs/x/own.log'"
    )
    assert not record.exc_info  # no page of traceback under the run's own error
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="tapefit"):
        pm.call_each("on_exception", trainer=None, exception=ValueError("x"))
    assert caplog.records[0].exc_info  # train --debug shows it
