"""tapefit's metrics and losses against Keras 3's numbers, which
``scripts/keras_reference_metrics.py`` saved in ``tests/layers/data/keras_metrics.npz`` (CI has
no Keras): each metric's result after several weighted batches, each loss with every reduction,
without and with sample weights."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "keras_reference_metrics.py"
spec = importlib.util.spec_from_file_location("keras_reference_metrics", SCRIPT)
assert spec is not None and spec.loader is not None
reference = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reference)

with np.load(reference.PATH, allow_pickle=False) as _file:
    SAVED = dict(_file)

RTOL = 1e-5


def data(kind):
    return {name: SAVED[f"data/{kind}/{name}"] for name in ("y_true", "y_pred", "sample_weight")}


def test_the_saved_file_is_small_and_has_every_case():
    assert reference.PATH.stat().st_size < 200_000
    for case, *_ in reference.METRIC_CASES:
        assert f"metric/{case}" in SAVED
    for case, *_ in reference.LOSS_CASES:
        for reduction in reference.REDUCTIONS:
            assert f"loss/{case}/{reduction}" in SAVED and f"loss/{case}/{reduction}/weighted" in SAVED
    # the data the script draws is the data it saved
    for kind, arrays in reference.make_data().items():
        for name, value in arrays.items():
            np.testing.assert_array_equal(SAVED[f"data/{kind}/{name}"], value)


@pytest.mark.parametrize(
    "case, cls, kwargs, kind, weighted", reference.METRIC_CASES, ids=lambda v: v if isinstance(v, str) else ""
)
def test_metric_matches_keras(case, cls, kwargs, kind, weighted):
    arrays = data(kind)
    metric = getattr(tp.metrics, cls)(**kwargs)
    for b in range(reference.BATCHES):
        weights = arrays["sample_weight"][b] if weighted else None
        metric.update_state(arrays["y_true"][b], arrays["y_pred"][b], sample_weight=weights)
    np.testing.assert_allclose(metric.result().numpy(), SAVED[f"metric/{case}"], rtol=RTOL, atol=1e-7)


@pytest.mark.parametrize(
    "case, cls, kwargs, kind", reference.LOSS_CASES, ids=lambda v: v if isinstance(v, str) else ""
)
@pytest.mark.parametrize("reduction", reference.REDUCTIONS)
def test_loss_matches_keras(case, cls, kwargs, kind, reduction):
    arrays = data(kind)
    loss = getattr(tp.losses, cls)(reduction=reduction, **kwargs)
    y_true, y_pred = arrays["y_true"][0], arrays["y_pred"][0]
    np.testing.assert_allclose(
        loss(y_true, y_pred).numpy(), SAVED[f"loss/{case}/{reduction}"], rtol=RTOL, atol=1e-6
    )
    weighted = loss(y_true, y_pred, sample_weight=arrays["sample_weight"][0])
    np.testing.assert_allclose(
        weighted.numpy(), SAVED[f"loss/{case}/{reduction}/weighted"], rtol=RTOL, atol=1e-6
    )


def test_the_comparison_names_every_difference():
    a = {"x": np.ones(2, np.float32), "y": np.ones(2, np.float32), "z": np.ones(3, np.float32)}
    b = {"x": a["x"], "y": np.full(2, 2.0, np.float32), "z": np.ones(2, np.float32), "w": a["x"]}
    assert reference.compare(a, b) == ["extra: w", "y: differs by 1", "z: shape (3,) against (2,)"]
