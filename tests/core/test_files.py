"""``tapefit.core.files``: the one check of what a file is before any reader reads it, and the
header claims each reader checks against the file's length."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp
from tapefit.checkpointing import save_checkpoint
from tapefit.core.files import FileRefused, atomic_write, npy_header, open_untrusted
from tapefit.data import DataError, load_npz
from tapefit.layers.saving import read_weights
from tests.plugins.test_checkpoint_untrusted import npy_header as npy_bytes
from tests.plugins.test_checkpoint_untrusted import peak_allocated, zip_bomb

REPO = Path(__file__).resolve().parents[2]

# Every reader of a file, by the suffix of the file it reads: each must refuse what is not a regular file.
READERS = {
    ".yaml": "from tapefit.cli.config import load_config_file as read",
    ".npz": "from tapefit.data import load_npz as read",
    ".csv": "from tapefit.data import load_csv as read",
    ".npy": "from tapefit.data import open_npy as read",
    ".safetensors": "from tapefit.layers.saving import read_weights as read",
    ".ckpt.npz": "from tapefit.checkpointing import load_checkpoint as read",
}


def errors_of_every_reader(folder: Path, make) -> dict[str, str]:
    """Each reader's error on a file made by ``make(path)``, read in a subprocess with a deadline:
    a reader that waits on a pipe or reads a device for ever fails the test instead of hanging it."""
    errors = {}
    for suffix, statement in READERS.items():
        path = folder / f"f{suffix}"
        make(path)
        code = f"{statement}\ntry:\n    read({str(path)!r})\nexcept Exception as e:\n    print(e)\n"
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=REPO
        )
        errors[suffix] = result.stdout.strip()
        path.unlink()
    return errors


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_every_reader_refuses_a_fifo_with_the_one_check(tmp_path):
    errors = errors_of_every_reader(tmp_path, os.mkfifo)
    assert all("is a named pipe (FIFO), not a regular file" in error for error in errors.values()), errors


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero here")
def test_every_reader_refuses_dev_zero_with_the_one_check(tmp_path):
    errors = errors_of_every_reader(tmp_path, lambda path: path.symlink_to("/dev/zero"))
    assert all("is a character device, not a regular file" in error for error in errors.values()), errors


def test_open_regular_names_the_file_and_what_is_wrong(tmp_path):
    with pytest.raises(FileRefused, match=r"^data file '.*nope' does not exist$"):
        open_untrusted(tmp_path / "nope", "data file")
    with pytest.raises(FileRefused, match=r"^config file '.*' is a folder, not a regular file$"):
        open_untrusted(tmp_path, "config file")
    big = tmp_path / "big.yaml"
    big.write_bytes(bytes(101))
    with pytest.raises(
        FileRefused, match=r"^config file '.*big.yaml' is 101 bytes, more than the 100 a config"
    ):
        open_untrusted(big, "config file", max_bytes=100)
    with open_untrusted(big, "config file", max_bytes=101) as f:
        assert f.read() == bytes(101)


def longest_name(folder: Path, suffix: str) -> Path:
    """The longest file name ``folder``'s file system allows, ending in ``suffix``."""
    try:
        limit = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        limit = 255
    return folder / ("a" * (limit - len(suffix)) + suffix)


def small_model() -> tp.Model:
    inputs = tp.Input((3,))
    return tp.Model(inputs, tp.layers.Dense(2)(inputs))


@pytest.mark.parametrize(
    "write",
    [
        lambda folder: atomic_write(longest_name(folder, ".bin"), lambda f: f.write(b"x")),
        lambda folder: small_model().save(longest_name(folder, ".tapefit")),
        lambda folder: small_model().save_weights(longest_name(folder, ".safetensors")),
        lambda folder: tp.Trainer(small_model(), "sgd", "mse").save(longest_name(folder, ".tapefit")),
        lambda folder: save_checkpoint(longest_name(folder, ".npz"), {"step": 1}),
    ],
    ids=["atomic_write", "Model.save", "save_weights", "Trainer.save", "save_checkpoint"],
)
def test_every_atomic_write_takes_the_longest_name_the_file_system_allows(write, tmp_path):
    write(tmp_path)
    [written] = tmp_path.iterdir()  # the file itself, and no temporary left beside it
    assert written.name.startswith("aaaa") and len(written.name) == len(longest_name(tmp_path, "").name)


