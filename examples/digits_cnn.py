"""Image classification: a small CNN on the 8x8 handwritten digits, trained with compile and fit.

The digits ship with scikit-learn (``pip install -e ".[digits]"``), so nothing is downloaded.
Run: ``python -m examples.digits_cnn`` (``--tiny`` for a run of a few seconds).
"""

from __future__ import annotations

import sys

import tapefit as tp


# --8<-- [start:model]
def build_model() -> tp.layers.Sequential:
    """Two 3x3 convolutions, a pooling step and a Dense layer giving the ten classes' logits."""
    return tp.layers.Sequential(
        [
            tp.layers.Conv2D(16, 3, padding="same", activation="relu"),
            tp.layers.MaxPool2D(2),  # 8x8 -> 4x4
            tp.layers.Conv2D(32, 3, padding="same", activation="relu"),
            tp.layers.Flatten(),
            tp.layers.Dropout(0.2),
            tp.layers.Dense(10),
        ],
        name="digits_cnn",
    )


# --8<-- [end:model]


def main(tiny: bool = False) -> dict[str, list[float]]:
    """Trains the CNN and returns its history: loss and accuracy per epoch, and their val_ twins."""
    tp.random.set_seed(0)
    x, y = tp.data.load_digits(flatten=False)  # images (1797, 8, 8, 1) in [0, 1], labels 0-9
    if tiny:
        x, y = x[:400], y[:400]
    # --8<-- [start:fit]
    model = build_model()
    model.compile(
        optimizer=tp.optimizers.Adam(learning_rate=0.003),
        loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    history = model.fit(x, y, epochs=4 if tiny else 12, batch_size=32, validation_split=0.2, verbose=0)
    # --8<-- [end:fit]
    logs = history.history
    print(f"validation accuracy {logs['val_accuracy'][-1]:.3f} after {len(logs['loss'])} epochs")
    return logs


if __name__ == "__main__":
    main(tiny="--tiny" in sys.argv)
