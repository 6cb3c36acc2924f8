"""``TextVectorization``: strings to token ids or token vectors, as Keras 3's layer."""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core.function import host_call
from tapefit.core.messages import shown
from tapefit.core.tensor import Tensor
from tapefit.layers.preprocessing import encoding as enc
from tapefit.layers.preprocessing.lookup import StringLookup, is_batches
from tapefit.layers.symbolic import SymbolicTensor

# TensorFlow's tf.strings.lower (which Keras calls) lowers ASCII letters only.
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_PUNCTUATION = re.compile("[" + re.escape(string.punctuation) + "]")
# tf.strings.split with no separator splits on ASCII whitespace, and drops empty tokens.
_WHITESPACE = re.compile("[ \t\n\v\f\r]+")
_STANDARDIZE = ("lower_and_strip_punctuation", "lower", "strip_punctuation")
_SPLIT = ("whitespace", "character")


def _ngrams(tokens: list[str], widths: tuple[int, ...]) -> list[str]:
    """Every n-gram of each width in turn, its tokens joined by a space (tf.strings.ngrams)."""
    out: list[str] = []
    for width in widths:
        out.extend(" ".join(tokens[i : i + width]) for i in range(len(tokens) - width + 1))
    return out


class TextVectorization(enc.PreprocessingLayer):
    """Turns strings into sequences of token ids, or into one vector of token counts each, as
    Keras's ``TextVectorization``.

    Each string is standardized, split into tokens, made into n-grams, then looked up in the
    vocabulary (learned by ``adapt`` or given): id 0 is padding (``""``), id 1 the
    out-of-vocabulary token ``"[UNK]"``, then the vocabulary, most frequent token first (ties:
    the greater string first), as Keras orders it. ``"lower"`` lowers ASCII letters only and
    ``"strip_punctuation"`` removes ASCII punctuation, as TensorFlow's string ops do. Outputs
    are Tensors no tape records: int64 ids or vectors (float32 in ``"tf_idf"`` mode).

    Args:
        max_tokens: the vocabulary's size, padding and OOV ids included (``None``: no limit).
        standardize: ``"lower_and_strip_punctuation"``, ``"lower"``, ``"strip_punctuation"``,
            ``None``, or a function of a NumPy array of ``str`` that returns one like it.
        split: ``"whitespace"``, ``"character"``, ``None`` (each string is one token), or a
            function of a 1-D NumPy array of ``str`` returning one list of tokens per string.
        ngrams: ``None``, ``n`` (all n-grams from 1 to n) or a tuple of the widths wanted.
        output_mode: ``"int"``, ``"multi_hot"``, ``"count"``, ``"tf_idf"`` (or ``"one_hot"``,
            with one token per string).
        output_sequence_length: in ``"int"`` mode, the length every sequence is padded or cut
            to (``None``: the longest of the batch).
        pad_to_max_tokens: make the vectors ``max_tokens`` wide.
        vocabulary: the tokens (a list, array or file of one a line), instead of ``adapt``.
        idf_weights: the idf of each vocabulary entry, in ``"tf_idf"`` mode.
        encoding: the encoding of ``bytes`` inputs.
        name: the layer's name.
        dtype: the dtype of the vectors (float32).
        trainable: kept for Keras's signature (there are no weights).
    """

    def __init__(
        self,
        max_tokens: int | None = None,
        standardize: str | Callable[[np.ndarray], Any] | None = "lower_and_strip_punctuation",
        split: str | Callable[[np.ndarray], Any] | None = "whitespace",
        ngrams: int | tuple[int, ...] | None = None,
        output_mode: str = "int",
        output_sequence_length: int | None = None,
        pad_to_max_tokens: bool = False,
        vocabulary: Any = None,
        idf_weights: Any = None,
        encoding: str = "utf-8",
        name: str | None = None,
        *,
        dtype: Any = None,
        trainable: bool = True,
    ) -> None:
        super().__init__(name=name, trainable=trainable)
        where = self._where()
        self.dtype = enc.float_dtype(dtype, where)
        if not (standardize is None or callable(standardize) or standardize in _STANDARDIZE):
            raise ValueError(
                f"{where}: standardize must be one of {', '.join(_STANDARDIZE)}, None or a function; "
                f"got {shown(standardize)}"
            )
        if not (split is None or callable(split) or split in _SPLIT):
            raise ValueError(
                f"{where}: split must be 'whitespace', 'character', None or a function; got {shown(split)}"
            )
        output_mode = enc.check_mode(output_mode, ("int", *enc.ENCODINGS), where)
        if isinstance(ngrams, list):
            ngrams = tuple(ngrams)
        if not (
            ngrams is None
            or (isinstance(ngrams, int) and not isinstance(ngrams, bool) and ngrams >= 1)
            or (isinstance(ngrams, tuple) and ngrams and all(isinstance(n, int) and n >= 1 for n in ngrams))
        ):
            raise ValueError(
                f"{where}: ngrams must be None, an int or a tuple of ints >= 1; got {shown(ngrams)}"
            )
        if output_sequence_length is not None:
            if output_mode != "int":
                raise ValueError(f"{where}: output_sequence_length is for output_mode='int' only")
            if not isinstance(output_sequence_length, int) or output_sequence_length < 0:
                raise ValueError(
                    f"{where}: output_sequence_length must be None or an int >= 0, "
                    f"got {shown(output_sequence_length)}"
                )
        self.standardize = standardize
        self.split = split
        self.ngrams = ngrams
        self._widths = tuple(range(1, ngrams + 1)) if isinstance(ngrams, int) else ngrams
        self.output_mode = output_mode
        self.output_sequence_length = output_sequence_length
        self.encoding = encoding
        self._lookup_layer = StringLookup(
            max_tokens=max_tokens,
            vocabulary=vocabulary,
            idf_weights=idf_weights,
            pad_to_max_tokens=pad_to_max_tokens,
            mask_token="",
            output_mode=output_mode,
            encoding=encoding,
            dtype=dtype,
        )

    @property
    def max_tokens(self) -> int | None:
        """The vocabulary's largest size."""
        return self._lookup_layer.max_tokens

    @property
    def pad_to_max_tokens(self) -> bool:
        """Whether the vectors are ``max_tokens`` wide."""
        return self._lookup_layer.pad_to_max_tokens

    # -- the vocabulary ---------------------------------------------------------

    def get_vocabulary(self, include_special_tokens: bool = True) -> list[str]:
        """The vocabulary by id (``""`` and ``"[UNK]"`` first, unless ``include_special_tokens``
        is false)."""
        return self._lookup_layer.get_vocabulary(include_special_tokens)

    def vocabulary_size(self) -> int:
        """The number of ids, padding and OOV included."""
        return self._lookup_layer.vocabulary_size()

    def set_vocabulary(self, vocabulary: Any, idf_weights: Any = None) -> None:
        """Sets the vocabulary (and idf weights in ``"tf_idf"`` mode), as ``StringLookup``'s."""
        self._lookup_layer.set_vocabulary(vocabulary, idf_weights)

    def adapt(self, data: Any, batch_size: int | None = None, steps: int | None = None) -> None:
        """Learns the vocabulary from strings: each string is a document.

        Args:
            data: an array or list of strings (1-D, or a last axis of 1), or an iterable of
                such batches (a generator, a data set).
            batch_size: taken for Keras's signature; the whole array is read at once.
            steps: the most batches of an iterable to take (``None``: all).

        Raises:
            ValueError: the layer was given its vocabulary when it was made.
        """
        lookup = self._lookup_layer
        lookup.reset_state()
        if is_batches(data):
            for i, batch in enumerate(data):
                if steps is not None and i >= steps:
                    break
                self.update_state(batch)
        else:
            values = enc.strings_of(data, self._where(), self.encoding)
            self.update_state(values[:, None] if values.ndim == 1 else values)
        lookup.finalize_state()

    def update_state(self, data: Any) -> None:
        """Counts the tokens of one batch of strings (``adapt`` calls it)."""
        lookup = self._lookup_layer
        if lookup._has_input_vocabulary:
            raise ValueError(f"{self._where()} was given its vocabulary when it was made; it cannot adapt")
        processed = self._preprocess(data)
        documents = processed if isinstance(processed, list) else lookup._documents_of(processed)
        lookup._update_documents(documents)

    # -- the pipeline -----------------------------------------------------------

    def _standardized(self, values: np.ndarray) -> np.ndarray:
        if self.standardize is None:
            return values
        if callable(self.standardize):
            result = enc.strings_of(self.standardize(values), f"{self._where()}'s standardize", self.encoding)
            if result.shape != values.shape:
                raise ValueError(
                    f"{self._where()}: standardize returned shape {result.shape} for strings of shape "
                    f"{values.shape}"
                )
            return result
        flat = values.reshape(-1).tolist()
        if self.standardize in ("lower", "lower_and_strip_punctuation"):
            flat = [s.translate(_ASCII_LOWER) for s in flat]
        if self.standardize in ("strip_punctuation", "lower_and_strip_punctuation"):
            flat = [_PUNCTUATION.sub("", s) for s in flat]
        return np.asarray(flat, dtype=str).reshape(values.shape) if flat else values

    def _split(self, values: np.ndarray) -> list[list[str]]:
        where = self._where()
        if values.ndim > 1:
            if values.shape[-1] != 1:
                raise ValueError(
                    f"{where} splits strings of shape (batch,) or (batch, 1), got shape {values.shape}"
                )
            values = values[..., 0]
        if values.ndim != 1:
            values = values.reshape(-1)
        if self.split == "whitespace":
            return [[t for t in _WHITESPACE.split(s) if t] for s in values.tolist()]
        if self.split == "character":
            return [list(s) for s in values.tolist()]
        assert callable(self.split)
        rows = self.split(values)
        out = []
        for row in rows:
            tokens = enc.strings_of(row, f"{where}'s split", self.encoding).reshape(-1).tolist()
            out.append(tokens)
        if len(out) != len(values):
            raise ValueError(f"{where}: split returned {len(out)} token lists for {len(values)} strings")
        return out

    def _preprocess(self, inputs: Any) -> list[np.ndarray] | np.ndarray:
        """The tokens of each string (a list of 1-D arrays), or (``split=None`` without
        n-grams) the standardized strings themselves, in their shape."""
        values = self._standardized(enc.strings_of(inputs, self._where(), self.encoding))
        if self.split is None:
            if self._widths is None:
                return values
            if values.ndim != 2:
                raise ValueError(
                    f"{self._where()}: n-grams without split need inputs of rank 2, got {values.shape}"
                )
            rows = [row.tolist() for row in values]
        else:
            rows = self._split(values)
        if self._widths is not None:
            rows = [_ngrams(row, self._widths) for row in rows]
        return [np.asarray(row, dtype=str) if row else np.zeros((0,), dtype=str) for row in rows]

    def call(self, inputs: Any) -> Tensor:
        """The ids (padded with 0) or vectors of the strings: int64, float32 for ``"tf_idf"``."""
        return host_call(self._vectorize, inputs)

    def _vectorize(self, inputs: Any) -> Tensor:
        lookup = self._lookup_layer
        processed = self._preprocess(inputs)
        if isinstance(processed, np.ndarray):
            if self.output_mode == "int":
                ids = lookup.lookup_ids(processed)
                if self.output_sequence_length is not None and ids.ndim >= 1:
                    ids = _fit_last_axis(ids, self.output_sequence_length)
                return enc.constant(ids)
            if processed.ndim <= 1:
                processed = processed[..., None]
            if self.output_mode == "one_hot" and processed.shape[-1] != 1:
                raise ValueError(f"{self._where()}: output_mode='one_hot' needs one token per string")
            return lookup._encode_ids(lookup.lookup_ids(processed))
        rows = processed
        lengths = [len(row) for row in rows]
        flat = np.concatenate(rows) if rows else np.zeros((0,), dtype=str)
        ids = lookup.lookup_ids(flat) if flat.size else np.zeros((0,), dtype=np.int64)
        pieces = np.split(ids, np.cumsum(lengths)[:-1]) if rows else []
        if self.output_mode == "int":
            width = self.output_sequence_length
            if width is None:
                width = max(lengths, default=0)
            out = np.zeros((len(rows), width), dtype=np.int64)
            for i, piece in enumerate(pieces):
                n = min(len(piece), width)
                out[i, :n] = piece[:n]
            return enc.constant(out)
        if self.output_mode == "one_hot":
            if any(n != 1 for n in lengths):
                raise ValueError(f"{self._where()}: output_mode='one_hot' needs one token per string")
            return lookup._encode_ids(ids.reshape(-1, 1))
        lookup._check_vocabulary()
        vectors = enc.encode_rows(pieces, self.output_mode, lookup._depth(), self._where(), lookup._idf)
        return enc.constant(lookup._encoded_dtype(vectors))

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """``(batch, output_sequence_length)`` in ``"int"`` mode (``None``: any length); else
        ``(batch, depth)`` for strings of shape ``(batch,)`` or ``(batch, 1)``."""
        shape = tuple(input_shape)
        if self.output_mode == "int":
            if self.split is None and self._widths is None:
                if self.output_sequence_length is not None and len(shape) >= 1:
                    return (*shape[:-1], self.output_sequence_length)
                return shape
            return (shape[0] if shape else None, self.output_sequence_length)
        if self.split is None and self._widths is None:
            shape = (*shape, 1) if len(shape) <= 1 else shape
        else:
            if len(shape) > 1 and shape[-1] == 1:
                shape = shape[:-1]
            shape = (*shape, None)
        return self._lookup_layer.compute_output_shape(shape)

    def compute_output_spec(self, inputs: Any) -> SymbolicTensor:
        """The symbolic output: int64 ids or counts, float32 for ``"tf_idf"``."""
        enc.check_symbolic_input(self, inputs, "U", "strings")
        dtype = _dt.float32 if self.output_mode == "tf_idf" else _dt.int64
        return enc.symbolic(self, self.compute_output_shape(inputs.shape), dtype)

    def get_config(self) -> dict[str, Any]:
        """Keras's keys, with the vocabulary (and idf weights) the layer has now; a function
        given as ``standardize`` or ``split`` must be registered to be saved."""
        from tapefit.layers import serialization

        config = {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": self.dtype.name,
            "max_tokens": self.max_tokens,
            "standardize": self.standardize,
            "split": self.split,
            "ngrams": self.ngrams,
            "output_mode": self.output_mode,
            "output_sequence_length": self.output_sequence_length,
            "pad_to_max_tokens": self.pad_to_max_tokens,
            "encoding": self.encoding,
            **self._lookup_layer._lookup_config(),
        }
        return serialization.to_plain(config, self._where())


def _fit_last_axis(ids: np.ndarray, length: int) -> np.ndarray:
    """``ids`` cut or padded with zeros to ``length`` along the last axis."""
    ids = ids[..., :length]
    if ids.shape[-1] < length:
        pad = [(0, 0)] * (ids.ndim - 1) + [(0, length - ids.shape[-1])]
        ids = np.pad(ids, pad)
    return ids
