"""Keras 3's argument names for what the "Argument by argument" tables of
``docs/coming-from-keras.md`` cover, saved for CI.

CI has no Keras, so ``tests/test_docs_keras_table.py`` reads the names this script wrote into
``tests/data/keras_signatures.json`` with Keras 3 installed, and checks that each table lists
every one of them. Only Keras is used, not tapefit.

    KERAS_BACKEND=jax python scripts/keras_signatures.py          # writes the file
    KERAS_BACKEND=jax python scripts/keras_signatures.py --check  # exit 1 if the file differs
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
from pathlib import Path

PATH = Path(__file__).resolve().parents[1] / "tests" / "data" / "keras_signatures.json"

# table heading: the Keras object, by its path under ``keras``
CALLABLES = {
    "Model.compile": "Model.compile",
    "Model.fit": "Model.fit",
    "Model.evaluate": "Model.evaluate",
    "Model.predict": "Model.predict",
    "EarlyStopping": "callbacks.EarlyStopping",
    "ReduceLROnPlateau": "callbacks.ReduceLROnPlateau",
    "TerminateOnNaN": "callbacks.TerminateOnNaN",
    "CSVLogger": "callbacks.CSVLogger",
    "ModelCheckpoint": "callbacks.ModelCheckpoint",
    "TensorBoard": "callbacks.TensorBoard",
    "BackupAndRestore": "callbacks.BackupAndRestore",
    "LearningRateScheduler": "callbacks.LearningRateScheduler",
    "LambdaCallback": "callbacks.LambdaCallback",
    "ProgbarLogger": "callbacks.ProgbarLogger",
    "SeedGenerator": "random.SeedGenerator",
}
LAYERS = [  # the layers tapefit has
    "Dense", "Conv1D", "Conv2D", "MaxPooling2D", "AveragePooling2D", "GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalMaxPooling1D",
    "GlobalMaxPooling2D", "BatchNormalization", "LayerNormalization", "Embedding", "Dropout",
    "SimpleRNN", "LSTM", "GRU", "Bidirectional", "MultiHeadAttention", "Flatten", "Reshape",
    "Permute", "RepeatVector", "ZeroPadding1D", "ZeroPadding2D", "Cropping1D", "Cropping2D",
    "UpSampling1D", "UpSampling2D", "Add", "Subtract", "Multiply", "Average", "Maximum",
    "Minimum", "Concatenate", "Dot", "ReLU", "LeakyReLU", "PReLU", "ELU", "Softmax", "Rescaling",
    "GaussianNoise", "Conv1DTranspose", "Conv2DTranspose", "MaxPooling1D", "AveragePooling1D",
    "DepthwiseConv2D", "SeparableConv2D", "GroupNormalization", "SpatialDropout1D", "SpatialDropout2D",
    "TextVectorization", "StringLookup", "IntegerLookup", "CategoryEncoding", "Hashing", "Normalization",
    "RNN", "SimpleRNNCell", "LSTMCell", "GRUCell", "StackedRNNCells", "Masking", "TimeDistributed",
]  # fmt: skip
LISTS = {  # table heading: the module whose public names (in lowercase) are the list
    "activations": "activations",
    "initializers": "initializers",
    "regularizers": "regularizers",
    "constraints": "constraints",
}
NAMESPACES = {  # table heading: the module whose public classes and functions are the list
    "losses": "losses",
    "metrics": "metrics",
}
SKIP = {"self", "args", "kwargs"}


def arguments(obj: object) -> list[str]:
    """The named arguments of ``obj`` (a class: its constructor), in order."""
    target = obj.__init__ if inspect.isclass(obj) else obj  # type: ignore[misc]
    return [name for name in inspect.signature(target).parameters if name not in SKIP]


def listed(module: object) -> list[str]:
    """The names a Keras user may pass as a string: the module's public lowercase functions and
    the snake_case aliases of its classes, as ``keras.<module>.get`` resolves them."""
    names = set()
    for name in dir(module):
        if name.startswith("_") or name in {"get", "serialize", "deserialize"}:
            continue
        value = getattr(module, name)
        if inspect.isfunction(value) and name.islower():
            names.add(name)
        elif inspect.isclass(value) and name.islower():
            names.add(name)  # snake_case aliases of classes (glorot_uniform, l2, max_norm)
    return sorted(names)


def namespace(module: object) -> list[str]:
    """Every public class and function of ``module`` (``AUC``, ``binary_crossentropy``), but its
    base classes and its ``get``, ``serialize`` and ``deserialize``."""
    skip = {"get", "serialize", "deserialize", "Loss", "Metric"}
    return sorted(
        name
        for name in dir(module)
        if not name.startswith("_")
        and name not in skip
        and (inspect.isclass(getattr(module, name)) or inspect.isfunction(getattr(module, name)))
    )


def signatures() -> dict[str, list[str]]:
    import keras

    def find(path: str) -> object:
        obj: object = keras
        for part in path.split("."):
            obj = getattr(obj, part)
        return obj

    out: dict[str, list[str]] = {"keras_version": [keras.__version__]}
    for heading, path in CALLABLES.items():
        out[heading] = arguments(find(path))
    for layer in LAYERS:
        out[layer] = arguments(find(f"layers.{layer}"))
    for heading, module in LISTS.items():
        out[heading] = listed(find(module))
    for heading, module in NAMESPACES.items():
        out[heading] = namespace(find(module))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the saved file")
    args = parser.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "jax")
    text = json.dumps(signatures(), indent=1) + "\n"
    if args.check:
        same = PATH.read_text() == text
        print("same" if same else f"{PATH} differs from Keras's signatures")
        return 0 if same else 1
    PATH.write_text(text)
    print(f"wrote {PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
