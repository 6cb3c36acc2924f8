"""Keras 3's numbers for the layer arguments tapefit took from it (issue 25), saved for CI.

CI has no Keras, so tapefit is compared there with the numbers this script computed once with
Keras 3 (JAX backend) and saved in ``tests/layers/data/keras_layers_parity.npz``. Only NumPy,
JAX and Keras are used, not tapefit.

- ``constraint/<case>``: each case of ``CONSTRAINTS`` applied to ``w`` (or to the 4-D ``k``).
- ``sgd/kernel``, ``sgd/bias``: ``Dense(3, kernel_constraint="max_norm",
  bias_constraint="non_neg")`` from ``sgd/w0``, ``sgd/b0`` after 3 steps of SGD(0.5) on the MSE
  of ``x``, ``y`` (one batch of 8 per step).
- ``<case>/loss``, ``<case>/penalty`` and ``<case>/grad/<i>``: for ``dense_reg`` and
  ``lstm_reg`` (layers with kernel, recurrent, bias and activity regularizers, from the weights
  ``<case>/w/<i>``): the MSE plus ``model.losses`` on one batch, the sum of ``model.losses``
  alone, and the gradients of the loss for the weights.
- ``activity/gru``, ``activity/conv2d``: the sum of ``losses`` after one call of a
  ``GRU(3, return_sequences=True, return_state=True)`` on ``seq`` with an L2(0.05) activity
  regularizer (each output penalized) and of a ``Conv2D(2, 2)`` on ``img`` with an L1(0.02)
  one, from the weights ``activity/<case>/w/<i>``.
- ``orthogonal/<case>``: each case of ``ORTHOGONAL`` applied to ``w`` (or ``w_zero_row``).
- ``identity/<rows>x<cols>``: ``Identity(gain=2.0)`` of that shape.

    KERAS_BACKEND=jax python scripts/keras_reference_layers.py          # writes the file
    KERAS_BACKEND=jax python scripts/keras_reference_layers.py --check  # compares, exit 1 if not equal
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

PATH = Path(__file__).resolve().parents[1] / "tests" / "layers" / "data" / "keras_layers_parity.npz"

# case: (constraint name, its arguments, the input's key)
CONSTRAINTS: dict[str, tuple[str, dict[str, Any], str]] = {
    "max_norm": ("MaxNorm", {}, "w"),
    "max_norm_1.5_axis1": ("MaxNorm", {"max_value": 1.5, "axis": 1}, "w"),
    "max_norm_conv": ("MaxNorm", {"max_value": 1.0, "axis": [0, 1, 2]}, "k"),
    "non_neg": ("NonNeg", {}, "w"),
    "unit_norm": ("UnitNorm", {}, "w"),
    "unit_norm_axis1": ("UnitNorm", {"axis": 1}, "w"),
    "min_max_norm": ("MinMaxNorm", {}, "w"),
    "min_max_norm_rate": ("MinMaxNorm", {"min_value": 0.5, "max_value": 1.2, "rate": 0.7}, "w"),
}

# case: (factor, mode, the input's key)
ORTHOGONAL: dict[str, tuple[float, str, str]] = {
    "rows": (0.01, "rows", "w"),
    "columns": (0.1, "columns", "w"),
    "zero_row": (0.05, "rows", "w_zero_row"),
}

# the regularizers of the two models (Keras classes and factors)
DENSE_REG = {"kernel": ("L1L2", 0.01, 0.02), "bias": ("L2", 0.03), "activity": ("L1", 0.05)}
LSTM_REG = {
    "kernel": ("L2", 0.01),
    "recurrent": ("L1", 0.02),
    "bias": ("L2", 0.03),
    "activity": ("L2", 0.04),
}


def data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(25)
    w = rng.normal(scale=0.9, size=(4, 3)).astype(np.float32)
    w_zero_row = rng.normal(size=(3, 5)).astype(np.float32)
    w_zero_row[1] = 0.0
    return {
        "w": w,
        "k": rng.normal(size=(2, 2, 3, 4)).astype(np.float32),
        "w_zero_row": w_zero_row,
        "x": rng.normal(size=(8, 5)).astype(np.float32),
        "y": rng.normal(size=(8, 3)).astype(np.float32),
        "sgd/w0": rng.normal(scale=0.8, size=(5, 3)).astype(np.float32),
        "sgd/b0": np.array([0.2, -0.3, 0.1], np.float32),
        "seq": rng.normal(size=(4, 6, 2)).astype(np.float32),
        "seq_y": rng.normal(size=(4, 3)).astype(np.float32),
        "dense_reg/w/0": rng.normal(scale=0.5, size=(5, 3)).astype(np.float32),
        "dense_reg/w/1": rng.normal(scale=0.1, size=3).astype(np.float32),
        "lstm_reg/w/0": rng.normal(scale=0.5, size=(2, 12)).astype(np.float32),
        "lstm_reg/w/1": rng.normal(scale=0.5, size=(3, 12)).astype(np.float32),
        "lstm_reg/w/2": rng.normal(scale=0.1, size=12).astype(np.float32),
        "img": rng.normal(size=(3, 4, 4, 2)).astype(np.float32),
        "activity/gru/w/0": rng.normal(scale=0.5, size=(2, 9)).astype(np.float32),
        "activity/gru/w/1": rng.normal(scale=0.5, size=(3, 9)).astype(np.float32),
        "activity/gru/w/2": rng.normal(scale=0.1, size=(2, 9)).astype(np.float32),
        "activity/conv2d/w/0": rng.normal(scale=0.5, size=(2, 2, 2, 2)).astype(np.float32),
        "activity/conv2d/w/1": rng.normal(scale=0.1, size=2).astype(np.float32),
    }


def _regularizer(keras: Any, spec: tuple[Any, ...]) -> Any:
    name, *factors = spec
    cls = getattr(keras.regularizers, name)
    return cls(*factors)


def _loss_and_grads(keras: Any, model: Any, x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    import jax
    import jax.numpy as jnp

    trainable = [v.value for v in model.trainable_variables]
    fixed = [v.value for v in model.non_trainable_variables]

    def loss_fn(weights: list[Any]) -> tuple[Any, Any]:
        out, _, losses = model.stateless_call(weights, fixed, x, return_losses=True)
        penalty = jnp.sum(jnp.stack(losses))
        return jnp.mean(jnp.square(out - y)) + penalty, penalty

    (loss, penalty), grads = jax.value_and_grad(loss_fn, has_aux=True)(trainable)
    result = {"loss": np.asarray(loss), "penalty": np.asarray(penalty)}
    result.update({f"grad/{i}": np.asarray(g) for i, g in enumerate(grads)})
    return result


def compute() -> dict[str, np.ndarray]:
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras

    d = data()
    out: dict[str, np.ndarray] = dict(d)
    for case, (name, kwargs, key) in CONSTRAINTS.items():
        constraint = getattr(keras.constraints, name)(**kwargs)
        out[f"constraint/{case}"] = np.asarray(constraint(keras.ops.convert_to_tensor(d[key])))

    dense = keras.layers.Dense(3, kernel_constraint="max_norm", bias_constraint="non_neg")
    model = keras.Sequential([keras.Input((5,)), dense])
    dense.set_weights([d["sgd/w0"], d["sgd/b0"]])
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    model.fit(d["x"], d["y"], batch_size=8, epochs=3, shuffle=False, verbose=0)
    out["sgd/kernel"], out["sgd/bias"] = (np.asarray(v) for v in dense.get_weights())

    regs = {k: _regularizer(keras, v) for k, v in DENSE_REG.items()}
    dense = keras.layers.Dense(
        3,
        kernel_regularizer=regs["kernel"],
        bias_regularizer=regs["bias"],
        activity_regularizer=regs["activity"],
    )
    model = keras.Sequential([keras.Input((5,)), dense])
    dense.set_weights([d["dense_reg/w/0"], d["dense_reg/w/1"]])
    for key, value in _loss_and_grads(keras, model, d["x"], d["y"]).items():
        out[f"dense_reg/{key}"] = value

    regs = {k: _regularizer(keras, v) for k, v in LSTM_REG.items()}
    lstm = keras.layers.LSTM(
        3,
        kernel_regularizer=regs["kernel"],
        recurrent_regularizer=regs["recurrent"],
        bias_regularizer=regs["bias"],
        activity_regularizer=regs["activity"],
    )
    model = keras.Sequential([keras.Input((6, 2)), lstm])
    lstm.set_weights([d[f"lstm_reg/w/{i}"] for i in range(3)])
    for key, value in _loss_and_grads(keras, model, d["seq"], d["seq_y"]).items():
        out[f"lstm_reg/{key}"] = value

    gru = keras.layers.GRU(
        3, return_sequences=True, return_state=True, activity_regularizer=keras.regularizers.L2(0.05)
    )
    gru(d["seq"][:1])
    gru.set_weights([d[f"activity/gru/w/{i}"] for i in range(3)])
    gru(d["seq"])
    out["activity/gru"] = np.sum([np.asarray(v) for v in gru.losses])
    conv = keras.layers.Conv2D(2, 2, activity_regularizer=keras.regularizers.L1(0.02))
    conv(d["img"][:1])
    conv.set_weights([d[f"activity/conv2d/w/{i}"] for i in range(2)])
    conv(d["img"])
    out["activity/conv2d"] = np.sum([np.asarray(v) for v in conv.losses])

    for case, (factor, mode, key) in ORTHOGONAL.items():
        regularizer = keras.regularizers.OrthogonalRegularizer(factor=factor, mode=mode)
        out[f"orthogonal/{case}"] = np.asarray(regularizer(keras.ops.convert_to_tensor(d[key])))

    for shape in ((3, 4), (4, 2), (3, 3)):
        value = keras.initializers.Identity(gain=2.0)(shape)
        out[f"identity/{shape[0]}x{shape[1]}"] = np.asarray(value)
    return {k: np.asarray(v, dtype=np.float32) for k, v in out.items()}


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
