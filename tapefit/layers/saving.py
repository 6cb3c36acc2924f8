"""Weight files and whole-model files: a Module's ``state_dict`` as a ``.safetensors`` file, and
the model with its config (and a trainer's compile state) as one ``.tapefit`` file.

safetensors is the format PyTorch and Hugging Face tools read: a JSON header naming each
array's dtype, shape and byte range, then the raw bytes. Loading it never runs code (unlike a
pickle). The keys are the ``state_dict`` paths (``sequential/dense/kernel``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tapefit.core.files import FileRefused, atomic_write, file_size, open_untrusted
from tapefit.core.messages import shown
from tapefit.layers.training_methods import held_optimizers

if TYPE_CHECKING:
    from tapefit.layers.module import Module

SUFFIX = ".safetensors"
_MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit


def _safetensors_numpy() -> Any:
    try:
        import safetensors.numpy
    except ImportError as error:
        raise ImportError(
            "save_weights/load_weights need the 'safetensors' package (a dependency of tapefit): "
            "pip install safetensors"
        ) from error
    return safetensors.numpy


def _safetensors_bytes(arrays: dict[str, np.ndarray], **metadata: str) -> bytes:
    """``arrays`` as a safetensors file. Without arrays, without metadata too: safetensors 0.4.0
    (the lowest version taken) writes an empty file with metadata as JSON it cannot read back."""
    st = _safetensors_numpy()
    return st.save(arrays, metadata=metadata) if arrays else st.save({})


def save_weights(module: Module, path: str | os.PathLike[str]) -> Path:
    """Writes ``module.state_dict()`` to ``path`` (a ``.safetensors`` file); returns the path."""
    path = Path(path)
    if path.suffix != SUFFIX:
        raise ValueError(f"save_weights: the file name must end in '{SUFFIX}', got '{path}'")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"save_weights: the folder '{path.parent}' of '{path}' does not exist")
    # asarray, not ascontiguousarray: that one makes a 0-d array (a scalar Variable) shape (1,).
    state = {key: np.asarray(value, order="C") for key, value in module.state_dict().items()}
    data = _safetensors_bytes(state, format="np", producer="tapefit")
    atomic_write(path, lambda f: f.write(data))  # never a half-written file where a good one was
    return path


def read_weights(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The arrays of a ``.safetensors`` file, by key.

    What the file's header claims (its own length, and where the last array ends) is checked
    against the file's length before the arrays are read.

    Raises:
        FileNotFoundError: there is no such file.
        ValueError: the file is not a regular file, not a safetensors file, or its header claims
            more or fewer bytes than the file holds (the message names it).
    """
    path = Path(path)
    st = _safetensors_numpy()
    if not path.exists():
        raise FileNotFoundError(f"load_weights: no such file: '{path}'")
    try:
        f = open_untrusted(path, "weights file")
    except FileRefused as error:
        raise ValueError(f"load_weights: {error}") from None
    with f:
        length = file_size(f)
        prefix = f.read(8)
        header_bytes = int.from_bytes(prefix, "little") if len(prefix) == 8 else -1
        if not 0 < header_bytes <= min(length - 8, _MAX_HEADER_BYTES):
            raise ValueError(
                f"load_weights: '{path}' is not a readable safetensors file (its first 8 bytes claim a "
                f"header of {header_bytes} bytes; the file has {length})"
            )
        header = f.read(header_bytes)
        data_bytes = _data_bytes(header)
        declared = 8 + header_bytes + (data_bytes or 0)
        if data_bytes is not None and declared != length:
            raise ValueError(
                f"load_weights: '{path}' is not a readable safetensors file (its header declares "
                f"{declared} bytes, the file has {length})"
            )
        data = prefix + header + f.read()
    try:
        # From bytes rather than safetensors' memory map: the arrays then hold no open mapping
        # of the file, which could keep it from being replaced later (Windows).
        return dict(st.load(data))
    except Exception as error:  # safetensors raises its own SafetensorError, an Exception
        raise ValueError(f"load_weights: '{path}' is not a readable safetensors file ({error})") from None


