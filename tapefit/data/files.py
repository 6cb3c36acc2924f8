"""The user's own data: NumPy ``.npz`` archives and CSV tables."""

from __future__ import annotations

import atexit
import contextlib
import csv
import io
import os
import struct
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from tapefit.core.files import FileRefused, file_size, npy_header
from tapefit.data.arrays import DataError
from tapefit.data.npy import on_disk_array, open_data_file

_INT32 = np.iinfo(np.int32)
_DEFLATE_MAX_RATIO = 1032  # the most that deflate can expand a byte stream (RFC 1951: 258 bytes per 2 bits)


def load_npz(path: str, x_key: str = "x", y_key: str = "y", mmap: bool = False) -> tuple[Any, Any]:
    """Loads features and labels from a ``.npz`` archive (as written by ``np.savez``).

    The archive is read with ``allow_pickle=False``: loading data never runs code. What its
    zip directory and the arrays' ``.npy`` headers claim is checked against the file's length
    before an array is read (a member cannot claim more than deflate can make of its bytes),
    and the features and labels must claim the same number of samples.

    Args:
        path: The archive.
        x_key: The name of the features array in the archive.
        y_key: The name of the labels array in the archive.
        mmap: read the features' rows from the archive as batches take them (an archive larger
            than memory; ``np.savez``, not ``np.savez_compressed``), the labels whole.

    Returns:
        ``(x, y)`` as stored.

    Raises:
        DataError: If the file is missing, not a regular file, unreadable or lying about its
            size, or a key is not in it.
    """
    with open_data_file(path) as f:
        # The file's first bytes say what it is (a lone .npy, or no zip at all), which a zipfile
        # or NumPy message would not.
        magic = f.read(6)
        if magic == b"\x93NUMPY":
            raise DataError(
                f"{path!r} is a .npy file holding one array, not an .npz archive of named arrays; "
                "save the features and labels together with np.savez(path, x=x, y=y)",
                key="path",
            )
        if not magic.startswith(b"PK"):
            raise DataError(
                f"{path!r} is not an .npz archive (a zip of named arrays, as np.savez writes)", key="path"
            )
        f.seek(0)
        try:
            with zipfile.ZipFile(f) as archive:
                infos = _members(archive, path, file_size(f), (("x_key", x_key), ("y_key", y_key)))
                arrays = []
                for key_name, info in infos.items():
                    if mmap and key_name == "x_key":
                        arrays.append(_npz_member_on_disk(path, x_key, info))
                        continue
                    with archive.open(info) as member:
                        arrays.append(np.lib.format.read_array(member, allow_pickle=False))
                return arrays[0], arrays[1]
        except DataError:
            raise
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise DataError(f"cannot read {path!r} as an .npz archive: {e}", key="path") from e


def _members(
    archive: zipfile.ZipFile, path: str, length: int, keys: tuple[tuple[str, str], ...]
) -> dict[str, zipfile.ZipInfo]:
    """The zip entries of the arrays ``keys`` names, each checked before a byte of it is read: its
    sizes against the file's length, its ``.npy`` header against its size, no Python objects;
    and the arrays claim one sample count."""
    by_name = {info.filename.removesuffix(".npy"): info for info in archive.infolist()}
    if sum(info.compress_size for info in by_name.values()) > length:
        raise DataError(f"{path!r}: its zip directory declares more bytes than the file holds", key="path")
    infos, shapes = {}, {}
    for key_name, key in keys:
        info = by_name.get(key)
        if info is None:
            raise DataError(
                f"{path!r} has no array {key!r}; it holds: {', '.join(sorted(by_name)) or 'nothing'}",
                key=key_name,
            )
        stored = info.compress_type == zipfile.ZIP_STORED
        if info.file_size > (info.compress_size if stored else info.compress_size * _DEFLATE_MAX_RATIO):
            raise DataError(
                f"{path!r}: the array {key!r} declares {info.file_size} bytes, more than its "
                f"{info.compress_size} bytes in the file can hold",
                key="path",
            )
        with archive.open(info) as member:
            try:
                shapes[key] = npy_header(member, info.file_size, f"{path!r}: the array {key!r}")[0]
            except FileRefused as e:
                raise DataError(str(e), key=key_name) from None
        infos[key_name] = info
    x, y = (shapes[key] for _, key in keys)
    if x and y and x[0] != y[0]:
        raise DataError(
            f"{path!r}: its headers declare {x[0]} samples of {keys[0][1]!r} but {y[0]} of {keys[1][1]!r}",
            key="path",
        )
    return infos


