"""tapefit: a readable, tape-based autodiff and training loop on NumPy.

``import tapefit as tp``. ``tp.__all__`` lists the public names: the tensors, the tape and the
ops (``tapefit.core``), ``Module``, ``Trainer`` and ``History``, the marks ``hookimpl``,
``configurable`` and ``register_serializable``, and the public subpackages; ``dir(tp)`` (tab
completion) shows those. The packages behind them (``core``, ``training``, ``distributed``, ``cli``) are importable by their
dotted names.
"""

import sys as _sys

from tapefit import checkpointing as checkpointing
from tapefit import core as _core
from tapefit import data as data
from tapefit import layers as layers
from tapefit import linalg as linalg
from tapefit import math as math
from tapefit import models as models
from tapefit import nn as nn
from tapefit import optimizers as optimizers
from tapefit import plugins as plugins
from tapefit import utils as utils
from tapefit.cli.config import configurable as configurable
from tapefit.core import *  # noqa: F403
from tapefit.core import random as random
from tapefit.core import testing as testing
from tapefit.layers import Input as Input
from tapefit.layers import Model as Model
from tapefit.layers import Module as Module
from tapefit.layers import activations as activations
from tapefit.layers import constraints as constraints
from tapefit.layers import initializers as initializers
from tapefit.layers import losses as losses
from tapefit.layers import metrics as metrics
from tapefit.layers import regularizers as regularizers
from tapefit.layers.serialization import register_serializable as register_serializable
from tapefit.plugins import hookimpl as hookimpl
from tapefit.training.trainer import History as History
from tapefit.training.trainer import Trainer as Trainer

# As with os.path: these live in subpackages but are importable by the dotted names users
# see (``from tapefit.testing import check_gradients``, ``from tapefit.losses import Huber``).
for _module in (random, testing, activations, constraints, initializers, losses, metrics, regularizers):
    _sys.modules[f"{__name__}.{_module.__name__.rpartition('.')[2]}"] = _module
del _module

__version__ = "0.2.0.dev0"  # the CHANGELOG's newest section, unreleased: a .dev0 of it

__all__ = [
    *_core.__all__,
    "History",
    "Input",
    "Model",
    "Module",
    "Trainer",
    "configurable",
    "hookimpl",
    "register_serializable",
    # the public subpackages
    "activations",
    "checkpointing",
    "constraints",
    "data",
    "initializers",
    "layers",
    "linalg",
    "losses",
    "math",
    "metrics",
    "models",
    "nn",
    "optimizers",
    "plugins",
    "regularizers",
    "utils",
]  # tp.random and tp.testing come with tapefit.core's names


def __dir__() -> list[str]:
    # What tab completion offers: the public names. The packages behind them stay importable
    # by their dotted names (``import tapefit.training`` then ``tapefit.training`` works).
    return sorted([*__all__, "__version__"])
