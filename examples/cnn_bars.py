"""A small CNN learns to tell vertical from horizontal bars (8x8 images), with a plain tape loop.

Run: ``python examples/cnn_bars.py`` (about a second).
"""

from __future__ import annotations

import numpy as np

import tapefit as tp
from tapefit.layers import Conv2D, Dense, Flatten, MaxPool2D, Sequential


def bars(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` noisy 8x8 images with one vertical (label 0) or horizontal (label 1) bar."""
    x = rng.normal(0.0, 0.3, size=(n, 8, 8, 1)).astype(np.float32)
    y = rng.integers(0, 2, size=n).astype(np.int32)
    for k, pos in enumerate(rng.integers(0, 8, size=n)):
        if y[k] == 0:
            x[k, :, pos, 0] += 1.0
        else:
            x[k, pos, :, 0] += 1.0
    return x, y


def main() -> None:
    tp.random.set_seed(0)
    rng = np.random.default_rng(0)
    x_train, y_train = bars(256, rng)
    x_test, y_test = bars(500, rng)

    model = Sequential([Conv2D(8, 3, activation="relu"), MaxPool2D(2), Flatten(), Dense(2)], name="bars_cnn")
    loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)  # the model outputs logits
    accuracy = tp.metrics.get("accuracy", loss=loss_fn)
    optimizer = tp.optimizers.Adam(learning_rate=0.01)

    for epoch in range(3):
        order = rng.permutation(len(x_train))
        for start in range(0, len(order), 32):
            batch = order[start : start + 32]
            with tp.GradientTape() as tape:
                loss = loss_fn(y_train[batch], model(x_train[batch], training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        accuracy.reset_state()
        accuracy.update_state(y_test, model(x_test))
        print(f"epoch {epoch}: loss {float(loss):.4f}, test accuracy {float(accuracy.result()):.3f}")
    model.summary()


if __name__ == "__main__":
    main()
