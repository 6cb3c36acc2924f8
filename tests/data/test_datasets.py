"""The data sets of configs: digits, spirals, npz and csv files, the split and standardization."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tapefit import data
from tapefit.data import DataError, digits

REPO = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------- digits


def test_digits_match_scikit_learn_public_loader():
    from sklearn.datasets import load_digits as sklearn_load_digits

    x, y = data.load_digits()
    bunch = sklearn_load_digits()
    assert x.shape == (1797, 64) and x.dtype == np.float32
    assert y.shape == (1797,) and y.dtype == np.int32
    np.testing.assert_array_equal(x, (bunch.data / 16.0).astype(np.float32))
    np.testing.assert_array_equal(y, bunch.target)
    assert x.min() == 0.0 and x.max() == 1.0
    assert sorted(np.unique(y)) == list(range(10))


def test_digits_as_images_are_the_same_pixels():
    flat, y_flat = data.load_digits()
    images, y = data.load_digits(flatten=False)
    assert images.shape == (1797, 8, 8, 1)
    np.testing.assert_array_equal(images.reshape(1797, 64), flat)
    np.testing.assert_array_equal(y, y_flat)


def test_digits_fall_back_to_scikit_learn_loader(monkeypatch):
    expected = data.load_digits()
    monkeypatch.setattr(digits, "_bundled_file", lambda: None)
    x, y = data.load_digits()
    np.testing.assert_array_equal(x, expected[0])
    np.testing.assert_array_equal(y, expected[1])


def test_digits_without_scikit_learn_say_how_to_install(monkeypatch):
    monkeypatch.setattr(digits.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DataError, match=r"pip install 'tapefit\[digits\]'"):
        data.load_digits()


# --------------------------------------------------------------------------- spirals


def test_spirals_shapes_balance_and_seed():
    x, y = data.make_spirals(n_samples=301, n_classes=3, seed=5)
    assert x.shape == (301, 2) and x.dtype == np.float32 and y.dtype == np.int32
    assert np.bincount(y).tolist() == [101, 100, 100]
    x2, y2 = data.make_spirals(n_samples=301, n_classes=3, seed=5)
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(y, y2)
    x3, _ = data.make_spirals(n_samples=301, n_classes=3, seed=6)
    assert not np.array_equal(x, x3)


@pytest.mark.parametrize("n_classes, turns", [(2, 1.0), (4, 1.5)])
def test_spirals_without_noise_lie_on_their_arms(n_classes, turns):
    x, y = data.make_spirals(n_samples=200, n_classes=n_classes, noise=0.0, turns=turns, seed=1)
    r = np.hypot(x[:, 0], x[:, 1]).astype(np.float64)
    assert np.all((r > 0) & (r <= 1 + 1e-6))
    expected = 2 * np.pi * (turns * r + y / n_classes)
    angle = np.arctan2(x[:, 1], x[:, 0])
    diff = np.angle(np.exp(1j * (angle - expected)))  # wrapped to (-pi, pi]
    assert np.max(np.abs(diff)) < 1e-4


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"n_classes": 1}, "n_classes"),
        ({"n_samples": 2, "n_classes": 3}, "n_samples"),
        ({"noise": -0.1}, "noise"),
    ],
)
def test_spirals_reject_bad_arguments(kwargs, key):
    with pytest.raises(DataError) as info:
        data.make_spirals(**kwargs)
    assert info.value.key == key and key in str(info.value)


# --------------------------------------------------------------------------- npz


def test_npz_round_trip_and_key_choice(tmp_path):
    path = tmp_path / "d.npz"
    x, y = np.arange(12.0).reshape(6, 2), np.array([0, 1, 0, 1, 1, 0])
    np.savez(path, features=x, labels=y)
    got_x, got_y = data.load_npz(str(path), x_key="features", y_key="labels")
    np.testing.assert_array_equal(got_x, x)
    np.testing.assert_array_equal(got_y, y)


def test_npz_missing_key_lists_the_archive(tmp_path):
    path = tmp_path / "d.npz"
    np.savez(path, a=np.zeros(3), b=np.zeros(3))
    with pytest.raises(DataError, match=r"has no array 'x'; it holds: a, b") as info:
        data.load_npz(str(path))
    assert info.value.key == "x_key"


def test_npz_missing_file_and_pickles_are_refused(tmp_path):
    with pytest.raises(DataError, match="does not exist") as info:
        data.load_npz(str(tmp_path / "nope.npz"))
    assert info.value.key == "path"
    path = tmp_path / "objects.npz"
    np.savez(path, x=np.array([{"a": 1}], dtype=object), y=np.zeros(1))
    with pytest.raises(DataError, match="the array 'x' holds Python objects") as info:
        data.load_npz(str(path))
    assert info.value.key == "x_key"
    bad = tmp_path / "text.npz"
    bad.write_text("not a zip")
    with pytest.raises(DataError, match=r"is not an \.npz archive"):
        data.load_npz(str(bad))


def test_npz_given_other_files_says_what_they_are(tmp_path):
    single = tmp_path / "x.npy"
    np.save(single, np.zeros((3, 2)))
    with pytest.raises(DataError, match=r"x\.npy' is a \.npy file holding one array.*np\.savez") as info:
        data.load_npz(str(single))
    assert info.value.key == "path"
    table = tmp_path / "d.csv"
    table.write_text("a,b,label\n1,2,0\n")
    with pytest.raises(DataError, match=r"d\.csv' is not an \.npz archive") as info:
        data.load_npz(str(table))
    assert "pickle" not in str(info.value) and info.value.key == "path"


# --------------------------------------------------------------------------- csv


def _write(tmp_path, text, name="t.csv"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_csv_header_detected_and_label_by_name(tmp_path):
    path = _write(tmp_path, "a,label,b\n1,0,2\n3,1,4\n\n5,2,6\n")
    x, y = data.load_csv(path, label_column="label")
    np.testing.assert_array_equal(x, [[1, 2], [3, 4], [5, 6]])
    np.testing.assert_array_equal(y, [0, 1, 2])
    assert y.dtype.kind == "i"


def test_csv_without_header_label_by_index(tmp_path):
    path = _write(tmp_path, "1;2;0.5\n3;4;1.5\n")
    x, y = data.load_csv(path, delimiter=";")  # the last column by default
    np.testing.assert_array_equal(x, [[1, 2], [3, 4]])
    np.testing.assert_array_equal(y, [0.5, 1.5])
    assert y.dtype.kind == "f"
    x, y = data.load_csv(path, label_column=0, delimiter=";")
    np.testing.assert_array_equal(y, [1, 3])
    np.testing.assert_array_equal(x, [[2, 0.5], [4, 1.5]])


def test_csv_saved_with_a_byte_order_mark(tmp_path):
    # Excel's "CSV UTF-8" starts with a BOM: the first row is still data, the first name still 'label'.
    path = tmp_path / "bom.csv"
    path.write_bytes("1,2,0\n3,4,1\n".encode("utf-8-sig"))
    x, y = data.load_csv(str(path))
    np.testing.assert_array_equal(x, [[1, 2], [3, 4]])
    np.testing.assert_array_equal(y, [0, 1])
    path.write_bytes("label,a\n0,1\n1,3\n".encode("utf-8-sig"))
    x, y = data.load_csv(str(path), label_column="label")
    np.testing.assert_array_equal(x, [[1], [3]])
    np.testing.assert_array_equal(y, [0, 1])


def test_csv_header_forced_and_label_dtype(tmp_path):
    path = _write(tmp_path, "1,2,3\n4,5,6\n7,8,9\n")
    x, y = data.load_csv(path, header=True, label_dtype="float")
    assert len(x) == 2 and y.dtype == np.float64
    np.testing.assert_array_equal(y, [6, 9])


@pytest.mark.parametrize(
    "text, kwargs, message, key",
    [
        ("a,b\n1,2\n3,x\n", {}, r"line 3, column 2: 'x' is not a number", None),
        ("1,2,3\n4,5\n", {}, r"line 2: 2 fields, but the first data row has 3", None),
        ("a,b\n1,2\n", {"label_column": "c"}, r"has no column 'c'; its columns: a, b", "label_column"),
        ("1,2\n", {"label_column": "b"}, r"is a name but .* has no header row", "label_column"),
        ("1,2\n", {"label_column": 2}, r"label_column 2 is out of range for 2 columns", "label_column"),
        ("1,2.5\n", {"label_dtype": "int"}, r"not whole numbers", "label_dtype"),
        ("", {}, r"is empty", "path"),
        ("a,b\n", {}, r"has a header but no data rows", "path"),
        ("1,2\n", {"header": "maybe"}, r"header must be true, false or 'auto'", "header"),
    ],
)
def test_csv_errors_name_the_problem(tmp_path, text, kwargs, message, key):
    path = _write(tmp_path, text)
    with pytest.raises(DataError, match=message) as info:
        data.load_csv(path, **kwargs)
    assert info.value.key == key


def test_csv_one_column_suggests_the_delimiter_it_holds(tmp_path):
    path = _write(tmp_path, "a;b;label\n1;2;0\n")
    with pytest.raises(DataError, match=r"has 1 column.*delimiter: ';'") as info:
        data.load_csv(path)
    assert info.value.key == "delimiter"
    np.testing.assert_array_equal(data.load_csv(path, delimiter=";")[1], [0])


def test_csv_missing_file(tmp_path):
    with pytest.raises(DataError, match=r"data file '.*nope.csv' does not exist"):
        data.load_csv(str(tmp_path / "nope.csv"))


# --------------------------------------------------------------------------- checks, split, standardization


def test_check_arrays_converts_and_rejects():
    x, y = data.check_arrays(np.arange(4, dtype=np.int64), np.array([0, 1, 1, 0], dtype=np.int64), "src")
    assert x.shape == (4, 1) and x.dtype == np.float32 and y.dtype == np.int32
    _, y = data.check_arrays(np.zeros((2, 3)), np.array([0.5, 1.0]), "src")
    assert y.dtype == np.float32
    with pytest.raises(DataError, match="src: 3 samples of features but 2 labels"):
        data.check_arrays(np.zeros((3, 2)), np.zeros(2), "src")
    with pytest.raises(DataError, match="src: the features must be numbers, got dtype <U1"):
        data.check_arrays(np.array(["a", "b"]), np.zeros(2), "src")
    with pytest.raises(DataError, match="NaN or infinite"):
        data.check_arrays(np.array([[np.nan], [1.0]]), np.zeros(2), "src")
    with pytest.raises(DataError, match="no samples"):
        data.check_arrays(np.zeros((0, 2)), np.zeros(0), "src")


def test_check_arrays_refuses_integer_labels_int32_cannot_hold():
    labels = np.array([0, 1, 2**32 + 1, 2], dtype=np.int64)  # a cast to int32 would make class 1
    with pytest.raises(
        DataError,
        match=r"^src: the label 4294967297 at sample 2 is outside the range of class indices "
        r"\(int32, -2147483648 to 2147483647\)$",
    ):
        data.check_arrays(np.zeros((4, 1)), labels, "src")
    with pytest.raises(DataError, match=r"^src: the label -2147483649 at sample 1, column 0 "):
        data.check_arrays(np.zeros((2, 1)), np.array([[0], [-(2**31) - 1]]), "src")
    _, y = data.check_arrays(np.zeros((2, 1)), np.array([2**31 - 1, -(2**31)], dtype=np.int64), "src")
    np.testing.assert_array_equal(y, [2**31 - 1, -(2**31)])


def test_validation_split_is_seeded_disjoint_and_sized_like_keras():
    x = np.arange(50, dtype=np.float32)[:, None]
    y = np.arange(50)
    (xt, yt), (xv, yv) = data.validation_split(x, y, 0.25, seed=3)
    assert len(xt) == 37 and len(xv) == 13  # floor(50 * 0.75) = 37 for training
    assert sorted(np.concatenate([yt, yv]).tolist()) == list(range(50))
    np.testing.assert_array_equal(xt[:, 0], yt)  # rows stay paired
    assert yv.tolist() != list(range(37, 50))  # shuffled, not the tail
    (_, yt2), _ = data.validation_split(x, y, 0.25, seed=3)
    np.testing.assert_array_equal(yt, yt2)
    (_, yt3), _ = data.validation_split(x, y, 0.25, seed=4)
    assert not np.array_equal(yt, yt3)
    train, val = data.validation_split(x, y, 0.0, seed=3)
    assert val is None and train[0] is x


def test_negative_seeds_work_as_in_tp_random():
    # TensorFlow's seeds are int64 and tp.random.set_seed takes -1; the data seeds do too.
    x, y = np.arange(20, dtype=np.float32)[:, None], np.arange(20)
    (_, yt), _ = data.validation_split(x, y, 0.25, seed=-1)
    (_, yt2), _ = data.validation_split(x, y, 0.25, seed=-1)
    np.testing.assert_array_equal(yt, yt2)
    (_, yt3), _ = data.validation_split(x, y, 0.25, seed=1)
    assert not np.array_equal(yt, yt3)
    xs, _ = data.make_spirals(n_samples=30, seed=-7)
    np.testing.assert_array_equal(data.make_spirals(n_samples=30, seed=-7)[0], xs)
    assert not np.array_equal(data.make_spirals(n_samples=30, seed=7)[0], xs)


@pytest.mark.parametrize(
    "n, fraction, message",
    [(10, 1.0, r"in \[0, 1\)"), (10, -0.1, r"in \[0, 1\)"), (1, 0.5, "no training samples")],
)
def test_validation_split_rejects_useless_fractions(n, fraction, message):
    with pytest.raises(DataError, match=message) as info:
        data.validation_split(np.zeros((n, 1)), np.zeros(n), fraction, seed=0)
    assert info.value.key == "validation_split"


def test_standardize_uses_training_statistics():
    rng = np.random.default_rng(0)
    train = (rng.normal(size=(200, 3)) * [1.0, 5.0, 0.0] + [2.0, -3.0, 7.0]).astype(np.float32)
    val = train[:5] + 1.0
    (train_s, val_s), (mean, std) = data.standardize(train, val)
    assert train_s.dtype == np.float32
    np.testing.assert_allclose(train_s[:, :2].mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(train_s[:, :2].std(axis=0), 1.0, atol=1e-5)
    np.testing.assert_array_equal(train_s[:, 2], 0.0)  # a constant feature is only centred
    np.testing.assert_allclose(val_s, (val - mean) / std, rtol=1e-6)
    np.testing.assert_allclose(std[2], 1.0)


def test_a_csv_line_of_millions_of_fields_costs_a_few_times_its_size(tmp_path):
    # A 25 MB line of 6.25 million fields once cost 400 MB (a Python string per field) to be refused.
    line = ",".join(["1.5"] * 6_250_000)
    (tmp_path / "t.csv").write_text(f"1,2,0\n{line}\n3,4,1\n")
    code = f"""
import tracemalloc
from tapefit.data import DataError, load_csv
tracemalloc.start()
try:
    load_csv({str(tmp_path / "t.csv")!r})
except DataError as e:
    print(e)
print(tracemalloc.get_traced_memory()[1])
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    error, peak = result.stdout.strip().splitlines()
    assert error.endswith("t.csv' line 2: 6250000 fields, but the first data row has 3"), result.stderr
    assert int(peak) < 4 * len(line), f"{int(peak) >> 20} MB to refuse a {len(line) >> 20} MB line"
