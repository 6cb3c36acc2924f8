"""``StringLookup`` and ``IntegerLookup``: tokens to integer ids through a vocabulary (learned
by ``adapt`` or given), and back (``invert=True``), with Keras 3's special tokens and order."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core.function import host_call
from tapefit.core.messages import shown
from tapefit.core.tensor import Tensor
from tapefit.layers.preprocessing import encoding as enc
from tapefit.layers.preprocessing.hashes import hash_buckets
from tapefit.layers.symbolic import SymbolicTensor


def _salt(salt: Any, where: str) -> list[int] | None:
    if salt is None:
        return None
    if isinstance(salt, (tuple, list)) and len(salt) == 2 and all(isinstance(s, int) for s in salt):
        return [int(salt[0]), int(salt[1])]
    if isinstance(salt, int) and not isinstance(salt, bool):
        return [salt, salt]
    raise ValueError(f"{where}: salt must be an int or a pair of ints, got {shown(salt)}")


def is_batches(data: Any) -> bool:
    """Whether ``adapt`` data is an iterable of batches rather than one array (Keras's rule:
    anything iterable but a list, tuple, array or tensor)."""
    return hasattr(data, "__iter__") and not isinstance(data, (list, tuple, np.ndarray, Tensor, str, bytes))


class IndexLookup(enc.PreprocessingLayer):
    """What ``StringLookup`` and ``IntegerLookup`` share: the vocabulary, ``adapt``, the lookup
    and the encodings. Ids: the mask token (``"int"`` mode only) at 0, then the
    ``num_oov_indices`` out-of-vocabulary ids, then the tokens."""

    _kinds = "U"  # the NumPy kinds of the tokens
    _what = "strings"

    def _init_lookup(
        self,
        max_tokens: int | None,
        num_oov_indices: int,
        mask_token: Any,
        oov_token: Any,
        vocabulary: Any,
        idf_weights: Any,
        invert: bool,
        output_mode: str,
        pad_to_max_tokens: bool,
        salt: Any,
        oov_method: str,
    ) -> None:
        where = self._where()
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens <= 1):
            raise ValueError(
                f"{where}: max_tokens must be None or an int greater than 1, got {shown(max_tokens)}"
            )
        if pad_to_max_tokens and max_tokens is None:
            raise ValueError(f"{where}: pad_to_max_tokens=True needs max_tokens")
        if not isinstance(num_oov_indices, int) or num_oov_indices < 0:
            raise ValueError(f"{where}: num_oov_indices must be an int >= 0, got {shown(num_oov_indices)}")
        if oov_method not in ("floormod", "farmhash"):
            raise ValueError(f"{where}: oov_method must be 'floormod' or 'farmhash', got {shown(oov_method)}")
        output_mode = enc.check_mode(output_mode, ("int", *enc.ENCODINGS), where)
        if invert and output_mode != "int":
            raise ValueError(f"{where}: invert=True needs output_mode='int', got {shown(output_mode)}")
        if idf_weights is not None and output_mode != "tf_idf":
            raise ValueError(f"{where}: idf_weights are for output_mode='tf_idf' only")
        if output_mode == "tf_idf" and vocabulary is not None and idf_weights is None:
            raise ValueError(f"{where}: with a vocabulary in output_mode='tf_idf', give idf_weights too")
        self.max_tokens = max_tokens
        self.num_oov_indices = num_oov_indices
        self.mask_token = mask_token
        self.oov_token = oov_token
        self.invert = bool(invert)
        self.output_mode = output_mode
        self.pad_to_max_tokens = bool(pad_to_max_tokens)
        self.salt = _salt(salt, where)
        self.oov_method = oov_method
        self._has_input_vocabulary = vocabulary is not None
        self._tokens: np.ndarray | None = None  # the learned or given tokens, no special ones
        self._idf: np.ndarray | None = None  # one weight per id (and zeros up to max_tokens)
        self._sorted: np.ndarray | None = None
        self._order: np.ndarray | None = None
        self._counts: collections.Counter[Any] = collections.Counter()
        self._document_counts: collections.Counter[Any] = collections.Counter()
        self._documents = 0
        if vocabulary is not None:
            self.set_vocabulary(vocabulary, idf_weights)

    # -- the vocabulary ---------------------------------------------------------

    def _oov_start(self) -> int:
        return 1 if self.mask_token is not None and self.output_mode == "int" else 0

    def _token_start(self) -> int:
        return self._oov_start() + self.num_oov_indices

    def _tokens_of(self, value: Any) -> np.ndarray:
        raise NotImplementedError

    def _plain(self, token: Any) -> Any:
        """A token as a plain Python value (for ``get_vocabulary`` and configs)."""
        return int(token) if self._kinds == "iu" else str(token)

    def vocabulary_size(self) -> int:
        """The number of ids: the special tokens' and the vocabulary's."""
        return self._token_start() + (0 if self._tokens is None else len(self._tokens))

    def get_vocabulary(self, include_special_tokens: bool = True) -> list[Any]:
        """The vocabulary, by id: with ``include_special_tokens`` (default) a token's position
        is its id (the mask token first in ``"int"`` mode, then the OOV token once per OOV id)."""
        tokens = [] if self._tokens is None else [self._plain(t) for t in self._tokens]
        if not include_special_tokens:
            return tokens
        special = [self.oov_token] * self._token_start()
        if self.mask_token is not None and self.output_mode == "int":
            special[0] = self.mask_token
        return special + tokens

    def set_vocabulary(self, vocabulary: Any, idf_weights: Any = None) -> None:
        """Sets the vocabulary (and, in ``"tf_idf"`` mode, the idf weights), as Keras's.

        Args:
            vocabulary: the tokens (a list, tuple or 1-D array), or the path of a text file of
                one token a line. It may start with the special tokens exactly as
                ``get_vocabulary()`` lists them; it may not hold them elsewhere.
            idf_weights: one weight per entry of ``vocabulary``; given only, and always, in
                ``"tf_idf"`` mode. Without the special tokens in ``vocabulary``, their weight
                is the average.

        Raises:
            ValueError: an empty vocabulary, a repeated token, a special token out of place,
                more tokens than ``max_tokens``, idf weights of another length.
        """
        where = self._where()
        if self.output_mode == "tf_idf" and idf_weights is None:
            raise ValueError(f"{where}: output_mode='tf_idf' needs idf_weights with the vocabulary")
        if self.output_mode != "tf_idf" and idf_weights is not None:
            raise ValueError(f"{where}: idf_weights are for output_mode='tf_idf' only")
        if isinstance(vocabulary, (str, Path)):
            lines = Path(vocabulary).read_text(encoding="utf-8").splitlines()
            while lines and lines[-1] == "":
                lines.pop()
            vocabulary = lines if self._kinds == "U" else [int(line) for line in lines]
        values = self._tokens_of(vocabulary)
        if values.ndim != 1:
            raise ValueError(f"{where}: the vocabulary must be 1-D, got shape {values.shape}")
        if values.size == 0:
            raise ValueError(f"{where}: the vocabulary is empty")
        start = self._token_start()
        special = [self.mask_token] * self._oov_start() + [self.oov_token] * self.num_oov_indices
        has_special = len(values) >= start and [self._plain(v) for v in values[:start]] == special
        tokens = values[start:] if has_special else values
        repeated = [t for t, n in collections.Counter(tokens.tolist()).items() if n > 1]
        if repeated:
            raise ValueError(f"{where}: the vocabulary repeats {shown(repeated[0])}; give each token once")
        token_list = tokens.tolist()
        if self.mask_token is not None and self.mask_token in token_list:
            raise ValueError(
                f"{where}: the mask token {shown(self.mask_token)} is in the vocabulary at position "
                f"{token_list.index(self.mask_token) + (start if has_special else 0)}; leave it out, or put the "
                f"special tokens first in this order: {special}"
            )
        if self.invert and self.oov_token is not None and self.oov_token in token_list:
            raise ValueError(
                f"{where}: the OOV token {shown(self.oov_token)} is in the vocabulary; leave it out, or put "
                f"the special tokens first in this order: {special}"
            )
        if self.max_tokens is not None and start + len(tokens) > self.max_tokens:
            raise ValueError(
                f"{where}: a vocabulary of {start + len(tokens)} ids (special tokens included) is larger "
                f"than max_tokens={self.max_tokens}"
            )
        if idf_weights is not None:
            weights = np.asarray(idf_weights.numpy() if isinstance(idf_weights, Tensor) else idf_weights)
            if weights.ndim != 1 or len(weights) != len(values):
                raise ValueError(
                    f"{where}: idf_weights must be 1-D with one weight per vocabulary entry "
                    f"({len(values)}), got shape {weights.shape}"
                )
            weights = weights.astype(np.float32)
            front = 0 if has_special else start
            value = 0.0 if has_special else float(np.average(weights))
            back = self.max_tokens - front - len(weights) if self.pad_to_max_tokens and self.max_tokens else 0
            self._idf = np.concatenate(
                [np.full(front, value, np.float32), weights, np.zeros(max(back, 0), np.float32)]
            )
        self._set_tokens(tokens)

    def _set_tokens(self, tokens: np.ndarray) -> None:
        self._tokens = tokens
        self._order = np.argsort(tokens, kind="stable")
        self._sorted = tokens[self._order]

    # -- adapt ------------------------------------------------------------------

    def adapt(self, data: Any, steps: int | None = None) -> None:
        """Learns the vocabulary from ``data``: every token, most frequent first, ties broken by
        the tokens' order, highest first (Keras's order), cut to ``max_tokens``; in
        ``"tf_idf"`` mode also each token's idf, ``log(1 + documents / (1 + documents with it))``.

        Args:
            data: an array or list (each element a document when it is 1-D, each row when 2-D),
                or an iterable of batches (a generator, a data set): each batch is one update,
                and a 1-D batch is one document.
            steps: the most batches of an iterable to take (``None``: all).

        Raises:
            ValueError: the layer was given its vocabulary when it was made.
        """
        self.reset_state()
        if is_batches(data):
            for i, batch in enumerate(data):
                if steps is not None and i >= steps:
                    break
                self.update_state(batch)
        else:
            values = self._tokens_of(data)
            self.update_state(values[:, None] if values.ndim == 1 else values)
        self.finalize_state()

    def reset_state(self) -> None:
        """Forgets the counts of an ``adapt`` under way."""
        self._counts = collections.Counter()
        self._document_counts = collections.Counter()
        self._documents = 0

    def update_state(self, data: Any) -> None:
        """Counts the tokens of one batch (``adapt`` calls it for each)."""
        if self._has_input_vocabulary:
            raise ValueError(f"{self._where()} was given its vocabulary when it was made; it cannot adapt")
        self._update_documents(self._documents_of(self._tokens_of(data)))

    def _update_documents(self, documents: list[np.ndarray]) -> None:
        """Counts the tokens of ``documents`` (and, for ``"tf_idf"``, the documents of each)."""
        for document in documents:
            self._counts.update(document.tolist())
        if self.output_mode == "tf_idf":
            for document in documents:
                self._document_counts.update(set(document.tolist()))
            self._documents += len(documents)

    def _documents_of(self, values: np.ndarray) -> list[np.ndarray]:
        """The documents of a batch: its rows (a 1-D batch is one document)."""
        if values.ndim <= 1:
            return [values.reshape(-1)]
        return [row.reshape(-1) for row in values]

    def finalize_state(self) -> None:
        """Makes the vocabulary (and idf weights) from the counts of ``update_state``."""
        counts = dict(self._counts)
        if not counts:
            return
        for special in (self.mask_token, self.oov_token):
            if special is not None:
                counts.pop(special, None)
        tokens = self._tokens_of(list(counts))
        frequencies = np.asarray([counts[self._plain(t)] for t in tokens], dtype=np.int64)
        order = np.lexsort((tokens, frequencies))[::-1]
        start = self._token_start()
        if self.max_tokens:
            order = order[: self.max_tokens - start]
        tokens = tokens[order]
        if self.output_mode == "tf_idf":
            documents = np.asarray([self._document_counts[self._plain(t)] for t in tokens], dtype=np.float64)
            idf = np.log(1.0 + self._documents / (1.0 + documents)).astype(np.float32)
            mean = np.float32(np.mean(idf)) if idf.size else np.float32(0.0)
            back = self.max_tokens - start - len(idf) if self.pad_to_max_tokens and self.max_tokens else 0
            self._idf = np.concatenate(
                [np.full(start, mean, np.float32), idf, np.zeros(max(back, 0), np.float32)]
            )
        self._set_tokens(tokens)
        self.reset_state()

    # -- calling ----------------------------------------------------------------

    def _depth(self) -> int:
        return self.max_tokens if self.pad_to_max_tokens and self.max_tokens else self.vocabulary_size()

    def _check_vocabulary(self) -> None:
        if self._tokens is None:
            raise ValueError(
                f"{self._where()} has no vocabulary: call adapt(data) or set_vocabulary(...) first "
                "(or pass vocabulary=)"
            )

    def _oov_ids(self, values: np.ndarray) -> np.ndarray:
        """The OOV id of each of ``values`` (with several OOV ids: by hash or modulo)."""
        start = self._oov_start()
        n = self.num_oov_indices
        if n == 1:
            return np.full(values.shape, start, dtype=np.int64)
        if self._kinds == "iu" and self.oov_method == "floormod":
            return np.mod(values, n).astype(np.int64) + start
        texts = [str(v).encode("utf-8") for v in values.reshape(-1)]
        key = None if self.salt is None else (self.salt[0], self.salt[1])
        return hash_buckets(texts, n, key).reshape(values.shape) + start

    def lookup_ids(self, values: np.ndarray) -> np.ndarray:
        """The ids of ``values`` (tokens): int64, ``enc.DROPPED`` for the mask token outside
        ``"int"`` mode.

        Raises:
            ValueError: without OOV ids, a token that is not in the vocabulary.
        """
        self._check_vocabulary()
        assert self._sorted is not None and self._order is not None
        flat = values.reshape(-1)
        ids = np.full(flat.shape, -1, dtype=np.int64)
        if len(self._sorted):
            position = np.minimum(np.searchsorted(self._sorted, flat), len(self._sorted) - 1)
            found = self._sorted[position] == flat
            ids[found] = self._order[position[found]] + self._token_start()
        else:
            found = np.zeros(flat.shape, dtype=bool)
        if self.mask_token is not None:
            masked = flat == self.mask_token
            found = found | masked
            ids[masked] = 0 if self.output_mode == "int" else enc.DROPPED
        missing = ~found
        if missing.any():
            if self.num_oov_indices == 0:
                raise ValueError(
                    f"{self._where()}: {shown(self._plain(flat[missing][0]))} is not in the vocabulary, and "
                    "num_oov_indices=0 leaves no id for it (set num_oov_indices=1)"
                )
            ids[missing] = self._oov_ids(flat[missing])
        return ids.reshape(values.shape)

    def _invert(self, inputs: Any) -> np.ndarray:
        ids = enc.integers_of(inputs, f"{self._where()} (invert=True)")
        self._check_vocabulary()
        assert self._tokens is not None
        vocabulary = np.asarray(self.get_vocabulary(), dtype=object)
        flat = ids.reshape(-1)
        inside = (flat >= self._token_start()) & (flat < len(vocabulary))
        out = np.full(flat.shape, self.oov_token, dtype=object)
        out[inside] = vocabulary[flat[inside]]
        if self.mask_token is not None:
            out[flat == 0] = self.mask_token
        return out.reshape(ids.shape).astype(str if self._kinds == "U" else np.int64)

    def _encode_ids(self, ids: np.ndarray) -> Tensor:
        if self.output_mode == "int":
            return enc.constant(ids)
        out = enc.encode(ids, self.output_mode, self._depth(), self._where(), self._idf)
        return enc.constant(self._encoded_dtype(out))

    def _encoded_dtype(self, vectors: np.ndarray) -> np.ndarray:
        """Vectors as Keras gives them: int64, float32 for ``"tf_idf"``."""
        return vectors.astype(np.int64 if self.output_mode != "tf_idf" else self.dtype)

    def call(self, inputs: Any) -> Any:
        """The ids of the tokens, or their encoding (an int64 Tensor, float32 for ``"tf_idf"``),
        or with ``invert=True`` the tokens of ids. No tape records it."""
        return host_call(self._lookup, inputs)

    def _lookup(self, inputs: Any) -> Any:
        if self.invert:
            tokens = self._invert(inputs)
            return tokens if self._kinds == "U" else enc.constant(tokens)
        return self._encode_ids(self.lookup_ids(self._tokens_of(inputs)))

    def compute_output_shape(self, input_shape: Any) -> tuple[int | None, ...]:
        """The input's shape in ``"int"`` mode; else Keras's rule for the encoding's depth."""
        shape = tuple(input_shape)
        if self.output_mode == "int":
            return shape
        depth = self._depth() if self._tokens is not None or self.pad_to_max_tokens else None
        return enc.encoded_shape(shape, self.output_mode, depth)

    def compute_output_spec(self, inputs: Any) -> SymbolicTensor:
        """The symbolic output: int64 ids or counts, float32 ``"tf_idf"``, or (``invert``) tokens."""
        dtype: np.dtype
        if self.invert:
            enc.check_symbolic_input(self, inputs, "iu", "integer ids (invert=True)")
            dtype = _dt.string if self._kinds == "U" else _dt.int64
        else:
            enc.check_symbolic_input(self, inputs, self._kinds, self._what)
            dtype = _dt.float32 if self.output_mode == "tf_idf" else _dt.int64
        return enc.symbolic(self, self.compute_output_shape(inputs.shape), dtype)

    def _lookup_config(self) -> dict[str, Any]:
        """The vocabulary and idf weights as they are now, for ``get_config`` (Keras keeps only
        a vocabulary given as an argument there; here an adapted one is saved too)."""
        if self._tokens is None:
            return {"vocabulary": None, "idf_weights": None}
        vocabulary = self.get_vocabulary()
        idf = None
        if self._idf is not None:
            idf = [float(w) for w in self._idf[: len(vocabulary)]]
        return {"vocabulary": vocabulary, "idf_weights": idf}