def _data_bytes(header: bytes) -> int | None:
    """Where the last array of a safetensors header ends (its ``data_offsets``); ``None`` for a
    header that is not one (``safetensors`` then says what is wrong with it)."""
    try:
        entries = json.loads(header)
        ends = [entry["data_offsets"][1] for key, entry in entries.items() if key != "__metadata__"]
        return max((int(end) for end in ends), default=0)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError):
        return None


def load_weights(module: Module, path: str | os.PathLike[str]) -> None:
    """Loads a ``.safetensors`` file into ``module`` with ``load_state_dict``'s checks."""
    state = read_weights(path)
    try:
        module.load_state_dict(state)
    except ValueError as error:
        raise ValueError(f"load_weights from '{path}': {error}") from None


# -- whole-model files ------------------------------------------------------------------
#
# A ``.tapefit`` file is a zip archive whose members are stored, not compressed: ``config.json``
# (the architecture, its ``build_config``: the input spec of the model's first call, or of each
# layer it holds when only those were called; and the compile state when a trainer saved it),
# ``model.safetensors`` (the weights, keyed by the state_dict paths), from a trainer
# ``optimizer.safetensors`` (the trainer's optimizer's state, keyed as ``get_state``:
# ``iterations``, ``learning_rate``, ``<slot>/<position>``) and, for a model that holds
# optimizers as attributes (a GAN's two), ``optimizers.safetensors`` (their states, keyed
# ``<attribute>/<state key>``, as ``d_optimizer/momentum/0``; their configs are not saved: the
# model's own config makes them). Each member is a standard file: unzip it, and json and
# safetensors tools read the parts. Stored members keep a member's size on disk equal to its
# size read, so every size is checked against the file before a byte is read, and no member
# inflates.

MODEL_SUFFIX = ".tapefit"
FORMAT = "tapefit.model"
FORMAT_VERSION = 1
CONFIG_MEMBER = "config.json"
WEIGHTS_MEMBER = "model.safetensors"
OPTIMIZER_MEMBER = "optimizer.safetensors"
HELD_OPTIMIZERS_MEMBER = "optimizers.safetensors"
MAX_CONFIG_BYTES = 16 * 2**20
"""The largest ``config.json`` a model file may hold (a config is a few kB per layer)."""
MAX_JSON_DEPTH = 100
"""The deepest nesting of lists and dicts ``config.json`` may have."""
_INPUT_DTYPES = frozenset(
    ["bool", "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32"]
    + ["str"]  # string inputs, for the preprocessing layers
)
MAX_LAYERS = 10_000
"""The most layers a model file may describe."""
MAX_SAMPLE_ELEMENTS = 2**24
"""The most elements one sample of one input of a model file may have (64 MB of float32)."""
MAX_PROBE_COST = 2**30
"""The most a file may ask of the batches its layers are built on: layers times the elements of
its largest input sample. Built-in layers are built from their shape rules, which cost nothing of
the input's size; a layer without one is probed on a batch of its input, so a file of many such
layers on a huge input would take minutes to load (ten layers on 2**24, or 1,000 on 2**20, are
within it)."""
_TOP_KEYS = (
    "format",
    "format_version",
    "tapefit_version",
    "model",
    "build_config",
    "compile_config",
    "optimizer",
    "weight_paths",
)


class ModelFileError(ValueError):
    """A model file that ``load_model`` refuses: not a ``.tapefit`` file, sizes that lie, JSON too
    large or too deep, an unknown key or class. The message is one line naming the file."""


@dataclasses.dataclass
class ModelFile:
    """What a model file holds, checked for shape but not yet rebuilt into objects.

    Attributes:
        config: ``config.json``, with the keys ``model``, ``build_config``, ``compile_config``
            and ``optimizer`` (the last two ``None`` for a file ``Module.save`` wrote), and
            ``weight_paths``, the keys of ``weights`` in the order of the model's ``variables``.
        weights: the model's arrays by ``state_dict`` path.
        optimizer_state: the optimizer's ``get_state()`` (``None`` without an optimizer).
        held_optimizer_states: the ``get_state()`` of each optimizer the model holds, by
            attribute name (empty when it holds none).
    """

    config: dict[str, Any]
    weights: dict[str, np.ndarray]
    optimizer_state: dict[str, Any] | None
    held_optimizer_states: dict[str, dict[str, np.ndarray]] = dataclasses.field(default_factory=dict)


