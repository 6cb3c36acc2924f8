"""The ``train`` command: ``train --config FILE [--set KEY=VALUE ...] [--resume auto|PATH]``.

It reads and validates the config (every problem is one line naming the key, exit status 2,
before anything is built or written), builds the data, model, loss, metrics, optimizer and
plugins, checks that the model runs on the data, and only then creates the run's folder
(``runs/<name>/`` unless ``trainer.output_dir`` says otherwise), writes the resolved config
there and trains. Exit status: 0 done, 2 a bad command line or config, 1 a failure while
training, 130 interrupted (Ctrl-C), 143 SIGTERM, 129 SIGHUP: each of those three stops the run at
its next safe point with an interrupted checkpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import inspect
import json
import logging
import math
import os
import shlex
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from tapefit.cli import config as _config
from tapefit.cli import run_folder as _run_folder
from tapefit.cli.build import (
    Data,
    build_data,
    build_loss,
    build_metrics,
    build_model,
    build_optimizer,
    build_plugins,
    check_ends,
    check_labels,
    check_model_on_data,
    check_monitors,
    check_steps,
    error_text,
    fail,
    grain_workers,
    loss_kind,
    mapped_batch,
    pipeline,
)
from tapefit.cli.config import ConfigError, Schema, default_schema
from tapefit.cli.run_folder import RunFolderError, RunLock
from tapefit.core import random as _random
from tapefit.distributed.world import MPIWorld, launcher_rank, launcher_world_size, shard_problem
from tapefit.plugins.hookspecs import hookimpl
from tapefit.training.boundary import STOP_SIGNALS, raise_terminated
from tapefit.training.step import overridden_step

CONFIG_FILE_NAME = "config.yaml"
"""The resolved config in the run folder."""

MODEL_FILE_NAME = "model.safetensors"
"""The final weights in the run folder (with early_stopping's restore_best_weights, the best ones)."""

EXAMPLES = """\
examples:
  train --config configs/digits_mlp.yaml
      train the digits MLP; outputs go to runs/digits-mlp/
  train --config configs/digits_mlp.yaml --set trainer.epochs=5 --set optimizer.learning_rate=3e-3
      override any key; values are read as YAML (3, 3e-3, true, null, [64, 32])
  train --config configs/digits_mlp.yaml --resume auto --set trainer.epochs=40
      continue from the newest checkpoint of runs/digits-mlp/, up to epoch 40
  train --config configs/spirals_mlp.yaml --print-config
      show the config with every default filled in, then exit
  python -m tapefit train --config my_run.toml --set name=try-2 --set plugins[0].every_n_epochs=5

exit status: 0 done, 2 bad command line or config, 1 failure while training, 130 interrupted
  (Ctrl-C), 143 SIGTERM, 129 SIGHUP (each saves an interrupted checkpoint first)
watch a run: tensorboard --logdir runs (TensorBoard itself: pip install tensorboard)
"""

logger = logging.getLogger("tapefit")


# --------------------------------------------------------------------------- the schema of configs


@dataclass
class Run:
    """Everything ``train`` built from a config, ready to fit."""

    config: dict[str, Any]
    data: Data
    model: Any
    loss: Any
    metrics: list[Any]
    optimizer: Any
    plugins: list[Any]
    output_dir: Path
    trainer: Any
    resume_from: Path | None
    resume_contents: dict[str, Any] | None = None
    lock: RunLock | None = None
    resume_note: str | None = None

    @property
    def resume_epoch(self) -> int:
        """The epochs the checkpoint resumed from has done (0 for a fresh run)."""
        state = (self.resume_contents or {}).get("trainer", {})
        return int(state.get("epoch", 0))


def _checkpoint_folder(plugins: list[Any], output_dir: Path) -> Path | None:
    """The folder of the first plugin that saves checkpoints (``checkpoint_folder``, hookspecs.py)."""
    for plugin in plugins:
        folder = getattr(plugin, "checkpoint_folder", None)
        if callable(folder):
            return Path(folder(output_dir))
    return None


def find_resume_point(resume: str, plugins: list[Any], output_dir: Path) -> tuple[Path | None, str | None]:
    """The checkpoint ``--resume`` means: ``auto`` the run's newest (or ``None``), else a path;
    and a note when ``auto`` could not follow the ``last`` pointer and took the newest intact one."""
    from tapefit import checkpointing as _checkpoint

    if resume == "auto":
        folder = _checkpoint_folder(plugins, output_dir)
        if folder is None:
            raise ConfigError(
                "--resume auto: the config has no checkpoint plugin, so there is nothing to resume"
            )
        try:
            return _checkpoint.resume_point(folder)
        except (OSError, ValueError) as e:
            raise ConfigError(
                f"--resume auto: {e}; not starting over on top of the run (repair the pointer, or start "
                "afresh with --overwrite)"
            ) from e
    try:  # read and verified by _load_resume, right after
        path = _checkpoint.resolve_checkpoint(resume)
    except (OSError, ValueError) as e:
        raise ConfigError(f"--resume: {e}") from e
    return path, None


def _load_resume(path: Path, model: Any, config: dict[str, Any], data: Data) -> dict[str, Any]:
    """Reads the checkpoint at ``path`` once and checks that it can continue this config;
    returns its contents (the run reads them from here on)."""
    from tapefit import checkpointing as _checkpoint
    from tapefit.checkpointing.validate import check_checkpoint, check_fits
    from tapefit.data.loader import BatchLoader
    from tapefit.data.sources import as_source, fit_kind

    try:
        contents = _checkpoint.load_checkpoint(path)
        check_checkpoint(contents, model=model, num_samples=len(data.x_train), source=path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"--resume: {e}") from e
    settings = config["trainer"]
    if data.stream is not None:
        source = as_source(data.stream)
    else:
        source = BatchLoader(
            data.x_train,
            data.y_train,
            batch_size=settings["batch_size"],
            shuffle=settings["shuffle"],
            drop_last=settings["drop_last"],
        )
    try:
        check_fits(contents, fit_kind(source), path)
    except ValueError as e:
        raise ConfigError(f"--resume: {e}") from e
    scratch = build_optimizer(copy.deepcopy(config["optimizer"]))
    try:  # a fresh optimizer of the config's kind takes the saved state, or says why not
        if scratch is None:  # the model's own optimizers are checked by fit, once its step built them
            if contents.get("optimizer"):
                raise ValueError("the config has no optimizer, the checkpoint holds one's state")
        else:
            scratch.set_state(contents.get("optimizer", {}))
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(
            f"--resume: {path} holds the state of another optimizer than the config's "
            f"({str(e).strip().splitlines()[0]})"
        ) from e
    return contents


def _check_plugin_states(contents: dict[str, Any], path: Path, trainer: Any) -> None:
    """Has each plugin of the run check its state in the checkpoint ``contents`` (read from
    ``path``; by the names the trainer registered them under), so that a bad one is refused
    before training."""
    from tapefit.checkpointing.validate import check_plugin_states

    try:
        states = contents["plugins"]
        check_plugin_states(states, trainer.plugins.list_name_plugin(), model=trainer.model, source=path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"--resume: {e}") from e


def resolve(args: argparse.Namespace, schema: Schema) -> dict[str, Any]:
    """Reads the config file, applies ``--set`` and validates it; calls nothing the config names."""
    raw = _config.load_config_file(args.config)
    _config.search_beside(args.config)
    raw = _config.apply_overrides(raw, args.set)
    stem = Path(args.config).stem.replace("_", "-")
    return _config.resolve_config(raw, schema, default_name=stem)


def prepare(args: argparse.Namespace) -> Run:
    """Reads, validates and builds everything; raises ``ConfigError`` before anything is written."""
    from tapefit.training.trainer import Trainer

    schema = default_schema()
    config = resolve(args, schema)
    _random.set_seed(config["seed"])
    data = build_data(config["data"], schema)
    if config["loss"] is not None:
        check_labels(loss_kind(config["loss"], schema), data)
    model = build_model(config, schema, data)
    loss = build_loss(config["loss"], schema)
    metrics = build_metrics(config["metrics"], schema, loss)
    optimizer = build_optimizer(config["optimizer"])
    plugins = build_plugins(config["plugins"])
    # A model's own train_step decides what it is run on and which keys its logs have: it is
    # checked by its first step, not here.
    own_step = overridden_step(model, "train_step") is not None
    if not own_step:
        check_monitors(plugins, metrics, data)
    settings = config["trainer"]
    checked = _stream(config, data)
    if not own_step:
        check_model_on_data(model, loss, loss_kind(config["loss"], schema), checked, metrics)
    check_steps(settings, data)
    if config["data"]["workers"] or config["data"]["map"] is not None:
        data.description += f", read by {config['data']['workers']} worker processes"
    if data.stream is not None and config["data"]["type"] == "grain":
        pass  # a grain source makes its own batches: nothing to check against batch_size
    elif settings["drop_last"] and settings["batch_size"] > len(data.x_train):
        fail(
            "trainer.batch_size",
            f"{settings['batch_size']} is more than the {len(data.x_train)} training samples, and "
            "trainer.drop_last is true, so there would be no batch",
        )
    problem = shard_problem(
        len(data.x_train), settings["batch_size"], settings["drop_last"], launcher_world_size()
    )
    if problem is not None and config["data"]["type"] != "grain":
        fail("trainer.batch_size", problem)
    output_dir = Path(config["trainer"]["output_dir"] or Path("runs") / config["name"])
    try:
        if output_dir.exists() and not output_dir.is_dir():
            fail("trainer.output_dir", f"{str(output_dir)!r} exists and is not a folder")
    except (OSError, ValueError) as e:  # a name too long, a NUL byte: as the lock would say
        _cannot_use(output_dir, e)
    # Locked before a checkpoint is looked for or a folder judged, so that what is checked
    # stays true while this run lives; a second train of the same folder stops here. Under an
    # MPI launcher rank 0 alone owns the folder (the others write nothing to it).
    chief = launcher_rank() == 0
    lock = _lock(output_dir) if chief else None
    try:
        resume_from, resume_contents, resume_note = None, None, None
        if chief:
            _run_folder.check_no_links(output_dir)
        if args.resume is not None:
            resume_from, resume_note = find_resume_point(args.resume, plugins, output_dir)
            if resume_from is not None:
                resume_contents = _load_resume(resume_from, model, config, data)
        if not chief:
            pass
        elif resume_from is None:
            _check_output_dir(output_dir, args)
        else:
            _check_resume_target(resume_from, args.resume, plugins, output_dir)
        try:  # registering the plugins checks their hooks (a misspelt hook name is an error)
            trainer = Trainer(
                model,
                optimizer,
                loss,
                metrics=metrics,
                plugins=plugins,
                output_dir=output_dir,
                config=config,
                compile=config["trainer"].get("compile", False),
                threads=config["trainer"].get("threads"),
            )
        except Exception as e:
            raise ConfigError(f"plugins: {error_text(e)}", "plugins") from e
        if resume_from is not None and resume_contents is not None:
            _check_plugin_states(resume_contents, resume_from, trainer)
    except RunFolderError as e:
        if lock is not None:
            lock.release(undo=True)
        raise ConfigError(str(e)) from None
    except BaseException:
        if lock is not None:
            lock.release(undo=True)
        raise
    return Run(
        config,
        data,
        model,
        loss,
        metrics,
        optimizer,
        plugins,
        output_dir,
        trainer,
        resume_from,
        resume_contents,
        lock,
        resume_note,
    )


def _stream(config: dict[str, Any], data: Data) -> Data:
    """Makes ``data.stream`` when the config streams the data (grain, workers, a map); returns
    what the model is checked on: a map's first batch when there is a map, else ``data``."""
    settings = config["trainer"]
    if config["data"]["type"] == "grain":
        check_ends(settings, data)
        data.stream = grain_workers(data.stream, config["data"])
    elif config["data"]["workers"] or config["data"]["map"] is not None:
        data.stream = pipeline(data, config["data"], settings)
        if config["data"]["map"] is not None:
            return mapped_batch(data, config["data"])
    return data


def _lock(output_dir: Path) -> RunLock:
    """Takes the run folder's lock, or says in one line why it cannot be taken."""
    try:
        return RunLock.acquire(output_dir)
    except RunFolderError as e:
        raise ConfigError(str(e)) from None
    except (OSError, ValueError) as e:
        _cannot_use(output_dir, e)


def _cannot_use(output_dir: Path, error: OSError | ValueError) -> NoReturn:
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    shown = str(output_dir) if len(str(output_dir)) <= 80 else str(output_dir)[:77] + "..."
    fail("trainer.output_dir", f"cannot make or lock the run folder {shown!r}: {reason}")


def _check_output_dir(output_dir: Path, args: argparse.Namespace) -> None:
    if not _run_folder.entries(output_dir):
        return
    if not _run_folder.is_run_folder(output_dir):
        what = "--resume auto: it has no checkpoint, and " if args.resume == "auto" else ""
        raise ConfigError(
            f"{what}{output_dir} holds files and is not a tapefit run folder (train did not make it); "
            "not writing into it: pick another name (--set name=...) or trainer.output_dir"
        )
    if args.resume == "auto":
        return  # asked to continue, and nothing to continue from: start afresh in the run folder
    if not args.overwrite:
        raise ConfigError(
            f"{output_dir} already holds a run; continue it with --resume auto, start over with --overwrite, "
            "or pick another name (--set name=...)"
        )


def _check_resume_target(resume_from: Path, resume: str, plugins: list[Any], output_dir: Path) -> None:
    """A checkpoint from elsewhere may continue in an empty folder, never over another run's files."""
    own = [output_dir, _checkpoint_folder(plugins, output_dir)]
    if any(folder is not None and resume_from.resolve().is_relative_to(folder.resolve()) for folder in own):
        return
    if _run_folder.entries(output_dir):
        raise ConfigError(
            f"--resume {resume}: {output_dir} already holds another run and the checkpoint is not one of its "
            "own; continue it in a new folder (--set name=...)"
        )


# --------------------------------------------------------------------------- training and the report


def _format_logs(logs: Mapping[str, float]) -> str:
    # loss first, then the metrics, then their validation twins, whatever order they came in
    order = sorted(logs, key=lambda k: (k.startswith("val_"), k.removeprefix("val_") != "loss"))
    logs = {k: logs[k] for k in order}
    return "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in logs.items())


def train(run: Run, args: argparse.Namespace, out: Any) -> int:
    """Creates the run folder, writes the resolved config, fits, and prints the summary."""
    chief = launcher_rank() == 0  # under an MPI launcher rank 0 alone writes the run's files
    if chief and run.resume_from is None and args.overwrite and _run_folder.is_run_folder(run.output_dir):
        kept = _run_folder.remove_recorded(run.output_dir)  # the lock stays: this run holds it
        if kept:
            print(
                f"train: --overwrite kept what no run wrote in {run.output_dir}: {', '.join(kept)}", file=out
            )
    trainer = run.trainer
    settings = run.config["trainer"]
    print(f"train: {run.config['name']}: {run.data.description}", file=out)
    contents = run.resume_contents
    if contents is not None:
        finished = trainer.finished_by(contents)
        if finished is not None:
            print(
                f"train: {run.resume_from}: {finished}; nothing to train (to train on anyway, remove "
                "that plugin from the config)",
                file=out,
            )
            return 0
    if run.resume_from is not None and run.resume_epoch >= settings["epochs"]:
        print(f"train: resuming from {run.resume_from}", file=out)
        print(
            f"train: the checkpoint has {run.resume_epoch} epochs done and trainer.epochs is "
            f"{settings['epochs']}: nothing to train (train longer with --set trainer.epochs=N)",
            file=out,
        )
        return 0  # and nothing written: the run folder stays as the finished run left it
    if chief:
        _claim(run)
    if run.resume_note is not None:
        print(f"train: --resume auto: {run.resume_note}", file=out)
    if contents is not None:
        _say_the_learning_rate_is_restored(contents, args, out)
    if run.resume_from is None and args.resume == "auto":
        folder = _checkpoint_folder(run.plugins, run.output_dir)
        print(
            f"train: --resume auto: no checkpoint in {folder} yet, so training starts from the beginning",
            file=out,
        )
    if run.resume_from is not None:
        print(f"train: resuming from {run.resume_from}", file=out)
    started = time.perf_counter()
    streamed = run.data.stream is not None
    recorder = _RunFolderRecorder(run.output_dir) if chief else None
    if recorder is not None:
        trainer.plugins.register(recorder, name="run_folder")
    try:
        # the trainer section is derived from fit's signature (and Trainer's): its fit keys go to fit
        fit_keys = inspect.signature(trainer.fit).parameters
        history = trainer.fit(
            run.data.stream if streamed else run.data.x_train,
            None if streamed else run.data.y_train,
            validation_data=run.data.validation,
            resume_from=run.resume_from,
            **{key: value for key, value in settings.items() if key in fit_keys},
        )
    finally:
        if recorder is not None:
            recorder.record()
    seconds = time.perf_counter() - started
    final = {k: v[-1] for k, v in history.history.items() if v}
    epochs = len(history.epoch)  # a custom train_step's logs may have no loss
    trained = max(epochs - run.resume_epoch, 0) if run.resume_from is not None else epochs
    total = f" ({epochs} in all)" if run.resume_from is not None else ""
    failure = _failure(run.plugins, final)
    if failure is None and chief:
        _run_folder.record(run.output_dir, [MODEL_FILE_NAME])
        _export(run.model, run.output_dir / MODEL_FILE_NAME)
    print(
        f"train: {'stopped' if failure else 'done'}: {run.config['name']}, {trained} "
        f"epoch{'' if trained == 1 else 's'} in {seconds:.1f} s{total}",
        file=out,
    )
    if final:
        print(f"  final   {_format_logs(final)}", file=out)
    if chief:
        _print_outputs(run, out)
    if failure is not None:
        if chief:
            print(f"{args.prog}: error: {failure}", file=sys.stderr)
        return 1
    return 0


def _claim(run: Run) -> None:
    """Marks the run folder as train's (it is empty, or holds the run this one resumes) and
    writes the resolved config into it."""
    from tapefit.checkpointing import atomic_write

    folder = run.output_dir
    if not _run_folder.is_run_folder(folder):
        _run_folder.record(folder, _run_folder.entries(folder))
    _run_folder.record(folder, [CONFIG_FILE_NAME])
    text = _config.dump_config(run.config).encode("utf-8")
    atomic_write(folder / CONFIG_FILE_NAME, lambda f: f.write(text))


class _RunFolderRecorder:
    """Records in the run folder's marker the entries that appear in it while the run trains
    (the plugins' logs, checkpoints, a user plugin's files), once the plugins have started and
    at every epoch's end, so that ``--overwrite`` knows them even after a SIGKILL."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.before = set(_run_folder.entries(folder))

    def record(self) -> None:
        with contextlib.suppress(OSError):  # bookkeeping never ends a run; the next record retries
            _run_folder.record(self.folder, set(_run_folder.entries(self.folder)) - self.before)

    @hookimpl(trylast=True)
    def on_fit_start(self) -> None:
        self.record()

    @hookimpl(trylast=True)
    def on_epoch_end(self) -> None:
        self.record()


def _say_the_learning_rate_is_restored(
    contents: Mapping[str, Any], args: argparse.Namespace, out: Any
) -> None:
    """A resumed optimizer takes its learning rate from the checkpoint (a plugin such as
    reduce_lr_on_plateau may have changed it), not from the config: one line when ``--set``
    asked for another one."""
    if not any(item.partition("=")[0].strip() == "optimizer.learning_rate" for item in args.set):
        return
    saved = contents.get("optimizer", {}).get("learning_rate")
    if isinstance(saved, (int, float)):
        print(
            "train: --set optimizer.learning_rate is not used on a resume: the optimizer continues with the "
            f"checkpoint's learning rate, {float(saved):g}",
            file=out,
        )


# What --export writes, by the file name's suffix.
EXPORT_SUFFIXES = (".safetensors", ".tapefit", ".onnx")


def export(run: Run, path: Path, out: Any) -> int:
    """``train --export PATH``: the checkpoint ``--resume`` chose, as the weights alone
    (``.safetensors``), a whole-model file (``.tapefit``: the architecture, the weights, the
    optimizer with its state, the loss and the metrics; ``tp.models.load_model`` reads it) or an
    ONNX graph of the model's forward pass (``.onnx``)."""
    try:
        if run.resume_from is None or run.resume_contents is None:
            raise ConfigError("--export: there is no checkpoint to export (the run has not saved one yet)")
        try:
            if overridden_step(run.model, "train_step") is not None and not _built(run.model):
                # Only its step knows what each layer sees (a GAN's generator its noise).
                batch = run.data.x_train[: run.config["trainer"]["batch_size"]]
                run.trainer._build_by_step((batch, None, None))
            run.model.load_state_dict(run.resume_contents["model"])
            if path.suffix == ".tapefit":
                if run.optimizer is not None:
                    run.optimizer.set_state(run.resume_contents["optimizer"])
                run.trainer.save(path)
            elif path.suffix == ".onnx":
                run.model.export(path, format="onnx")
            else:
                _export(run.model, path)
        except (OSError, ValueError, ImportError) as e:
            raise ConfigError(f"--export: {error_text(e)}") from e
    finally:
        if run.lock is not None:
            run.lock.release(undo=True)  # export writes nothing into the run folder
    what = {".tapefit": "the model", ".onnx": "the model (ONNX)"}.get(path.suffix, "the weights")
    print(f"train: exported {what} of {run.resume_from} to {path}", file=out)
    return 0


def _built(model: Any) -> bool:
    return all(getattr(module, "built", True) for module in [model, *getattr(model, "submodules", [])])


def _failure(plugins: list[Any], final: Mapping[str, float]) -> str | None:
    """Why the fit failed (a plugin's ``failure``, or a non-finite final loss), or ``None``."""
    for plugin in plugins:
        failure = getattr(plugin, "failure", None)
        if isinstance(failure, str) and failure:
            return failure
    loss = final.get("loss")
    if isinstance(loss, float) and not math.isfinite(loss):
        return "the training loss was not finite"
    return None


def _export(model: Any, path: Path) -> None:
    """Writes the model's weights to ``path`` (``.safetensors``), when the model can save them."""
    if callable(getattr(model, "save_weights", None)):
        model.save_weights(path)


def _print_outputs(run: Run, out: Any) -> None:
    from tapefit.checkpointing import latest_checkpoint

    folder = run.output_dir
    print(f"  outputs {folder}/", file=out)
    known = {
        CONFIG_FILE_NAME: "resolved config",
        MODEL_FILE_NAME: "the trained weights (Module.load_weights)",
        "tensorboard": _tensorboard_advice(folder.parent),
        "checkpoints": "checkpoints",
    }
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        what = known.get(entry.name) or ("CSV log" if entry.suffix == ".csv" else "")
        print(f"    {entry.name + ('/' if entry.is_dir() else ''):<18}{what}", file=out)
    checkpoints = _checkpoint_folder(run.plugins, folder)
    last = latest_checkpoint(checkpoints) if checkpoints is not None else None
    if last is not None:
        print(f"  last checkpoint {last} (continue with --resume auto)", file=out)


def _tensorboard_advice(logdir: Path) -> str:
    """How to watch the TensorBoard event files in ``logdir``, with what is installed here."""
    command = f"tensorboard --logdir {shlex.quote(str(logdir))}"
    if shutil.which("tensorboard") is not None:
        return f"TensorBoard ({command})"
    return f"TensorBoard (to watch: pip install tensorboard, then {command})"


def _what_was_saved(run: Run) -> str:
    """Where an interrupted run can continue from, in words."""
    from tapefit.checkpointing import latest_checkpoint

    folder = _checkpoint_folder(run.plugins, run.output_dir)
    if folder is None:
        return "no checkpoint was saved (the run has no checkpoint plugin)"
    saved = [p.interrupted_path for p in run.plugins if getattr(p, "interrupted_path", None) is not None]
    if saved:
        return f"the state was saved to {saved[0]} (continue with --resume auto)"
    last = latest_checkpoint(folder) if folder is not None else None
    if last is None:
        return "no checkpoint was saved yet"
    return f"the newest checkpoint is {last} (continue from it with --resume auto)"


# --------------------------------------------------------------------------- the command line


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(prog: str = "train") -> argparse.ArgumentParser:
    """The argument parser of ``train``."""
    parser = _Parser(
        prog=prog,
        description="Train a model from a config file (YAML or TOML).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config", required=True, metavar="FILE", help="the config file (.yaml, .yml or .toml)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key (dotted path, lists by index: plugins[1].keep_last=5); repeatable",
    )
    parser.add_argument(
        "--resume",
        metavar="auto|PATH",
        help="continue from a checkpoint: 'auto' for the run's newest, or a checkpoint file or folder",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help=(
            "print the resolved config (defaults filled in) and exit; it is validated, but nothing it names "
            "is built or called, so a built-in model's output_units stay null until a run reads the data"
        ),
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="delete an earlier run of the same name first"
    )
    parser.add_argument(
        "--export",
        metavar="PATH",
        help=(
            "write the checkpoint that --resume names (default: the run's newest) to PATH and exit without "
            "training: a .safetensors file holds the model weights, a .tapefit file the whole model (its "
            "architecture, weights, optimizer, loss and metrics; tp.models.load_model reads it), a .onnx "
            "file the model's forward pass for serving"
        ),
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logging")
    from tapefit import __version__

    parser.add_argument("--version", action="version", version=f"tapefit {__version__}")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "train") -> int:
    """Runs ``train`` with ``argv`` (default ``sys.argv[1:]``) and returns the exit status."""
    parser = build_parser(prog)
    try:
        args = parser.parse_args(argv)
        args.prog = prog
        if args.overwrite and args.resume is not None:
            parser.error("--overwrite deletes the run that --resume would continue; give one of them")
        if args.export is not None:
            if args.overwrite or args.print_config:
                parser.error(
                    "--export writes a checkpoint's weights and trains nothing; drop --overwrite/--print-config"
                )
            if not args.export.endswith(EXPORT_SUFFIXES):
                parser.error(
                    f"--export: the file name must end in {' or '.join(map(repr, EXPORT_SUFFIXES))}, "
                    f"got {args.export!r}"
                )
            args.resume = args.resume or "auto"
    except SystemExit as e:  # --help, --version and usage errors
        return e.code if isinstance(e.code, int) else 2
    # tapefit's warnings (a plugin that failed to clean up, ...) go to stderr while train runs;
    # the handler is removed afterwards, so calling main() from Python leaves logging as it was.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"{prog}: %(levelname)s: %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    # Under an MPI launcher only rank 0 prints; the others speak only when they fail.
    chief = launcher_rank() == 0
    logger.setLevel((logging.DEBUG if args.debug else logging.INFO) if chief else logging.ERROR)
    in_main_thread = threading.current_thread() is threading.main_thread()
    handlers = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS} if in_main_thread else {}
    try:
        # SIGTERM (a scheduler's, docker stop's) and SIGHUP stop the run as Ctrl-C does.
        for signum in handlers:
            if signum != signal.SIGINT:
                signal.signal(signum, raise_terminated)
        if chief:
            return _main(args, prog, sys.stdout)
        with open(os.devnull, "w") as quiet:
            return _main(args, prog, quiet)
    except KeyboardInterrupt as e:  # between a first Ctrl-C and its handler
        _ignore_interrupts()
        what, status = _stopped(e)
        if chief:  # under a launcher every rank stops: rank 0 says so for all
            print(f"{prog}: {what}", file=sys.stderr)
        return status
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        for signum, previous in handlers.items():
            if previous is not None:
                signal.signal(signum, previous)


