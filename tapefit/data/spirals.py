"""An embedded synthetic data set: interleaved spirals in the plane, one arm per class."""

from __future__ import annotations

import numpy as np

from tapefit.core.random import seeded_generator
from tapefit.data.arrays import DataError


def make_spirals(
    n_samples: int = 1000, n_classes: int = 2, noise: float = 0.1, turns: float = 1.0, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Draws points on ``n_classes`` spiral arms around the origin.

    Arm ``k`` is ``r * (cos(a), sin(a))`` with radius ``r`` uniform in (0, 1] and angle
    ``a = 2*pi*(turns*r + k/n_classes)``, plus Gaussian noise of standard deviation
    ``noise * r`` (so the arms stay apart near the centre). Classes get equal shares of the
    samples (the first ones one more when it does not divide), then the samples are shuffled.

    Args:
        n_samples: The number of points.
        n_classes: The number of arms (classes), at least 2.
        noise: Standard deviation of the noise, relative to the radius.
        turns: How many turns each arm makes.
        seed: Seed of the generator: the same seed gives the same points.

    Returns:
        ``(x, y)``: float32 points of shape ``(n_samples, 2)`` and int32 labels.

    Raises:
        DataError: For fewer samples than classes, fewer than two classes or negative noise.
    """
    if n_classes < 2:
        raise DataError(f"n_classes must be at least 2, got {n_classes}", key="n_classes")
    if n_samples < n_classes:
        raise DataError(f"n_samples ({n_samples}) must be at least n_classes ({n_classes})", key="n_samples")
    if noise < 0:
        raise DataError(f"noise must be >= 0, got {noise}", key="noise")
    rng = seeded_generator(seed)
    y = np.arange(n_samples) % n_classes
    r = 1.0 - rng.random(n_samples)  # in (0, 1]
    angle = 2.0 * np.pi * (turns * r + y / n_classes)
    points = r[:, None] * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    points += rng.normal(scale=noise, size=points.shape) * r[:, None]
    order = rng.permutation(n_samples)
    return points[order].astype(np.float32), y[order].astype(np.int32)
