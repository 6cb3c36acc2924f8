"""The user's own data: NumPy ``.npz`` archives and CSV tables."""

from __future__ import annotations

import csv
import os
import zipfile

import numpy as np

from tapefit.data.arrays import DataError


def _check_file(path: str) -> None:
    if not os.path.exists(path):
        raise DataError(f"data file {path!r} does not exist", key="path")
    if not os.path.isfile(path):
        raise DataError(f"data file {path!r} is not a file", key="path")


def load_npz(path: str, x_key: str = "x", y_key: str = "y") -> tuple[np.ndarray, np.ndarray]:
    """Loads features and labels from a ``.npz`` archive (as written by ``np.savez``).

    The archive is read with ``allow_pickle=False``: loading data never runs code.

    Args:
        path: The archive.
        x_key: The name of the features array in the archive.
        y_key: The name of the labels array in the archive.

    Returns:
        ``(x, y)`` as stored.

    Raises:
        DataError: If the file is missing or unreadable, or a key is not in it.
    """
    _check_file(path)
    # np.load reads .npy files and (with pickles allowed) anything else too, so look at the
    # file's first bytes to say what it is instead of passing on a misleading NumPy message.
    with open(path, "rb") as f:
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
    try:
        with np.load(path, allow_pickle=False) as archive:
            names = sorted(archive.files)
            arrays = []
            for key_name, key in (("x_key", x_key), ("y_key", y_key)):
                if key not in names:
                    raise DataError(
                        f"{path!r} has no array {key!r}; it holds: {', '.join(names) or 'nothing'}",
                        key=key_name,
                    )
                try:
                    arrays.append(archive[key])
                except ValueError as e:
                    if "allow_pickle" not in str(e):
                        raise
                    raise DataError(
                        f"{path!r}: the array {key!r} holds Python objects, which would need unpickling "
                        "(never done: it can run code); store numbers",
                        key=key_name,
                    ) from e
            return arrays[0], arrays[1]
    except DataError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise DataError(f"cannot read {path!r} as an .npz archive: {e}", key="path") from e


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
) -> tuple[np.ndarray, np.ndarray]:
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

    Returns:
        ``(x, y)``: float64 features of shape ``(rows, columns - 1)`` and the labels.

    Raises:
        DataError: If the file is missing, a field is not a number, rows differ in length, or
            ``label_column`` names no column.
    """
    _check_file(path)
    if header not in (True, False, "auto"):
        raise DataError(f"header must be true, false or 'auto', got {header!r}", key="header")
    if label_dtype not in ("auto", "int", "float"):
        raise DataError(
            f"label_dtype must be 'auto', 'int' or 'float', got {label_dtype!r}", key="label_dtype"
        )
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = [(i + 1, row) for i, row in enumerate(csv.reader(f, delimiter=delimiter)) if row]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise DataError(f"cannot read {path!r} as CSV: {e}", key="path") from e
    if not rows:
        raise DataError(f"{path!r} is empty", key="path")
    names: list[str] | None = None
    if header is True or (header == "auto" and not all(_is_number(v) for v in rows[0][1])):
        names = [v.strip() for v in rows[0][1]]
        rows = rows[1:]
    if not rows:
        raise DataError(f"{path!r} has a header but no data rows", key="path")
    width = len(rows[0][1])
    if width < 2:
        others = [d for d in ",;\t| " if d != delimiter and d in rows[0][1][0].strip()]
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
        label_index = names.index(label_column)
    else:
        if not -width <= label_column < width:
            raise DataError(
                f"label_column {label_column} is out of range for {width} columns", key="label_column"
            )
        label_index = label_column % width
    table = np.empty((len(rows), width), dtype=np.float64)
    for r, (line, row) in enumerate(rows):
        if len(row) != width:
            raise DataError(f"{path!r} line {line}: {len(row)} fields, but the first data row has {width}")
        for c, value in enumerate(row):
            try:
                table[r, c] = float(value)
            except ValueError:
                raise DataError(f"{path!r} line {line}, column {c + 1}: {value!r} is not a number") from None
    y = table[:, label_index]
    x = np.delete(table, label_index, axis=1)
    whole = bool(np.all(np.isfinite(y)) and np.all(y == np.round(y)))
    if label_dtype == "int" and not whole:
        raise DataError(
            f"{path!r}: label_dtype is 'int' but some labels are not whole numbers", key="label_dtype"
        )
    if label_dtype == "int" or (label_dtype == "auto" and whole):
        return x, y.astype(np.int64)
    return x, y
