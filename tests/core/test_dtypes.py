"""The dtypes tapefit uses (``tapefit/core/dtypes.py``) and the conversions that name them."""

import re

import numpy as np
import pytest

import tapefit as tp
from tapefit.core import dtypes


@pytest.mark.parametrize(
    ("given", "want"),
    [("float32", np.float32), (tp.float16, np.float16), (np.int64, np.int64), ("bool", np.bool_)],
)
def test_as_dtype_accepts_the_tensor_dtypes(given, want):
    assert dtypes.as_dtype(given) == np.dtype(want)


@pytest.mark.parametrize("dtype", [object, np.complex64, "U5", "datetime64[s]"])
def test_dtypes_a_tensor_cannot_hold_are_rejected_by_name(dtype):
    name = re.escape(np.dtype(dtype).name)
    with pytest.raises(TypeError, match=f"{name}.*not a tensor dtype"):
        dtypes.as_dtype(dtype)
    for make in (lambda: tp.zeros([2], dtype), lambda: tp.cast(tp.ones([2]), dtype)):
        with pytest.raises(TypeError, match=name):
            make()
    with pytest.raises(TypeError, match=name):
        tp.constant([1.0], dtype)


def test_none_is_not_a_dtype_where_one_is_required():
    # np.dtype(None) is float64: an accidental float64 if passed through
    with pytest.raises(TypeError, match="None is not a dtype"):
        dtypes.as_dtype(None)
    with pytest.raises(TypeError, match="None is not a dtype"):
        tp.cast(tp.ones([2]), None)


def test_unknown_names_are_rejected():
    with pytest.raises(TypeError, match="'floaty' is not a dtype"):
        dtypes.as_dtype("floaty")


@pytest.mark.parametrize(
    ("given", "want"), [(float, tp.float32), ("float", tp.float32), (int, tp.int32), ("int", tp.int32)]
)
def test_python_types_and_their_names_give_the_dtypes_of_python_data(given, want):
    # NumPy reads float and "float" as float64 (and int as int64); TensorFlow's float is float32
    assert dtypes.as_dtype(given) == want
    assert tp.cast(tp.constant([1.0, 0.0]) > 0.5, given).dtype == want
    assert tp.zeros([2], dtype=given).dtype == want
    assert tp.Variable(1, dtype=given).dtype == want
    assert dtypes.as_dtype(bool) == tp.bool
