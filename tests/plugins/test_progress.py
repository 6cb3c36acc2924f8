"""The progress plugin: tqdm bars per epoch, quiet when not on a terminal."""

from __future__ import annotations

import io

import pytest

import tapefit as tp
from tapefit.plugins.progress import Progress, format_logs


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


def test_quiet_unless_a_terminal_or_asked(make_trainer, make_data):
    x, y = make_data(12)
    not_a_terminal = io.StringIO()
    make_trainer([Progress(file=not_a_terminal)]).fit(x, y, epochs=1, batch_size=5)
    assert not_a_terminal.getvalue() == ""
    terminal = Terminal()
    make_trainer([Progress(file=terminal)]).fit(x, y, epochs=1, batch_size=5)
    assert "Epoch 1/1" in terminal.getvalue()
    silenced = Terminal()
    make_trainer([Progress(enabled=False, file=silenced)]).fit(x, y, epochs=1, batch_size=5)
    assert silenced.getvalue() == ""


def test_redraws_are_rate_limited(make_trainer, make_data):
    x, y = make_data(40)
    updates = []

    class Counting(Progress):
        @tp.hookimpl
        def on_epoch_start(self, trainer, epoch):
            super().on_epoch_start(trainer, epoch)
            original = self._bar.update
            self._bar.update = lambda n: (updates.append(n), original(n))

    # One redraw per hour at most: only the epoch's end updates the bar, with every batch at once.
    plugin = Counting(refresh_per_second=1 / 3600, enabled=True, file=io.StringIO())
    make_trainer([plugin]).fit(x, y, epochs=1, batch_size=4)
    assert updates == [10]


def test_format_and_errors():
    assert format_logs({"loss": 0.123456789, "acc": 1.0}) == {"loss": "0.1235", "acc": "1"}
    with pytest.raises(ValueError, match="refresh_per_second must be positive"):
        Progress(refresh_per_second=0)
    # a config can only give a string: a file name is not a stream (it crashed in the first epoch)
    with pytest.raises(TypeError, match=r"file must be a text stream .*, got the string 'progress.log'"):
        Progress(file="progress.log")