def _npz_member_on_disk(path: str, name: str, info: zipfile.ZipInfo) -> Any:
    """The archive's member ``name``, read on demand from where it lies in the zip file."""
    if info.compress_type != zipfile.ZIP_STORED:
        raise DataError(
            f"{path!r}: the array {name!r} is compressed (np.savez_compressed), so its rows cannot be read "
            "on demand; save it with np.savez, or set mmap: false",
            key="mmap",
        )
    with open_data_file(path) as f:  # the member's data follows its local header (30 bytes, name, extra)
        f.seek(info.header_offset)
        local = f.read(30)
    name_length, extra_length = struct.unpack("<HH", local[26:30])
    try:
        start = info.header_offset + 30 + name_length + extra_length
        return on_disk_array(Path(path), start, info.file_size)
    except DataError:
        raise
    except ValueError as e:
        raise DataError(f"{path!r}: the array {name!r}: {e}", key="x_key") from None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def load_csv(
    path: str,
    label_column: int | str = -1,
    header: bool | str = "auto",
    delimiter: str = ",",
    label_dtype: str = "auto",
    mmap: bool = False,
) -> tuple[Any, np.ndarray]:
    """Loads a CSV table of numbers: one column holds the labels, the others the features.

    Args:
        path: The file, UTF-8 (a byte order mark, as Excel writes, is skipped).
        label_column: The labels' column: an index (negative counts from the end) or, with a
            header, a column name.
        header: ``True`` if the first row names the columns, ``False`` if it is data, ``"auto"``
            to treat it as a header when any of its fields is not a number.
        delimiter: The field separator.
        label_dtype: ``"int"`` for class indices, ``"float"`` for regression targets, ``"auto"``
            for int when every label is a whole number.
        mmap: for a table larger than memory: stream it once into a float32 file of its own
            (a temporary file, removed when Python exits) whose rows batches read on demand;
            the labels are kept in memory.

    Returns:
        ``(x, y)``: the features, shape ``(rows, columns - 1)`` (float64 in memory, or a float32
        ``NpyFile`` with ``mmap``), and the labels.

    Raises:
        DataError: If the file is missing, a field is not a number, rows differ in length,
            ``label_column`` names no column, or a class label is outside int32's range.
    """
    if header not in (True, False, "auto"):
        raise DataError(f"header must be true, false or 'auto', got {header!r}", key="header")
    if label_dtype not in ("auto", "int", "float"):
        raise DataError(
            f"label_dtype must be 'auto', 'int' or 'float', got {label_dtype!r}", key="label_dtype"
        )
    try:
        with io.TextIOWrapper(open_data_file(path), newline="", encoding="utf-8-sig") as f:
            rows = _records(f, delimiter)
            first = next(rows, None)
            if first is None:
                raise DataError(f"{path!r} is empty", key="path")
            names: list[str] | None = None
            if header is True or (header == "auto" and not _all_numbers(first[1], delimiter)):
                names = [v.strip() for v in _fields(first[1], delimiter)]
                first = next(rows, None)
            if first is None:
                raise DataError(f"{path!r} has a header but no data rows", key="path")
            width = _width(first[1], delimiter)
            head = next(iter(_fields(first[1], delimiter)))
            label_index = _label_index(path, head, width, names, label_column, delimiter)
            table = _Table(path, width, label_index, delimiter, on_disk=mmap)
            table.add(*first)
            for line, row in rows:
                table.add(line, row)
            x, y = table.finish()
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise DataError(f"cannot read {path!r} as CSV: {e}", key="path") from e
    whole = bool(np.all(np.isfinite(y)) and np.all(y == np.round(y)))
    if label_dtype == "int" and not whole:
        raise DataError(
            f"{path!r}: label_dtype is 'int' but some labels are not whole numbers", key="label_dtype"
        )
    if label_dtype == "int" or (label_dtype == "auto" and whole):
        if table.past_int32 is not None:  # checked before any cast: a cast would wrap or warn
            line, column, text = table.past_int32
            raise DataError(
                f"{path!r} line {line}, column {column}: the label {text.strip()!r} is outside the range of "
                f"class indices (int32, {_INT32.min} to {_INT32.max}); for regression targets set "
                "label_dtype: float",
                key="label_dtype",
            )
        return x, y.astype(np.int64)
    return x, y


def _records(f: Any, delimiter: str) -> Iterator[tuple[int, str | list[str]]]:
    """``(line, record)`` for each record of a CSV file that is not blank: the line's text when it
    holds no quote (``_fields`` splits it a piece at a time), else its fields as ``csv`` reads
    them (a quoted field may span lines). A line is read whole, but never split whole: a row of
    millions of fields costs a few times its text, not a Python string per field."""
    lines = iter(f)
    number = 0

    def continued(text: str) -> Iterator[str]:  # the line, then the lines a quoted field spans
        nonlocal number
        yield text
        for more in lines:
            number += 1
            yield more

    for text in lines:
        number += 1
        start = number
        if '"' not in text:
            text = text.rstrip("\r\n")
            if text:
                yield start, text
            continue
        row = next(csv.reader(continued(text), delimiter=delimiter), None)
        if row:
            yield start, row


_PIECE = 1 << 16  # characters of a line split at once


