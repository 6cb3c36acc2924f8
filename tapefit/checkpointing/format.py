"""Checkpoint files: the format, pointers, loading with every check.

Used by the trainer, the ``train`` command and any plugin; it knows nothing of plugins (the
``checkpoint`` plugin decides when to save and what to keep).

**Format.** One checkpoint is one ``.npz`` file (a zip of ``.npy`` members, written and
read with ``allow_pickle=False``, so loading never runs code). Every array of the
checkpoint's contents is a member; the rest of the contents (counters, random
generator states, the config, plugin states) is JSON in the member ``__metadata__``,
with each array replaced by ``{"__ndarray__": member name}``. The member ``__digest__``
holds the SHA-256 of the metadata and of every array (name, dtype, shape and bytes);
``load_checkpoint`` recomputes it and refuses a file that does not match, naming it.

**Atomic writes.** A checkpoint is written with ``tapefit.core.files.atomic_write`` (a
temporary file in the same folder, ``fsync``, rename). The ``last`` pointer (a one-line text
file naming the newest checkpoint) is written the same way, after the checkpoint, so a process
killed at any moment leaves ``last`` naming a complete checkpoint. Pointers are read as
untrusted input (``read_pointer``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import zipfile
from pathlib import Path
from typing import IO, Any

import numpy as np

from tapefit.core.files import (
    FileRefused,
    atomic_write,
    file_kind,
    file_size,
    npy_header,
    open_regular,
    open_untrusted,
)
from tapefit.core.messages import shown
from tapefit.core.tensor import Tensor

FORMAT_NAME = "tapefit-checkpoint"
FORMAT_VERSION = 1
LAST_POINTER = "last"
_METADATA = "__metadata__"
_DIGEST = "__digest__"
_ARRAY_REF = "__ndarray__"
_MAX_METADATA_BYTES = 64 * 2**20
_MAX_POINTER_BYTES = 4096
_MAX_NAME_BYTES = 255

logger = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated, corrupted, or not a tapefit checkpoint."""


# ---------------------------------------------------------------------------
# Contents <-> (JSON metadata, arrays)
# ---------------------------------------------------------------------------


def _split(contents: dict[str, Any]) -> tuple[Any, dict[str, np.ndarray]]:
    """Replaces every array in ``contents`` by a reference; returns (JSON-able data, arrays)."""
    arrays: dict[str, np.ndarray] = {}

    def member_name(path: list[str]) -> str:
        base = "/".join(path) or "array"
        name, i = base, 2
        while name in arrays or name in (_METADATA, _DIGEST):
            name, i = f"{base}~{i}", i + 1
        return name

    def convert(value: Any, path: list[str]) -> Any:
        if isinstance(value, Tensor):
            value = value.numpy()
        if isinstance(value, (np.ndarray, np.generic)) and not isinstance(value, np.bool_ | np.str_):
            array = np.asarray(value)
            if array.dtype.kind not in "biuf":
                raise TypeError(
                    f"checkpoint entry {'/'.join(path)!r}: cannot store arrays of dtype {array.dtype}"
                )
            name = member_name(path)
            arrays[name] = np.asarray(array, order="C")  # ascontiguousarray would make 0-d arrays 1-d
            return {_ARRAY_REF: name}
        if isinstance(value, np.bool_):
            return bool(value)
        if isinstance(value, np.str_):
            return str(value)
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise TypeError(
                        f"checkpoint entry {'/'.join(path) or '<root>'!r}: keys must be strings, got {shown(key)}"
                    )
                out[key] = convert(item, [*path, key])
            return out
        if isinstance(value, (list, tuple)):
            return [convert(item, [*path, str(i)]) for i, item in enumerate(value)]
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        raise TypeError(
            f"checkpoint entry {'/'.join(path)!r}: cannot store a {type(value).__name__}; "
            "states must be dicts, lists, numbers, strings, None and arrays"
        )

    return convert(contents, []), arrays


def _join(data: Any, arrays: dict[str, np.ndarray], source: Path) -> Any:
    """The inverse of ``_split``."""

    def convert(value: Any) -> Any:
        if isinstance(value, dict):
            if set(value) == {_ARRAY_REF}:
                try:
                    return arrays[value[_ARRAY_REF]]
                except KeyError:
                    raise CheckpointError(f"{source}: missing array {shown(value[_ARRAY_REF])}") from None
            return {k: convert(v) for k, v in value.items()}
        if isinstance(value, list):
            return [convert(v) for v in value]
        return value

    return convert(data)


def _digest(metadata: bytes, arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    h.update(metadata)
    for name in sorted(arrays):
        array = arrays[name]
        h.update(f"\0{name}\0{array.dtype.str}\0{array.shape}\0".encode())
        h.update(np.ascontiguousarray(array).data.cast("B"))
    return h.hexdigest()


# ---------------------------------------------------------------------------
# Saving and loading
# ---------------------------------------------------------------------------


def _write_npz(f: IO[bytes], members: dict[str, np.ndarray]) -> None:
    # Uncompressed, like np.savez; allow_pickle=False also refuses object arrays here.
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, array in members.items():
            with zf.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, array, allow_pickle=False)


