"""``tp.math``: elementwise math and reductions, under TensorFlow's names."""

from tapefit.core.ops.math import *  # noqa: F403
from tapefit.core.ops.nn import erf as erf
from tapefit.core.ops.nn import softplus as softplus
from tapefit.core.ops.reduce import *  # noqa: F403
