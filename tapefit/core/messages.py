"""How error messages quote the values they were given: briefly, on one line.

A value in a message may come from a file (a model file, a checkpoint, a config), so it may be
as long as the file: an error quotes at most ``LIMIT`` characters of it, the start and ``...``.
"""

from __future__ import annotations

import reprlib
from typing import Any

__all__ = ["LIMIT", "shown"]

LIMIT = 80
"""The most characters of a value an error message quotes."""

_repr = reprlib.Repr()
_repr.maxlevel = 3
_repr.maxlist = _repr.maxtuple = _repr.maxset = _repr.maxdict = _repr.maxarray = LIMIT // 2
_repr.maxstring = _repr.maxother = _repr.maxlong = 4 * LIMIT


def shown(value: Any, limit: int = LIMIT) -> str:
    """``repr(value)`` on one line, cut to ``limit`` characters (its start, then ``...``; a string
    keeps its quotes around them).

    The cost does not grow with the value: a string is cut before its repr is made, and a
    container's repr looks at its first items only.
    """
    if isinstance(value, str):  # cut inside the quotes: 'abc...'
        text, keep = repr(value[: limit + 1]), limit
        while len(text) > limit and keep > 0:
            keep -= 1
            text = repr(value[:keep] + "...")
        return text
    try:
        text = _repr.repr(value)
    except Exception:  # a repr that fails must not hide the error being reported
        text = f"<{type(value).__name__}>"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
