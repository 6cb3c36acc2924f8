"""Writing and opening files as tapefit does everywhere: complete or absent, never through a link.

``atomic_write`` writes to a temporary file in the same folder, flushes, ``fsync``-s and renames
it over the final name (atomic within one file system), then ``fsync``-s the folder: a crash
never leaves a half-written file where a good one was, and the rename replaces a symbolic link
planted at the name instead of writing through it. ``open_regular`` opens a text file that must
be a regular file, never through a link, so that a FIFO or a device planted in its place is
refused instead of blocking or reading without end. Checkpoints, weights and model files, ONNX
exports, the run folder's files and the plugins' logs all go through these two.

Every file tapefit reads is untrusted (a config, a data file, a weights file, a checkpoint):
``open_untrusted`` opens it for reading only once the opened file is known to be a regular file
of at most the size its kind may have, and ``npy_header`` checks that the bytes a ``.npy`` header
declares are the bytes there are, so that no reader allocates or waits for what a header merely
claims. Readers turn ``FileRefused`` into their own error.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import numpy as np

TEMPORARY_SUFFIX = ".tmp"
"""The suffix of ``atomic_write``'s temporary files (``.<name>.<12 hex digits>.tmp``)."""

TEMPORARY_NAME_KEPT = 32
"""How many characters of the final name a temporary file's name keeps (``.<name>`` above): at
most 18 + 32 characters whatever the final name's length, so that every name the file system
allows can be written (a 250-character name plus 18 would pass its limit of 255 bytes)."""


def _fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable; not every platform can open a folder.
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _create_temporary(path: Path) -> tuple[int, str]:
    # Not tempfile.mkstemp: its files are 0600, and the rename would carry that over; 0666
    # through the umask gives what a plain open() gives.
    while True:
        kept = path.name[:TEMPORARY_NAME_KEPT]
        name = str(path.parent / f".{kept}.{secrets.token_hex(6)}{TEMPORARY_SUFFIX}")
        try:
            return os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666
            ), name
        except FileExistsError:
            continue


def naming(error: OSError, path: str | os.PathLike[str]) -> OSError:
    """``error`` with ``path`` as its file name when it has none (a write on a full disk names no
    file), so that its one line says which file failed: ``[Errno 28] No space left on device:
    'runs/x/history.csv'``."""
    if error.filename is not None or error.errno is None:
        return error
    return OSError(error.errno, error.strerror, os.fspath(path))  # the errno's subclass


@contextlib.contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[None]:
    """Re-raises an ``OSError`` of the block with ``path`` as its file name (``naming``)."""
    try:
        yield
    except OSError as error:
        named = naming(error, path)
        if named is error:
            raise
        raise named from error


def atomic_write(path: str | os.PathLike[str], write: Callable[[IO[bytes]], object]) -> Path:
    """Writes a file so that it is either complete or absent, never half-written.

    Args:
        path: the final file name.
        write: called with a binary file object to write the contents into.

    Returns:
        The path written.

    Raises:
        OSError: the file could not be written (a full disk); it names ``path``, and the file
            that was there before is left as it was.
    """
    path = Path(path)
    with writing(path):
        fd, tmp_name = _create_temporary(path)
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp_name, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
            raise
    _fsync_dir(path.parent)
    return path


_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words (for an error that names it)."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def not_regular(mode: int) -> str | None:
    """What a file of ``st_mode`` ``mode`` is when it is not a regular file (``"a named pipe
    (FIFO)"``), else ``None``."""
    return None if stat.S_ISREG(mode) else file_kind(mode)


