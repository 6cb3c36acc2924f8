"""Every op, gathered from its family module."""

from tapefit.core.ops import clip, creation, linalg, math, matrix, nn, reduce, shape
from tapefit.core.ops.clip import *  # noqa: F403
from tapefit.core.ops.creation import *  # noqa: F403
from tapefit.core.ops.linalg import *  # noqa: F403
from tapefit.core.ops.math import *  # noqa: F403
from tapefit.core.ops.reduce import *  # noqa: F403
from tapefit.core.ops.shape import *  # noqa: F403

# tp.nn's names stay in tp.nn (as in TensorFlow), except the few TF also has at the top.
# ``+=`` of each family's ``__all__``, the form mypy and pyright both read statically.
__all__: list[str] = []
__all__ += clip.__all__
__all__ += creation.__all__
__all__ += linalg.__all__
__all__ += math.__all__
__all__ += reduce.__all__
__all__ += shape.__all__
_ = nn, matrix  # tp.nn's and tp.linalg's names stay in their namespaces
