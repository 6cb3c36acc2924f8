"""Add, Subtract, Multiply, Average, Maximum, Minimum, Concatenate and Dot: Keras 3's numbers
(saved by scripts/keras_reference_functional.py), gradients, masks and errors."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp
from tapefit import layers as L

MERGING = {"Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum", "Concatenate", "Dot"}


def _cases(keras_reference):
    return [c for c in keras_reference.LAYER_CASES if c[1] in MERGING]


def _inputs(keras_saved, case, n):
    return [keras_saved[f"layer/{case}/x{i}"] for i in range(n)]


def test_every_layer_matches_keras(keras_reference, keras_saved):
    cases = _cases(keras_reference)
    assert {c[1] for c in cases} == MERGING
    for case, cls, kwargs, shapes in cases:
        out = getattr(L, cls)(**kwargs)(_inputs(keras_saved, case, len(shapes)))
        np.testing.assert_allclose(out.numpy(), keras_saved[f"layer/{case}/out"], atol=1e-5, err_msg=case)


def test_every_layer_has_finite_difference_gradients(keras_reference, keras_saved):
    for case, cls, kwargs, shapes in _cases(keras_reference):
        layer = getattr(L, cls)(**kwargs)
        xs = [x.astype(np.float64) for x in _inputs(keras_saved, case, len(shapes))]
        tp.testing.check_gradients(lambda *inputs, layer=layer: layer(list(inputs)), *xs)


def test_functional_shapes():
    a, b = tp.Input((3, 4)), tp.Input((5, 4))
    assert L.Concatenate(axis=1)([a, b]).shape == (None, 8, 4)
    assert L.Dot(axes=(2, 2))([a, b]).shape == (None, 3, 5)
    assert L.Dot(axes=1)([tp.Input((5,)), tp.Input((5,))]).shape == (None, 1)
    assert L.Add()([tp.Input((1, 4)), a]).shape == (None, 3, 4)


def test_the_mask_of_a_merge_is_the_or_of_its_inputs_masks():
    ids = tp.Input((None,), dtype="int32")
    embedding = L.Embedding(5, 3, mask_zero=True)
    summed = L.Add()([embedding(ids), embedding(ids)])
    assert summed.has_mask
    assert not L.Add()([embedding(ids), tp.Input((None, 3))]).has_mask  # Keras: every input needs one
    masks = [tp.constant([[True, False]]), tp.constant([[False, False]])]
    np.testing.assert_array_equal(L.Maximum().compute_mask(None, masks).numpy(), [[True, False]])


def test_concatenate_joins_masks_as_keras():
    x = [np.zeros((1, 2, 3), np.float32), np.zeros((1, 2, 3), np.float32)]
    mask = [tp.constant([[True, False]]), None]
    np.testing.assert_array_equal(
        L.Concatenate(axis=1).compute_mask(x, mask).numpy(),
        [[True, False, True, True]],
    )
    np.testing.assert_array_equal(L.Concatenate().compute_mask(x, mask).numpy(), [[True, True]])
    assert L.Concatenate().compute_mask(x, [None, None]) is None


@pytest.mark.parametrize(
    ("layer", "shapes", "message"),
    [
        (L.Add(), [(2, 4), (2, 3)], r"inputs of shapes \(2, 4\) and \(2, 3\) do not match"),
        (L.Subtract(), [(2, 4)] * 3, "takes exactly 2 inputs, got 3"),
        (L.Multiply(), [(2, 4)], "takes at least 2 inputs, got 1"),
        (
            L.Concatenate(),
            [(2, 4, 1), (2, 3, 1)],
            r"\(2, 4, 1\) and \(2, 3, 1\) differ on an axis other than -1",
        ),
        (L.Concatenate(axis=0), [(2, 4), (2, 4)], "axis 0 is not a non-batch axis"),
        (L.Dot(axes=1), [(2, 4), (2, 3)], r"differ along axes 1 \(4 against 3\)"),
        (L.Dot(axes=0), [(2, 4), (2, 4)], "must be non-batch axes"),
    ],
)
def test_mismatched_inputs_are_named(layer, shapes, message):
    with pytest.raises(ValueError, match=message):
        layer([np.zeros(s, np.float32) for s in shapes])


def test_a_merge_needs_a_list():
    with pytest.raises(ValueError, match="takes a list of tensors, got one tensor"):
        L.Add()(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="axes must be an int or a list of two ints"):
        L.Dot(axes=(1, 2, 3))


@pytest.mark.parametrize(
    ("function", "cls"),
    [
        (L.add, L.Add),
        (L.subtract, L.Subtract),
        (L.multiply, L.Multiply),
        (L.average, L.Average),
        (L.maximum, L.Maximum),
        (L.minimum, L.Minimum),
        (L.concatenate, L.Concatenate),
        (L.dot, L.Dot),
    ],
)
def test_the_merge_functions_call_their_layer(function, cls):
    a, b = tp.Input((3,), name="left"), tp.Input((3,), name="right")
    out = function([a, b], name=f"merged_{cls.__name__.lower()}")
    model = tp.Model([a, b], out)
    layer = model.get_layer(f"merged_{cls.__name__.lower()}")
    assert type(layer) is cls
    x, y = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((2, 3), np.float32)
    expected = cls(**({"axes": -1} if cls is L.Dot else {}))([tp.constant(x), tp.constant(y)]).numpy()
    np.testing.assert_allclose(model([x, y]).numpy(), expected, rtol=1e-6)


def test_concatenate_takes_an_axis():
    a, b = tp.Input((2, 4)), tp.Input((3, 4))
    assert L.concatenate([a, b], axis=1).shape == (None, 5, 4)
