"""The fused ops' workspace: an array is handed out again only once nothing else holds it."""

import numpy as np
import pytest

from tapefit.core.ops import workspace


@pytest.fixture(autouse=True)
def _fresh_workspace(monkeypatch):
    monkeypatch.setattr(workspace._kept, "arrays", [])


def test_a_released_array_is_reused():
    a = workspace.empty((7, 3), np.float32)
    address = a.ctypes.data
    del a
    b = workspace.empty((7, 3), np.float32)
    assert b.ctypes.data == address


def test_a_held_array_or_a_view_of_it_is_not_reused():
    a = workspace.empty((5, 4), np.float64)
    b = workspace.empty((5, 4), np.float64)
    assert not np.shares_memory(a, b)
    view = a[1:]
    address = a.ctypes.data
    del a
    c = workspace.empty((5, 4), np.float64)
    assert not np.shares_memory(c, view) and not np.shares_memory(c, b)
    del c, view
    assert workspace.empty((5, 4), np.float64).ctypes.data == address


def test_other_shapes_and_dtypes_get_their_own_arrays():
    a = workspace.empty((2, 3), np.float32)
    b = workspace.empty((3, 2), np.float32)
    c = workspace.empty((2, 3), np.float64)
    assert b.shape == (3, 2) and c.dtype == np.float64
    assert not np.shares_memory(a, b) and not np.shares_memory(a, c)


def test_arrays_over_the_limit_are_not_kept(monkeypatch):
    monkeypatch.setattr(workspace, "LIMIT", 1024)
    big = workspace.empty((300,), np.float64)  # 2400 bytes
    assert all(k is not big for k in workspace._kept.arrays)
    small = workspace.empty((10,), np.float64)
    assert any(k is small for k in workspace._kept.arrays)
    del small
    other = workspace.empty((125,), np.float64)  # 1000 bytes: the free small one makes room
    assert [k is other for k in workspace._kept.arrays] == [True]
