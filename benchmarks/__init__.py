"""tapefit's benchmarks: ``python -m benchmarks`` runs the suite (``suite.py``); the other
modules are single benchmarks, each runnable as a script."""
