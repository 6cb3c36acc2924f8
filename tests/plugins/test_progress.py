"""The progress plugin: tqdm bars per epoch, quiet when not on a terminal."""

from __future__ import annotations

import io
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp
from tapefit.plugins.progress import Progress, format_value


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_bars_show_epochs_batches_and_logs(make_trainer, make_data):
    x, y = make_data(12)
    out = io.StringIO()
    make_trainer([Progress(enabled=True, file=out)]).fit(x, y, epochs=2, batch_size=5, validation_data=(x, y))
    text = out.getvalue()
    assert "Epoch 1/2" in text and "Epoch 2/2" in text
    assert "3/3" in text  # every batch counted by the end of the epoch
    assert "loss=" in text and "val_loss=" in text and "accuracy=" in text


def test_a_bar_on_a_terminal_a_line_per_epoch_in_a_log_and_silence_when_asked(make_trainer, make_data):
    x, y = make_data(12)
    log = io.StringIO()
    make_trainer([Progress(file=log)]).fit(x, y, epochs=2, batch_size=5)
    lines = log.getvalue().splitlines()
    assert [line.split(" - ")[:2] for line in lines] == [
        ["Epoch 1/2", "3 batches"],
        ["Epoch 2/2", "3 batches"],
    ]
    assert all("loss: " in line and "accuracy: " in line for line in lines)
    terminal = Terminal()
    make_trainer([Progress(file=terminal)]).fit(x, y, epochs=1, batch_size=5)
    assert "Epoch 1/1" in terminal.getvalue() and "3/3" in terminal.getvalue()
    for silenced in (Progress(enabled=False, file=Terminal()), Progress(verbose=0, file=Terminal())):
        make_trainer([silenced]).fit(x, y, epochs=1, batch_size=5)
        assert silenced.file.getvalue() == ""


def test_the_bar_shows_the_running_mean_of_the_loss(make_trainer, make_data):
    x, y = make_data(20)
    shown, losses = [], []

    class Recording(Progress):
        @tp.hookimpl
        def transform_gradients(self, grads_and_vars, logs):
            losses.append(logs["loss"])  # the batch's own loss

        @tp.hookimpl
        def on_train_batch_end(self, trainer, logs):
            super().on_train_batch_end(trainer, logs)
            shown.append(float(self._bar.postfix.split("loss=")[1].split(",")[0]))

    plugin = Recording(refresh_per_second=1e9, enabled=True, file=io.StringIO())
    make_trainer([plugin]).fit(x, y, epochs=1, batch_size=5, shuffle=False)
    assert shown[-1] == pytest.approx(np.mean(losses), rel=1e-3)  # equal batches: the plain mean
    assert shown[0] == pytest.approx(losses[0], rel=1e-3) and shown[-1] != pytest.approx(losses[-1], rel=1e-3)


SCRIPT_DATA = (
    "import numpy as np\n"
    "import tapefit as tp\n"
    "x = np.random.default_rng(0).normal(size=(12, 3)).astype(np.float32)\n"
    "y = (x[:, 0] > 0).astype(np.int64)\n"
)
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]
    ),
}


def write_script(tmp_path, body):
    """A script that fits on 12 samples in a fresh interpreter (this checkout's tapefit)."""
    script = tmp_path / "fit.py"
    script.write_text(SCRIPT_DATA + body)
    return [sys.executable, str(script)]


def test_fit_shows_progress_by_default_and_logs_plugin_decisions(tmp_path):
    # A fresh interpreter: no logging configured, standard error a pipe, as in a batch job.
    command = write_script(
        tmp_path,
        "stop = tp.plugins.EarlyStopping(monitor='loss', patience=1, min_delta=100.0, restore_best_weights=True)\n"
        "trainer = tp.Trainer(tp.layers.Dense(2), 'sgd', tp.losses.SparseCategoricalCrossentropy(from_logits=True), plugins=[stop])\n"
        "trainer.fit(x, y, epochs=5, batch_size=5)\n"
        "trainer.fit(x, y, epochs=1, batch_size=5, verbose=0)\n",
    )
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=ENV)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert [line.split(" - ")[0] for line in lines if line.startswith("Epoch")] == ["Epoch 1/5", "Epoch 2/5"]
    assert "early_stopping: restoring the weights of epoch 1" in lines


def test_a_bad_verbose_is_refused(make_trainer, make_data):
    x, y = make_data(12)
    with pytest.raises(ValueError, match="verbose must be 'auto', 0, 1 or 2"):
        make_trainer([]).fit(x, y, verbose=3)


def on_pseudo_terminal(tmp_path, columns):
    """What a fit (2 epochs of 3 batches) draws on a pseudo-terminal ``columns`` wide."""
    pty = pytest.importorskip("pty")
    fcntl = pytest.importorskip("fcntl")
    termios = pytest.importorskip("termios")
    command = write_script(
        tmp_path,
        "tp.Trainer(tp.layers.Dense(2), 'sgd', 'sparse_categorical_crossentropy').fit(x, y, epochs=2, batch_size=5)\n",
    )
    leader, follower = pty.openpty()
    # A new pseudo-terminal is 0 columns wide until it is sized.
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    try:
        result = subprocess.run(command, stderr=follower, stdout=subprocess.DEVNULL, env=ENV, timeout=120)
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal's other end is closed: all read
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    assert result.returncode == 0
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.parametrize("columns", [120, 0])
def test_on_a_pseudo_terminal_auto_draws_bars(tmp_path, columns):
    text = on_pseudo_terminal(tmp_path, columns)
    # tqdm's bar, not lines; on a terminal of unknown width (0 columns) too, where tqdm alone
    # draws blank lines
    assert "Epoch 1/2" in text and "Epoch 2/2" in text and "3/3" in text and "batch" in text
    assert "Epoch 1/2 - 3 batches" not in text


def test_values_print_as_keras_prints_them():
    assert [format_value(v) for v in (1, 0.0, 0.98765, 3.21e-5, 123456.0, float("nan"))] == [
        "1.0000",
        "0.0000",
        "0.9877",
        "3.2100e-05",
        "1.2346e+05",
        "nan",
    ]


def test_the_line_format_shows_every_value_with_four_decimals(make_trainer, make_data):
    x, y = make_data(12)
    log = io.StringIO()
    make_trainer([Progress(file=log)]).fit(x, y, epochs=1, batch_size=5, validation_data=(x[:1], y[:1]))
    line = log.getvalue().splitlines()[0]
    assert re.search(r"val_accuracy: [01]\.0000$", line), line


def test_logs_wider_than_the_bar_are_printed_whole_below_it(make_trainer, make_data):
    x, y = make_data(12)
    out = Terminal()  # a terminal of unknown width: a bar 100 columns wide
    metrics = ["accuracy", "sparse_categorical_accuracy", "sparse_categorical_crossentropy"]
    make_trainer([Progress(file=out)], metrics=metrics).fit(
        x, y, epochs=1, batch_size=5, validation_data=(x, y)
    )
    text = out.getvalue()
    assert "val_sparse_categorical_crossentropy: " in text.splitlines()[-1]
    assert text.splitlines()[-1].startswith("  loss: ")
