"""tapefit: a readable, tape-based autodiff and training loop on NumPy.

``import tapefit as tp``; the names here are the public API (see API.md).
"""

import sys as _sys

from tapefit import layers as layers
from tapefit import math as math
from tapefit import nn as nn
from tapefit import optimizers as optimizers
from tapefit import plugins as plugins
from tapefit.cli.config import configurable as configurable
from tapefit.core import *  # noqa: F403
from tapefit.core import random as random
from tapefit.core import testing as testing
from tapefit.layers import Module as Module
from tapefit.layers import activations as activations
from tapefit.layers import initializers as initializers
from tapefit.layers import losses as losses
from tapefit.layers import metrics as metrics
from tapefit.layers import regularizers as regularizers
from tapefit.plugins import hookimpl as hookimpl
from tapefit.training.trainer import History as History
from tapefit.training.trainer import Trainer as Trainer

# As with os.path: these live in subpackages but are importable by the dotted names users
# see (``from tapefit.testing import check_gradients``, ``from tapefit.losses import Huber``).
for _module in (random, testing, activations, initializers, losses, metrics, regularizers):
    _sys.modules[f"{__name__}.{_module.__name__.rpartition('.')[2]}"] = _module
del _module

__version__ = "0.1.0"
