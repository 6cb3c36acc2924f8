"""The autodiff core: tensors, variables, the tape, the op registry and the ops."""

from tapefit.core import operators as _operators  # noqa: F401 - binds Tensor's operators
from tapefit.core import ops as _ops
from tapefit.core import random, testing
from tapefit.core.custom_gradient import custom_gradient
from tapefit.core.dtypes import bool, float16, float32, float64, int32, int64
from tapefit.core.ops import *  # noqa: F403
from tapefit.core.record import Op, pause_recording
from tapefit.core.registry import not_differentiable, primitive, register_gradient
from tapefit.core.tape import GradientTape, UnconnectedGradients
from tapefit.core.tensor import Tensor, Variable, constant

__all__ = [
    "GradientTape",
    "Op",
    "Tensor",
    "UnconnectedGradients",
    "Variable",
    "bool",
    "constant",
    "custom_gradient",
    "float16",
    "float32",
    "float64",
    "int32",
    "int64",
    "not_differentiable",
    "pause_recording",
    "primitive",
    "random",
    "register_gradient",
    "testing",
    *_ops.__all__,
]
