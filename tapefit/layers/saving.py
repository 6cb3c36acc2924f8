"""Weight files: a Module's ``state_dict`` as a ``.safetensors`` file, and back.

safetensors is the format PyTorch and Hugging Face tools read: a JSON header naming each
array's dtype, shape and byte range, then the raw bytes. Loading it never runs code (unlike a
pickle). The keys are the ``state_dict`` paths (``sequential/dense/kernel``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tapefit.core.files import FileRefused, atomic_write, file_size, open_untrusted

if TYPE_CHECKING:
    from tapefit.layers.module import Module

SUFFIX = ".safetensors"
_MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit


def _safetensors_numpy() -> Any:
    try:
        import safetensors.numpy
    except ImportError as error:
        raise ImportError(
            "save_weights/load_weights need the 'safetensors' package (a dependency of tapefit): "
            "pip install safetensors"
        ) from error
    return safetensors.numpy


def save_weights(module: Module, path: str | os.PathLike[str]) -> Path:
    """Writes ``module.state_dict()`` to ``path`` (a ``.safetensors`` file); returns the path."""
    path = Path(path)
    if path.suffix != SUFFIX:
        raise ValueError(f"save_weights: the file name must end in '{SUFFIX}', got '{path}'")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"save_weights: the folder '{path.parent}' of '{path}' does not exist")
    st = _safetensors_numpy()
    # asarray, not ascontiguousarray: that one makes a 0-d array (a scalar Variable) shape (1,).
    state = {key: np.asarray(value, order="C") for key, value in module.state_dict().items()}
    data = st.save(state, metadata={"format": "np", "producer": "tapefit"})
    atomic_write(path, lambda f: f.write(data))  # never a half-written file where a good one was
    return path


def read_weights(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The arrays of a ``.safetensors`` file, by key.

    What the file's header claims (its own length, and where the last array ends) is checked
    against the file's length before the arrays are read.

    Raises:
        FileNotFoundError: there is no such file.
        ValueError: the file is not a regular file, not a safetensors file, or its header claims
            more or fewer bytes than the file holds (the message names it).
    """
    path = Path(path)
    st = _safetensors_numpy()
    if not path.exists():
        raise FileNotFoundError(f"load_weights: no such file: '{path}'")
    try:
        f = open_untrusted(path, "weights file")
    except FileRefused as error:
        raise ValueError(f"load_weights: {error}") from None
    with f:
        length = file_size(f)
        prefix = f.read(8)
        header_bytes = int.from_bytes(prefix, "little") if len(prefix) == 8 else -1
        if not 0 < header_bytes <= min(length - 8, _MAX_HEADER_BYTES):
            raise ValueError(
                f"load_weights: '{path}' is not a readable safetensors file (its first 8 bytes claim a "
                f"header of {header_bytes} bytes; the file has {length})"
            )
        header = f.read(header_bytes)
        data_bytes = _data_bytes(header)
        declared = 8 + header_bytes + (data_bytes or 0)
        if data_bytes is not None and declared != length:
            raise ValueError(
                f"load_weights: '{path}' is not a readable safetensors file (its header declares "
                f"{declared} bytes, the file has {length})"
            )
        data = prefix + header + f.read()
    try:
        # From bytes rather than safetensors' memory map: the arrays then hold no open mapping
        # of the file, which could keep it from being replaced later (Windows).
        return dict(st.load(data))
    except Exception as error:  # safetensors raises its own SafetensorError, an Exception
        raise ValueError(f"load_weights: '{path}' is not a readable safetensors file ({error})") from None


def _data_bytes(header: bytes) -> int | None:
    """Where the last array of a safetensors header ends (its ``data_offsets``); ``None`` for a
    header that is not one (``safetensors`` then says what is wrong with it)."""
    try:
        entries = json.loads(header)
        ends = [entry["data_offsets"][1] for key, entry in entries.items() if key != "__metadata__"]
        return max((int(end) for end in ends), default=0)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError):
        return None


def load_weights(module: Module, path: str | os.PathLike[str]) -> None:
    """Loads a ``.safetensors`` file into ``module`` with ``load_state_dict``'s checks."""
    state = read_weights(path)
    try:
        module.load_state_dict(state)
    except ValueError as error:
        raise ValueError(f"load_weights from '{path}': {error}") from None