def command(argv: Sequence[str] | None = None, prog: str = "train") -> int:
    """``main`` for a process that exits with its status: once it returns, a late Ctrl-C is
    ignored, so that it cannot turn the exit into a traceback."""
    status = main(argv, prog)
    _ignore_interrupts()
    return status


def _main(args: argparse.Namespace, prog: str, out: Any) -> int:
    try:
        if args.print_config:
            out.write(_config.dump_config(resolve(args, default_schema())))
            return 0
        try:
            run = prepare(args)
        except ConfigError as e:
            _, chief_started, _ = _agree_on_start(ok=False)
            e.speak = launcher_rank() == 0 or chief_started  # type: ignore[attr-defined]
            raise
        agreed = fingerprint(run) if launcher_world_size() > 1 else None
        started, _, mismatch = _agree_on_start(ok=True, fingerprint=agreed)
        if not started:
            if run.lock is not None:
                run.lock.release(undo=True)
            if mismatch is not None:
                raise mismatch  # this rank speaks for the ranks that differ
            return 2  # another rank could not start, or runs another config, and said why
        if args.export is not None:
            return export(run, Path(args.export), out)
    except ConfigError as e:
        if args.debug:
            traceback.print_exc()
        where = f"{args.config}: " if e.key is not None else ""  # a key's message names its file
        if getattr(e, "speak", True):  # under a launcher rank 0 speaks for the ranks that agree
            rank = (
                f"rank {launcher_rank()}: "
                if launcher_rank() and not getattr(e, "names_ranks", False)
                else ""
            )
            print(f"{prog}: error: {rank}{where}{e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        _ignore_interrupts()
        what, status = _stopped(e)
        if launcher_rank() == 0:  # under a launcher every rank stops: rank 0 says so for all
            print(f"{prog}: {what} before training started", file=sys.stderr)
        return status
    try:
        return train(run, args, out)
    except KeyboardInterrupt as e:
        _ignore_interrupts()
        what, status = _stopped(e)
        newline = "\n" if status == 130 else ""  # after the terminal's ^C
        if launcher_rank() == 0:  # the ranks agreed to stop (Trainer.fit): rank 0 says so for all
            print(f"{newline}{prog}: {what}; {_what_was_saved(run)}", file=sys.stderr)
        return status
    except Exception as e:
        if args.debug:
            traceback.print_exc()
        print(f"{prog}: error while training: {error_text(e)} (--debug shows the traceback)", file=sys.stderr)
        return 1
    finally:
        if run.lock is not None:
            run.lock.release()


def _agree_on_start(
    ok: bool, fingerprint: dict[str, Any] | None = None
) -> tuple[bool, bool, ConfigError | None]:
    """Under an MPI launcher, whether every rank could start and whether rank 0 could (each
    rank checks the config and data itself), so that no rank is left waiting for the others
    at a collective; in one process, ``(ok, ok, None)``.

    When every rank could start, they compare their ``fingerprint`` (the resolved config's
    key paths and values, and the data's shapes) with rank 0's: a rank that runs another
    config would wait at a collective whose sizes differ, or train on other data without a
    word. The lowest rank that differs gets the ``ConfigError`` that names the first key that
    differs; every rank then does not start.
    """
    if launcher_world_size() <= 1:
        return ok, ok, None
    world = MPIWorld()
    failed = world.allreduce_sum(np.array([not ok, not ok and world.is_chief], np.float64), "start-up check")
    if failed[0] != 0 or fingerprint is None:
        return bool(failed[0] == 0), bool(failed[1] == 0), None
    chief = world.broadcast_object(fingerprint, "start-up config check")
    difference = _first_difference(chief["config"], fingerprint["config"])
    if difference is None and chief["--resume"] != fingerprint["--resume"]:
        difference = ("--resume", _config.show(chief["--resume"]), _config.show(fingerprint["--resume"]))
    if difference is None and chief["data"] != fingerprint["data"]:
        difference = ("data", chief["data"], fingerprint["data"])
    flags = np.zeros(world.size, np.float64)
    flags[world.rank] = difference is not None
    differ = np.flatnonzero(world.allreduce_sum(flags, "start-up config check"))
    if not differ.size:
        return True, True, None
    if world.rank != differ[0]:
        return False, True, None
    assert difference is not None
    key, theirs, mine = difference
    more = "" if differ.size == 1 else f"; ranks {', '.join(map(str, differ))} differ from rank 0"
    error = ConfigError(
        f"{key}: differs between the MPI ranks (rank 0 has {theirs}, rank {world.rank} has {mine}{more}); "
        "every rank must run the same config",
        None if key in ("--resume", "data") else key,
    )
    error.names_ranks = True  # type: ignore[attr-defined]
    return False, True, error


def fingerprint(run: Run) -> dict[str, Any]:
    """What the ranks of a distributed run must agree on: the resolved config (as JSON values),
    the checkpoint they resume from, and the data's sizes, shapes and dtypes."""
    data = run.data
    shapes = [("training", data.x_train, data.y_train)]
    if isinstance(data.validation, tuple) and len(data.validation) == 2:
        shapes.append(("validation", *data.validation))
    described = "; ".join(
        f"{len(x)} {part} samples of shape {tuple(np.shape(x)[1:])} ({getattr(x, 'dtype', '?')}), "
        f"labels {tuple(np.shape(y)[1:])} ({getattr(y, 'dtype', '?')})"
        for part, x, y in shapes
    )
    config = json.loads(json.dumps(_config.plain(run.config), default=repr))
    resume = None if run.resume_from is None else str(run.resume_from)
    return {"config": config, "--resume": resume, "data": described}


def _first_difference(chief: Any, mine: Any, key: str = "") -> tuple[str, str, str] | None:
    """The first key path (in rank 0's order) whose value differs between rank 0's ``chief``
    and this rank's ``mine``: ``(key, rank 0's value, this rank's value)``, or ``None``.

    Sections are compared key by key, lists of sections entry by entry
    (``plugins[0].timeout``); any other value, a list of numbers too
    (``model.hidden_units``), as a whole.
    """
    if _canonical(chief) == _canonical(mine):
        return None
    if isinstance(chief, dict) and isinstance(mine, dict):
        for name in [*chief, *(k for k in mine if k not in chief)]:
            inner = f"{key}.{name}" if key else str(name)
            if name not in chief or name not in mine:
                shown = [
                    _config.show(side[name]) if name in side else "no such key" for side in (chief, mine)
                ]
                return inner, shown[0], shown[1]
            found = _first_difference(chief[name], mine[name], inner)
            if found is not None:
                return found
    both_lists = isinstance(chief, list) and isinstance(mine, list)
    if both_lists and any(isinstance(v, dict) for v in [*chief, *mine]):
        for i, (a, b) in enumerate(zip(chief, mine)):
            found = _first_difference(a, b, f"{key}[{i}]")
            if found is not None:
                return found
        return key, _entries(len(chief)), _entries(len(mine))
    return key, _config.show(chief), _config.show(mine)


def _entries(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _stopped(interrupt: KeyboardInterrupt) -> tuple[str, int]:
    """What stopped the run, in words, and the exit status: 130 for Ctrl-C, 128 + the signal's
    number for SIGTERM (143) and SIGHUP (129), as a shell reports a process they ended."""
    signum = getattr(interrupt, "signum", signal.SIGINT)
    if signum == signal.SIGINT:
        return "interrupted", 130
    return f"stopped by {signal.Signals(signum).name}", 128 + signum


def _ignore_interrupts() -> None:
    """From the first Ctrl-C (or SIGTERM, SIGHUP) on, ``train`` is only reporting and leaving: a
    second one (within milliseconds, as an impatient double press) must not turn the exit into
    a traceback. ``main`` restores the handlers before it returns."""
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)


if __name__ == "__main__":
    sys.exit(main())
