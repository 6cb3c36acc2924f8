"""Checkpoints: the file format, atomic writes, pointers, and the checks of untrusted checkpoints.

``format`` writes and reads one checkpoint file (``.npz`` of arrays plus JSON metadata, no
pickle, with a digest; written atomically), and reads the ``last``/``best`` pointers as
untrusted input. ``validate`` checks every field a resume reads (types, ranges, the model's
shapes and dtypes, finite weights) before anything is restored. It knows nothing of plugins:
the ``checkpoint`` plugin decides when to save and what to keep.
"""

from tapefit.checkpointing.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    LAST_POINTER,
    CheckpointError,
    latest_checkpoint,
    load_checkpoint,
    read_pointer,
    resolve_checkpoint,
    resume_point,
    save_checkpoint,
    write_pointer,
)
from tapefit.core.files import TEMPORARY_SUFFIX, atomic_write, open_regular, writing

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "LAST_POINTER",
    "TEMPORARY_SUFFIX",
    "CheckpointError",
    "atomic_write",
    "latest_checkpoint",
    "load_checkpoint",
    "open_regular",
    "read_pointer",
    "resolve_checkpoint",
    "resume_point",
    "save_checkpoint",
    "write_pointer",
    "writing",
]
