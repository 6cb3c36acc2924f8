"""A training loop of your own: a tape, an optimizer and ``tp.function``, without ``fit``.

Two interleaved spirals (made here) are classified by a small MLP. The step (forward pass,
loss, gradients, update) is compiled with ``@tp.function``: its first calls trace it, the rest
replay the traced NumPy program. The loop around it shuffles, batches, keeps the metrics and
validates, all in plain Python, which is what ``fit`` would otherwise do for you.
Run: ``python -m examples.custom_loop`` (``--tiny`` for a run of a few seconds).
"""

from __future__ import annotations

import sys

import numpy as np

import tapefit as tp


def make_spirals(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points ``(n, 2)`` of two spirals, each turned half a circle from the other, and their
    labels (0 or 1)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n).astype(np.int32)
    t = rng.uniform(0.25, 1.0, n) * 3 * np.pi  # how far along its spiral a point is
    angle = t + np.pi * y
    x = np.stack([t * np.cos(angle), t * np.sin(angle)], axis=1) / (3 * np.pi)
    return (x + rng.normal(0.0, 0.02, x.shape)).astype(np.float32), y


def main(tiny: bool = False) -> dict[str, list[float]]:
    """Trains the MLP with a compiled step and returns the history it kept: the epoch's mean loss
    and accuracy, and the validation accuracy."""
    tp.random.set_seed(0)
    rng = np.random.default_rng(0)
    x, y = make_spirals(1280 if tiny else 2560)
    x_val, y_val = make_spirals(512, seed=1)
    model = tp.layers.Sequential(
        [tp.layers.Dense(64, activation="relu"), tp.layers.Dense(64, activation="relu"), tp.layers.Dense(2)]
    )
    loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = tp.optimizers.Adam(learning_rate=0.01)
    mean_loss = tp.metrics.Mean(name="loss")
    accuracy = tp.metrics.SparseCategoricalAccuracy(name="accuracy")

    # --8<-- [start:loop]
    @tp.function
    def train_step(x: tp.Tensor, y: tp.Tensor) -> tuple[tp.Tensor, tp.Tensor]:
        with tp.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss, logits

    history: dict[str, list[float]] = {"loss": [], "accuracy": [], "val_accuracy": []}
    batch = 64  # the data divide into whole batches: every call has one signature, one trace
    for _epoch in range(6 if tiny else 25):
        mean_loss.reset_state()
        accuracy.reset_state()
        order = rng.permutation(len(x))
        for start in range(0, len(x), batch):
            rows = order[start : start + batch]
            loss, logits = train_step(tp.constant(x[rows]), tp.constant(y[rows]))
            mean_loss.update_state(loss)
            accuracy.update_state(y[rows], logits)
        # --8<-- [end:loop]
        predicted = np.argmax(model(x_val).numpy(), axis=1)
        history["loss"].append(float(mean_loss.result()))
        history["accuracy"].append(float(accuracy.result()))
        history["val_accuracy"].append(float(np.mean(predicted == y_val)))
    print(f"validation accuracy {history['val_accuracy'][-1]:.3f} (chance 0.5)")
    return history


if __name__ == "__main__":
    main(tiny="--tiny" in sys.argv)