class StringLookup(IndexLookup):
    """Maps strings to integer ids through a vocabulary, as Keras's ``StringLookup``.

    Ids: with ``mask_token`` (``"int"`` mode) 0 is the mask, then ``num_oov_indices`` ids for
    tokens not in the vocabulary, then the vocabulary in order. Several OOV ids take a token by
    FarmHash (SipHash with ``salt``), as Keras's. ``adapt(data)`` learns the vocabulary (most
    frequent first; ties: the greater string first). Outputs are Tensors no tape records.

    Args:
        max_tokens: the most ids (special ones included); ``None``: no limit.
        num_oov_indices: ids for out-of-vocabulary tokens (0: such a token is an error).
        mask_token: the token of id 0 (``None``: no mask id).
        oov_token: the token ``invert=True`` gives for OOV ids.
        vocabulary: the tokens (a list, array, or a file of one a line); else ``adapt``.
        idf_weights: the idf of each vocabulary entry, in ``"tf_idf"`` mode.
        invert: map ids to tokens (a NumPy array of ``str``) instead.
        output_mode: ``"int"`` (ids), ``"one_hot"``, ``"multi_hot"``, ``"count"``, ``"tf_idf"``.
        pad_to_max_tokens: make the encodings ``max_tokens`` wide.
        encoding: the encoding of ``bytes`` inputs.
        name: the layer's name.
        salt: a key (an int or two) for SipHash of OOV tokens, instead of FarmHash.
        dtype: the dtype of the vector encodings (float32).
        trainable: kept for Keras's signature (there are no weights).
    """

    def __init__(
        self,
        max_tokens: int | None = None,
        num_oov_indices: int = 1,
        mask_token: str | None = None,
        oov_token: str = "[UNK]",
        vocabulary: Any = None,
        idf_weights: Any = None,
        invert: bool = False,
        output_mode: str = "int",
        pad_to_max_tokens: bool = False,
        encoding: str = "utf-8",
        name: str | None = None,
        salt: Any = None,
        *,
        dtype: Any = None,
        trainable: bool = True,
    ) -> None:
        super().__init__(name=name, trainable=trainable)
        self.dtype = enc.float_dtype(dtype, self._where())
        self.encoding = encoding
        self._init_lookup(
            max_tokens=max_tokens,
            num_oov_indices=num_oov_indices,
            mask_token=mask_token,
            oov_token=oov_token,
            vocabulary=vocabulary,
            idf_weights=idf_weights,
            invert=invert,
            output_mode=output_mode,
            pad_to_max_tokens=pad_to_max_tokens,
            salt=salt,
            oov_method="farmhash",  # a string's OOV ids are always by hash
        )

    def _tokens_of(self, value: Any) -> np.ndarray:
        if isinstance(value, list) and not value:
            return np.zeros((0,), dtype=str)
        return enc.strings_of(value, self._where(), self.encoding)

    def get_config(self) -> dict[str, Any]:
        """Keras's keys, with the vocabulary (and idf weights) the layer has now."""
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": self.dtype.name,
            "max_tokens": self.max_tokens,
            "num_oov_indices": self.num_oov_indices,
            "mask_token": self.mask_token,
            "oov_token": self.oov_token,
            "invert": self.invert,
            "output_mode": self.output_mode,
            "pad_to_max_tokens": self.pad_to_max_tokens,
            "encoding": self.encoding,
            "salt": self.salt,
            **self._lookup_config(),
        }


