"""Data sets for training: digits, spirals, the user's npz and csv files, and their preparation.

``load_digits`` and ``make_spirals`` need no files; ``load_npz`` and ``load_csv`` read the
user's own, ``open_npy`` and ``load_npy`` open ``.npy`` files memory-mapped. ``validation_split``
and ``standardize`` prepare any of them. ``Pipeline`` runs per-sample work in worker processes
(on Grain, the ``data`` extra).
"""

from tapefit.data.arrays import DataError, check_arrays, is_lazy, standardize, validation_split
from tapefit.data.digits import load_digits
from tapefit.data.files import load_csv, load_npz
from tapefit.data.npy import NpyFile, ShardedArray, load_npy, open_npy
from tapefit.data.pipeline import Pipeline
from tapefit.data.spirals import make_spirals

__all__ = [
    "DataError",
    "NpyFile",
    "Pipeline",
    "ShardedArray",
    "check_arrays",
    "is_lazy",
    "load_csv",
    "load_digits",
    "load_npy",
    "load_npz",
    "make_spirals",
    "open_npy",
    "standardize",
    "validation_split",
]
