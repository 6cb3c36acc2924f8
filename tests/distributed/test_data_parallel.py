"""DataParallel.shard: the rows of a batch that this process trains on."""

from __future__ import annotations

import numpy as np

from tapefit.distributed.data_parallel import DataParallel


def test_a_batch_without_targets_is_counted_by_its_inputs():
    # A custom train_step may take x alone (a GAN's images, a VAE's digits): fit passes y=None.
    x = np.zeros((5, 3), np.float32)
    parallel = DataParallel()
    assert parallel.shard(x, None) == (x, None, None)
    assert parallel.batch_rows == (5, 5)