def test_a_temporary_name_is_short_whatever_the_final_name(tmp_path, monkeypatch):
    seen = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (seen.append(Path(a).name), real(a, b))[1])
    atomic_write(tmp_path / ("b" * 200), lambda f: f.write(b"x"))
    atomic_write(tmp_path / "epoch0003-step00000120.npz", lambda f: f.write(b"x"))
    assert [len(name) for name in seen] == [1 + 32 + 1 + 12 + 4, 1 + 26 + 1 + 12 + 4]
    assert seen[1].startswith(".epoch0003-step00000120.npz.")  # a short name is kept whole


def test_an_npy_header_must_account_for_the_bytes_exactly():
    good = io.BytesIO()
    np.save(good, np.arange(6, dtype=np.int32).reshape(2, 3))
    size = len(good.getvalue())
    good.seek(0)
    assert npy_header(good, size, "x")[:2] == ((2, 3), np.dtype(np.int32))
    for wrong in (size - 1, size + 1):
        good.seek(0)
        with pytest.raises(
            FileRefused, match=rf"^x declares {size} bytes of int32 \(2, 3\), but holds {wrong}$"
        ):
            npy_header(good, wrong, "x")


def test_an_npz_zip_bomb_whose_headers_disagree_is_refused_without_inflating_it(tmp_path):
    labels = npy_bytes("<i8", (10,)) + bytes(80)
    bomb = zip_bomb(tmp_path / "bomb.npz", claimed=2**28, member="x", others={"y.npy": labels})
    assert bomb.stat().st_size < 2**21  # 256 MB of zeros in about 260 kB

    def load():
        with pytest.raises(DataError, match=rf"its headers declare {2**28} samples of 'x' but 10 of 'y'"):
            load_npz(str(bomb))

    assert peak_allocated(load) < 2**22  # nothing near the member's claimed size was allocated


def test_an_npz_member_claiming_more_than_its_stored_bytes_is_refused(tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, x=np.zeros((4, 3)), y=np.zeros(4))
    raw = bytearray(path.read_bytes())
    entry = raw.index(b"PK\x01\x02")  # x.npy's entry in the zip's central directory
    raw[entry + 24 : entry + 28] = struct.pack("<I", 2**31)  # its uncompressed size
    path.write_bytes(bytes(raw))
    with pytest.raises(DataError, match=r"the array 'x' declares 2147483648 bytes, more than its 224 bytes"):
        load_npz(str(path))


def safetensors_file(path: Path, entries: dict, data: bytes) -> Path:
    text = json.dumps(entries).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return path


def test_a_safetensors_header_length_claiming_more_than_the_file_is_refused(tmp_path):
    path = tmp_path / "w.safetensors"
    path.write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(
        ValueError, match=r"its first 8 bytes claim a header of 1000000000000 bytes; the file has 10"
    ):
        read_weights(path)


def test_safetensors_offsets_claiming_more_than_the_file_are_refused_before_reading(tmp_path):
    entries = {"w": {"dtype": "F32", "shape": [10**9], "data_offsets": [0, 4 * 10**9]}}
    path = safetensors_file(tmp_path / "w.safetensors", entries, bytes(16))
    with pytest.raises(ValueError, match=r"its header declares 4000000\d+ bytes, the file has \d+\)$"):
        read_weights(path)


def test_a_weights_file_written_by_save_weights_still_loads(tmp_path):
    model = tp.layers.Dense(3)
    model(tp.constant(np.zeros((1, 2), np.float32)))
    model.save_weights(tmp_path / "w.safetensors")
    assert set(read_weights(tmp_path / "w.safetensors")) == set(model.state_dict())
