"""The ``train`` command: ``train --config FILE [--set KEY=VALUE ...] [--resume auto|PATH]``.

``app`` parses the command line, builds the data, model, loss, metrics, optimizer and plugins a
config names, checks them, and runs the trainer (exit codes, signals, the report); ``config``
loads YAML/TOML, applies ``--set`` and checks a config against a schema derived from the
classes' signatures (``tp.configurable`` marks what a config may call); ``models`` holds the
config's built-in model builders (``mlp``, ``cnn``); ``run_folder`` holds the run folder's lock
and the marker that says ``train`` made it.
"""
