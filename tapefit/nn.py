"""``tp.nn``: activations, cross-entropies, dropout, convolution and pooling."""

from tapefit.core.ops.nn import *  # noqa: F403
