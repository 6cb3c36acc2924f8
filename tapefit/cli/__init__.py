"""The ``train`` command: ``train --config FILE [--set KEY=VALUE ...] [--resume auto|PATH]``.

``app`` parses the command line, prepares a run (resume point, run folder, lock), trains it and
reports (exit codes, signals, the summary); ``config`` loads YAML/TOML, applies ``--set`` and
checks a config against a schema derived from the classes' signatures (``tp.configurable``
marks what a config may call); ``schema`` holds each section's built-in types and what an import
path may name; ``build`` builds the objects a config names and tries them on the data before
anything is written; ``models`` holds the config's built-in model builders (``mlp``, ``cnn``);
``run_folder`` holds the run folder's lock and the marker that says ``train`` made it.
"""
