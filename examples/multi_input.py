"""A functional model with two inputs: measurements and a category id, joined by Concatenate.

The data are made here: the price of a flat from three measurements (its size, its floor, its
age) and the district it is in (one of 8 ids). The district shifts the price by an amount the
model must learn; an ``Embedding`` gives each district a vector, which ``Concatenate`` joins to
the measurements before two Dense layers. Each input reaches the model by its ``tp.Input``'s
name, so ``fit`` takes a dict. Run: ``python -m examples.multi_input`` (``--tiny``: seconds).
"""

from __future__ import annotations

import sys

import numpy as np

import tapefit as tp

DISTRICTS = 8


def make_flats(n: int, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """``({"measurements": (n, 3), "district": (n, 1)}, price (n, 1))``."""
    rng = np.random.default_rng(seed)
    measurements = rng.normal(0.0, 1.0, (n, 3)).astype(np.float32)
    district = rng.integers(0, DISTRICTS, (n, 1)).astype(np.int32)
    shift = np.linspace(-2.0, 2.0, DISTRICTS)[rng.permutation(DISTRICTS)]  # each district's premium
    price = (
        1.5 * measurements[:, :1]
        + 0.5 * np.tanh(measurements[:, 1:2])
        - 0.3 * measurements[:, 2:3]
        + shift[district]
        + rng.normal(0.0, 0.1, (n, 1))
    )
    return {"measurements": measurements, "district": district}, price.astype(np.float32)


# --8<-- [start:model]
def build_model() -> tp.Model:
    """Two inputs, one output: the predicted price."""
    measurements = tp.Input(shape=(3,), name="measurements")
    district = tp.Input(shape=(1,), dtype="int32", name="district")
    district_vector = tp.layers.Flatten()(tp.layers.Embedding(DISTRICTS, 4)(district))
    joined = tp.layers.Concatenate()([measurements, district_vector])
    hidden = tp.layers.Dense(32, activation="relu")(joined)
    price = tp.layers.Dense(1, name="price")(hidden)
    return tp.Model(inputs=[measurements, district], outputs=price, name="flat_prices")


# --8<-- [end:model]


def main(tiny: bool = False) -> dict[str, list[float]]:
    """Trains the model and returns its history (loss (mse), mae, val_loss, val_mae per epoch)."""
    tp.random.set_seed(0)
    x, y = make_flats(400 if tiny else 2000)
    model = build_model()
    model.compile(optimizer=tp.optimizers.Adam(learning_rate=0.01), loss="mse", metrics=["mae"])
    history = model.fit(x, y, epochs=5 if tiny else 20, batch_size=32, validation_split=0.2, verbose=0)
    logs = history.history
    split = int(len(y) * 0.8)
    baseline = float(np.mean(np.abs(y[split:] - y[:split].mean())))
    print(f"validation mae {logs['val_mae'][-1]:.3f}; the mean price as forecast: {baseline:.3f}")
    return logs


if __name__ == "__main__":
    main(tiny="--tiny" in sys.argv)
