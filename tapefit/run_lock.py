"""One process per run folder: an OS lock on a file inside it, held for the life of a run.

``fcntl.flock`` locks belong to the open file, so the OS releases them when the process
ends in any way (SIGKILL included): a lock is never stale. The file holds the holder's pid,
for the message a second process gets.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_NAME = ".train.lock"
"""The lock file inside a run folder (hidden; it stays after the run, unlocked)."""


class RunFolderBusy(Exception):
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

    def __init__(self, folder: Path, fd: int, created_file: bool, created_folder: bool) -> None:
        self.folder = folder
        self._fd: int | None = fd
        self._created_file = created_file
        self._created_folder = created_folder

    @property
    def path(self) -> Path:
        """The lock file."""
        return self.folder / LOCK_NAME

    @classmethod
    def acquire(cls, folder: str | os.PathLike[str]) -> RunLock:
        """Creates ``folder`` if needed and locks it without waiting.

        Raises:
            RunFolderBusy: another process holds it (the message names its pid).
        """
        folder = Path(folder)
        created_folder = not folder.exists()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / LOCK_NAME
        created_file = not path.exists()
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pid = _read_pid(fd)
            os.close(fd)
            raise RunFolderBusy(folder, pid) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return cls(folder, fd, created_file, created_folder)

    def release(self, undo: bool = False) -> None:
        """Unlocks. ``undo``: the run never started, so remove the lock file and the folder if
        ``acquire`` created them (the folder only if it is empty)."""
        if self._fd is None:
            return
        if undo and self._created_file:
            with contextlib.suppress(OSError):
                self.path.unlink()
        if undo and self._created_folder:
            with contextlib.suppress(OSError):
                self.folder.rmdir()  # only when still empty
        os.close(self._fd)
        self._fd = None


def _read_pid(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        os.lseek(fd, 0, os.SEEK_SET)
        return int(os.read(fd, 32).decode().strip())
    return None
