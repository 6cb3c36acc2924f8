"""Distributed training and the cores it runs on.

``world`` holds ``World`` (one process) and ``MPIWorld`` (the processes of an MPI launcher:
collectives with timeouts, abort), and the rules for splitting batches among ranks; ``threads``
sizes BLAS threads so that ranks, data workers and neighbours do not oversubscribe the cores.
The ``distributed`` plugin and the trainer call them; nothing here imports a plugin.
"""

from tapefit.distributed.world import MPIWorld, World

__all__ = ["MPIWorld", "World"]
