"""Keras 3's outputs for the preprocessing layers tapefit takes from it, saved for CI.

CI has no Keras, so tapefit's ``TextVectorization``, ``StringLookup``, ``IntegerLookup``,
``CategoryEncoding``, ``Hashing`` and ``Normalization`` are compared there with what this
script computed once with Keras 3 (TensorFlow backend), saved in
``tests/layers/data/keras_preprocessing.npz``. Only NumPy and Keras are used, not tapefit.

- ``input/<key>``: the inputs of ``INPUTS`` (strings as unicode arrays).
- ``case/<case>/spec``: for each case of ``CASES``, its JSON: the Keras class, its arguments,
  the input it adapts on (or ``null``), the input it is called on, and the call's arguments.
- ``case/<case>/vocabulary``: ``get_vocabulary()`` after adapt (lookup layers).
- ``case/<case>/output``: the output of the call.
- ``case/<case>/mean``, ``variance`` (Normalization): the statistics after adapt, and
  ``case/<case>/gradient``: the gradient of ``sum(output * input_weights)`` with respect to the
  input (``input/weights_<input>``).
- ``example/...``: the vectorization part of keras.io's "Text classification from scratch"
  (its custom standardization, ``adapt`` on a batched data set of texts, ``vectorize_text``) on
  ``REVIEWS``: ``example/vocabulary``, ``example/train`` and ``example/test`` (the vectorized
  texts).

    KERAS_BACKEND=tensorflow /tmp/kerasvenv/bin/python scripts/keras_reference_preprocessing.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

PATH = Path(__file__).resolve().parents[1] / "tests" / "layers" / "data" / "keras_preprocessing.npz"


def _random_strings(seed: int, count: int) -> np.ndarray:
    """Strings of every length from 0 to 150 bytes (FarmHash has a branch per length range)."""
    rng = np.random.default_rng(seed)
    alphabet = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,!é漢")
    lengths = np.concatenate([np.arange(0, 151), rng.integers(0, 150, count - 151)])
    return np.asarray(["".join(rng.choice(alphabet, size=int(n))) for n in lengths], dtype=str)


CORPUS = np.asarray(
    [
        "The quick brown fox jumps over the lazy dog.",
        "the DOG barks; the fox runs!",
        "A dog, a cat, and a bird... all friends?",
        "Émile ate crème brûlée at the café",
        "tabs\tand\nnewlines   and  spaces",
        "dog dog cat cat bird",
        "It's (really) [quite] {odd}: 50% off -- #1 @home",
        "",
    ],
    dtype=str,
)
QUERIES = np.asarray(
    ["the dog and the cat", "An unknown ZEBRA appears!", "crème café dog", "", "fox fox fox"],
    dtype=str,
)
TOKENS = np.asarray(
    [["a", "b", "c", "a"], ["b", "b", "d", "e"], ["c", "a", "", "f"], ["g", "a", "b", "h"]], dtype=str
)
TOKEN_QUERIES = np.asarray([["a", "z", "b", ""], ["q", "h", "e", "a"], ["zz", "yy", "xx", "c"]], dtype=str)
INTEGERS = np.asarray([[3, 7, 7, 1], [9, 3, 0, 12], [7, 7, 3, 40], [5, 9, 1, 1]], dtype=np.int64)
INTEGER_QUERIES = np.asarray([[3, 100, 7, 0], [2, 9, 41, -5], [1000, 12, 5, 77]], dtype=np.int64)
IDS = np.asarray([[0, 1, 1, 3], [2, 2, 2, 0], [3, 1, 0, 2]], dtype=np.int64)

# IMDB-like reviews, with the "<br />" breaks the example's standardization removes
REVIEWS = np.asarray(
    [
        "This movie was great!<br /><br />I loved the acting, the story and the music.",
        "Terrible film. The plot made no sense<br />and the acting was worse.",
        "A great, great story: I would watch it again.",
        "Not my kind of movie; too long, too loud<br />and too silly.",
        "The music was lovely and the actors were great.",
        "Worst movie of the year? Maybe. I left early.",
    ],
    dtype=str,
)
REVIEW_LABELS = np.asarray([1, 0, 1, 0, 1, 0], dtype=np.int64)
REVIEW_QUERIES = np.asarray(["A great movie<br />with great music!", "boring, silly and loud"], dtype=str)
EXAMPLE = {"max_features": 30, "sequence_length": 12, "batch_size": 4}

INPUTS: dict[str, np.ndarray] = {
    "corpus": CORPUS,
    "queries": QUERIES,
    "queries_column": QUERIES[:, None],
    "tokens": TOKENS,
    "token_queries": TOKEN_QUERIES,
    "token_column": np.asarray(["a", "b", "zzz", ""], dtype=str)[:, None],
    "integers": INTEGERS,
    "integer_queries": INTEGER_QUERIES,
    "ids": IDS,
    "ids_column": IDS[:, :1],
    "count_weights": np.asarray(
        [[0.5, 1.0, 2.0, 0.25], [1.0, 1.5, 2.5, 3.0], [2.0, 0.5, 1.0, 4.0]], np.float32
    ),
    "hash_strings": _random_strings(0, 300),
    "hash_integers": np.asarray([-(2**40), -7, -1, 0, 1, 2, 3, 42, 1000, 2**40, 2**62], dtype=np.int64),
    "hash_floats": np.asarray([[-2.7, 0.0], [1.9, 3.5], [42.0, 1e6]], dtype=np.float32),
    "table": np.random.default_rng(1).normal(3.0, 2.0, (40, 3)).astype(np.float32),
    "table_queries": np.random.default_rng(2).normal(3.0, 2.0, (5, 3)).astype(np.float32),
    "images": np.random.default_rng(3).uniform(0.0, 4.0, (6, 2, 3, 2)).astype(np.float32),
}
INPUTS["weights_table_queries"] = np.random.default_rng(4).normal(size=(5, 3)).astype(np.float32)
INPUTS["weights_images"] = np.random.default_rng(5).normal(size=(6, 2, 3, 2)).astype(np.float32)

# (case, Keras class, arguments, adapt input or None, call input, call arguments)
CASES: list[tuple[str, str, dict[str, Any], str | None, str, dict[str, Any]]] = [
    ("tv_default", "TextVectorization", {}, "corpus", "queries", {}),
    ("tv_column", "TextVectorization", {"output_sequence_length": 5}, "corpus", "queries_column", {}),
    ("tv_length", "TextVectorization", {"output_sequence_length": 4}, "corpus", "queries", {}),
    ("tv_long", "TextVectorization", {"output_sequence_length": 12}, "corpus", "queries", {}),
    ("tv_max_tokens", "TextVectorization", {"max_tokens": 9}, "corpus", "queries", {}),
    ("tv_lower", "TextVectorization", {"standardize": "lower"}, "corpus", "queries", {}),
    ("tv_strip", "TextVectorization", {"standardize": "strip_punctuation"}, "corpus", "queries", {}),
    ("tv_none", "TextVectorization", {"standardize": None}, "corpus", "queries", {}),
    ("tv_character", "TextVectorization", {"split": "character"}, "corpus", "queries", {}),
    ("tv_no_split", "TextVectorization", {"split": None}, "queries", "queries", {}),
    ("tv_ngrams", "TextVectorization", {"ngrams": 2}, "corpus", "queries", {}),
    ("tv_ngrams_13", "TextVectorization", {"ngrams": [1, 3], "max_tokens": 30}, "corpus", "queries", {}),
    ("tv_multi_hot", "TextVectorization", {"output_mode": "multi_hot"}, "corpus", "queries", {}),
    ("tv_count", "TextVectorization", {"output_mode": "count", "max_tokens": 12}, "corpus", "queries", {}),
    ("tv_tf_idf", "TextVectorization", {"output_mode": "tf_idf"}, "corpus", "queries", {}),
    (
        "tv_tf_idf_padded",
        "TextVectorization",
        {"output_mode": "tf_idf", "max_tokens": 40, "pad_to_max_tokens": True},
        "corpus",
        "queries",
        {},
    ),
    (
        "tv_multi_hot_padded",
        "TextVectorization",
        {"output_mode": "multi_hot", "max_tokens": 50, "pad_to_max_tokens": True},
        "corpus",
        "queries",
        {},
    ),
    ("tv_vocabulary", "TextVectorization", {"vocabulary": ["dog", "the", "cat"]}, None, "queries", {}),
    ("sl_int", "StringLookup", {}, "tokens", "token_queries", {}),
    ("sl_mask", "StringLookup", {"mask_token": ""}, "tokens", "token_queries", {}),
    ("sl_oov3", "StringLookup", {"num_oov_indices": 3}, "tokens", "token_queries", {}),
    ("sl_oov3_salt", "StringLookup", {"num_oov_indices": 3, "salt": [11, 22]}, "tokens", "token_queries", {}),
    ("sl_max_tokens", "StringLookup", {"max_tokens": 4}, "tokens", "token_queries", {}),
    ("sl_one_hot", "StringLookup", {"output_mode": "one_hot"}, "tokens", "token_column", {}),
    ("sl_multi_hot", "StringLookup", {"output_mode": "multi_hot"}, "tokens", "token_queries", {}),
    (
        "sl_multi_hot_mask",
        "StringLookup",
        {"output_mode": "multi_hot", "mask_token": ""},
        "tokens",
        "token_queries",
        {},
    ),
    ("sl_count", "StringLookup", {"output_mode": "count"}, "tokens", "token_queries", {}),
    ("sl_tf_idf", "StringLookup", {"output_mode": "tf_idf"}, "tokens", "token_queries", {}),
    ("sl_vocabulary", "StringLookup", {"vocabulary": ["b", "a", "zz"]}, None, "token_queries", {}),
    (
        "sl_invert",
        "StringLookup",
        {"vocabulary": ["b", "a", "zz"], "invert": True, "mask_token": "[M]"},
        None,
        "ids",
        {},
    ),
    ("il_int", "IntegerLookup", {}, "integers", "integer_queries", {}),
    ("il_mask", "IntegerLookup", {"mask_token": 0}, "integers", "integer_queries", {}),
    ("il_oov3", "IntegerLookup", {"num_oov_indices": 3}, "integers", "integer_queries", {}),
    (
        "il_oov3_farmhash",
        "IntegerLookup",
        {"num_oov_indices": 3, "oov_method": "farmhash"},
        "integers",
        "integer_queries",
        {},
    ),
    ("il_max_tokens", "IntegerLookup", {"max_tokens": 4}, "integers", "integer_queries", {}),
    ("il_multi_hot", "IntegerLookup", {"output_mode": "multi_hot"}, "integers", "integer_queries", {}),
    ("il_count", "IntegerLookup", {"output_mode": "count"}, "integers", "integer_queries", {}),
    ("il_tf_idf", "IntegerLookup", {"output_mode": "tf_idf"}, "integers", "integer_queries", {}),
    ("il_invert", "IntegerLookup", {"vocabulary": [12, 36, 7], "invert": True}, None, "ids", {}),
    ("ce_one_hot", "CategoryEncoding", {"num_tokens": 4, "output_mode": "one_hot"}, None, "ids_column", {}),
    ("ce_multi_hot", "CategoryEncoding", {"num_tokens": 5}, None, "ids", {}),
    ("ce_count", "CategoryEncoding", {"num_tokens": 4, "output_mode": "count"}, None, "ids", {}),
    (
        "ce_count_weights",
        "CategoryEncoding",
        {"num_tokens": 4, "output_mode": "count"},
        None,
        "ids",
        {"count_weights": "count_weights"},
    ),
    ("hash_strings", "Hashing", {"num_bins": 1000003}, None, "hash_strings", {}),
    ("hash_strings_small", "Hashing", {"num_bins": 7}, None, "hash_strings", {}),
    ("hash_salt", "Hashing", {"num_bins": 1000003, "salt": [133, 137]}, None, "hash_strings", {}),
    ("hash_salt_int", "Hashing", {"num_bins": 97, "salt": 5}, None, "hash_strings", {}),
    ("hash_mask", "Hashing", {"num_bins": 5, "mask_value": ""}, None, "hash_strings", {}),
    ("hash_integers", "Hashing", {"num_bins": 1000003}, None, "hash_integers", {}),
    ("hash_integers_mask", "Hashing", {"num_bins": 6, "mask_value": 0}, None, "hash_integers", {}),
    ("hash_floats", "Hashing", {"num_bins": 1000003}, None, "hash_floats", {}),
    ("hash_multi_hot", "Hashing", {"num_bins": 8, "output_mode": "multi_hot"}, None, "token_queries", {}),
    ("hash_count", "Hashing", {"num_bins": 8, "output_mode": "count"}, None, "token_queries", {}),
    ("hash_one_hot", "Hashing", {"num_bins": 8, "output_mode": "one_hot"}, None, "token_column", {}),
    ("norm_default", "Normalization", {}, "table", "table_queries", {}),
    ("norm_all", "Normalization", {"axis": None}, "table", "table_queries", {}),
    ("norm_invert", "Normalization", {"invert": True}, "table", "table_queries", {}),
    (
        "norm_given",
        "Normalization",
        {"mean": [1.0, 2.0, 3.0], "variance": [4.0, 0.25, 9.0]},
        None,
        "table_queries",
        {},
    ),
    ("norm_given_scalar", "Normalization", {"mean": 3.0, "variance": 2.0}, None, "table_queries", {}),
    ("norm_images", "Normalization", {"axis": [1, 3]}, "images", "images", {}),
    ("norm_batches", "Normalization", {}, "table/batches", "table_queries", {}),
]


def _arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    out = dict(arguments)
    for key in ("ngrams", "axis"):
        if isinstance(out.get(key), list):
            out[key] = tuple(out[key])
    return out


def _example(keras: Any, tf: Any) -> dict[str, np.ndarray]:
    """The vectorization part of keras.io's "Text classification from scratch", as written there
    (its sizes made small), on ``REVIEWS``."""
    import re
    import string

    def custom_standardization(input_data: Any) -> Any:
        lowercase = tf.strings.lower(input_data)
        stripped_html = tf.strings.regex_replace(lowercase, "<br />", " ")
        return tf.strings.regex_replace(stripped_html, f"[{re.escape(string.punctuation)}]", "")

    vectorize_layer = keras.layers.TextVectorization(
        standardize=custom_standardization,
        max_tokens=EXAMPLE["max_features"],
        output_mode="int",
        output_sequence_length=EXAMPLE["sequence_length"],
    )
    raw_train_ds = tf.data.Dataset.from_tensor_slices((REVIEWS, REVIEW_LABELS)).batch(EXAMPLE["batch_size"])
    text_ds = raw_train_ds.map(lambda x, y: x)
    vectorize_layer.adapt(text_ds)

    def vectorize_text(text: Any, label: Any) -> Any:
        text = tf.expand_dims(text, -1)
        return vectorize_layer(text), label

    train = np.concatenate([x.numpy() for x, _ in raw_train_ds.map(vectorize_text)])
    test, _ = vectorize_text(tf.constant(REVIEW_QUERIES), None)
    return {
        "example/reviews": REVIEWS,
        "example/labels": REVIEW_LABELS,
        "example/queries": REVIEW_QUERIES,
        "example/vocabulary": np.asarray(vectorize_layer.get_vocabulary()),
        "example/train": train,
        "example/test": test.numpy(),
    }


def main() -> int:
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras
    import tensorflow as tf

    saved: dict[str, np.ndarray] = {f"input/{k}": v for k, v in INPUTS.items()}
    for case, cls, arguments, adapt, given, call in CASES:
        layer = getattr(keras.layers, cls)(**_arguments(arguments))
        if adapt is not None:
            if adapt.endswith("/batches"):  # an iterable of batches of 16, 16 and 8 rows
                data = INPUTS[adapt.split("/")[0]]
                layer.adapt([data[:16], data[16:32], data[32:]])
            else:
                layer.adapt(INPUTS[adapt])
        inputs = INPUTS[given]
        kwargs = {k: INPUTS[v] for k, v in call.items()}
        spec = {"class": cls, "arguments": arguments, "adapt": adapt, "input": given, "call": call}
        saved[f"case/{case}/spec"] = np.asarray(json.dumps(spec))
        if cls == "Normalization":
            x = tf.constant(inputs)
            with tf.GradientTape() as tape:
                tape.watch(x)
                output = layer(x)
                total = tf.reduce_sum(output * INPUTS[f"weights_{given}"])
            saved[f"case/{case}/gradient"] = tape.gradient(total, x).numpy()
            if adapt is not None:
                saved[f"case/{case}/mean"] = np.asarray(layer.adapt_mean.numpy())
                saved[f"case/{case}/variance"] = np.asarray(layer.adapt_variance.numpy())
        else:
            output = layer(inputs, **kwargs)
        output = np.asarray(output.numpy() if hasattr(output, "numpy") else output)
        if output.dtype.kind in "SO":
            output = np.char.decode(output.astype(bytes), "utf-8")
        saved[f"case/{case}/output"] = output
        if hasattr(layer, "get_vocabulary") and adapt is not None:
            vocabulary = layer.get_vocabulary()
            saved[f"case/{case}/vocabulary"] = np.asarray(
                [int(v) for v in vocabulary] if cls == "IntegerLookup" else vocabulary
            )
    saved.update(_example(keras, tf))
    saved["keras_version"] = np.asarray(keras.__version__)
    PATH.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(PATH, **saved)
    print(f"wrote {len(CASES)} cases to {PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
