"""Keras 3's numbers for the rules tapefit now applies as Keras does, saved for CI.

CI has no Keras, so tapefit is compared there with the numbers this script computed once with
Keras 3 (JAX backend) and saved in ``tests/training/data/keras_parity.npz``. Only NumPy and
Keras are used, not tapefit.

- ``activation/<name>``: each Keras 3 activation of ``x`` (``threshold`` with 0.3 and -1.0).
- ``fit/<case>/history/<key>`` and ``fit/<case>/batch_loss``: one small model (``Dense(4,
  relu)``, ``Dense(3)``, from the weights ``w/<i>``) trained 3 epochs by SGD(0.1) in batches of
  8 without shuffling, once per case of ``CASES``: the History, and the ``loss`` each
  ``on_train_batch_end`` saw (the epoch's running mean in Keras 3).

    KERAS_BACKEND=jax python scripts/keras_reference_parity.py          # writes the file
    KERAS_BACKEND=jax python scripts/keras_reference_parity.py --check  # compares, exit 1 if not equal
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

PATH = Path(__file__).resolve().parents[1] / "tests" / "training" / "data" / "keras_parity.npz"

ACTIVATIONS = [
    "celu", "elu", "exponential", "gelu", "glu", "hard_shrink", "hard_sigmoid", "hard_silu",
    "hard_swish", "hard_tanh", "leaky_relu", "linear", "log_sigmoid", "log_softmax", "mish",
    "relu", "relu6", "selu", "sigmoid", "silu", "soft_shrink", "softmax", "softplus", "softsign",
    "sparse_plus", "sparse_sigmoid", "sparsemax", "squareplus", "swish", "tanh", "tanh_shrink",
]  # fmt: skip

# case: the fit arguments beyond x, y (by name; the arrays come from ``data()``)
CASES: dict[str, dict[str, Any]] = {
    "plain": {},
    "split_weighted": {"validation_split": 0.25, "sample_weight": "w"},
    "validation_weighted": {"validation_data": ("xv", "yv", "wv")},
    "class_weight_partial": {"class_weight": {0: 2.0, 2: 0.5}},  # class 1 not listed: 1.0
}


def data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 5)).astype(np.float32)
    y = (np.abs(x[:, 0] * 1.5 + x[:, 1]).astype(np.int64)) % 3
    xv = rng.normal(size=(10, 5)).astype(np.float32)
    yv = (np.abs(xv[:, 0] * 1.5 + xv[:, 1]).astype(np.int64)) % 3
    w = rng.uniform(0.1, 2.0, size=32).astype(np.float32)
    wv = rng.uniform(0.1, 2.0, size=10).astype(np.float32)
    weights = [
        rng.normal(scale=0.5, size=(5, 4)).astype(np.float32),
        rng.normal(scale=0.1, size=4).astype(np.float32),
        rng.normal(scale=0.5, size=(4, 3)).astype(np.float32),
        rng.normal(scale=0.1, size=3).astype(np.float32),
    ]
    return {
        "x": x,
        "y": y,
        "xv": xv,
        "yv": yv,
        "w": w,
        "wv": wv,
        **{f"w/{i}": v for i, v in enumerate(weights)},
    }


def compute() -> dict[str, np.ndarray]:
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras

    arrays = data()
    out: dict[str, np.ndarray] = dict(arrays)
    x = (np.random.default_rng(1).normal(size=(3, 8)) * 2.5).astype(np.float32)
    out["activation_x"] = x
    for name in ACTIVATIONS:
        out[f"activation/{name}"] = np.asarray(getattr(keras.activations, name)(x))
    out["activation/threshold"] = np.asarray(keras.activations.threshold(x, 0.3, -1.0))

    def value(v: Any) -> Any:
        return tuple(arrays[k] for k in v) if isinstance(v, tuple) else arrays[v] if isinstance(v, str) else v

    for case, arguments in CASES.items():
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [keras.Input((5,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(3)]
        )
        model.set_weights([arrays[f"w/{i}"] for i in range(4)])
        model.compile(
            keras.optimizers.SGD(0.1),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
        seen: list[float] = []
        record = keras.callbacks.LambdaCallback(
            on_train_batch_end=lambda batch, logs, seen=seen: seen.append(logs["loss"])
        )
        history = model.fit(
            arrays["x"],
            arrays["y"],
            epochs=3,
            batch_size=8,
            shuffle=False,
            verbose=0,
            callbacks=[record],
            **{k: value(v) for k, v in arguments.items()},
        )
        for key, values in history.history.items():
            out[f"fit/{case}/history/{key}"] = np.asarray(values, np.float64)
        out[f"fit/{case}/batch_loss"] = np.asarray(seen, np.float64)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="compare with the saved file instead of writing it"
    )
    args = parser.parse_args(argv)
    out = compute()
    if args.check:
        saved = dict(np.load(PATH))
        same = sorted(saved) == sorted(out) and all(np.allclose(saved[k], out[k], atol=1e-6) for k in out)
        print("same" if same else "differs")
        return 0 if same else 1
    PATH.parent.mkdir(parents=True, exist_ok=True)
    np.savez(PATH, **out)
    print(f"wrote {PATH} ({PATH.stat().st_size} bytes, {len(out)} arrays)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
