"""Checks tapefit's exact-resume promise over a matrix of small training runs.

Run ``python scripts/resume_matrix.py`` (about 5 minutes on 2 cores), ``--quick`` for a
subset of about a minute, ``--seed N`` for another sample of cases, ``--list`` to print the
cases without running them, ``--only TEXT`` to run the cases whose line contains ``TEXT`` and
``--keep`` to keep each case's folder (checkpoints, CSV files, each process's output).

Every case runs three fresh Python processes (this script with ``--phase``), so that no state
in memory can carry over from one run to the next:

1. ``straight``: the fit for its N epochs, with fixed seeds;
2. ``interrupt``: the same fit, interrupted at the case's split point;
3. ``resume``: the same fit resumed from that run's checkpoint folder, up to epoch N.

The results of 1 and 3 must be equal bit for bit: the model's ``state_dict``, the optimizer's
``get_state()``, ``History.history`` and ``History.epoch``, the step count, the states of the
plugins other than ``checkpoint``, and the CSV file when ``csv_logger`` is in the run. Each case
prints one ``PASS`` or ``FAIL`` line (naming the fields that differed and the first difference
of each), then a summary ``N passed, M failed``; the exit status is 1 when any case failed.

The split points (``Split`` makes them): the first fit trains only k epochs (``epoch_end``); a
plugin sets ``stop_training`` after a step or an epoch (``stop_*``); a plugin raises in
``on_train_batch_end``, ``transform_gradients`` or ``on_epoch_end``, or the loss raises
(``raise_*``; ``first``: the raising plugin runs before the others); the process ends with
``os._exit`` (as SIGKILL) and resumes from the last ``every_n_steps`` checkpoint
(``kill_steps``); the driver sends SIGINT while a step's update or an epoch's end runs
(``sigint_*``, the pinned cases). Two third-party plugins count batches and epochs and log the
counts, one keeping them by ``state_dict`` (``counter``), one by the checkpoint hooks
(``hook_counter``).

The ``gan`` cases (pinned, ``--only gan``) train the model of ``configs/gan_digits.yaml`` (its
``model`` section, ``examples.gan:GAN``) on digits, as ``train`` does: no optimizer and no loss
in the trainer, the model's own train_step with its two optimizers, two updates per step; a
SIGINT in the middle of an epoch arrives between them.

The cases are a seeded, spread-out sample of the axes below (every value of every axis comes
round about equally often, not the full product), plus the pinned SIGINT cases. A plain Python
iterable cannot save its position (README, "Your own data"), so generator cases only split
where its stream starts an epoch anyway. BLAS runs on one thread per process unless
``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS`` is set.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import json
import math
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this checkout's tapefit, also when run from elsewhere

import tapefit as tp  # noqa: E402
from tapefit.checkpointing import load_checkpoint, save_checkpoint  # noqa: E402

TRAIN, VALIDATION = 45, 12  # samples
CLASSES = 3
KILLED = 17  # the exit status of a process the kill_steps split ended with os._exit
SIGINT_WAIT = 2.0  # seconds a SIGINT case sleeps inside the trainer's held section
TIMEOUT = 300  # seconds for one process
GAN_CONFIG = ROOT / "configs" / "gan_digits.yaml"

# -- the axes --------------------------------------------------------------------------------


class UserModel(tp.Module):
    """A user's Module subclass: its own Variable next to lazily built layers."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = tp.layers.Dense(12, activation="tanh")
        self.dropout = tp.layers.Dropout(0.25)
        self.out = tp.layers.Dense(CLASSES)
        self.temperature = tp.Variable(1.5, name="temperature")

    def call(self, x: Any, training: bool = False) -> Any:
        return self.out(self.dropout(self.hidden(x), training=training)) / self.temperature


def _sequential(*layers: Any) -> Any:
    return tp.layers.Sequential(list(layers))


