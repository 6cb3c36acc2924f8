"""Weight penalties: values against NumPy, Keras's default factors, lookup by name."""

import numpy as np
import pytest

import tapefit as tp
from tapefit.layers import regularizers

W = np.array([[0.5, -1.5], [2.0, -0.25]])


def test_penalties_match_their_formulas():
    x = tp.constant(W)
    assert float(regularizers.L1(0.3)(x)) == pytest.approx(0.3 * np.abs(W).sum())
    assert float(regularizers.L2(0.2)(x)) == pytest.approx(0.2 * np.square(W).sum())
    both = regularizers.L1L2(l1=0.3, l2=0.2)(x)
    assert float(both) == pytest.approx(0.3 * np.abs(W).sum() + 0.2 * np.square(W).sum())
    assert float(regularizers.L1L2()(x)) == 0.0


def test_names_give_keras_default_factors():
    x = tp.constant(W)
    assert float(regularizers.get("l1")(x)) == pytest.approx(0.01 * np.abs(W).sum())
    assert float(regularizers.get("l2")(x)) == pytest.approx(0.01 * np.square(W).sum())
    assert float(regularizers.get("l1_l2")(x)) == pytest.approx(0.01 * (np.abs(W).sum() + np.square(W).sum()))
    assert regularizers.get(None) is None
    mine = regularizers.L2(1.0)
    assert regularizers.get(mine) is mine
    with pytest.raises(
        ValueError, match=r"unknown regularizer 'l3'; known: l1, l1_l2, l1l2, l2, orthogonal_regularizer"
    ):
        regularizers.get("l3")
    with pytest.raises(TypeError, match="a regularizer must be None, a name or a callable"):
        regularizers.get(0.1)


def test_penalties_are_differentiable():
    tp.testing.check_gradients(regularizers.L1L2(l1=0.3, l2=0.2), W, order=1)
    tp.testing.check_gradients(regularizers.L2(0.5), W, order=2)


def test_negative_factors_are_rejected():
    with pytest.raises(ValueError, match="must be >= 0"):
        regularizers.L1L2(l1=-0.1)
