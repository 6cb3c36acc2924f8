"""The 8x8 handwritten digits (1797 images, 10 classes), from scikit-learn's bundled copy.

Nothing is downloaded: scikit-learn ships the data inside its package (``pip install
'tapefit[digits]'`` installs it).
"""

from __future__ import annotations

import gzip
import importlib.util
import os

import numpy as np

from tapefit.data.arrays import DataError

NUM_SAMPLES = 1797
_MISSING = "data.type 'digits' needs scikit-learn, which ships the digits: pip install 'tapefit[digits]'"


def _bundled_file() -> str | None:
    # find_spec locates scikit-learn without importing it (which takes about a second).
    spec = importlib.util.find_spec("sklearn")
    if spec is None or spec.origin is None:
        raise DataError(_MISSING)
    path = os.path.join(os.path.dirname(spec.origin), "datasets", "data", "digits.csv.gz")
    return path if os.path.isfile(path) else None


def _read_table() -> np.ndarray:
    path = _bundled_file()
    if path is not None:
        with gzip.open(path, "rt") as f:
            table = np.loadtxt(f, delimiter=",")
        if table.shape == (NUM_SAMPLES, 65):
            return table
    # A scikit-learn that keeps the file elsewhere: its public loader finds it.
    from sklearn.datasets import load_digits as sklearn_load_digits

    bunch = sklearn_load_digits()
    return np.concatenate([bunch.data, bunch.target[:, None]], axis=1)


def load_digits(flatten: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Loads the 1797 digits with pixel values scaled from 0..16 to [0, 1].

    Args:
        flatten: ``True`` gives features of shape ``(1797, 64)`` for an MLP; ``False`` gives
            NHWC images of shape ``(1797, 8, 8, 1)`` for a CNN.

    Returns:
        ``(x, y)``: float32 pixels and int32 labels 0..9, in scikit-learn's order.

    Raises:
        DataError: If scikit-learn is not installed.
    """
    table = _read_table()
    x = (table[:, :64] / 16.0).astype(np.float32)
    y = table[:, 64].astype(np.int32)
    if not flatten:
        x = x.reshape(-1, 8, 8, 1)
    return x, y
