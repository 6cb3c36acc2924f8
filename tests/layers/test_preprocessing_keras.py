"""The preprocessing layers against Keras 3: vocabularies learned by ``adapt``, the outputs of
every mode, ``Hashing``'s bins and ``Normalization``'s statistics and gradients, as
``scripts/keras_reference_preprocessing.py`` saved them (CI has no Keras)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp

DATA = np.load(Path(__file__).parent / "data" / "keras_preprocessing.npz")
CASES = sorted({key.split("/")[1] for key in DATA.files if key.startswith("case/")})


def _spec(case: str) -> dict:
    return json.loads(str(DATA[f"case/{case}/spec"]))


def _run(case: str):
    spec = _spec(case)
    layer = getattr(tp.layers, spec["class"])(**spec["arguments"])
    adapt = spec["adapt"]
    if adapt is not None:
        if adapt.endswith("/batches"):
            data = DATA[f"input/{adapt.split('/')[0]}"]
            layer.adapt([data[:16], data[16:32], data[32:]])
        else:
            layer.adapt(DATA[f"input/{adapt}"])
    inputs = DATA[f"input/{spec['input']}"]
    kwargs = {k: DATA[f"input/{v}"] for k, v in spec["call"].items()}
    return layer, inputs, kwargs


def test_every_case_is_here():
    assert len(CASES) >= 60
    classes = {_spec(case)["class"] for case in CASES}
    assert classes == {
        "TextVectorization",
        "StringLookup",
        "IntegerLookup",
        "CategoryEncoding",
        "Hashing",
        "Normalization",
    }


@pytest.mark.parametrize("case", CASES)
def test_matches_keras(case):
    layer, inputs, kwargs = _run(case)
    spec = _spec(case)
    if f"case/{case}/vocabulary" in DATA.files:
        assert layer.get_vocabulary() == DATA[f"case/{case}/vocabulary"].tolist()
    if spec["class"] == "Normalization":
        x = tp.constant(inputs)
        weights = DATA[f"input/weights_{spec['input']}"]
        with tp.GradientTape() as tape:
            tape.watch(x)
            out = layer(x)
            total = tp.reduce_sum(out * weights)
        np.testing.assert_allclose(tape.gradient(total, x).numpy(), DATA[f"case/{case}/gradient"], rtol=1e-5)
        if f"case/{case}/mean" in DATA.files:
            np.testing.assert_allclose(layer.mean.numpy(), DATA[f"case/{case}/mean"], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(layer.variance.numpy(), DATA[f"case/{case}/variance"], rtol=1e-5)
    else:
        out = layer(inputs, **kwargs)
    want = DATA[f"case/{case}/output"]
    got = out if isinstance(out, np.ndarray) else out.numpy()
    assert got.shape == want.shape
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    else:
        assert got.tolist() == want.tolist()
        if want.dtype.kind in "iu":
            assert got.dtype == want.dtype
