"""tp.linalg's square-matrix ops: values against NumPy, gradients against finite differences
(second order too), batches, and errors that name the problem."""

from __future__ import annotations

import numpy as np
import pytest
from tapefit.testing import check_gradients

import tapefit as tp


def spd(n, batch=(), seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(*batch, n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


@pytest.mark.parametrize("batch", [(), (2,)])
def test_values_match_numpy(batch):
    a = spd(3, batch)
    b = np.random.default_rng(1).normal(size=(*batch, 3, 2))
    np.testing.assert_allclose(tp.linalg.inv(a).numpy(), np.linalg.inv(a), rtol=1e-10)
    np.testing.assert_allclose(tp.linalg.det(a).numpy(), np.linalg.det(a), rtol=1e-10)
    np.testing.assert_allclose(tp.linalg.solve(a, b).numpy(), np.linalg.solve(a, b), rtol=1e-10)
    np.testing.assert_allclose(tp.linalg.cholesky(a).numpy(), np.linalg.cholesky(a), rtol=1e-10)


@pytest.mark.parametrize("batch", [(), (2,)])
def test_gradients_match_finite_differences(batch):
    a = spd(3, batch)
    b = np.random.default_rng(1).normal(size=(*batch, 3, 2))
    check_gradients(lambda m: tp.reduce_sum(tp.linalg.inv(m) * np.arange(9.0).reshape(3, 3)), a, order=2)
    check_gradients(lambda m: tp.reduce_sum(tp.linalg.det(m)), a, order=2)
    check_gradients(lambda m, r: tp.reduce_sum(tp.linalg.solve(m, r) ** 2), a, b, order=2)

    # The Cholesky factor depends on the symmetric part: differentiate through a symmetric input.
    def of_cholesky(m):
        sym = 0.5 * (m + tp.linalg.matmul(tp.eye(3, dtype=m.dtype), m, transpose_b=True))
        return tp.reduce_sum(tp.linalg.cholesky(sym) * np.arange(1.0, 10.0).reshape(3, 3))

    check_gradients(of_cholesky, a)


def test_errors_name_the_problem():
    with pytest.raises(
        ValueError, match=r"inv needs square matrices on the last two axes, got shape \(2, 3\)"
    ):
        tp.linalg.inv(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"MatrixInverse: the matrix is singular"):
        tp.linalg.inv(np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"Cholesky: the matrix is singular or not positive definite"):
        tp.linalg.cholesky(-np.eye(2))
    with pytest.raises(TypeError, match=r"det needs a floating matrix, got dtype int64"):
        tp.linalg.det(np.eye(2, dtype=np.int64))
    with pytest.raises(ValueError, match=r"solve: b needs 2 rows"):
        tp.linalg.solve(np.eye(2), np.ones((3, 1)))


def test_shape_linspace_and_a_named_constant():
    assert tp.shape(np.ones((2, 3))) == (2, 3)
    assert tp.shape(tp.Input((None, 4))) == (None, None, 4)
    np.testing.assert_array_equal(tp.linspace(0.0, 1.0, 5).numpy(), np.linspace(0, 1, 5, dtype=np.float32))
    assert tp.linspace(0, 1, 3).dtype == np.float32
    np.testing.assert_array_equal(tp.constant(2.0, shape=(2, 2), name="c").numpy(), np.full((2, 2), 2.0))
    np.testing.assert_array_equal(tp.constant([1, 2, 3, 4], shape=(2, 2)).numpy(), [[1, 2], [3, 4]])
    with pytest.raises(ValueError, match=r"a value of 3 elements cannot take the shape \(2, 2\)"):
        tp.constant([1, 2, 3], shape=(2, 2))
