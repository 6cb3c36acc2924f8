"""A checkpoint is untrusted input: a crafted one may not delete, inflate or smuggle anything."""

from __future__ import annotations

import io
import re
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp
from tapefit.plugins.checkpoint import (
    Checkpoint,
    CheckpointError,
    load_checkpoint,
    remove_stale_temporaries,
    save_checkpoint,
)
from tests.plugins.conftest import make_data, make_trainer


def first_run(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "ck"
    x, y = make_data()
    make_trainer([Checkpoint(dirpath=str(folder), keep_last=2)]).fit(x, y, epochs=3, batch_size=8)
    return folder, folder / "epoch0002-step00000009.npz"


def resume(folder: Path, source: Path, epochs: int = 5) -> None:
    x, y = make_data()
    make_trainer([Checkpoint(dirpath=str(folder), keep_last=2)]).fit(
        x, y, epochs=epochs, batch_size=8, resume_from=source
    )


def test_a_crafted_keep_last_list_deletes_nothing_outside_the_folder(tmp_path, caplog):
    folder, last = first_run(tmp_path)
    victims = [tmp_path / "thesis.tex", tmp_path / "ck" / "notes.npz"]
    for victim in victims:
        victim.write_text("precious\n")
    contents = load_checkpoint(last)
    # An attacker edits the list and recomputes the digest, as save_checkpoint does.
    contents["plugins"]["checkpoint"]["saved"] = [str(victims[0]), "../thesis.tex", "notes.npz", "last"]
    contents["plugins"]["checkpoint"]["best_name"] = "../../thesis.tex"
    crafted = tmp_path / "crafted.npz"
    save_checkpoint(crafted, {k: v for k, v in contents.items() if k not in ("format", "version")})
    resume(folder, crafted)
    assert all(victim.read_text() == "precious\n" for victim in victims)
    assert "ignoring '../thesis.tex' in the resumed checkpoint's saved" in caplog.text


def test_a_users_temporary_files_survive_the_plugin(tmp_path):
    folder = tmp_path / "userdir"
    folder.mkdir()
    draft = folder / ".draft.tmp"
    draft.write_text("mine\n")
    stale = folder / ".epoch0001-step00000006.npz.0123456789ab.tmp"
    stale.write_bytes(b"half a checkpoint")
    assert remove_stale_temporaries(folder) == [stale]
    assert draft.read_text() == "mine\n" and not stale.exists()
    x, y = make_data()
    make_trainer([Checkpoint(dirpath=str(folder))]).fit(x, y, epochs=1, batch_size=8)
    assert draft.read_text() == "mine\n"


def npy_header(dtype: str, shape: tuple[int, ...]) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": dtype, "fortran_order": False, "shape": shape})
    return out.getvalue()


def zip_bomb(
    path: Path, claimed: int = 2**31, member: str = "__metadata__", others: dict[str, bytes] | None = None
) -> Path:
    """An .npz whose member ``member`` inflates to ``claimed`` bytes of zeros from a few MB (and
    ``others``, members stored as given)."""
    header = npy_header("|u1", (claimed,))
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open(f"{member}.npy", "w", force_zip64=True) as out:
            out.write(header)
            chunk = bytes(2**24)
            for _ in range(claimed // len(chunk)):
                out.write(chunk)
        for name, data in (others or {}).items():
            zf.writestr(name, data)
    return path


def peak_allocated(call) -> int:
    """The most memory Python allocated while ``call()`` ran (it may raise: the test's ``raises`` holds it)."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_zip_bomb_is_refused_without_inflating_it(tmp_path):
    bomb = zip_bomb(tmp_path / "bomb.npz", claimed=2**28)  # 256 MB of zeros in about 250 kB
    assert bomb.stat().st_size < 2**21

    def load():
        with pytest.raises(CheckpointError, match=r"is compressed .* so it is not read"):
            load_checkpoint(bomb)

    assert peak_allocated(load) < 2**22  # nothing near the member's claimed size was allocated


def test_a_member_whose_header_claims_more_than_it_holds_is_refused(tmp_path):
    path = tmp_path / "liar.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("__metadata__.npy", npy_header("<f4", (10**9,)) + bytes(16))
    with pytest.raises(CheckpointError, match="declares 4000000128 bytes"):
        load_checkpoint(path)


def corrupt(tmp_path: Path, last: Path, edit) -> Path:
    contents = load_checkpoint(last)
    edit(contents)
    path = tmp_path / "edited.npz"
    save_checkpoint(path, {k: v for k, v in contents.items() if k not in ("format", "version")})
    return path


def first_weight(contents):
    return next(iter(contents["model"]))


EDITS = {
    "trainer.epoch": lambda c: c["trainer"].update(epoch="many"),
    "trainer.step": lambda c: c["trainer"].update(step=-3),
    "random.main": lambda c: c["random"].update(main={"garbage": 1}),
    "loader.order": lambda c: c["loader"].update(order=np.arange(5)),
    "model.": lambda c: c["model"].update({first_weight(c): c["model"][first_weight(c)].astype(np.int64)}),
    "holds NaN": lambda c: c["model"][first_weight(c)].fill(np.nan),
    # The optimizer's state, checked against the model as a model file's is.
    "optimizer: set_state: slot 'momentum/0' has shape (999,)": lambda c: c["optimizer"].update(
        {"momentum/0": np.zeros(999, np.float32)}
    ),
    "optimizer: set_state: the state holds slots for variable 40": lambda c: c["optimizer"].update(
        {"momentum/40": np.zeros(3, np.float32), "velocity/40": np.zeros(3, np.float32)}
    ),
    "optimizer: `learning_rate` must be a finite number": lambda c: c["optimizer"].update(
        learning_rate=np.array(np.inf)
    ),
    "optimizer: set_state: 'iterations' must be a count": lambda c: c["optimizer"].update(
        iterations=np.array(-5)
    ),
}


@pytest.mark.parametrize("field", sorted(EDITS))
def test_each_bad_field_is_refused_by_name_before_anything_is_restored(tmp_path, field):
    folder, last = first_run(tmp_path)
    x, y = make_data()
    edited = corrupt(tmp_path, last, EDITS[field])
    trainer = make_trainer([Checkpoint(dirpath=str(folder))])
    trainer.fit(x, y, epochs=1, batch_size=8)  # builds the model
    before = trainer.model.state_dict()
    with pytest.raises(CheckpointError, match=f"edited.npz: .*{re.escape(field)}"):
        trainer.fit(x, y, epochs=5, batch_size=8, resume_from=edited)
    after = trainer.model.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_a_mid_epoch_order_must_be_an_order_of_every_sample(tmp_path):
    folder, last = first_run(tmp_path)

    def shorten(c):
        c["trainer"].update(in_epoch=True)
        c["loader"].update(order=np.arange(23))

    edited = corrupt(tmp_path, last, shorten)
    x, y = make_data()
    with pytest.raises(CheckpointError, match=r"loader\.order: expected an order of all 24 samples, got 23"):
        make_trainer([Checkpoint(dirpath=str(folder))]).fit(x, y, epochs=5, batch_size=8, resume_from=edited)


def test_a_fit_that_went_on_past_an_interrupted_checkpoint_removes_it(tmp_path):
    folder = tmp_path / "ck"
    x, y = make_data()

    class Interrupt:
        @tp.hookimpl
        def on_train_batch_start(self, step):
            if step == 4:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        make_trainer([Checkpoint(dirpath=str(folder)), Interrupt()]).fit(x, y, epochs=3, batch_size=8)
    assert (folder / "interrupted.npz").is_file()
    make_trainer([Checkpoint(dirpath=str(folder))]).fit(x, y, epochs=3, batch_size=8, resume_from=folder)
    assert not (folder / "interrupted.npz").exists()
    assert (folder / "last").read_text().strip() == "epoch0002-step00000009.npz"


def test_a_refused_save_is_warned_about_once(tmp_path, caplog):
    x, y = make_data()
    trainer = make_trainer([Checkpoint(dirpath=str(tmp_path / "ck"))])
    trainer.optimizer = tp.optimizers.SGD(1e30)  # the loss is NaN within the first epoch
    with np.errstate(all="ignore"):
        trainer.fit(x, y, epochs=2, batch_size=8, verbose=0)
    refusals = [r.getMessage() for r in caplog.records if "not saving" in r.getMessage()]
    assert len(refusals) == len(set(refusals)) == 2  # one per epoch end; the fit's end adds none


def stateful_plugins(folder: Path) -> list:
    return [
        Checkpoint(dirpath=str(folder)),
        tp.plugins.EarlyStopping(monitor="loss", patience=9, restore_best_weights=True),
        tp.plugins.ReduceLROnPlateau(monitor="loss", patience=9),
    ]


def set_all(weights: dict, value: float) -> None:
    for array in weights.values():
        array.fill(value)


PLUGIN_EDITS = {
    # early stopping's best weights: NaN would be restored at the fit's end and exported
    "early_stopping: best_weights.sequential/dense/bias: holds NaN": lambda p: set_all(
        p["early_stopping"]["best_weights"], np.nan
    ),
    "early_stopping: best_weights.sequential/dense/kernel: the model's variable has shape": lambda p: p[
        "early_stopping"
    ]["best_weights"].update({"sequential/dense/kernel": np.zeros((2, 2), np.float32)}),
    "early_stopping: best_weights: the checkpoint holds another model": lambda p: p["early_stopping"][
        "best_weights"
    ].pop("sequential/dense/kernel"),
    "early_stopping: wait: expected a non-negative integer, got 'x'": lambda p: p["early_stopping"].update(
        wait="x"
    ),
    "early_stopping: best: expected null or a number, got 'abc'": lambda p: p["early_stopping"].update(
        best="abc"
    ),
    "early_stopping: stopped_epoch: expected null or a non-negative integer": lambda p: p[
        "early_stopping"
    ].update(stopped_epoch=-1),
    "early_stopping: best_epoch: missing": lambda p: p["early_stopping"].pop("best_epoch"),
    "reduce_lr_on_plateau: expected a mapping, got [1, 2]": lambda p: p.update(reduce_lr_on_plateau=[1, 2]),
    "reduce_lr_on_plateau: cooldown_counter: expected a non-negative integer": lambda p: p[
        "reduce_lr_on_plateau"
    ].update(cooldown_counter=1.5),
    "reduce_lr_on_plateau: best: expected null or a number, got nan": lambda p: p[
        "reduce_lr_on_plateau"
    ].update(best=float("nan")),
    "checkpoint: best_value: expected null or a number, got 'x'": lambda p: p["checkpoint"].update(
        best_value="x"
    ),
    "checkpoint: saved: expected a list of file names": lambda p: p["checkpoint"].update(saved="all"),
}


@pytest.mark.parametrize("problem", sorted(PLUGIN_EDITS))
def test_each_bad_plugin_state_is_refused_by_its_plugin_before_training(tmp_path, problem):
    folder = tmp_path / "ck"
    x, y = make_data()
    make_trainer(stateful_plugins(folder)).fit(x, y, epochs=2, batch_size=8)
    edited = corrupt(
        tmp_path, folder / "epoch0001-step00000006.npz", lambda c: PLUGIN_EDITS[problem](c["plugins"])
    )
    trainer = make_trainer(stateful_plugins(folder))
    trainer.fit(x, y, epochs=1, batch_size=8)  # builds the model
    before = trainer.model.state_dict()
    with pytest.raises(CheckpointError) as caught:
        trainer.fit(x, y, epochs=4, batch_size=8, resume_from=edited)
    message = str(caught.value)
    assert message.startswith(f"{edited}: plugins.{problem}"), message
    assert "\n" not in message
    after = trainer.model.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)  # nothing restored, nothing trained


def test_good_plugin_states_pass_their_checks_and_resume(tmp_path):
    folder = tmp_path / "ck"
    x, y = make_data()
    make_trainer(stateful_plugins(folder)).fit(x, y, epochs=2, batch_size=8)
    history = make_trainer(stateful_plugins(folder)).fit(x, y, epochs=3, batch_size=8, resume_from=folder)
    assert history.epoch == [0, 1, 2]


def test_a_plugin_that_keeps_its_state_by_hooks_checks_it_the_same_way(tmp_path):
    class Counter:
        """Keeps ``seen`` through the checkpoint hooks, not state_dict."""

        plugin_name = "counter"

        @tp.hookimpl
        def on_save_checkpoint(self, trainer, checkpoint):
            checkpoint["plugins"][trainer.plugins.get_name(self)] = {"seen": 3}

        def check_state_dict(self, state, model):
            if not isinstance(state.get("seen"), int):
                raise ValueError(f"seen: expected an integer, got {state.get('seen')!r}")

    folder = tmp_path / "ck"
    x, y = make_data()
    make_trainer([Checkpoint(dirpath=str(folder)), Counter()]).fit(x, y, epochs=2, batch_size=8)
    edited = corrupt(
        tmp_path, folder / "epoch0001-step00000006.npz", lambda c: c["plugins"]["counter"].update(seen="3")
    )
    with pytest.raises(
        CheckpointError, match=r"edited\.npz: plugins\.counter: seen: expected an integer, got '3'$"
    ):
        make_trainer([Checkpoint(dirpath=str(folder)), Counter()]).fit(
            x, y, epochs=3, batch_size=8, resume_from=edited
        )