class IntegerLookup(IndexLookup):
    """Maps integers to contiguous ids through a vocabulary, as Keras's ``IntegerLookup``.

    As ``StringLookup``, for int64 tokens: with several OOV ids a token takes
    ``token % num_oov_indices`` (``oov_method="floormod"``) or the FarmHash of its decimal
    text (``"farmhash"``; SipHash with ``salt``). ``adapt`` breaks ties by the greater integer.

    Args:
        max_tokens: the most ids (special ones included); ``None``: no limit.
        num_oov_indices: ids for out-of-vocabulary values (0: such a value is an error).
        mask_token: the value of id 0 (``None``: no mask id).
        oov_token: the value ``invert=True`` gives for OOV ids.
        vocabulary: the values (a list or array, or a file of one a line); else ``adapt``.
        vocabulary_dtype: ``"int64"`` (the only one, as Keras).
        idf_weights: the idf of each vocabulary entry, in ``"tf_idf"`` mode.
        invert: map ids to values instead.
        output_mode: ``"int"`` (ids), ``"one_hot"``, ``"multi_hot"``, ``"count"``, ``"tf_idf"``.
        pad_to_max_tokens: make the encodings ``max_tokens`` wide.
        oov_method: ``"floormod"`` or ``"farmhash"``, for several OOV ids.
        salt: a key (an int or two) for SipHash with ``oov_method="farmhash"``.
        name: the layer's name.
        dtype: the dtype of the vector encodings (float32).
        trainable: kept for Keras's signature (there are no weights).
    """

    _kinds = "iu"
    _what = "integers"
    takes_strings = False

    def __init__(
        self,
        max_tokens: int | None = None,
        num_oov_indices: int = 1,
        mask_token: int | None = None,
        oov_token: int = -1,
        vocabulary: Any = None,
        vocabulary_dtype: str = "int64",
        idf_weights: Any = None,
        invert: bool = False,
        output_mode: str = "int",
        pad_to_max_tokens: bool = False,
        oov_method: str = "floormod",
        salt: Any = None,
        name: str | None = None,
        *,
        dtype: Any = None,
        trainable: bool = True,
    ) -> None:
        super().__init__(name=name, trainable=trainable)
        self.dtype = enc.float_dtype(dtype, self._where())
        if vocabulary_dtype != "int64":
            raise ValueError(
                f"{self._where()}: vocabulary_dtype must be 'int64', got {shown(vocabulary_dtype)}"
            )
        if salt is not None and oov_method != "farmhash":
            raise ValueError(f"{self._where()}: salt is for oov_method='farmhash' only")
        for key, value in (("mask_token", mask_token), ("oov_token", oov_token)):
            if value is not None and (not isinstance(value, (int, np.integer)) or isinstance(value, bool)):
                raise TypeError(f"{self._where()}: {key} must be an int or None, got {shown(value)}")
        self.vocabulary_dtype = vocabulary_dtype
        self._init_lookup(
            max_tokens=max_tokens,
            num_oov_indices=num_oov_indices,
            mask_token=None if mask_token is None else int(mask_token),
            oov_token=None if oov_token is None else int(oov_token),
            vocabulary=vocabulary,
            idf_weights=idf_weights,
            invert=invert,
            output_mode=output_mode,
            pad_to_max_tokens=pad_to_max_tokens,
            salt=salt,
            oov_method=oov_method,
        )

    def _tokens_of(self, value: Any) -> np.ndarray:
        if isinstance(value, list) and not value:
            return np.zeros((0,), dtype=np.int64)
        return enc.integers_of(value, self._where())

    def get_config(self) -> dict[str, Any]:
        """Keras's keys, with the vocabulary (and idf weights) the layer has now."""
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": self.dtype.name,
            "max_tokens": self.max_tokens,
            "num_oov_indices": self.num_oov_indices,
            "mask_token": self.mask_token,
            "oov_token": self.oov_token,
            "vocabulary_dtype": self.vocabulary_dtype,
            "invert": self.invert,
            "output_mode": self.output_mode,
            "pad_to_max_tokens": self.pad_to_max_tokens,
            "oov_method": self.oov_method,
            "salt": self.salt,
            **self._lookup_config(),
        }
