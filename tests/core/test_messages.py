"""``tapefit.core.messages.shown``: how errors quote the values they were given."""

from __future__ import annotations

import time

import numpy as np

from tapefit.core.messages import LIMIT, shown


def test_short_values_are_their_repr() -> None:
    assert shown("relu") == "'relu'"
    assert shown([3, 3]) == "[3, 3]"
    assert shown(None) == "None"


def test_long_values_keep_a_prefix_on_one_line() -> None:
    for value in ([3] * 200_000, "x" * 10**6, "\n" * 500, {"a": list(range(1000))}, np.zeros((300, 300))):
        text = shown(value)
        assert len(text) <= LIMIT and "\n" not in text and text.rstrip("'").endswith("...")
    assert shown("x" * 300).startswith("'xxx") and shown("x" * 300).endswith("...'")


def test_the_cost_does_not_grow_with_the_value() -> None:
    huge = [[1] * 10_000] * 1_000
    start = time.perf_counter()
    shown(huge)
    shown("y" * 50_000_000)
    assert time.perf_counter() - start < 0.5
