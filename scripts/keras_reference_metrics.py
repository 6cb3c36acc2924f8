"""Keras 3's numbers for the metrics and losses tapefit takes from it, saved for CI.

CI has no Keras, so tapefit's metrics and losses are compared there with the numbers this script
computed once with Keras 3 (TensorFlow backend) and saved in ``tests/layers/data/keras_metrics.npz``.
Only NumPy and Keras are used, not tapefit.

- ``data/<kind>/y_true``, ``y_pred``, ``sample_weight``: the float32 inputs of each kind of data
  (``DATA``), several batches stacked on the first axis.
- ``metric/<case>``: for each case of ``METRIC_CASES`` (a Keras metric class, its arguments,
  the data it reads, whether it is weighted), the metric's ``result()`` after ``update_state``
  on every batch of its data, in order.
- ``loss/<case>/<reduction>`` and ``loss/<case>/<reduction>/weighted``: for each case of
  ``LOSS_CASES``, the loss of the first batch of its data with each reduction, without and
  with the batch's sample weights.

    /tmp/kerasvenv/bin/python scripts/keras_reference_metrics.py          # writes the file
    /tmp/kerasvenv/bin/python scripts/keras_reference_metrics.py --check  # compares, exit 1 if not equal
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

PATH = Path(__file__).resolve().parents[1] / "tests" / "layers" / "data" / "keras_metrics.npz"

BATCHES, SAMPLES, CLASSES = 3, 24, 4
REDUCTIONS = ("sum_over_batch_size", "sum", "none")

# (kind of data): how its y_true and y_pred are drawn; every kind has one weight per sample
DATA = {
    "binary": "0/1 targets of shape (samples, classes) and probabilities",
    "logits": "0/1 targets and logits (normal, scale 2)",
    "categorical": "one-hot targets and softmax probabilities",
    "sparse": "integer labels and softmax probabilities",
    "regression": "normal targets (kept from 0) and normal predictions",
    "multi_hot": "0/1 targets with at least one 1 per sample and probabilities",
    "soft": "softmax targets and softmax probabilities",
    "counts": "Poisson counts and positive rates",
    "signs": "-1/1 targets and normal predictions",
    "regression_as_logits": "one-hot targets and logits (normal, scale 2)",
}

# (case, Keras metric class, arguments, data kind, weighted)
METRIC_CASES: list[tuple[str, str, dict[str, Any], str, bool]] = [
    ("auc_roc", "AUC", {}, "binary", True),
    ("auc_roc_unweighted", "AUC", {}, "binary", False),
    ("auc_pr", "AUC", {"curve": "PR"}, "binary", True),
    ("auc_roc_minoring", "AUC", {"summation_method": "minoring"}, "binary", True),
    ("auc_roc_majoring", "AUC", {"summation_method": "majoring"}, "binary", True),
    ("auc_pr_majoring", "AUC", {"curve": "PR", "summation_method": "majoring"}, "binary", True),
    ("auc_thresholds", "AUC", {"thresholds": [0.1, 0.35, 0.5, 0.8]}, "binary", True),
    ("auc_pr_thresholds", "AUC", {"curve": "PR", "thresholds": [0.2, 0.45, 0.7]}, "binary", True),
    ("auc_50", "AUC", {"num_thresholds": 50}, "binary", True),
    ("auc_multi_label", "AUC", {"multi_label": True}, "binary", True),
    ("auc_multi_label_pr", "AUC", {"multi_label": True, "curve": "PR", "label_weights": [1, 2, 0.5, 1]}, "binary", True),
    ("auc_label_weights", "AUC", {"label_weights": [1, 2, 0.5, 1]}, "binary", True),
    ("auc_from_logits", "AUC", {"from_logits": True}, "logits", True),
    ("precision", "Precision", {}, "binary", True),
    ("precision_thresholds", "Precision", {"thresholds": [0.3, 0.5, 0.7]}, "binary", True),
    ("precision_even_thresholds", "Precision", {"thresholds": [0.0, 0.25, 0.5, 0.75, 1.0]}, "binary", True),
    ("precision_top_k", "Precision", {"top_k": 2}, "multi_hot", True),
    ("precision_class_id", "Precision", {"class_id": 1}, "binary", True),
    ("precision_top_k_class_id", "Precision", {"top_k": 2, "class_id": 2}, "multi_hot", True),
    ("recall", "Recall", {}, "binary", True),
    ("recall_unweighted", "Recall", {}, "binary", False),
    ("recall_thresholds", "Recall", {"thresholds": [0.3, 0.5, 0.7]}, "binary", True),
    ("recall_top_k", "Recall", {"top_k": 2}, "multi_hot", True),
    ("recall_class_id", "Recall", {"class_id": 3}, "binary", True),
    ("f1_none", "F1Score", {}, "multi_hot", True),
    ("f1_micro", "F1Score", {"average": "micro"}, "multi_hot", True),
    ("f1_macro", "F1Score", {"average": "macro"}, "multi_hot", True),
    ("f1_weighted", "F1Score", {"average": "weighted"}, "multi_hot", True),
    ("f1_macro_threshold", "F1Score", {"average": "macro", "threshold": 0.5}, "multi_hot", True),
    ("fbeta_weighted", "FBetaScore", {"average": "weighted", "beta": 2.0}, "multi_hot", True),
    ("fbeta_micro_threshold", "FBetaScore", {"average": "micro", "beta": 0.5, "threshold": 0.4}, "multi_hot", False),
    ("top_k", "TopKCategoricalAccuracy", {"k": 2}, "categorical", True),
    ("sparse_top_k", "SparseTopKCategoricalAccuracy", {"k": 2}, "sparse", True),
    ("sparse_top_k_1", "SparseTopKCategoricalAccuracy", {"k": 1}, "sparse", False),
    ("rmse", "RootMeanSquaredError", {}, "regression", True),
    ("mape", "MeanAbsolutePercentageError", {}, "regression", True),
    ("binary_crossentropy", "BinaryCrossentropy", {}, "binary", True),
    ("binary_crossentropy_logits", "BinaryCrossentropy", {"from_logits": True, "label_smoothing": 0.1}, "logits", True),
    ("categorical_crossentropy", "CategoricalCrossentropy", {}, "categorical", True),
    ("categorical_crossentropy_smoothed", "CategoricalCrossentropy", {"label_smoothing": 0.2}, "categorical", False),
]  # fmt: skip

# (case, Keras loss class, arguments, data kind)
LOSS_CASES: list[tuple[str, str, dict[str, Any], str]] = [
    ("kl_divergence", "KLDivergence", {}, "soft"),
    ("cosine_similarity", "CosineSimilarity", {}, "regression"),
    ("hinge", "Hinge", {}, "binary"),
    ("hinge_signs", "Hinge", {}, "signs"),
    ("log_cosh", "LogCosh", {}, "regression"),
    ("poisson", "Poisson", {}, "counts"),
    ("msle", "MeanSquaredLogarithmicError", {}, "regression"),
    ("mape", "MeanAbsolutePercentageError", {}, "regression"),
    ("binary_focal", "BinaryFocalCrossentropy", {}, "binary"),
    ("binary_focal_balanced", "BinaryFocalCrossentropy", {"apply_class_balancing": True, "alpha": 0.4, "gamma": 1.5}, "binary"),
    ("binary_focal_logits", "BinaryFocalCrossentropy", {"from_logits": True, "label_smoothing": 0.1, "gamma": 3.0}, "logits"),
    ("categorical_focal", "CategoricalFocalCrossentropy", {}, "categorical"),
    ("categorical_focal_logits", "CategoricalFocalCrossentropy", {"from_logits": True, "alpha": 0.5, "gamma": 3.0, "label_smoothing": 0.1}, "regression_as_logits"),
]  # fmt: skip


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def make_data(seed: int = 7) -> dict[str, dict[str, np.ndarray]]:
    """Every kind of data of ``DATA``: ``{kind: {"y_true", "y_pred", "sample_weight"}}``."""
    rng = np.random.default_rng(seed)
    shape = (BATCHES, SAMPLES, CLASSES)
    data: dict[str, dict[str, np.ndarray]] = {}

    def put(kind: str, y_true: np.ndarray, y_pred: np.ndarray) -> None:
        weights = rng.uniform(0.0, 2.0, size=(BATCHES, SAMPLES))
        data[kind] = {
            "y_true": y_true.astype(np.float32),
            "y_pred": y_pred.astype(np.float32),
            "sample_weight": weights.astype(np.float32),
        }

    put("binary", rng.random(shape) < 0.4, rng.random(shape))
    put("logits", rng.random(shape) < 0.5, rng.normal(0.0, 2.0, shape))
    labels = rng.integers(0, CLASSES, size=(BATCHES, SAMPLES))
    put("categorical", np.eye(CLASSES)[labels], _softmax(rng.normal(0.0, 1.5, shape)))
    put("sparse", labels, _softmax(rng.normal(0.0, 1.5, shape)))
    regression = rng.normal(0.0, 1.0, shape)
    put("regression", regression + np.sign(regression) * 0.1, rng.normal(0.0, 1.0, shape))
    hot = rng.random(shape) < 0.35
    hot[np.arange(BATCHES)[:, None], np.arange(SAMPLES)[None], labels] = True
    put("multi_hot", hot, rng.random(shape))
    put("soft", _softmax(rng.normal(0.0, 1.0, shape)), _softmax(rng.normal(0.0, 1.0, shape)))
    put("counts", rng.poisson(1.5, shape), rng.uniform(0.1, 3.0, shape))
    put("signs", np.where(rng.random(shape) < 0.5, -1.0, 1.0), rng.normal(0.0, 1.0, shape))
    put("regression_as_logits", np.eye(CLASSES)[labels], rng.normal(0.0, 2.0, shape))
    return data


def compute() -> dict[str, np.ndarray]:
    """Every reference array, by key."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    data = make_data()
    saved: dict[str, np.ndarray] = {}
    for kind, arrays in data.items():
        saved.update({f"data/{kind}/{name}": value for name, value in arrays.items()})
    for case, cls, kwargs, kind, weighted in METRIC_CASES:
        metric = getattr(keras.metrics, cls)(**kwargs)
        arrays = data[kind]
        for b in range(BATCHES):
            weights = arrays["sample_weight"][b] if weighted else None
            metric.update_state(arrays["y_true"][b], arrays["y_pred"][b], sample_weight=weights)
        saved[f"metric/{case}"] = np.asarray(metric.result(), np.float32)
    for case, cls, kwargs, kind in LOSS_CASES:
        arrays = data[kind]
        for reduction in REDUCTIONS:
            loss = getattr(keras.losses, cls)(reduction=reduction, **kwargs)
            y_true, y_pred = arrays["y_true"][0], arrays["y_pred"][0]
            saved[f"loss/{case}/{reduction}"] = np.asarray(loss(y_true, y_pred), np.float32)
            weighted = loss(y_true, y_pred, sample_weight=arrays["sample_weight"][0])
            saved[f"loss/{case}/{reduction}/weighted"] = np.asarray(weighted, np.float32)
    return saved


def compare(computed: dict[str, np.ndarray], saved: dict[str, np.ndarray], rtol: float = 1e-6) -> list[str]:
    """What differs between two sets of references, one line each."""
    problems = [f"missing: {k}" for k in sorted(set(computed) - set(saved))]
    problems += [f"extra: {k}" for k in sorted(set(saved) - set(computed))]
    for key in sorted(set(computed) & set(saved)):
        a, b = computed[key], saved[key]
        if a.shape != b.shape:
            problems.append(f"{key}: shape {a.shape} against {b.shape}")
        elif not np.allclose(a, b, rtol=rtol, atol=1e-7):
            problems.append(f"{key}: differs by {np.max(np.abs(a - b)):.3g}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="recompute and compare with the saved file")
    args = parser.parse_args(argv)
    computed = compute()
    if args.check:
        with np.load(PATH, allow_pickle=False) as file:
            problems = compare(computed, dict(file))
        for problem in problems:
            print(problem)
        print("reproduced" if not problems else f"{len(problems)} differences")
        return 1 if problems else 0
    np.savez_compressed(PATH, **computed)
    print(f"wrote {PATH} ({PATH.stat().st_size} bytes, {len(computed)} arrays)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