def save_checkpoint(path: str | os.PathLike[str], contents: dict[str, Any]) -> Path:
    """Writes ``contents`` (nested dicts/lists of JSON values and arrays) atomically to ``path``.

    Returns:
        The path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data, arrays = _split({"format": FORMAT_NAME, "version": FORMAT_VERSION, **contents})
    metadata = json.dumps(data, sort_keys=True, allow_nan=True).encode("utf-8")
    digest = _digest(metadata, arrays)
    members = {
        _METADATA: np.frombuffer(metadata, dtype=np.uint8),
        _DIGEST: np.frombuffer(digest.encode("ascii"), dtype=np.uint8),
        **arrays,
    }
    return atomic_write(path, lambda f: _write_npz(f, members))


def read_pointer(pointer: str | os.PathLike[str]) -> str:
    """The checkpoint file name that a pointer file (``last``, ``best``) holds.

    The pointer is untrusted: it must be a small regular file (not a link) holding one plain
    file name of the same folder.

    Raises:
        FileNotFoundError: there is no pointer.
        CheckpointError: the pointer cannot be followed; the message names it and says why.
    """
    pointer = Path(pointer)
    info = os.lstat(pointer)
    if not stat.S_ISREG(info.st_mode):
        raise CheckpointError(
            f"the pointer {pointer} is {file_kind(info.st_mode)}, not the file that train writes"
        )
    if info.st_size > _MAX_POINTER_BYTES:
        raise CheckpointError(f"the pointer {pointer} is {info.st_size} bytes; a pointer holds one file name")
    try:
        with open_regular(pointer) as f:
            name = f.read(_MAX_POINTER_BYTES + 1).strip()
    except (OSError, UnicodeDecodeError) as error:
        raise CheckpointError(f"the pointer {pointer} cannot be read ({error})") from error
    plain = name not in ("", ".", "..") and not any(c in name for c in "/\\\0")
    if not plain or len(name.encode("utf-8")) > _MAX_NAME_BYTES:
        raise CheckpointError(
            f"the pointer {pointer} holds {shown(name)}, which is not a file name in its folder"
        )
    return name


def resolve_checkpoint(path: str | os.PathLike[str]) -> Path:
    """The checkpoint file that ``path`` means.

    Args:
        path: a checkpoint file, or a folder whose ``last`` pointer names one.

    Raises:
        FileNotFoundError: nothing there (the message names the path).
        CheckpointError: the ``last`` pointer cannot be followed (``read_pointer``), or names
            something that is not a checkpoint file in the folder.
    """
    path = Path(path)
    if path.is_dir():
        pointer = path / LAST_POINTER
        if not os.path.lexists(pointer):
            raise FileNotFoundError(
                f"{path} is a folder without a '{LAST_POINTER}' pointer: no checkpoint to resume"
            )
        name = read_pointer(pointer)
        target = path / name
        try:
            mode = os.lstat(target).st_mode
        except FileNotFoundError:
            raise CheckpointError(
                f"the pointer {pointer} names {shown(name)}, which is not in {path}"
            ) from None
        if not stat.S_ISREG(mode):
            raise CheckpointError(f"the pointer {pointer} names {shown(name)}, which is {file_kind(mode)}")
        return target
    if path.exists():  # not a folder: load_checkpoint says what else it is
        return path
    if path.with_name(path.name + ".npz").is_file():
        return path.with_name(path.name + ".npz")
    raise FileNotFoundError(f"no checkpoint at {path}")


def latest_checkpoint(folder: str | os.PathLike[str]) -> Path | None:
    """The checkpoint that ``folder``'s ``last`` pointer names, or ``None`` when it has no pointer.

    Raises:
        CheckpointError: the pointer is there but cannot be followed.
    """
    try:
        return resolve_checkpoint(folder) if Path(folder).is_dir() else None
    except FileNotFoundError:
        return None


def resume_point(folder: str | os.PathLike[str]) -> tuple[Path | None, str | None]:
    """The checkpoint to continue a run from, and a note when it is not the one ``last`` names.

    It is what ``last`` names; where ``last`` is missing or cannot be followed while the folder
    holds checkpoints, it is the intact one that holds the furthest position (its trainer step,
    then the newest file), and the note says so. ``(None, None)``: the folder holds no checkpoint.

    Raises:
        CheckpointError: the pointer cannot be followed and no intact checkpoint is left in the
            folder; the message names the pointer, so that a run never starts over on top of them.
    """
    folder = Path(folder)
    pointer = folder / LAST_POINTER
    if pointer.is_dir() and not pointer.is_symlink():  # the next save could not write the pointer
        raise CheckpointError(f"{pointer} is a folder where the '{LAST_POINTER}' pointer belongs; remove it")
    broken = True
    try:
        named = latest_checkpoint(folder)
    except CheckpointError as error:
        named, problem = None, str(error)
    else:
        broken, problem = False, f"{folder} has no '{LAST_POINTER}' pointer"
    if named is not None:
        return named, None
    candidates = sorted(folder.glob("*.npz")) if folder.is_dir() else []
    best: tuple[tuple[int, int], Path] | None = None
    for candidate in candidates:
        try:
            if not stat.S_ISREG(os.lstat(candidate).st_mode):
                continue
            step = load_checkpoint(candidate).get("trainer", {}).get("step", -1)
            key = (step if isinstance(step, int) else -1, candidate.stat().st_mtime_ns)
        except (OSError, ValueError):
            continue
        if best is None or key > best[0]:
            best = (key, candidate)
    if best is not None:
        return best[1], f"{problem}; continuing from the newest intact checkpoint, {best[1]}"
    if broken or candidates:
        raise CheckpointError(f"{problem}, and {folder} holds no intact checkpoint to continue from")
    return None, None


def _read_members(f: IO[bytes], path: Path) -> dict[str, np.ndarray]:
    """The ``.npy`` members of the checkpoint's zip (the open file ``f``), checked before any
    byte is inflated.

    ``save_checkpoint`` stores members uncompressed, so a member that claims compression, or
    an uncompressed size that the file cannot hold, is refused from the zip directory alone:
    a small file whose member claims gigabytes (a zip bomb) is never decompressed. Each
    member's ``.npy`` header (its dtype and shape) must then account for its size exactly.
    """
    length = file_size(f)
    members: dict[str, np.ndarray] = {}
    with zipfile.ZipFile(f) as zf:
        infos = zf.infolist()
        for info in infos:
            if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
                raise CheckpointError(
                    f"{path}: member {shown(info.filename)} is compressed ({info.file_size} bytes declared); "
                    "tapefit checkpoints store their members uncompressed, so it is not read"
                )
        if sum(info.file_size for info in infos) > length:
            raise CheckpointError(f"{path}: its members declare more bytes than the file holds")
        for info in infos:
            name = info.filename.removesuffix(".npy")
            if name == _METADATA and info.file_size > _MAX_METADATA_BYTES:
                raise CheckpointError(
                    f"{path}: its metadata is {info.file_size} bytes, more than a checkpoint holds"
                )
            with zf.open(info) as member:
                try:
                    npy_header(member, info.file_size, f"{path}: member {shown(info.filename)}")
                except FileRefused as error:
                    raise CheckpointError(str(error)) from None
            with zf.open(info) as member:
                members[name] = np.lib.format.read_array(member, allow_pickle=False)
    return members


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Reads and verifies a checkpoint written by ``save_checkpoint``.

    Args:
        path: a checkpoint file, or a folder with a ``last`` pointer.

    Returns:
        The contents, arrays as ndarrays.

    Raises:
        CheckpointError: the file is truncated, corrupted (digest mismatch), or not a
            tapefit checkpoint; the message names the file.
    """
    path = resolve_checkpoint(path)
    try:
        f = open_untrusted(path, "checkpoint")
    except FileRefused as error:
        raise CheckpointError(str(error)) from None
    with f:
        magic = f.read(2)
        # np.load would try any other file as a pickle and say so; name what is wrong instead.
        if not magic:
            raise CheckpointError(f"{path}: the file is empty (a truncated checkpoint)")
        if magic != b"PK":
            raise CheckpointError(
                f"{path}: not a tapefit checkpoint (checkpoints are the .npz files that the checkpoint "
                "plugin writes)"
            )
        f.seek(0)
        try:
            members = _read_members(f, path)
        except CheckpointError:
            raise
        except Exception as error:  # zipfile, numpy and OS errors all mean the same here
            raise CheckpointError(
                f"{path}: cannot read the checkpoint, the file is truncated or corrupted "
                f"({type(error).__name__}: {error})"
            ) from error
    if _METADATA not in members or _DIGEST not in members:
        raise CheckpointError(f"{path}: not a tapefit checkpoint (no {_METADATA}/{_DIGEST} members)")
    metadata = members.pop(_METADATA).tobytes()
    stored = members.pop(_DIGEST).tobytes().decode("ascii", errors="replace")
    if _digest(metadata, members) != stored:
        raise CheckpointError(f"{path}: the checkpoint is corrupted (its SHA-256 digest does not match)")
    try:
        data = json.loads(metadata.decode("utf-8"))
    except ValueError as error:
        raise CheckpointError(f"{path}: unreadable metadata: {error}") from error
    except RecursionError:
        raise CheckpointError(f"{path}: unreadable metadata: nested too deeply") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise CheckpointError(f"{path}: not a tapefit checkpoint")
    if data.get("version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {shown(data.get('version'))} is not supported"
        )
    return _join(data, members, path)


def write_pointer(folder: str | os.PathLike[str], name: str, target: str) -> Path:
    """Atomically writes the pointer file ``folder/name`` naming ``target`` (a file name in ``folder``)."""
    return atomic_write(Path(folder) / name, lambda f: f.write(f"{target}\n".encode()))


# ---------------------------------------------------------------------------
# The plugin
# ---------------------------------------------------------------------------
