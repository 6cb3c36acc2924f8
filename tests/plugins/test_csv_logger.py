"""The csv_logger plugin: one row per epoch, every key, appending on resume."""

from __future__ import annotations

import csv

import pytest

import tapefit as tp
from tapefit.plugins.csv_logger import CSVLogger


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_one_row_per_epoch_with_every_key(tmp_path, make_trainer, make_data):
    x, y = make_data(12)
    path = tmp_path / "log.csv"
    history = make_trainer([CSVLogger(str(path))]).fit(x, y, epochs=3, batch_size=5, validation_data=(x, y))
    rows = read_rows(path)
    assert rows[0] == ["epoch", "accuracy", "loss", "val_accuracy", "val_loss"]
    assert [row[0] for row in rows[1:]] == ["0", "1", "2"]
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        column = rows[0].index(key)
        assert [float(row[column]) for row in rows[1:]] == history.history[key]  # exact: repr round-trips


def test_default_path_and_overwrite(tmp_path, make_trainer, make_data):
    x, y = make_data(12)
    for _ in range(2):  # a new fit starts the file anew
        make_trainer(["csv_logger"], output_dir=tmp_path).fit(x, y, epochs=2, batch_size=6)
    assert len(read_rows(tmp_path / "history.csv")) == 3


def test_resume_appends_and_drops_rows_the_resumed_fit_runs_again(tmp_path, make_trainer, make_data):
    x, y = make_data(12)
    path, folder = tmp_path / "log.csv", tmp_path / "ckpt"
    make_trainer([CSVLogger(str(path)), {"type": "checkpoint", "dirpath": str(folder)}]).fit(
        x, y, epochs=3, batch_size=5
    )
    assert [r[0] for r in read_rows(path)[1:]] == ["0", "1", "2"]
    # Resume from the end of epoch 0: the rows of epochs 1 and 2 are written again, once.
    resumed = make_trainer([CSVLogger(str(path))])
    history = resumed.fit(x, y, epochs=4, batch_size=5, resume_from=folder / "epoch0000-step00000003.npz")
    rows = read_rows(path)
    assert [r[0] for r in rows[1:]] == ["0", "1", "2", "3"]
    loss_column = rows[0].index("loss")
    assert [float(r[loss_column]) for r in rows[1:]] == history.history["loss"]


def test_resume_onto_a_file_with_a_non_integer_epoch_names_the_file_and_row(
    tmp_path, make_trainer, make_data
):
    x, y = make_data(12)
    path, folder = tmp_path / "log.csv", tmp_path / "ckpt"
    make_trainer([CSVLogger(str(path)), {"type": "checkpoint", "dirpath": str(folder)}]).fit(
        x, y, epochs=2, batch_size=6
    )
    text = path.read_text().splitlines()
    path.write_text("\n".join([text[0], "zero" + text[1][1:], *text[2:]]) + "\n")
    before = path.read_text()
    with pytest.raises(ValueError, match=r"log\.csv: cannot append, row 2 has the epoch 'zero'"):
        make_trainer([CSVLogger(str(path))]).fit(x, y, epochs=3, batch_size=6, resume_from=folder)
    assert path.read_text() == before


def test_new_keys_after_the_header_are_warned_about(tmp_path, make_trainer, make_data, caplog):
    x, y = make_data(12)

    class Late:
        @tp.hookimpl
        def on_epoch_end(self, epoch, logs):
            if epoch == 1:
                logs["late"] = 1.0

    path = tmp_path / "log.csv"
    make_trainer([Late(), CSVLogger(str(path))], metrics=()).fit(x, y, epochs=3, batch_size=6)
    assert read_rows(path)[0] == ["epoch", "loss"]
    assert caplog.text.count("'late' first appeared") == 1


def test_file_is_closed_on_exception(tmp_path, make_trainer, make_data):
    x, y = make_data(12)

    class Fail:
        @tp.hookimpl
        def on_epoch_start(self, epoch):
            if epoch == 2:
                raise RuntimeError("stop")

    logger = CSVLogger(str(tmp_path / "log.csv"))
    with pytest.raises(RuntimeError):
        make_trainer([Fail(), logger]).fit(x, y, epochs=3, batch_size=6)
    assert logger._file is None
    assert len(read_rows(tmp_path / "log.csv")) == 3  # header and two flushed rows


def test_validation_every_other_epoch_gets_its_columns(tmp_path, make_trainer, make_data):
    """With validation_freq=2 the first epoch has no val_ keys: as Keras's CSVLogger, the header
    has their columns anyway (empty on the epochs without validation), not a warning and no
    validation in the file."""
    x, y = make_data(12)
    path = tmp_path / "log.csv"
    history = make_trainer([CSVLogger(str(path))]).fit(
        x, y, epochs=4, batch_size=5, validation_data=(x, y), validation_freq=2, verbose=0
    )
    rows = read_rows(path)
    assert rows[0] == ["epoch", "accuracy", "loss", "val_accuracy", "val_loss"]
    column = rows[0].index("val_loss")
    assert [row[column] for row in rows[1:]][0::2] == ["", ""]
    assert [float(row[column]) for row in rows[1:][1::2]] == history.history["val_loss"][1::2]


def test_no_validation_columns_without_validation(tmp_path, make_trainer, make_data):
    x, y = make_data(12)
    path = tmp_path / "log.csv"
    make_trainer([CSVLogger(str(path))]).fit(x, y, epochs=2, batch_size=5, validation_freq=2, verbose=0)
    assert read_rows(path)[0] == ["epoch", "accuracy", "loss"]