L = tp.layers
MODELS = {  # name: (input kind, builder)
    "mlp": ("vector", lambda: _sequential(L.Dense(16, "relu", kernel_regularizer="l2"), L.Dense(CLASSES))),
    "dropout": ("vector", lambda: _sequential(L.Dense(16, "relu"), L.Dropout(0.3), L.Dense(CLASSES))),
    "batchnorm": ("vector", lambda: _sequential(L.Dense(16), L.BatchNormalization(), L.Activation("relu"), L.Dense(CLASSES))),
    "layernorm": ("vector", lambda: _sequential(L.Dense(16), L.LayerNormalization(), L.Activation("relu"), L.Dense(CLASSES))),
    "embedding": ("tokens", lambda: _sequential(L.Embedding(20, 8), L.GlobalAveragePooling1D(), L.Dense(CLASSES))),
    "cnn": ("image", lambda: _sequential(L.Conv2D(4, 3, activation="relu"), L.MaxPool2D(2), L.Flatten(), L.Dense(CLASSES))),
    "lstm": ("sequence", lambda: _sequential(L.LSTM(6), L.Dense(CLASSES))),
    "gru": ("sequence", lambda: _sequential(L.GRU(6, return_sequences=True), L.GlobalAveragePooling1D(), L.Dense(CLASSES))),
    "module": ("vector", UserModel),
}  # fmt: skip


def gan_from_config() -> Any:
    """The model ``configs/gan_digits.yaml`` names, built from its ``model`` section."""
    from tapefit.cli.config import load_config_file
    from tapefit.core.naming import import_object

    section = dict(load_config_file(GAN_CONFIG)["model"])
    return import_object(section.pop("type"))(**section)


OWN_STEP = {"gan": ("digits", gan_from_config)}  # models whose train_step has its own optimizers

optim = tp.optimizers
OPTIMIZERS = {  # name: (base learning rate, builder of the rate or schedule)
    "sgd": (0.05, lambda lr: optim.SGD(lr)),
    "sgd_nesterov": (0.02, lambda lr: optim.SGD(lr, momentum=0.9, nesterov=True)),
    "adam": (0.01, lambda lr: optim.Adam(lr)),
    "adam_amsgrad": (0.01, lambda lr: optim.Adam(lr, amsgrad=True)),
    "adamw": (0.01, lambda lr: optim.AdamW(lr, weight_decay=0.01)),
    "rmsprop_centered": (0.005, lambda lr: optim.RMSprop(lr, momentum=0.5, centered=True)),
    "adagrad": (0.05, lambda lr: optim.Adagrad(lr)),
}

