"""Configs for ``train``: loading (YAML or TOML), ``--set`` overrides, the schema and validation.

A config is a mapping with the top-level keys ``name``, ``seed``, ``data``, ``model``, ``loss``,
``metrics``, ``optimizer``, ``trainer`` and ``plugins``. Sections that pick an implementation do
so with ``type``: a built-in short name or an import path ``package.module:Name``; their other
keys are the keyword arguments of what ``type`` names, so the keys a type accepts, their types
and which are required are read from its signature (and annotations). ``resolve_config`` checks
everything that can be checked without running anything heavy (unknown keys, wrong types,
missing keys, unknown types, import paths, data files) and returns the resolved config: every
default filled in, every shorthand expanded.

Each problem is reported as a ``ConfigError`` whose message is one line naming the key path
(``optimizer.learning_rate``, ``plugins[2].global_norm``).

The modules, from the file to the schema: ``loading`` (files, size limits, ``configurable``),
``values`` (describing values and types in messages), ``overrides`` (``--set``), ``checking``
(a section's keys read from signatures), ``schema`` (the sections and ``resolve_config``) and
``builtins`` (the built-in types of each section: ``default_schema``).
"""

from tapefit.cli.config.builtins import default_schema, grain_source, loss_types, named_metric
from tapefit.cli.config.checking import (
    REQUIRED,
    Kind,
    Param,
    Target,
    check_list,
    check_mapping,
    check_typed,
    find_target,
    import_object,
    search_beside,
    signature_params,
)
from tapefit.cli.config.loading import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_VALUES,
    TOP_LEVEL_KEYS,
    ConfigError,
    check_size,
    configurable,
    dump_config,
    is_configurable,
    load_config_file,
    parse_yaml,
)
from tapefit.cli.config.overrides import apply_overrides, format_key_path, parse_key_path
from tapefit.cli.config.schema import DATA_COMMON, Schema, resolve_config, trainer_params
from tapefit.cli.config.values import describe, kind_of, plain, show

__all__ = [
    "DATA_COMMON",
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_VALUES",
    "REQUIRED",
    "TOP_LEVEL_KEYS",
    "ConfigError",
    "Kind",
    "Param",
    "Schema",
    "Target",
    "apply_overrides",
    "check_list",
    "check_mapping",
    "check_size",
    "check_typed",
    "configurable",
    "default_schema",
    "describe",
    "dump_config",
    "find_target",
    "format_key_path",
    "grain_source",
    "import_object",
    "is_configurable",
    "kind_of",
    "load_config_file",
    "loss_types",
    "named_metric",
    "parse_key_path",
    "parse_yaml",
    "plain",
    "resolve_config",
    "search_beside",
    "show",
    "signature_params",
    "trainer_params",
]