def save_model(
    module: Module,
    path: str | os.PathLike[str],
    *,
    compile_config: dict[str, Any] | None = None,
    optimizer_entry: dict[str, Any] | None = None,
    optimizer_state: dict[str, Any] | None = None,
) -> Path:
    """Writes ``module`` to ``path`` (a ``.tapefit`` file), atomically; returns the path.

    The states of the optimizers ``module`` holds as attributes are always written (Keras's
    ``model.save`` keeps the optimizers a model holds, as part of the model's state).

    Args:
        module: the model.
        path: the file, whose name ends in ``.tapefit``.
        compile_config: the trainer's loss, metrics and loss weights, as plain values.
        optimizer_entry: the optimizer's serialized form (``tp.models`` makes it).
        optimizer_state: the optimizer's ``get_state()``, saved with ``optimizer_entry``.

    Raises:
        ValueError: the model or optimizer holds what a file cannot describe (named).
    """
    from tapefit.layers import serialization

    path = Path(path)
    if path.suffix != MODEL_SUFFIX:
        raise ValueError(f"save: the file name must end in '{MODEL_SUFFIX}', got '{path}'")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"save: the folder '{path.parent}' of '{path}' does not exist")
    from tapefit import __version__

    state = module.state_dict()
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "tapefit_version": __version__,
        "model": serialization.serialize(module, f"model '{module.name}'"),
        "build_config": build_config(module),
        "compile_config": compile_config,
        "optimizer": optimizer_entry,
        # The weights in the order of `variables`: a rebuilt model takes them by position, since
        # its layers' paths may differ (a name given now, where the saved one had a default).
        "weight_paths": list(state),
    }
    text = json.dumps(config, indent=1, allow_nan=False).encode("utf-8")
    if len(text) > MAX_CONFIG_BYTES:  # load_model would refuse it: say so now (a huge vocabulary)
        raise ValueError(
            f"save: the model's config is {len(text)} bytes, more than the {MAX_CONFIG_BYTES} a model file "
            "may hold (a preprocessing layer's vocabulary is part of it)"
        )
    weights = {key: np.asarray(value, order="C") for key, value in state.items()}
    members = [(CONFIG_MEMBER, text), (WEIGHTS_MEMBER, _safetensors_bytes(weights, format="np"))]
    if (optimizer_entry is None) != (optimizer_state is None):
        raise ValueError("save: an optimizer's config and its state come together")
    if optimizer_state is not None:
        state = {key: np.asarray(value, order="C") for key, value in optimizer_state.items()}
        members.append((OPTIMIZER_MEMBER, _safetensors_bytes(state, format="np")))
    held = held_optimizers(module)
    if held:
        states = {
            f"{name}/{key}": np.asarray(value, order="C")
            for name, optimizer in held.items()
            for key, value in optimizer.get_state().items()
        }
        members.append((HELD_OPTIMIZERS_MEMBER, _safetensors_bytes(states, format="np")))

    def write(f: Any) -> None:
        with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED) as archive:
            for name, data in members:
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                archive.writestr(info, data, compress_type=zipfile.ZIP_STORED)

    atomic_write(path, write)
    return path


def build_config(module: Module) -> dict[str, Any] | None:
    """How a rebuilt ``module`` makes its variables: the input spec of its first call or, for a
    model never called itself (a GAN's step calls its parts), those of the layers it holds as
    attributes (``{"layers": {attribute: spec}}``); ``None`` when nothing was called."""
    from tapefit.layers import serialization
    from tapefit.layers.module import Module

    build_input = getattr(module, "_build_input", None)
    if build_input is not None:
        return {"input_spec": serialization.to_plain(build_input, "input")}
    layers = {
        name: serialization.to_plain(value._build_input, f"the input of {name}")
        for name, value in vars(module).items()
        if isinstance(value, Module) and getattr(value, "_build_input", None) is not None
    }
    return {"layers": layers} if layers else None