def open_regular(path: str | os.PathLike[str], mode: str = "r") -> IO[str]:
    """Opens a text file (``"r"``, ``"w"`` or ``"a"``) that must be a regular file, never through a
    symbolic link: a file a run writes stays inside its folder, and a FIFO or device planted in
    its place is refused instead of blocking or reading without end. The file object is named by
    ``path``, as ``open`` names it.

    Raises:
        OSError: as ``open`` does, or with the path and what it is instead of a regular file.
    """
    flags = {"r": os.O_RDONLY, "w": os.O_WRONLY | os.O_CREAT, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND}
    path = Path(path)

    def opener(name: str, _: int) -> int:
        # Without O_TRUNC: a file is emptied only once it is known to be a regular file.
        extra = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(name, flags[mode] | extra, 0o666)
        except OSError:
            try:
                found: int | None = os.lstat(name).st_mode
            except OSError:
                found = None
            if found is not None and stat.S_ISLNK(found):
                raise OSError(
                    f"{path} is a symbolic link; tapefit reads and writes its files only in place"
                ) from None
            if found is not None and not stat.S_ISREG(found):  # a FIFO without a reader (ENXIO), a folder
                raise OSError(f"{path} is {file_kind(found)}, not a regular file") from None
            raise  # the open's own error, which names the path
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise OSError(f"{path} is {file_kind(info.st_mode)}, not a regular file")
            os.set_blocking(fd, True)
            if mode == "w":
                os.ftruncate(fd, 0)
        except BaseException:
            os.close(fd)
            raise
        return fd

    return open(path, mode, newline="", encoding="utf-8", opener=opener)


# ---------------------------------------------------------------------------
# Reading untrusted files
# ---------------------------------------------------------------------------


class FileRefused(ValueError):
    """A file tapefit does not read: missing, not a regular file, larger than its kind may be,
    or claiming in a header what it does not hold. The message is one line naming the file."""


def open_untrusted(path: str | os.PathLike[str], what: str, *, max_bytes: int | None = None) -> IO[bytes]:
    """Opens ``path`` for reading in binary, once it is known to be a regular file.

    The check is made on the opened file (``fstat``), so what is read is what was checked;
    the open itself does not block on a named pipe. A symlink is followed: the file it
    names is checked.

    Args:
        path: the file.
        what: what the file is for the message (``"config file"``, ``"data file"``).
        max_bytes: the largest size this kind of file may have, or ``None`` for any.

    Raises:
        FileRefused: naming the file and what is wrong with it.
    """
    name = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(name, flags)
    except FileNotFoundError:
        raise FileRefused(f"{what} {name!r} does not exist") from None
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the name
        reason = getattr(error, "strerror", None) or str(error)
        raise FileRefused(f"cannot read {what} {name!r}: {reason}") from None
    try:
        info = os.fstat(fd)
        kind = not_regular(info.st_mode)
        if kind is not None:
            raise FileRefused(f"{what} {name!r} is {kind}, not a regular file")
        if max_bytes is not None and info.st_size > max_bytes:
            raise FileRefused(
                f"{what} {name!r} is {info.st_size} bytes, more than the {max_bytes} a {what} may have"
            )
        if getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def file_size(f: IO[bytes]) -> int:
    """The size of the open file ``f``, in bytes."""
    return os.fstat(f.fileno()).st_size


def npy_header(f: IO[bytes], size: int, what: str) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """Reads the ``.npy`` header at ``f``'s position and checks it against the ``.npy``'s size.

    Args:
        f: a binary file (or a zip member) positioned at the ``.npy``'s first byte.
        size: how many bytes the ``.npy`` occupies there (the file's length from that
            position, or the zip member's size).
        what: the ``.npy`` for the message (``"data file 'x.npy'"``).

    Returns:
        ``(shape, dtype, fortran_order, header_bytes)``; ``f`` is left at the first byte of data.

    Raises:
        FileRefused: not a ``.npy`` header (or one of a version not read), an array of Python
            objects, or a shape and dtype that do not account for ``size`` exactly.
    """
    start = f.tell()
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise FileRefused(f"{what} has .npy format {version}, which is not read")
    except FileRefused:
        raise
    except (ValueError, OSError, EOFError) as error:
        raise FileRefused(f"{what} has no readable .npy header ({str(error).splitlines()[0]})") from None
    if dtype.hasobject:
        raise FileRefused(f"{what} holds Python objects, which are never loaded (unpickling can run code)")
    header = f.tell() - start
    declared = header + math.prod(shape) * dtype.itemsize
    if declared != size:
        raise FileRefused(f"{what} declares {declared} bytes of {dtype} {tuple(shape)}, but holds {size}")
    return tuple(shape), dtype, bool(fortran), header
