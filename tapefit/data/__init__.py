"""Data sets for training: digits, spirals, the user's npz and csv files, and their preparation.

``load_digits`` and ``make_spirals`` need no files; ``load_npz`` and ``load_csv`` read the
user's own. ``validation_split`` and ``standardize`` prepare any of them.
"""

from tapefit.data.arrays import DataError, check_arrays, standardize, validation_split
from tapefit.data.digits import load_digits
from tapefit.data.files import load_csv, load_npz
from tapefit.data.spirals import make_spirals

__all__ = [
    "DataError",
    "check_arrays",
    "load_csv",
    "load_digits",
    "load_npz",
    "make_spirals",
    "standardize",
    "validation_split",
]
