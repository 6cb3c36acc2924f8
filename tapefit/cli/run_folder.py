"""The run folder of ``train``: its lock, and the marker that says train made it.

**Lock.** One process per run folder: an ``fcntl.flock`` on a file inside it, held for the
life of a run. The lock belongs to the open file, so the OS releases it when the process ends
in any way (SIGKILL included): a lock is never stale. The file holds the holder's pid, for the
message a second process gets.

**Marker.** A folder is a run folder because ``train`` marked it when it first wrote into it:
the marker file lists the top-level entries that runs wrote there (the resolved config, the
weights, each plugin's files). ``--overwrite`` removes exactly those, and only in a marked
folder; a user's own files beside them stay.

**No links.** The lock, the marker and the files a run writes are opened without following
symbolic links, and a run folder whose top-level entries include a link is refused: a run
never writes outside its folder through a link planted in it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path

from tapefit.core.files import atomic_write

LOCK_NAME = ".train.lock"
"""The lock file inside a run folder (hidden; it stays after the run, unlocked)."""

MARKER_NAME = ".tapefit-run"
"""The marker inside a run folder: JSON naming the entries runs wrote (see the module docstring)."""

_MARKER_FORMAT = "tapefit-run"
_MAX_MARKER_BYTES = 2**20
_BOOKKEEPING = (LOCK_NAME, MARKER_NAME)


class RunFolderError(Exception):
    """The run folder cannot be used as it is; the message names the file and why."""


class RunFolderBusy(RunFolderError):
    """Another process holds the run folder's lock.

    Attributes:
        folder: the run folder.
        pid: the holder's process id, or ``None`` when it cannot be read.
    """

    def __init__(self, folder: Path, pid: int | None) -> None:
        holder = f"process {pid}" if pid is not None else "another process"
        super().__init__(
            f"{folder} is in use by {holder} (another train of the same run); wait for it to end, "
            "or give this run another name (--set name=...)"
        )
        self.folder = folder
        self.pid = pid


class RunLock:
    """The lock of one run folder; ``acquire`` it, ``release`` it when the run ends."""

    def __init__(self, folder: Path, fd: int, created_file: bool, created_folders: list[Path]) -> None:
        self.folder = folder
        self._fd: int | None = fd
        self._created_file = created_file
        self._created_folders = created_folders  # deepest first

    @property
    def path(self) -> Path:
        """The lock file."""
        return self.folder / LOCK_NAME

    @classmethod
    def acquire(cls, folder: str | os.PathLike[str]) -> RunLock:
        """Creates ``folder`` if needed and locks it without waiting.

        Raises:
            RunFolderBusy: another process holds it (the message names its pid).
            RunFolderError: the lock file is a link, a folder, a FIFO or anything but a file.
            OSError: the folder cannot be made or the lock file created (read-only, too long).
        """
        folder = Path(folder)
        created_folders = [f for f in (folder, *folder.parents) if not f.exists()]
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / LOCK_NAME
        created_file = not os.path.lexists(path)
        _refuse_a_link(path)
        # O_NONBLOCK: a FIFO planted as the lock file must not block the open.
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags, 0o666)
        except IsADirectoryError:
            raise RunFolderError(f"{path} is a folder; it is train's lock file: remove it") from None
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise RunFolderError(f"{path} is not a regular file; it is train's lock file: remove it")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise RunFolderBusy(folder, pid) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return cls(folder, fd, created_file, created_folders)

    def release(self, undo: bool = False) -> None:
        """Unlocks. ``undo``: the run never started, so remove the lock file and the folder if
        ``acquire`` created them (folders only while they are empty)."""
        if self._fd is None:
            return
        if undo and self._created_file:
            with contextlib.suppress(OSError):
                self.path.unlink()
        for created in self._created_folders if undo else ():
            try:
                created.rmdir()  # only when still empty
            except OSError:
                break
        os.close(self._fd)
        self._fd = None


def _read_pid(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        os.lseek(fd, 0, os.SEEK_SET)
        return int(os.read(fd, 32).decode().strip())
    return None


def _refuse_a_link(path: Path) -> None:
    if os.path.islink(path):
        raise RunFolderError(
            f"{path} is a symbolic link; train writes its files inside the run folder, never through a "
            "link: remove it"
        )


def entries(folder: Path) -> list[str]:
    """The names in a run folder, but for the lock and the marker."""
    return sorted(name for name in os.listdir(folder) if name not in _BOOKKEEPING) if folder.is_dir() else []


def check_no_links(folder: Path) -> None:
    """Refuses a run folder that holds a symbolic link at its top level (``RunFolderError``)."""
    for name in (*_BOOKKEEPING, *entries(folder)):
        _refuse_a_link(folder / name)


def _plain(name: object) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name


def recorded(folder: Path) -> list[str] | None:
    """The entries the marker says runs wrote, or ``None`` when ``folder`` has no valid marker
    (so it is not a run folder). The marker is read as untrusted: a regular file of bounded
    size, and only plain names of the folder's own entries."""
    marker = folder / MARKER_NAME
    try:
        info = os.lstat(marker)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_MARKER_BYTES:
            return None
        with open(marker, "rb") as f:
            data = json.loads(f.read(_MAX_MARKER_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("format") != _MARKER_FORMAT:
        return None
    names = data.get("written")
    if not isinstance(names, list) or not all(_plain(n) and n not in _BOOKKEEPING for n in names):
        return None
    return sorted(set(names))


def is_run_folder(folder: Path) -> bool:
    """Whether ``train`` marked ``folder`` as a run folder."""
    return recorded(folder) is not None


def record(folder: Path, names: Iterable[str]) -> None:
    """Adds ``names`` (top-level entries a run wrote) to the folder's marker, making it if needed."""
    names = {n for n in names if _plain(n) and n not in _BOOKKEEPING}
    before = recorded(folder)
    if before is not None and names <= set(before):
        return
    _write_marker(folder, names | set(before or ()))


def _write_marker(folder: Path, written: Iterable[str]) -> None:
    text = json.dumps({"format": _MARKER_FORMAT, "version": 1, "written": sorted(written)}, indent=1) + "\n"
    _refuse_a_link(folder / MARKER_NAME)
    atomic_write(folder / MARKER_NAME, lambda f: f.write(text.encode("utf-8")))


def remove_recorded(folder: Path) -> list[str]:
    """Deletes the entries a marked folder's runs wrote (a link itself, never what it points at)
    and empties the marker; returns the names of the entries it kept (not written by a run)."""
    names = recorded(folder)
    if names is None:
        raise RunFolderError(f"{folder} is not a tapefit run folder (train did not make it); not deleting it")
    for name in names:
        path = folder / name
        with contextlib.suppress(FileNotFoundError):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    _write_marker(folder, ())
    return entries(folder)