def _pieces(record: str | list[str], delimiter: str) -> Iterator[list[str]]:
    """The fields of a record of ``_records``, in lists of a piece of the line each."""
    if isinstance(record, list):
        yield record
        return
    start, end = 0, len(record)
    while start + _PIECE < end:
        cut = record.find(delimiter, start + _PIECE)
        if cut == -1:
            break
        yield record[start:cut].split(delimiter)
        start = cut + 1
    yield record[start:].split(delimiter)


def _fields(record: str | list[str], delimiter: str) -> Iterator[str]:
    """The fields of a record of ``_records``, one at a time."""
    for piece in _pieces(record, delimiter):
        yield from piece


def _all_numbers(record: str | list[str], delimiter: str) -> bool:
    for piece in _pieces(record, delimiter):
        try:
            list(map(float, piece))
        except ValueError:
            return False
    return True


def _width(record: str | list[str], delimiter: str) -> int:
    return len(record) if isinstance(record, list) else record.count(delimiter) + 1


def _label_index(
    path: str, head: str, width: int, names: list[str] | None, label_column: int | str, delimiter: str
) -> int:
    if width < 2:
        others = [d for d in ",;\t| " if d != delimiter and d in head.strip()]
        if others:
            raise DataError(
                f"{path!r} has 1 column when split at {delimiter!r}, but its fields seem separated by "
                f"{others[0]!r}; set delimiter: {others[0]!r}",
                key="delimiter",
            )
        raise DataError(f"{path!r} has {width} column; it needs features and a label column", key="path")
    if isinstance(label_column, str):
        if names is None:
            raise DataError(
                f"label_column {label_column!r} is a name but {path!r} has no header row; "
                "give a column index or set header: true",
                key="label_column",
            )
        if label_column not in names:
            raise DataError(
                f"{path!r} has no column {label_column!r}; its columns: {', '.join(names)}",
                key="label_column",
            )
        return names.index(label_column)
    if not -width <= label_column < width:
        raise DataError(
            f"label_column {label_column} is out of range for {width} columns", key="label_column"
        )
    return label_column % width


_CHUNK = 4096  # rows parsed before they are written out or stacked


class _Table:
    """The parsed rows of a CSV table, kept in memory or streamed to a float32 file."""

    def __init__(self, path: str, width: int, label_index: int, delimiter: str, on_disk: bool) -> None:
        self.path, self.width, self.label_index, self.delimiter = path, width, label_index, delimiter
        self.labels: list[float] = []
        self.blocks: list[np.ndarray] = []
        self.rows: list[np.ndarray] = []
        self.out: Any = None
        self.past_int32: tuple[int, int, str] | None = None  # the first label int32 cannot hold
        if on_disk:
            handle, self.out_path = tempfile.mkstemp(prefix="tapefit-csv-", suffix=".f32")
            self.out = os.fdopen(handle, "wb")
            atexit.register(_remove, self.out_path)

    def add(self, line: int, record: str | list[str]) -> None:
        fields = _width(record, self.delimiter)  # counted before any split: a long line is refused whole
        if fields != self.width:
            raise DataError(
                f"{self.path!r} line {line}: {fields} fields, but the first data row has {self.width}"
            )
        values = np.empty(self.width)
        start = 0
        for piece in _pieces(record, self.delimiter):
            try:
                values[start : start + len(piece)] = list(map(float, piece))
            except ValueError:
                c, value = next((c, v) for c, v in enumerate(piece) if not _is_number(v))
                raise DataError(
                    f"{self.path!r} line {line}, column {start + c + 1}: {value!r} is not a number"
                ) from None
            start += len(piece)
        label = float(values[self.label_index])
        if self.past_int32 is None and not _INT32.min <= label <= _INT32.max:
            text = next(v for c, v in enumerate(_fields(record, self.delimiter)) if c == self.label_index)
            self.past_int32 = (line, self.label_index + 1, text)
        self.labels.append(label)
        self.rows.append(values)
        if len(self.rows) >= _CHUNK:
            self._flush()

    def _flush(self) -> None:
        if not self.rows:
            return
        block = np.delete(np.stack(self.rows), self.label_index, axis=1)
        block = block.astype(np.float32 if self.out is not None else np.float64, copy=False)
        if self.out is not None:
            with self._writing():
                self.out.write(block.tobytes())
        else:
            self.blocks.append(block)
        self.rows = []

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A failed write of the float32 copy (a full disk) is said as such, naming the copy."""
        try:
            yield
        except OSError as e:
            with contextlib.suppress(OSError):
                self.out.close()
            raise DataError(
                f"{self.path!r}: cannot write its float32 copy {self.out_path} (a temporary file, in "
                f"TMPDIR's folder): {e.strerror or e}",
                key="mmap",
            ) from e

    def finish(self) -> tuple[Any, np.ndarray]:
        self._flush()
        y = np.asarray(self.labels, dtype=np.float64)
        if self.out is None:
            return np.concatenate(self.blocks).reshape(len(y), self.width - 1), y
        with self._writing():
            self.out.close()
        from tapefit.data.npy import NpyFile

        return NpyFile(Path(self.out_path), (len(y), self.width - 1), np.dtype(np.float32), 0), y


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
