"""Keras 3's numbers for the functional API and the reshaping and merge layers, saved for CI.

CI has no Keras, so tapefit's functional models and layers are compared there with the numbers
this script computed once with Keras 3 (JAX backend) and saved in
``tests/layers/data/keras_functional.npz``. Only NumPy and Keras are used, not tapefit.

- ``layer/<case>``: each case of ``LAYER_CASES`` (a layer, its arguments and its inputs'
  shapes): the float32 inputs ``x<i>`` and Keras's output ``out``.
- ``<model>/...`` for each model of ``MODELS``: the weights of each named layer
  (``w/<layer>/<i>``, in Keras's ``get_weights`` order), the inputs ``x/<i>`` and outputs
  ``y/<i>``; for the models that are trained, the targets ``t/<i>``, the ``History``
  (``history/<key>``) and the weights after training (``trained/<layer>/<i>``).

Models: a residual MLP; two inputs through one shared layer; two outputs with two losses and
``loss_weights`` trained three epochs with SGD; the MNIST-1D-style conv net (``Input``,
``Reshape((40, 1))``, ``ZeroPadding1D``) trained two epochs; ``Embedding(mask_zero=True)``
into an LSTM (the mask passed along); masked embeddings merged by ``Maximum``, ``Minimum``
and ``Multiply`` (with and without an unmasked input), and the merged mask into a GRU.

    KERAS_BACKEND=jax python scripts/keras_reference_functional.py          # writes the file
    KERAS_BACKEND=jax python scripts/keras_reference_functional.py --check  # compares, exit 1 if not equal
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

PATH = Path(__file__).resolve().parents[1] / "tests" / "layers" / "data" / "keras_functional.npz"

LAYER_CASES: list[tuple[str, str, dict[str, Any], list[tuple[int, ...]]]] = [
    # (case, layer class, arguments, input shapes with the batch axis)
    ("reshape", "Reshape", {"target_shape": (3, 4)}, [(2, 12)]),
    ("reshape_unknown", "Reshape", {"target_shape": (-1, 2)}, [(2, 3, 4)]),
    ("permute", "Permute", {"dims": (2, 1)}, [(2, 3, 4)]),
    ("permute_3d", "Permute", {"dims": (3, 1, 2)}, [(2, 2, 3, 4)]),
    ("repeat_vector", "RepeatVector", {"n": 3}, [(2, 4)]),
    ("zero_padding1d", "ZeroPadding1D", {"padding": 2}, [(2, 5, 3)]),
    ("zero_padding1d_pair", "ZeroPadding1D", {"padding": (1, 3)}, [(2, 4, 2)]),
    (
        "zero_padding1d_first",
        "ZeroPadding1D",
        {"padding": (2, 1), "data_format": "channels_first"},
        [(2, 3, 4)],
    ),
    ("zero_padding2d", "ZeroPadding2D", {"padding": ((1, 0), (2, 1))}, [(2, 3, 4, 2)]),
    (
        "zero_padding2d_first",
        "ZeroPadding2D",
        {"padding": (1, 2), "data_format": "channels_first"},
        [(2, 2, 3, 3)],
    ),
    ("cropping1d", "Cropping1D", {"cropping": (1, 2)}, [(2, 6, 3)]),
    ("cropping2d", "Cropping2D", {"cropping": ((1, 0), (0, 2))}, [(2, 5, 6, 2)]),
    ("cropping2d_first", "Cropping2D", {"cropping": 1, "data_format": "channels_first"}, [(2, 2, 4, 5)]),
    ("up_sampling1d", "UpSampling1D", {"size": 3}, [(2, 4, 3)]),
    ("up_sampling2d", "UpSampling2D", {"size": (2, 3)}, [(2, 3, 2, 2)]),
    ("up_sampling2d_first", "UpSampling2D", {"size": 2, "data_format": "channels_first"}, [(2, 2, 3, 2)]),
    ("up_sampling2d_bilinear", "UpSampling2D", {"size": (2, 3), "interpolation": "bilinear"}, [(2, 3, 4, 2)]),
    (
        "up_sampling2d_bilinear_first",
        "UpSampling2D",
        {"size": 2, "interpolation": "bilinear", "data_format": "channels_first"},
        [(1, 2, 3, 3)],
    ),
    ("add", "Add", {}, [(2, 4), (2, 4), (2, 4)]),
    ("add_broadcast", "Add", {}, [(2, 1, 4), (2, 3, 4)]),
    ("subtract", "Subtract", {}, [(2, 3, 2), (2, 3, 2)]),
    ("multiply", "Multiply", {}, [(2, 5), (2, 5), (2, 5)]),
    ("average", "Average", {}, [(2, 4), (2, 4)]),
    ("maximum", "Maximum", {}, [(2, 4), (2, 4), (2, 4)]),
    ("minimum", "Minimum", {}, [(2, 3, 2), (2, 3, 2)]),
    ("concatenate", "Concatenate", {}, [(2, 3), (2, 5)]),
    ("concatenate_axis1", "Concatenate", {"axis": 1}, [(2, 2, 4), (2, 3, 4)]),
    ("dot", "Dot", {"axes": 1}, [(2, 5), (2, 5)]),
    ("dot_normalize", "Dot", {"axes": -1, "normalize": True}, [(2, 5), (2, 5)]),
    ("dot_3d", "Dot", {"axes": (2, 2)}, [(2, 3, 4), (2, 5, 4)]),
    ("dot_mixed_axes", "Dot", {"axes": (1, 2)}, [(2, 4, 3), (2, 5, 4)]),
]

TRAINED = {"two_outputs": {"epochs": 3, "batch_size": 8}, "conv1d": {"epochs": 2, "batch_size": 16}}
"""The models this script trains with SGD(0.1), without shuffling, and how."""

LOSS_WEIGHTS = {"reg": 0.5, "cls": 2.0}


def residual_mlp(keras: Any) -> Any:
    x = keras.Input((8,), name="x")
    h = keras.layers.Dense(16, activation="relu", name="d1")(x)
    r = keras.layers.Dense(16, activation="relu", name="d2")(h)
    h = keras.layers.Add(name="add")([h, r])
    return keras.Model(x, keras.layers.Dense(3, name="out")(h))


def shared_two_inputs(keras: Any) -> Any:
    a, b = keras.Input((6,), name="a"), keras.Input((6,), name="b")
    shared = keras.layers.Dense(4, activation="tanh", name="shared")
    sa, sb = shared(a), shared(b)
    diff = keras.layers.Subtract(name="diff")([sa, sb])
    joined = keras.layers.Concatenate(name="joined")([sa, sb, diff])
    return keras.Model([a, b], keras.layers.Dense(1, name="head")(joined))


def two_outputs(keras: Any) -> Any:
    x = keras.Input((5,), name="x")
    h = keras.layers.Dense(8, activation="relu", name="body")(x)
    reg = keras.layers.Dense(1, name="reg")(h)
    cls = keras.layers.Dense(3, activation="softmax", name="cls")(h)
    return keras.Model(x, [reg, cls])


def conv1d(keras: Any) -> Any:
    x = keras.Input((40,), name="x")
    h = keras.layers.Reshape((40, 1), name="reshape")(x)
    h = keras.layers.ZeroPadding1D(2, name="pad1")(h)
    h = keras.layers.Conv1D(8, 5, activation="relu", name="conv1")(h)
    h = keras.layers.ZeroPadding1D(2, name="pad2")(h)
    h = keras.layers.Conv1D(8, 5, strides=2, activation="relu", name="conv2")(h)
    h = keras.layers.Flatten(name="flatten")(h)
    return keras.Model(x, keras.layers.Dense(10, name="logits")(h))


def masked_rnn(keras: Any) -> Any:
    ids = keras.Input((6,), dtype="int32", name="ids")
    h = keras.layers.Embedding(7, 3, mask_zero=True, name="embedding")(ids)
    h = keras.layers.LSTM(4, name="lstm")(h)
    return keras.Model(ids, keras.layers.Dense(2, name="out")(h))


def masked_merges(keras: Any) -> Any:
    ids_a = keras.Input((5,), dtype="int32", name="ids_a")
    ids_b = keras.Input((5,), dtype="int32", name="ids_b")
    plain = keras.Input((5, 3), name="plain")
    a = keras.layers.Embedding(6, 3, mask_zero=True, name="emb_a")(ids_a)
    b = keras.layers.Embedding(6, 3, mask_zero=True, name="emb_b")(ids_b)
    largest = keras.layers.Maximum(name="max")([a, b])
    outputs = [
        largest,
        keras.layers.Minimum(name="min")([a, b, plain]),
        keras.layers.Multiply(name="mul")([a, b]),
        keras.layers.Multiply(name="mul_plain")([a, plain]),
        keras.layers.GRU(2, name="gru")(largest),  # the OR of the two masks
    ]
    return keras.Model([ids_a, ids_b, plain], outputs)


MODELS = {
    "residual_mlp": residual_mlp,
    "shared_two_inputs": shared_two_inputs,
    "two_outputs": two_outputs,
    "conv1d": conv1d,
    "masked_rnn": masked_rnn,
    "masked_merges": masked_merges,
}


def _inputs(name: str, rng: np.random.Generator) -> list[np.ndarray]:
    if name == "residual_mlp":
        return [rng.normal(size=(10, 8)).astype(np.float32)]
    if name == "shared_two_inputs":
        return [rng.normal(size=(10, 6)).astype(np.float32) for _ in range(2)]
    if name == "two_outputs":
        return [rng.normal(size=(30, 5)).astype(np.float32)]
    if name == "conv1d":
        return [rng.normal(size=(48, 40)).astype(np.float32)]
    if name == "masked_merges":
        ids = [rng.integers(0, 6, size=(6, 5)).astype(np.int32) for _ in range(2)]
        return [*ids, rng.normal(size=(6, 5, 3)).astype(np.float32)]
    lengths = rng.integers(1, 7, size=8)
    ids = rng.integers(1, 7, size=(8, 6)).astype(np.int32)
    ids[np.arange(6)[None, :] >= lengths[:, None]] = 0
    return [ids]


def _targets(name: str, rng: np.random.Generator, n: int) -> list[np.ndarray]:
    if name == "two_outputs":
        return [rng.normal(size=(n, 1)).astype(np.float32), rng.integers(0, 3, size=n).astype(np.int32)]
    return [rng.integers(0, 10, size=n).astype(np.int32)]


def _train(keras: Any, name: str, model: Any, xs: list[np.ndarray], ts: list[np.ndarray]) -> dict[str, Any]:
    if name == "two_outputs":
        loss: Any = {"reg": "mse", "cls": "sparse_categorical_crossentropy"}
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss, loss_weights=LOSS_WEIGHTS)
        targets: Any = {"reg": ts[0], "cls": ts[1]}
    else:
        model.compile(
            optimizer=keras.optimizers.SGD(0.1),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        targets = ts[0]
    history = model.fit(xs[0], targets, shuffle=False, verbose=0, **TRAINED[name])
    return history.history


def _weights(model: Any, prefix: str) -> dict[str, np.ndarray]:
    out = {}
    for layer in model.layers:
        for i, w in enumerate(layer.get_weights()):
            out[f"{prefix}/{layer.name}/{i}"] = np.asarray(w, np.float32)
    return out


def compute() -> dict[str, np.ndarray]:
    """Every reference array, by key."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(24)
    saved: dict[str, np.ndarray] = {}
    for case, cls, kwargs, shapes in LAYER_CASES:
        xs = [rng.normal(size=shape).astype(np.float32) for shape in shapes]
        layer = getattr(keras.layers, cls)(**kwargs)
        out = layer(xs if len(xs) > 1 else xs[0])
        saved.update({f"layer/{case}/x{i}": x for i, x in enumerate(xs)})
        saved[f"layer/{case}/out"] = np.asarray(out, np.float32)
    for name, build in MODELS.items():
        model = build(keras)
        xs = _inputs(name, rng)
        saved.update(_weights(model, f"{name}/w"))
        saved.update({f"{name}/x/{i}": x for i, x in enumerate(xs)})
        ys = model(xs if len(xs) > 1 else xs[0])
        ys = ys if isinstance(ys, (list, tuple)) else [ys]
        saved.update({f"{name}/y/{i}": np.asarray(y, np.float32) for i, y in enumerate(ys)})
        if name in TRAINED:
            ts = _targets(name, rng, len(xs[0]))
            saved.update({f"{name}/t/{i}": t for i, t in enumerate(ts)})
            history = _train(keras, name, model, xs, ts)
            saved.update({f"{name}/history/{k}": np.asarray(v, np.float64) for k, v in history.items()})
            saved.update(_weights(model, f"{name}/trained"))
    return saved


def compare(computed: dict[str, np.ndarray], saved: dict[str, np.ndarray], atol: float = 1e-6) -> list[str]:
    """What differs between two sets of references, one line each."""
    problems = [f"missing: {k}" for k in sorted(set(computed) - set(saved))]
    problems += [f"extra: {k}" for k in sorted(set(saved) - set(computed))]
    for key in sorted(set(computed) & set(saved)):
        a, b = computed[key], saved[key]
        if a.shape != b.shape:
            problems.append(f"{key}: shape {a.shape} against {b.shape}")
        elif not np.allclose(a, b, atol=atol, rtol=0):
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
