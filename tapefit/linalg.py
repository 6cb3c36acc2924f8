"""``tp.linalg``: matrix products and square-matrix ops, under TensorFlow's names."""

from tapefit.core.ops.linalg import einsum as einsum
from tapefit.core.ops.linalg import matmul as matmul
from tapefit.core.ops.linalg import tensordot as tensordot
from tapefit.core.ops.matrix import *  # noqa: F403
from tapefit.core.ops.matrix import __all__ as _matrix_names

__all__ = ["einsum", "matmul", "tensordot", *_matrix_names]
