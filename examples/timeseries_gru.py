"""Time-series forecasting: a GRU reads 24 steps of a noisy seasonal series and predicts the next.

The series is made here: two sine waves (periods of 12 and 40 steps) plus an AR(1) noise term.
Each sample is a window of 24 values; its target is the value that follows. The model is
judged against the naive forecast "the next value equals the last one".
Run: ``python -m examples.timeseries_gru`` (``--tiny`` for a run of a few seconds).
"""

from __future__ import annotations

import sys

import numpy as np

import tapefit as tp

WINDOW = 24


def make_series(steps: int, seed: int = 0) -> np.ndarray:
    """``steps`` values of ``sin(2 pi t / 12) + 0.5 sin(2 pi t / 40) + e_t``, ``e_t = 0.6 e_(t-1) + noise``."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps)
    noise = np.zeros(steps)
    for i in range(1, steps):
        noise[i] = 0.6 * noise[i - 1] + rng.normal(0.0, 0.15)
    return (np.sin(2 * np.pi * t / 12) + 0.5 * np.sin(2 * np.pi * t / 40) + noise).astype(np.float32)


# --8<-- [start:windows]
def make_windows(series: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Windows of shape ``(n, WINDOW, 1)`` and the value after each, shape ``(n, 1)``."""
    starts = np.arange(len(series) - WINDOW)
    x = series[starts[:, None] + np.arange(WINDOW)]
    return x[..., None], series[starts + WINDOW][:, None]


# --8<-- [end:windows]


# --8<-- [start:model]
def build_model() -> tp.layers.Sequential:
    return tp.layers.Sequential([tp.layers.GRU(16), tp.layers.Dense(1)], name="timeseries_gru")


# --8<-- [end:model]


def main(tiny: bool = False) -> dict[str, list[float]]:
    """Trains the GRU on the first 80% of the series (validated on the rest, which comes later in
    time) and returns its history: loss (mse), mae, val_loss and val_mae per epoch."""
    tp.random.set_seed(0)
    x, y = make_windows(make_series(500 if tiny else 1500))
    model = build_model()
    model.compile(optimizer=tp.optimizers.Adam(learning_rate=0.01), loss="mse", metrics=["mae"])
    # validation_split takes the last windows: the model forecasts a stretch it never saw
    history = model.fit(x, y, epochs=5 if tiny else 15, batch_size=32, validation_split=0.2, verbose=0)
    logs = history.history
    split = int(len(x) * 0.8)
    naive = float(np.mean(np.abs(x[split:, -1] - y[split:])))
    print(f"validation mae {logs['val_mae'][-1]:.3f}; the last value as forecast: {naive:.3f}")
    return logs


if __name__ == "__main__":
    main(tiny="--tiny" in sys.argv)
