"""Model files keep the optimizers a model holds (a GAN's two): saved by ``Trainer.save`` and
``Module.save``, given back by ``load_model`` and ``Trainer.load``, continued exactly, and
refused when crafted."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy

import tapefit as tp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.gan import GAN

MEMBER = "optimizers.safetensors"


def gan_data(n: int = 96) -> np.ndarray:
    return np.random.default_rng(0).normal(size=(n, 64)).astype(np.float32)


def fit_epoch(trainer: tp.Trainer, seed: int) -> dict[str, list[float]]:
    tp.random.set_seed(seed)  # the step's noise: the same draws for every run of this epoch
    history = trainer.fit(gan_data(), epochs=1, batch_size=32, shuffle=False, verbose=0)
    return history.history


def trained_gan(tmp_path: Path) -> tuple[tp.Trainer, Path]:
    tp.random.set_seed(0)
    trainer = tp.Trainer(GAN())
    fit_epoch(trainer, 1)
    path = tmp_path / "gan.tapefit"
    trainer.save(path)
    return trainer, path


def members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def write_zip(path: Path, contents: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in contents.items():
            archive.writestr(name, data)
    return path


def assert_same_state(a: Any, b: Any) -> None:
    state_a, state_b = a.get_state(), b.get_state()
    assert sorted(state_a) == sorted(state_b)
    for key, value in state_a.items():
        np.testing.assert_array_equal(np.asarray(value), np.asarray(state_b[key]), err_msg=key)


def test_trainer_save_writes_every_optimizer_the_model_holds(tmp_path: Path) -> None:
    trainer, path = trained_gan(tmp_path)
    assert trainer.optimizer is None and trainer.loss is None
    contents = members(path)
    assert list(contents) == ["config.json", "model.safetensors", MEMBER]
    assert json.loads(contents["config.json"])["optimizer"] is None  # GAN() makes them: no configs
    keys = sorted(safetensors.numpy.load(contents[MEMBER]))
    adam = [f"{slot}/{i}" for slot in ("momentum", "velocity") for i in range(4)] + [
        "iterations",
        "learning_rate",
    ]
    assert keys == sorted(f"{name}/{key}" for name in ("d_optimizer", "g_optimizer") for key in adam)

    loaded = tp.Trainer.load(path)
    assert loaded.optimizer is None and loaded.loss is None
    assert list(loaded.optimizers) == ["d_optimizer", "g_optimizer"]
    for name in ("d_optimizer", "g_optimizer"):
        assert int(getattr(loaded.model, name).iterations) == 3
        assert_same_state(getattr(loaded.model, name), getattr(trainer.model, name))


def test_fitting_a_loaded_gan_continues_bit_for_bit(tmp_path: Path) -> None:
    # The random generators are not in a model file, so every epoch is seeded on its own: the
    # second epoch draws the same noise whether the run went straight on or through the file.
    tp.random.set_seed(0)
    straight = tp.Trainer(GAN())
    fit_epoch(straight, 1)
    expected = fit_epoch(straight, 2)

    first, path = trained_gan(tmp_path)
    loaded = tp.Trainer.load(path)
    history = fit_epoch(loaded, 2)
    assert history == expected
    for a, b in zip(loaded.model.get_weights(), straight.model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)

    # The comparison sees the optimizers' states: the same weights with fresh optimizers differ.
    fresh = tp.Trainer(GAN())
    fresh.model.discriminator(np.zeros((1, 64), np.float32))
    fresh.model.generator(np.zeros((1, 16), np.float32))
    fresh.model.set_weights(first.model.get_weights())
    fit_epoch(fresh, 2)
    assert any(
        not np.array_equal(a, b)
        for a, b in zip(fresh.model.get_weights(), straight.model.get_weights(), strict=True)
    )


def test_model_save_keeps_the_optimizers_the_model_holds(tmp_path: Path) -> None:
    trainer, _ = trained_gan(tmp_path)
    trainer.model.save(tmp_path / "model.tapefit")
    assert MEMBER in members(tmp_path / "model.tapefit")
    model = tp.models.load_model(tmp_path / "model.tapefit")
    assert type(model) is GAN
    assert_same_state(model.d_optimizer, trainer.model.d_optimizer)
    again = tp.Trainer.load(tmp_path / "model.tapefit")  # its own step needs no optimizer or loss
    assert_same_state(again.model.g_optimizer, trainer.model.g_optimizer)


def test_a_model_with_the_default_step_still_needs_an_optimizer_and_loss(tmp_path: Path) -> None:
    model = tp.layers.Sequential([tp.layers.Dense(1)])
    model(np.zeros((1, 3), np.float32))
    tp.Trainer(model, None, "mse").save(tmp_path / "m.tapefit")
    with pytest.raises(tp.models.ModelFileError, match="without an optimizer and loss"):
        tp.Trainer.load(tmp_path / "m.tapefit")


# -- crafted files -------------------------------------------------------------------------


def refused(path: Path, match: str) -> None:
    for load in (tp.models.load_model, tp.Trainer.load):
        with pytest.raises(tp.models.ModelFileError, match=match) as caught:
            load(path)
        assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def with_states(tmp_path: Path, change: dict[str, Any], drop: str = "") -> Path:
    _, path = trained_gan(tmp_path)
    contents = members(path)
    state = safetensors.numpy.load(contents[MEMBER])
    state = {k: v for k, v in state.items() if not (drop and k.startswith(drop))}
    contents[MEMBER] = safetensors.numpy.save({**state, **change})
    return write_zip(tmp_path / "crafted.tapefit", contents)


@pytest.mark.parametrize(
    "change, drop, match",
    [
        (
            {"d_optimizer/momentum/0": np.zeros(999, np.float32)},
            "",
            r"optimizers\.safetensors: d_optimizer: set_state: slot 'momentum/0' has shape \(999,\), which none "
            "of the model's trainable variables has",
        ),
        (
            {
                "g_optimizer/momentum/9": np.zeros(64, np.float32),
                "g_optimizer/velocity/9": np.zeros(64, np.float32),
            },
            "",
            "g_optimizer: set_state: the state holds slots for variable 9, but the model has 8 trainable",
        ),
        (
            {"d_optimizer/learning_rate": np.array(np.inf)},
            "",
            "d_optimizer: `learning_rate` must be a finite number, got inf",
        ),
        (
            {"g_optimizer/iterations": np.array(-5)},
            "",
            r"g_optimizer: set_state: 'iterations' must be a count of steps \(>= 0\), got -5",
        ),
        (
            {"d_optimizer/iterations": np.array(1.5)},
            "",
            "d_optimizer: set_state: 'iterations' must be an integer",
        ),
        (
            {"d_optimizer/m/0": np.zeros(3, np.float32)},
            "",
            r"d_optimizer: set_state: unexpected entries \['m/0'\] for Adam",
        ),
        (
            {"e_optimizer/iterations": np.array(0)},
            "",
            r"optimizers\.safetensors holds the states of \['d_optimizer', 'e_optimizer', 'g_optimizer'\], "
            r"the model holds the optimizers \['d_optimizer', 'g_optimizer'\]",
        ),
        (
            {},
            "g_optimizer/",
            r"holds the states of \['d_optimizer'\], the model holds the optimizers \['d_optimizer', "
            r"'g_optimizer'\]",
        ),
        ({"iterations": np.array(0)}, "", r"the key 'iterations' is not '<attribute>/<state key>'"),
        ({"os-system/iterations": np.array(0)}, "", r"the key 'os-system/iterations' is not"),
        (
            {"os.system/iterations": np.array(0)},
            "",
            r"holds the states of \['d_optimizer', 'g_optimizer', 'os\.system'\]",
        ),
    ],
)
def test_optimizer_states_that_do_not_fit_the_model_are_refused(
    tmp_path: Path, change: dict[str, Any], drop: str, match: str
) -> None:
    refused(with_states(tmp_path, change, drop), match)


def test_a_model_holding_optimizers_needs_their_states(tmp_path: Path) -> None:
    _, path = trained_gan(tmp_path)
    contents = members(path)
    del contents[MEMBER]
    refused(
        write_zip(tmp_path / "without.tapefit", contents),
        r"optimizers\.safetensors holds the states of \[\], the model holds the optimizers",
    )


def test_an_optimizers_member_that_lies_or_is_not_safetensors_is_refused(tmp_path: Path) -> None:
    _, path = trained_gan(tmp_path)
    contents = members(path)
    truncated = {**contents, MEMBER: contents[MEMBER][:-4]}
    refused(write_zip(tmp_path / "short.tapefit", truncated), r"optimizers\.safetensors declares")
    garbage = {**contents, MEMBER: b"\xff" * 64}
    refused(write_zip(tmp_path / "garbage.tapefit", garbage), r"optimizers\.safetensors is not a safetensors")

    data = bytearray(path.read_bytes())
    # The central directory's record of the member: its uncompressed size field (offset 24).
    record = data.rfind(b"PK\x01\x02", 0, data.rfind(MEMBER.encode()))
    size = int.from_bytes(data[record + 24 : record + 28], "little")
    data[record + 24 : record + 28] = (size + 1000).to_bytes(4, "little")
    (tmp_path / "lies.tapefit").write_bytes(bytes(data))
    refused(tmp_path / "lies.tapefit", "the member 'optimizers.safetensors' declares")
    twice = write_zip(tmp_path / "twice.tapefit", contents)
    with zipfile.ZipFile(twice, "a") as archive, pytest.warns(UserWarning, match="Duplicate name"):
        archive.writestr(MEMBER, contents[MEMBER])
    refused(twice, "the member 'optimizers.safetensors' appears twice")
