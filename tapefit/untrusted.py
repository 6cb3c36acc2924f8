"""Opening the files tapefit reads, each of them untrusted (DESIGN.md, "Files and signals").

Every reader of a config, a data file (``.npy``, ``.npz``, CSV), a weights file or a
checkpoint opens it with ``open_regular``, the one place that checks what the file is before
a byte is read: a regular file (a named pipe would block the read for ever, ``/dev/zero`` and
other devices never end, a folder holds no bytes), of at most the size its kind may have.
``npy_header`` reads a ``.npy`` header and checks that the bytes it declares are the bytes
there are, so that no reader allocates or waits for what a header merely claims. Readers turn
``FileRefused`` into their own error (``ConfigError``, ``DataError``, ``CheckpointError``).
"""

from __future__ import annotations

import math
import os
import stat
from typing import IO

import numpy as np

__all__ = ["FileRefused", "file_size", "not_regular", "npy_header", "open_regular"]

_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


class FileRefused(ValueError):
    """A file tapefit does not read: missing, not a regular file, larger than its kind may be,
    or claiming in a header what it does not hold. The message is one line naming the file."""


def not_regular(mode: int) -> str | None:
    """What a file of ``st_mode`` ``mode`` is when it is not a regular file (``"a named pipe
    (FIFO)"``), else ``None``."""
    if stat.S_ISREG(mode):
        return None
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def open_regular(path: str | os.PathLike[str], what: str, *, max_bytes: int | None = None) -> IO[bytes]:
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