decay = tp.optimizers.schedules
SCHEDULES = {  # name: builder(base rate, total steps)
    "cosine": lambda lr, steps: decay.CosineDecay(lr, steps, alpha=0.1, warmup_target=2 * lr, warmup_steps=3),
    "exponential": lambda lr, steps: decay.ExponentialDecay(lr, 5, 0.7, staircase=True),
    "piecewise": lambda lr, steps: decay.PiecewiseConstantDecay([steps // 3, 2 * steps // 3], [lr, lr / 2, lr / 4]),
    "polynomial": lambda lr, steps: decay.PolynomialDecay(lr, max(1, steps // 2), lr / 10, cycle=True),
}  # fmt: skip

OPTIONAL_PLUGINS = [  # in the order they run; csv_logger last, so its rows hold the others' log keys
    "counter",
    "hook_counter",
    "early_stopping",
    "reduce_lr_on_plateau",
    "clip_gradients",
    "terminate_on_nan",
    "csv_logger",
]

DATA = ["arrays", "arrays", "generator", "pipeline", "grain"]
BATCHING = [(7, True, False), (11, True, True), (8, False, False), (5, True, True), (13, False, True)]  # fmt: skip
# (batch size, shuffle, drop_last); 45 samples leave a partial last batch for most sizes

EPOCH_SPLITS = ["epoch_end", "stop_epoch_end", "raise_epoch_end"]
STEP_SPLITS = ["kill_steps", "stop_mid_epoch", "raise_batch_end", "raise_transform", "raise_loss"]
SPLITS_EXPECT = {  # how the interrupted process ends: its outcome, or its exit status
    "epoch_end": "finished",
    "stop_epoch_end": "finished",
    "stop_mid_epoch": "finished",
    "raise_epoch_end": "RuntimeError",
    "raise_batch_end": "RuntimeError",
    "raise_transform": "RuntimeError",
    "raise_loss": "RuntimeError",
    "kill_steps": KILLED,
    "sigint_step": "KeyboardInterrupt",
    "sigint_epoch_end": "KeyboardInterrupt",
}


@dataclasses.dataclass
class Case:
    """One configuration: what to train, with which plugins, and where to interrupt it."""

    name: str
    model: str
    optimizer: str
    schedule: str | None
    data: str
    batch_size: int
    shuffle: bool
    drop_last: bool
    plugins: list[str]  # of OPTIONAL_PLUGINS, in this order; checkpoint always comes last
    split: str
    at: int  # the step (step splits) or epoch index (epoch splits) of the split
    epochs: int
    compile: bool = False
    split_first: bool = False  # the splitting plugin runs before the others (else after them)
    every_n_steps: int | None = None  # kill_steps: the checkpoint plugin saves every n steps
    workers: int = 0  # of a tp.data.Pipeline
    seed: int = 0

    def label(self) -> str:
        """One line: name, model, optimizer, data, split point, optional plugins."""
        rate = self.optimizer + (f"+{self.schedule}" if self.schedule else "")
        flags = [
            ("shuffle", self.shuffle),
            ("drop_last", self.drop_last),
            (f"workers={self.workers}", self.workers),
        ]
        data = f"{self.data}(bs={self.batch_size}" + "".join(f",{flag}" for flag, on in flags if on) + ")"
        split = f"{self.split}@{self.at}" + " first" * self.split_first + " compiled" * self.compile
        return f"{self.name} {self.model} {rate} {data} {split} [{','.join(self.plugins)}]"


def steps_per_epoch(case: Case) -> int:
    if case.drop_last and case.data != "generator":
        return TRAIN // case.batch_size
    return math.ceil(TRAIN / case.batch_size)


def epochs_run(case: Case) -> int:
    """Early stopping (patience epochs - 2, never improving) ends the run one epoch early."""
    return case.epochs - 1 if "early_stopping" in case.plugins else case.epochs


# -- sampling the cases --------------------------------------------------------------------


def spread(values: list[Any], count: int, rng: random.Random) -> list[Any]:
    """``count`` values, each of ``values`` about equally often, in a shuffled order."""
    out: list[Any] = []
    while len(out) < count:
        block = list(values)
        rng.shuffle(block)
        out += block
    return out[:count]


def choose_split_point(case: Case, rng: random.Random) -> None:
    """Sets ``at`` (and ``every_n_steps``) within the epochs the run really trains."""
    run = epochs_run(case)
    total = run * steps_per_epoch(case)
    if case.split == "epoch_end":
        case.at = rng.randrange(1, run)  # the first fit trains this many epochs
    elif case.split == "raise_epoch_end":
        case.at = rng.randrange(0, run)
    elif case.split in ("stop_epoch_end", "sigint_epoch_end"):
        case.at = rng.randrange(0, run - 1)
    elif case.split == "kill_steps":
        case.every_n_steps = rng.choice([2, 3])
        case.at = rng.randrange(case.every_n_steps + 1, total)
    elif case.data == "generator":  # a stream restarts on resume: split where an epoch starts
        case.at = steps_per_epoch(case) * rng.randrange(1, run)
    else:
        case.at = rng.randrange(1, total - 1)


def make_case(index: int, row: dict[str, Any], rng: random.Random) -> Case:
    size, shuffle, drop_last = row["batching"]
    case = Case(
        name=f"c{index:03d}",
        model=row["model"],
        optimizer=row["optimizer"],
        schedule=row["schedule"],
        data=row["data"],
        batch_size=size,
        shuffle=shuffle and row["data"] != "generator",
        drop_last=drop_last and row["data"] != "generator",
        plugins=[p for p in OPTIONAL_PLUGINS if row[p]],
        split=row["split"],
        at=0,
        epochs=4 if size >= 11 else 3,
        compile=row["compile"],
        split_first=row["split_first"],
        workers=row["workers"] if row["data"] == "pipeline" else 0,
        seed=rng.randrange(2**16),
    )
    if case.schedule and "reduce_lr_on_plateau" in case.plugins:
        case.plugins.remove("reduce_lr_on_plateau")  # it refuses a schedule
    if case.data == "generator" and case.split in ("kill_steps", "stop_mid_epoch", "raise_batch_end"):
        case.split = rng.choice(EPOCH_SPLITS)  # these resume in the middle of the stream
    if case.split == "raise_loss":
        case.compile = False  # a compiled step replays without calling the Python loss
    choose_split_point(case, rng)
    return case


def sample_cases(count: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    axes: dict[str, list[Any]] = {
        "model": list(MODELS),
        "optimizer": list(OPTIMIZERS),
        "schedule": [None, None, *SCHEDULES],
        "data": DATA,
        "batching": BATCHING,
        "split": EPOCH_SPLITS + STEP_SPLITS,
        "compile": [False, False, False, True],
        "split_first": [False, True],
        "workers": [0, 0, 1],
        **{plugin: [True, False] for plugin in OPTIONAL_PLUGINS},
    }
    columns = {axis: spread(values, count, rng) for axis, values in axes.items()}
    return [make_case(i, {axis: column[i] for axis, column in columns.items()}, rng) for i in range(count)]


# The SIGINT cases: the driver sends the signal once the process says it is inside the
# trainer's held section (a step's update, an epoch's end hooks).
PINNED = [
    Case("sigint-step", "dropout", "adam", None, "arrays", 7, True, False, ["counter", "hook_counter", "csv_logger"], "sigint_step", 9, 3),
    Case(
        "sigint-epoch", "batchnorm", "rmsprop_centered", None, "pipeline", 8, True, False,
        ["counter", "early_stopping", "reduce_lr_on_plateau", "csv_logger"], "sigint_epoch_end", 0, 4, seed=5,
    ),
]  # fmt: skip

# The GAN of configs/gan_digits.yaml (its optimizers are its own: "own"). A SIGINT in the middle
# of epoch 2 (8 batches an epoch), between the discriminator's and the generator's update; then
# its other ways to stop: an epoch's end, a kill between step checkpoints, a raise before an update.
GAN_PINNED = [
    Case("gan-sigint-step", "gan", "own", None, "arrays", 6, True, False, ["counter", "hook_counter", "clip_gradients", "csv_logger"], "sigint_step", 11, 3),
    Case("gan-sigint-step-compiled", "gan", "own", None, "pipeline", 6, True, True, ["counter", "csv_logger"], "sigint_step", 9, 3, compile=True, seed=3),
    Case("gan-sigint-epoch", "gan", "own", None, "grain", 8, True, False, ["hook_counter", "terminate_on_nan", "csv_logger"], "sigint_epoch_end", 0, 3, seed=7),
    Case("gan-kill-steps", "gan", "own", None, "arrays", 7, False, False, ["counter", "csv_logger"], "kill_steps", 10, 3, every_n_steps=3),
    Case("gan-raise-transform", "gan", "own", None, "generator", 9, False, False, ["counter", "csv_logger"], "raise_transform", 5, 3, split_first=True),
]  # fmt: skip


# -- the plugins -------------------------------------------------------------------------------


class Counts:
    """Counts the batches begun and ended and the epochs ended, and logs the counts at every
    epoch end (``<plugin_name>_starts``, ...). Its subclasses keep them in checkpoints."""

    plugin_name = "counts"

    def __init__(self) -> None:
        self.starts = self.ends = self.epochs = 0

    def counts(self) -> dict[str, int]:
        return {"starts": self.starts, "ends": self.ends, "epochs": self.epochs}

    def set_counts(self, state: dict[str, Any]) -> None:
        self.starts, self.ends, self.epochs = int(state["starts"]), int(state["ends"]), int(state["epochs"])

    @tp.hookimpl
    def on_train_batch_start(self) -> None:
        self.starts += 1

    @tp.hookimpl
    def on_train_batch_end(self) -> None:
        self.ends += 1

    @tp.hookimpl
    def on_epoch_end(self, logs: dict[str, float]) -> None:
        self.epochs += 1
        logs.update({f"{self.plugin_name}_{key}": value for key, value in self.counts().items()})


class Counter(Counts):
    """A third-party plugin that keeps its state through ``state_dict``/``load_state_dict``."""

    plugin_name = "counter"

    def state_dict(self) -> dict[str, int]:
        return self.counts()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.set_counts(state)


class HookCounter(Counts):
    """A third-party plugin that keeps its state the other way hookspecs.py documents: it writes
    and reads its own entry of ``checkpoint["plugins"]`` in the checkpoint hooks."""

    plugin_name = "hook_counter"

    @tp.hookimpl
    def on_save_checkpoint(self, trainer: Any, checkpoint: dict[str, Any]) -> None:
        checkpoint["plugins"][trainer.plugins.get_name(self)] = self.counts()

    @tp.hookimpl
    def on_load_checkpoint(self, trainer: Any, checkpoint: dict[str, Any]) -> None:
        self.set_counts(checkpoint["plugins"][trainer.plugins.get_name(self)])


class Split:
    """Interrupts the first fit at the case's split point (only in the ``interrupt`` phase)."""

    def __init__(self, kind: str, at: int, ready: Path, update: int = 0) -> None:
        self.kind, self.at, self.ready = kind, at, ready
        self.update = update  # sigint_step: the step's update it comes in (a GAN's second: 1)
        self.updates = 0  # the updates of step `at` begun

    def _ready(self) -> None:
        self.ready.touch()  # the driver sends SIGINT now, while this sleeps
        time.sleep(SIGINT_WAIT)

    @tp.hookimpl
    def on_train_batch_start(self, step: int) -> None:
        if self.kind == "kill_steps" and step == self.at:
            os._exit(KILLED)  # as SIGKILL: no exception, no interrupted checkpoint

    @tp.hookimpl
    def transform_gradients(self, step: int) -> None:
        if step != self.at:
            return
        if self.kind == "raise_transform":
            raise RuntimeError(f"split: transform_gradients of step {step}")
        if self.kind == "sigint_step" and self.updates == self.update:
            self._ready()
        self.updates += 1

    @tp.hookimpl
    def on_train_batch_end(self, trainer: Any, step: int) -> None:
        if step != self.at:
            return
        if self.kind == "stop_mid_epoch":
            trainer.stop_training = True
        if self.kind == "raise_batch_end":
            raise RuntimeError(f"split: on_train_batch_end of step {step}")

    @tp.hookimpl
    def on_epoch_end(self, trainer: Any, epoch: int) -> None:
        if epoch != self.at:
            return
        if self.kind == "stop_epoch_end":
            trainer.stop_training = True
        if self.kind == "raise_epoch_end":
            raise RuntimeError(f"split: on_epoch_end of epoch {epoch}")
        if self.kind == "sigint_epoch_end":
            self._ready()


def plugin_specs(case: Case, folder: Path) -> list[Any]:
    patience = case.epochs - 2  # min_delta 9: never improves after epoch 0, stops after epoch `patience`
    specs = {
        "csv_logger": {"type": "csv_logger", "filename": str(folder / "history.csv")},
        "early_stopping": {"type": "early_stopping", "monitor": "loss", "patience": patience, "min_delta": 9.0},
        "reduce_lr_on_plateau": {
            "type": "reduce_lr_on_plateau", "monitor": "loss", "patience": 1, "factor": 0.5, "min_delta": 9.0,
        },
        "clip_gradients": {"type": "clip_gradients", "global_norm": 0.5},
        "terminate_on_nan": "terminate_on_nan",
    }  # fmt: skip
    made = {"counter": Counter, "hook_counter": HookCounter}
    return [made[name]() if name in made else specs[name] for name in case.plugins]


def checkpoint_spec(case: Case, folder: Path) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "checkpoint", "dirpath": str(folder / "ckpt")}
    if case.every_n_steps:
        spec.update(every_n_steps=case.every_n_steps, every_n_epochs=None)
    return spec


# -- one phase, in its own process ----------------------------------------------------------


def make_arrays(kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Training and validation arrays of the model's input kind, with 3 balanced classes."""
    rng = np.random.default_rng(1234)
    n = TRAIN + VALIDATION
    if kind == "digits":  # as gan_digits.yaml reads them: standardized by the training part
        x, y = tp.data.load_digits()
        (x_train, x_val), _ = tp.data.standardize(x[:TRAIN], x[TRAIN:n])
        return x_train, y[:TRAIN], x_val, y[TRAIN:n]
    if kind == "tokens":
        x = rng.integers(0, 20, size=(n, 5))
        score = (x % 7).mean(axis=1)
    else:
        shape = {"vector": (6,), "image": (6, 6, 1), "sequence": (5, 3)}[kind]
        x = rng.normal(size=(n, *shape)).astype(np.float32)
        flat = x.reshape(n, -1)
        score = flat[:, 0] + flat[:, 1] * flat[:, 2]
    y = np.digitize(score, np.quantile(score, [1 / 3, 2 / 3])).astype(np.int64)
    return x[:TRAIN], y[:TRAIN], x[TRAIN:], y[TRAIN:]


class Batches:
    """A Python generator per epoch (``__iter__``), the same batches every epoch."""

    def __init__(self, x: np.ndarray, y: np.ndarray, size: int) -> None:
        self.x, self.y, self.size = x, y, size

    def __len__(self) -> int:
        return math.ceil(len(self.x) / self.size)

    def __iter__(self) -> Any:
        for start in range(0, len(self.x), self.size):
            yield self.x[start : start + self.size], self.y[start : start + self.size]


def halve(sample: tuple[Any, Any]) -> tuple[Any, Any]:
    """A Pipeline's per-sample map (run in its worker processes)."""
    x, y = sample
    return (x * np.float32(0.5) if x.dtype.kind == "f" else x), y


def fit_data(case: Case, x: np.ndarray, y: np.ndarray) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The positional and keyword arguments of ``fit`` that give it the training data."""
    if case.data == "arrays":
        return (x, y), {"batch_size": case.batch_size, "shuffle": case.shuffle, "drop_last": case.drop_last}
    if case.data == "generator":
        return (Batches(x, y, case.batch_size),), {}
    if case.data == "pipeline":
        pipeline = tp.data.Pipeline(
            x, y, batch_size=case.batch_size, shuffle=case.shuffle, drop_last=case.drop_last,
            map=halve if case.workers else None, workers=case.workers,
        )  # fmt: skip
        return (pipeline,), {}
    import grain

    samples = grain.MapDataset.source(list(zip(x, y)))
    if case.shuffle:
        samples = samples.shuffle(seed=case.seed)
    return (samples.batch(case.batch_size, drop_remainder=case.drop_last),), {}


def make_trainer(case: Case, folder: Path, split: Split | None) -> Any:
    plugins = plugin_specs(case, folder)
    if split is not None:
        plugins = [split, *plugins] if case.split_first else [*plugins, split]
    if case.model in OWN_STEP:  # as train builds it from a config without optimizer and loss
        model = OWN_STEP[case.model][1]()
        return tp.Trainer(
            model, plugins=[*plugins, checkpoint_spec(case, folder)], output_dir=folder, compile=case.compile
        )
    build_model = MODELS[case.model][1]
    base, build_optimizer = OPTIMIZERS[case.optimizer]
    total = epochs_run(case) * steps_per_epoch(case)
    rate = SCHEDULES[case.schedule](base, total) if case.schedule else base
    return tp.Trainer(
        build_model(),
        build_optimizer(rate),
        tp.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        plugins=[*plugins, checkpoint_spec(case, folder)],
        output_dir=folder,
        compile=case.compile,
    )


def fail_in_loss(trainer: Any, step: int) -> None:
    """Makes the loss raise in the training step ``step`` (not in validation)."""
    original = trainer.loss

    def loss(y_true: Any, y_pred: Any, **kwargs: Any) -> Any:
        if trainer.step == step and trainer.batch_in_epoch < trainer.steps_per_epoch:
            raise RuntimeError(f"split: the loss of step {step}")
        return original(y_true, y_pred, **kwargs)

    trainer.loss = loss


def results(trainer: Any, history: Any, folder: Path) -> dict[str, Any]:
    """What the straight and the resumed run must agree on, bit for bit."""
    csv = folder / "history.csv"
    plugins = trainer.plugins.state_dicts()
    plugins.pop("checkpoint", None)  # the files it saved differ by design
    return {
        "model": trainer.model.state_dict(),
        "optimizer": {name: optimizer.get_state() for name, optimizer in trainer.optimizers.items()},
        "history": {"history": history.history, "epoch": history.epoch},
        "csv": csv.read_text() if csv.is_file() else None,
        "plugins": plugins,
        "step": trainer.step,
    }


def run_phase(case: Case, phase: str, folder: Path) -> None:
    """One fit of ``case`` in this process: ``straight``, ``interrupt`` or ``resume``."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with SIGINT ignored
    tp.random.set_seed(case.seed)
    x, y, x_val, y_val = make_arrays({**MODELS, **OWN_STEP}[case.model][0])
    run = folder / ("straight" if phase == "straight" else "run")
    # A GAN's SIGINT comes between its discriminator's update and its generator's.
    update = 1 if case.model in OWN_STEP else 0
    split = Split(case.split, case.at, folder / "ready", update) if phase == "interrupt" else None
    trainer = make_trainer(case, run, split)
    if split is not None and case.split == "raise_loss":
        fail_in_loss(trainer, case.at)
    args, kwargs = fit_data(case, x, y)
    epochs = case.at if phase == "interrupt" and case.split == "epoch_end" else case.epochs
    # No checkpoint was written when the interruption left no whole state (an exception in
    # the first epoch's batch-end hooks): a resume starts afresh, as `train --resume auto` does.
    saved = (run / "ckpt" / "last").is_file()
    resume_from = run / "ckpt" if phase == "resume" and saved else None
    outcome = "finished"
    # A model with its own train_step and the default test_step has no loss to validate with.
    validation = None if case.model in OWN_STEP else (x_val, y_val)
    try:
        history = trainer.fit(
            *args, **kwargs, epochs=epochs, validation_data=validation, verbose=0, resume_from=resume_from
        )
    except (RuntimeError, KeyboardInterrupt) as error:
        if phase != "interrupt" or (isinstance(error, RuntimeError) and not str(error).startswith("split:")):
            raise  # not the case's own interruption
        outcome = type(error).__name__
    if phase == "interrupt":
        (folder / "interrupt.json").write_text(json.dumps({"outcome": outcome, "step": trainer.step}))
    else:
        save_checkpoint(folder / f"{phase}.npz", results(trainer, history, run))


# -- the driver ----------------------------------------------------------------------------


def worker_command(case: Case, phase: str, folder: Path) -> list[str]:
    return [
        sys.executable, str(Path(__file__).resolve()), "--phase", phase,
        "--case", json.dumps(dataclasses.asdict(case)), "--folder", str(folder),
    ]  # fmt: skip


def worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if "OPENBLAS_NUM_THREADS" not in env and "OMP_NUM_THREADS" not in env:
        env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = "1"  # two cases run side by side
    return env


class PhaseError(Exception):
    pass


def wait_ready_then_interrupt(process: subprocess.Popen[bytes], ready: Path) -> None:
    """Sends SIGINT once the process says (``ready``) it sleeps in the trainer's held section."""
    deadline = time.monotonic() + TIMEOUT
    while process.poll() is None and time.monotonic() < deadline:
        if ready.exists():
            process.send_signal(signal.SIGINT)
            return
        time.sleep(0.01)


def run_worker(case: Case, phase: str, folder: Path) -> int:
    """Runs one phase in a fresh process (its own session); returns its exit status."""
    with open(folder / f"{phase}.log", "wb") as log:
        process = subprocess.Popen(
            worker_command(case, phase, folder),
            stdout=log,
            stderr=log,
            env=worker_env(),
            start_new_session=True,
        )
        try:
            if case.split.startswith("sigint") and phase == "interrupt":
                wait_ready_then_interrupt(process, folder / "ready")
            process.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            raise PhaseError(f"{phase}: no result after {TIMEOUT} s") from None
        finally:
            # A process ended by os._exit leaves its Grain workers behind: end its whole group.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return process.returncode


def last_line(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


def interrupt(case: Case, folder: Path) -> str:
    """Runs the interrupted phase and checks that it stopped where the case says; returns where
    the checkpoint it left resumes (epoch, batch and step)."""
    status = run_worker(case, "interrupt", folder)
    expected = SPLITS_EXPECT[case.split]
    if expected == KILLED:
        if status != KILLED:
            raise PhaseError(
                f"interrupt: exit status {status}, not {KILLED}: {last_line(folder / 'interrupt.log')}"
            )
    elif status != 0:
        raise PhaseError(f"interrupt: exit status {status}: {last_line(folder / 'interrupt.log')}")
    else:
        outcome = json.loads((folder / "interrupt.json").read_text())["outcome"]
        if outcome != expected:
            raise PhaseError(f"interrupt: the fit ended with {outcome}, not {expected} (split not reached)")
    if not (folder / "run" / "ckpt" / "last").is_file():
        return "no checkpoint (starts afresh)"
    trainer = load_checkpoint(folder / "run" / "ckpt")["trainer"]
    return f"e{trainer['epoch']}b{trainer['batch_in_epoch']} step {trainer['step']}"


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack("<d", a) == struct.pack("<d", b)  # NaN equals NaN, 0.0 is not -0.0
    return type(a) is type(b) and a == b


def differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Where ``actual`` differs from ``expected`` bit for bit, as ``path: expected != actual``."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        if expected.keys() != actual.keys():
            return [f"{path}: keys {sorted(expected.keys() ^ actual.keys())} in one only"]
        return [
            d for key in sorted(expected) for d in differences(expected[key], actual[key], f"{path}/{key}")
        ]
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{path}: {len(expected)} != {len(actual)} items"]
        return [
            d for i, (e, a) in enumerate(zip(expected, actual)) for d in differences(e, a, f"{path}[{i}]")
        ]
    if same(expected, actual):
        return []
    if isinstance(expected, np.ndarray) and isinstance(actual, np.ndarray) and expected.shape == actual.shape:
        changed = int(np.sum(expected != actual))
        return [
            f"{path}: {changed} of {expected.size} values differ (max |diff| {np.max(np.abs(expected - actual)):.3g})"
        ]
    if isinstance(expected, str) and isinstance(actual, str):  # the CSV: its first differing line
        pairs = zip(expected.splitlines(), actual.splitlines())
        line = next((f"{e!r} != {a!r}" for e, a in pairs if e != a), "line counts differ")
        return [f"{path}: {line}"]
    return [f"{path}: {expected!r} != {actual!r}"]


FIELDS = ("model", "optimizer", "history", "csv", "plugins", "step")


def compare(straight: dict[str, Any], resumed: dict[str, Any]) -> dict[str, list[str]]:
    found = {field: differences(straight.get(field), resumed.get(field), field) for field in FIELDS}
    return {field: diffs for field, diffs in found.items() if diffs}


def run_case(case: Case, root: Path) -> tuple[bool, str]:
    """Runs the three phases of ``case``; returns (passed, the detail for its line)."""
    folder = root / case.name
    folder.mkdir(parents=True)
    try:
        if run_worker(case, "straight", folder) != 0:
            raise PhaseError(f"straight: {last_line(folder / 'straight.log')}")
        position = interrupt(case, folder)
        if run_worker(case, "resume", folder) != 0:
            raise PhaseError(f"resume: {last_line(folder / 'resume.log')}")
    except PhaseError as error:
        return False, f"error: {error}"
    straight, resumed = load_checkpoint(folder / "straight.npz"), load_checkpoint(folder / "resume.npz")
    found = compare(straight, resumed)
    detail = f"resumed at {position} of {straight['step']}"
    if not found:
        return True, detail
    parts = [f"{field} ({len(diffs)}: {diffs[0]})" for field, diffs in found.items()]
    return False, f"{detail}; differs: " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a subset of about a minute")
    parser.add_argument("--seed", type=int, default=0, help="the sample of cases (default 0)")
    parser.add_argument("--cases", type=int, help="how many sampled cases (default 250, quick 30)")
    parser.add_argument("--jobs", type=int, default=2, help="cases run side by side (default 2)")
    parser.add_argument("--only", help="run the cases whose description contains this text")
    parser.add_argument("--list", action="store_true", help="print the cases and exit")
    parser.add_argument("--keep", action="store_true", help="keep the cases' folders")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        run_phase(Case(**json.loads(args.case)), args.phase, Path(args.folder))
        return 0
    count = args.cases if args.cases is not None else (30 if args.quick else 250)
    pinned = PINNED[:1] + GAN_PINNED[:1] if args.quick else PINNED + GAN_PINNED
    cases = pinned + sample_cases(count, args.seed)
    if args.only:
        cases = [case for case in cases if args.only in case.label()]
    if args.list:
        print("\n".join(case.label() for case in cases))
        return 0
    root = Path(tempfile.mkdtemp(prefix="resume_matrix-"))
    started, failed = time.monotonic(), 0
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for case, (passed, detail) in zip(cases, pool.map(lambda c: run_case(c, root), cases)):
            failed += not passed
            print(f"{'PASS' if passed else 'FAIL'} {case.label()}: {detail}", flush=True)
    print(f"{len(cases)} cases, seed {args.seed}, {time.monotonic() - started:.0f} s")
    print(f"{len(cases) - failed} passed, {failed} failed")
    if args.keep:
        print(f"the cases' folders: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