def read_model_file(path: str | os.PathLike[str]) -> ModelFile:
    """Reads and checks a ``.tapefit`` file, building nothing.

    Every member's declared size is checked against the file's length before it is read, the
    bytes read against the size declared, ``config.json`` against ``MAX_CONFIG_BYTES`` and
    ``MAX_JSON_DEPTH``, and its top-level keys against the format's.

    Raises:
        FileNotFoundError: there is no such file.
        ModelFileError: anything else wrong with it, in one line naming the file.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"load_model: no such file: '{path}'")

    def refuse(problem: str) -> ModelFileError:
        return ModelFileError(f"load_model: '{path}': {problem}")

    try:
        f = open_untrusted(path, "model file")
    except FileRefused as error:
        raise ModelFileError(f"load_model: {error}") from None
    with f:
        length = file_size(f)
        try:
            archive = zipfile.ZipFile(f)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError):
            raise refuse("not a tapefit model file (not a zip archive, or a truncated one)") from None
        except NotImplementedError as error:  # zipfile's word for a zip version it cannot read
            raise refuse(f"not a tapefit model file ({_first_line(error)})") from None
        with archive:
            data = _read_members(archive, length, refuse)
    config = _parse_config(data[CONFIG_MEMBER], refuse)
    _check_claims(config, refuse)
    weights = _parse_safetensors(data[WEIGHTS_MEMBER], WEIGHTS_MEMBER, refuse)
    if set(weights) != set(config["weight_paths"]):
        extra = sorted(set(weights) ^ set(config["weight_paths"]))
        raise refuse(f"{WEIGHTS_MEMBER} and weight_paths disagree about {shown(extra[0])}")
    optimizer_state = None
    if OPTIMIZER_MEMBER in data:
        optimizer_state = _parse_safetensors(data[OPTIMIZER_MEMBER], OPTIMIZER_MEMBER, refuse)
    if (optimizer_state is None) != (config["optimizer"] is None):
        raise refuse("the optimizer's config and its state must come together")
    held_states: dict[str, dict[str, np.ndarray]] = {}
    if HELD_OPTIMIZERS_MEMBER in data:
        flat = _parse_safetensors(data[HELD_OPTIMIZERS_MEMBER], HELD_OPTIMIZERS_MEMBER, refuse)
        for key, array in flat.items():
            name, _, state_key = key.partition("/")
            segments = name.split(".")  # held_optimizers joins a submodule, attribute and item by dots
            if not (
                segments[0].isidentifier()
                and all(p.isidentifier() or p.isdigit() for p in segments)
                and state_key
            ):
                raise refuse(
                    f"{HELD_OPTIMIZERS_MEMBER}: the key {shown(key)} is not '<attribute>/<state key>'"
                )
            held_states.setdefault(name, {})[state_key] = array
    return ModelFile(config, weights, optimizer_state, held_states)


def _read_members(archive: zipfile.ZipFile, length: int, refuse: Any) -> dict[str, bytes]:
    infos = archive.infolist()
    allowed = (CONFIG_MEMBER, WEIGHTS_MEMBER, OPTIMIZER_MEMBER, HELD_OPTIMIZERS_MEMBER)
    if len(infos) > len(allowed):
        raise refuse(f"it has {len(infos)} members, a model file at most {len(allowed)}")
    seen: set[str] = set()
    total = 0
    for info in infos:
        quoted = shown(info.filename)
        if info.filename not in allowed:
            raise refuse(f"unknown member {quoted} (a model file holds {', '.join(allowed)})")
        if info.filename in seen:
            raise refuse(f"the member {quoted} appears twice")
        seen.add(info.filename)
        if info.flag_bits & 0x1:
            raise refuse(f"the member {quoted} is encrypted; model files store their members in the clear")
        if info.compress_type != zipfile.ZIP_STORED:
            raise refuse(f"the member {quoted} is compressed; model files store their members")
        if info.file_size != info.compress_size:
            raise refuse(
                f"the member {quoted} declares {info.file_size} bytes but stores {info.compress_size}"
            )
        total += info.file_size
        if info.header_offset + info.file_size > length or total > length:
            raise refuse(
                f"the member {quoted} declares {info.file_size} bytes, more than the file's {length}"
            )
        if info.filename == CONFIG_MEMBER and info.file_size > MAX_CONFIG_BYTES:
            raise refuse(
                f"{CONFIG_MEMBER} is {info.file_size} bytes, more than the {MAX_CONFIG_BYTES} allowed"
            )
    for required in (CONFIG_MEMBER, WEIGHTS_MEMBER):
        if required not in seen:
            raise refuse(f"it has no {required}")
    data: dict[str, bytes] = {}
    for info in infos:
        try:
            with archive.open(info) as member:
                content = member.read(info.file_size + 1)
        except (
            zipfile.BadZipFile,
            OSError,
            ValueError,
            EOFError,
            NotImplementedError,
            RuntimeError,
        ) as error:
            raise refuse(f"the member {shown(info.filename)} cannot be read ({_first_line(error)})") from None
        if len(content) != info.file_size:
            raise refuse(
                f"the member {shown(info.filename)} holds {len(content)} bytes, it declares {info.file_size}"
            )
        data[info.filename] = content
    return data


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _parse_config(data: bytes, refuse: Any) -> dict[str, Any]:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in items:
            if key in result:
                raise ValueError(f"the key {shown(key)} appears twice in one object")
            result[key] = value
        return result

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number")

    try:
        config = json.loads(data.decode("utf-8"), object_pairs_hook=pairs, parse_constant=constant)
    except RecursionError:
        raise refuse(f"{CONFIG_MEMBER} is nested more than {MAX_JSON_DEPTH} levels deep") from None
    except (UnicodeDecodeError, ValueError) as error:
        raise refuse(f"{CONFIG_MEMBER} is not valid JSON ({_first_line(error)})") from None
    depth = _depth(config)
    if depth > MAX_JSON_DEPTH:
        raise refuse(f"{CONFIG_MEMBER} is nested {depth} levels deep, more than the {MAX_JSON_DEPTH} allowed")
    if not isinstance(config, dict):
        raise refuse(f"{CONFIG_MEMBER} must hold an object, got {type(config).__name__}")
    unknown = [k for k in config if k not in _TOP_KEYS]
    if unknown:
        raise refuse(f"unknown key {shown(unknown[0])} in {CONFIG_MEMBER} (known: {', '.join(_TOP_KEYS)})")
    missing = [k for k in _TOP_KEYS if k not in config]
    if missing:
        raise refuse(f"{CONFIG_MEMBER} has no {shown(missing[0])}")
    if config["format"] != FORMAT:
        raise refuse(f"its format is {shown(config['format'])}, not {shown(FORMAT)}")
    if config["format_version"] != FORMAT_VERSION:
        raise refuse(
            f"format version {shown(config['format_version'])}; this tapefit reads version {FORMAT_VERSION}"
        )
    for key in ("build_config", "compile_config"):
        if config[key] is not None and not isinstance(config[key], dict):
            raise refuse(f"{key} must be an object or null")
    paths = config["weight_paths"]
    if (
        not isinstance(paths, list)
        or not all(isinstance(p, str) for p in paths)
        or len(set(paths)) != len(paths)
    ):
        raise refuse("weight_paths must be a list of distinct strings")
    return config


def _check_claims(config: dict[str, Any], refuse: Any) -> None:
    """Refuses a config that asks for more work to build than a model file may: more than
    ``MAX_LAYERS`` layers, an input sample of more than ``MAX_SAMPLE_ELEMENTS`` elements, or
    both so large together that building would pass ``MAX_PROBE_COST``."""
    layers = 0
    largest, where = 0, ""
    stack: list[tuple[Any, str]] = [(config["model"], "model"), (config["build_config"], "build_config")]
    while stack:
        item, at = stack.pop()
        if isinstance(item, list):
            if (
                len(item) == 2
                and isinstance(item[0], list)
                and isinstance(item[1], str)
                and at.startswith("build")
            ):
                elements = _sample_elements(item[0][1:], 1)  # an input spec: [shape with batch, dtype]
                key = "build_config.input_spec"
            else:
                stack.extend((child, at) for child in item)
                continue
        elif isinstance(item, dict):
            if item.get("module") in ("tapefit.layers", "custom") and "class_name" in item:
                layers += 1
            if set(item) == {"name", "shape", "dtype"} and isinstance(item["shape"], list):
                elements = _sample_elements(item["shape"], 3)  # a functional input, no batch axis
                key = f"the shape of the input {shown(item['name'])}"
            else:
                stack.extend((child, at) for child in item.values())
                continue
        else:
            continue
        if elements > MAX_SAMPLE_ELEMENTS:
            raise refuse(
                f"{key} asks for {elements} elements a sample, more than the {MAX_SAMPLE_ELEMENTS} allowed"
            )
        if elements > largest:
            largest, where = elements, key
    if layers > MAX_LAYERS:
        raise refuse(f"model: it describes {layers} layers, more than the {MAX_LAYERS} allowed")
    if layers * largest > MAX_PROBE_COST:
        raise refuse(
            f"{where} asks for {largest} elements a sample, too many for {layers} layers to be built on "
            f"(at most {MAX_PROBE_COST} for layers times elements)"
        )


def _sample_elements(shape: list[Any], unknown: int) -> int:
    """The elements of one sample of ``shape`` (``unknown`` for each ``None`` axis); a shape
    that is not one of numbers counts as none (building it says what is wrong)."""
    if not all(n is None or (isinstance(n, int) and not isinstance(n, bool)) for n in shape):
        return 0
    count = 1
    for n in shape:
        count *= unknown if n is None else max(n, 0)
        if count > MAX_SAMPLE_ELEMENTS:  # past the limit: the exact count is not needed
            return count
    return count


def _depth(value: Any) -> int:
    """How deeply lists and dicts nest in ``value`` (a scalar is 0), without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if depth <= MAX_JSON_DEPTH:
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _parse_safetensors(data: bytes, member: str, refuse: Any) -> dict[str, np.ndarray]:
    st = _safetensors_numpy()
    header_bytes = int.from_bytes(data[:8], "little") if len(data) >= 8 else -1
    if not 0 < header_bytes <= min(len(data) - 8, _MAX_HEADER_BYTES):
        raise refuse(
            f"{member} is not a safetensors file (its header claims {header_bytes} bytes of {len(data)})"
        )
    declared = _data_bytes(data[8 : 8 + header_bytes])
    if declared is not None and 8 + header_bytes + declared != len(data):
        raise refuse(f"{member} declares {8 + header_bytes + declared} bytes, it holds {len(data)}")
    try:
        return dict(st.load(data))
    except Exception as error:  # safetensors raises its own SafetensorError, an Exception
        raise refuse(f"{member} is not a readable safetensors file ({_first_line(error)})") from None


def build_from_spec(module: Module, spec: Any) -> None:
    """Makes ``module``'s variables as its first call on data did, from symbolic inputs of
    ``spec``: by the module's shape rule, which allocates nothing of the input's size, or (a
    module without one) by the probe of ``symbolic_outputs``, on a batch of one with ``None``
    axes of size one; ``training`` is off."""
    from tapefit.layers.symbolic import SymbolicTensor, symbolic_outputs

    def symbolic(leaf: Any) -> Any:
        if isinstance(leaf, dict):
            return {k: symbolic(v) for k, v in leaf.items()}
        if (
            isinstance(leaf, list)
            and len(leaf) == 2
            and isinstance(leaf[1], str)
            and isinstance(leaf[0], list)
        ):
            shape, dtype = leaf
            dims = shape[1:]
            if dtype not in _INPUT_DTYPES or not all(
                n is None or (isinstance(n, int) and not isinstance(n, bool) and n >= 0) for n in dims
            ):
                raise ValueError(f"build_config: not an input spec: {shown(leaf)}")
            if math.prod(1 if n is None else n for n in dims) > MAX_SAMPLE_ELEMENTS:
                raise ValueError(
                    f"build_config: an input of shape {dims} per sample is too large to build with"
                )
            return SymbolicTensor((None, *dims), dtype, "input")
        if isinstance(leaf, list):
            return [symbolic(v) for v in leaf]
        raise ValueError(f"build_config: not an input spec: {shown(leaf)}")

    symbolic_outputs(module, (symbolic(spec),), {"training": False})
