"""Shapes without data: layers say what they give for symbolic inputs, and a layer without a
rule is probed on the smallest batch, leaving no trace."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp
from tapefit import layers as L


def _x(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def test_split_in_a_lambda_on_unknown_axes():
    x = tp.Input((None, None, 10))
    halves = L.Lambda(lambda t: tp.split(t, 2, axis=1))(x)
    thirds = L.Lambda(lambda t: tp.split(t, [3, 7], axis=-1))(x)
    assert [h.shape for h in halves] == [(None, None, None, 10)] * 2
    assert [t.shape for t in thirds] == [(None, None, None, 3), (None, None, None, 7)]
    assert L.Lambda(lambda t: tp.split(t, 2, axis=1)).compute_output_shape((None, 6, 10)) == [
        (None, 3, 10),
        (None, 3, 10),
    ]
    model = tp.Model(x, [*halves, *thirds])
    for steps, width in ((4, 3), (6, 5)):
        outs = model(_x(2, steps, width, 10))
        assert [o.shape for o in outs] == [(2, steps // 2, width, 10)] * 2 + [
            (2, steps, width, 3),
            (2, steps, width, 7),
        ]


class _Noisy(L.Layer):
    """Draws random numbers and moves a non-trainable variable whenever it is called."""

    def build(self, input_shape):
        self.count = self.add_weight((), "zeros", trainable=False, name="count")

    def call(self, inputs):
        self.count.assign_add(np.float32(1))
        return inputs + tp.random.normal(tuple(inputs.shape))


def test_a_probe_leaves_no_trace():
    tp.random.set_seed(3)
    layer = _Noisy()
    x = tp.Input((4,))
    y = layer(x)  # built (its weights drawn and kept), then probed
    assert y.shape == (None, 4) and layer.built
    built = tp.random.get_state()
    assert float(layer.count.numpy()) == 0.0
    with tp.GradientTape() as tape:
        z = layer(y)  # probed again, under a tape: nothing drawn, moved or recorded
    assert tp.random.get_state() == built
    assert float(layer.count.numpy()) == 0.0
    assert tape.watched_variables() == ()  # the probe's call read no variable under the tape
    model = tp.Model(x, L.Dense(2)(z))
    assert model(_x(2, 4)).shape == (2, 2) and float(layer.count.numpy()) == 2.0


def test_conv1d_on_unknown_steps_builds_and_runs_on_two_lengths():
    x = tp.Input((None, 10))
    y = L.GlobalMaxPooling1D()(L.Conv1D(3, 3)(x))
    assert y.shape == (None, 3)
    model = tp.Model(x, y)
    for steps in (3, 11):
        assert model(_x(2, steps, 10)).shape == (2, 3)


def _fit_twice(model, shapes, targets):
    trainer = tp.Trainer(model, tp.optimizers.SGD(0.05), "sparse_categorical_crossentropy")
    losses = []
    for shape in shapes:
        history = trainer.fit(_x(*shape), targets, batch_size=4, epochs=2, verbose=0)
        losses += history.history["loss"]
    assert all(np.isfinite(losses))
    return losses


def test_a_cnn_on_unknown_image_sizes_trains_on_two_sizes():
    tp.random.set_seed(0)
    x = tp.Input((None, None, 3))
    h = L.Conv2D(4, 3, padding="same", activation="relu")(x)
    h = L.MaxPooling2D()(h)
    h = L.BatchNormalization()(L.Conv2D(4, 3, activation="relu")(h))
    y = L.Dense(2)(L.GlobalAveragePooling2D()(h))
    assert h.shape == (None, None, None, 4) and y.shape == (None, 2)
    model = tp.Model(x, y)
    _fit_twice(model, [(8, 12, 12, 3), (8, 20, 16, 3)], np.arange(8) % 2)


def test_an_lstm_on_unknown_lengths_trains_on_two_lengths():
    tp.random.set_seed(0)
    x = tp.Input((None, 10))
    h = L.LSTM(5, return_sequences=True)(x)
    assert h.shape == (None, None, 5)
    model = tp.Model(x, L.Dense(2)(L.LSTM(4)(h)))
    _fit_twice(model, [(8, 3, 10), (8, 7, 10)], np.arange(8) % 2)


# Run in a fresh process, under a 1.5 GB address space, with the peak of what Python and NumPy
# allocated (tracemalloc) and the time it took printed as "<peak MiB> <seconds> <outcome>".
_MEASURE = """
import resource, sys, time, tracemalloc
resource.setrlimit(resource.RLIMIT_AS, (3 * 2**29, 3 * 2**29))
import tapefit as tp
tracemalloc.start()
start = time.perf_counter()
try:
    exec(sys.argv[1])
    outcome = "ok"
except tp.models.ModelFileError as error:
    outcome = "refused " + str(error).replace(chr(10), " ")
print(tracemalloc.get_traced_memory()[1] / 2**20, time.perf_counter() - start, outcome)
"""


def _measure(code, timeout=60):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(tp.__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, code], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    peak, seconds, outcome = done.stdout.split(" ", 2)
    return float(peak), float(seconds), outcome.strip()


def test_building_on_a_huge_input_allocates_nothing_of_its_size():
    peak, _, outcome = _measure(
        "i = tp.Input((20000, 20000))\n"
        "m = tp.Model(i, tp.layers.Dense(2)(i))\n"
        "assert m.outputs[0].shape == (None, 20000, 2)"
    )
    assert outcome == "ok" and peak < 200


def test_loading_a_file_costs_what_the_file_holds(tmp_path):
    repeat, deep = tmp_path / "repeat.tapefit", tmp_path / "deep.tapefit"
    i = tp.Input((2,))
    tp.Model(i, L.RepeatVector(50_000_000)(i)).save(repeat)
    x = i = tp.Input((None, 2**22))
    for _ in range(400):
        x = L.Activation("relu")(x)
    tp.Model(i, x).save(deep)
    assert repeat.stat().st_size < 2000 and deep.stat().st_size < 200_000
    peak, seconds, outcome = _measure(
        f"m = tp.models.load_model({str(repeat)!r})\nassert m.outputs[0].shape == (None, 50_000_000, 2)"
    )
    assert outcome == "ok" and peak < 100 and seconds < 5
    peak, seconds, outcome = _measure(f"tp.models.load_model({str(deep)!r})")
    assert outcome == "ok" or (outcome.startswith("refused") and "\n" not in outcome)
    assert peak < 100 and seconds < 5


_F, _I = np.float32, np.int32
# (make the layer, the concrete input shape(s) with the batch axis, the input dtype)
_CASES = {
    "dense": (lambda: L.Dense(3), (2, 5), _F),
    "dense_3d": (lambda: L.Dense(3), (2, 4, 5), _F),
    "activation": (lambda: L.Activation("relu"), (2, 3, 4), _F),
    "flatten": (lambda: L.Flatten(), (2, 3, 4), _F),
    "flatten_int": (lambda: L.Flatten(), (2, 3, 4), _I),
    "embedding": (lambda: L.Embedding(10, 4), (2, 5), _I),
    "embedding_masked": (lambda: L.Embedding(10, 4, mask_zero=True), (2, 5), _I),
    "dropout": (lambda: L.Dropout(0.5), (2, 3), _F),
    "conv2d": (lambda: L.Conv2D(4, 3), (2, 8, 9, 3), _F),
    "conv2d_same_strided": (lambda: L.Conv2D(4, 3, strides=2, padding="same"), (2, 7, 9, 3), _F),
    "conv2d_dilated": (lambda: L.Conv2D(2, 3, dilation_rate=2), (2, 9, 10, 3), _F),
    "max_pool2d": (lambda: L.MaxPooling2D(), (2, 7, 9, 3), _F),
    "avg_pool2d_same": (lambda: L.AveragePooling2D(3, strides=2, padding="same"), (2, 7, 8, 2), _F),
    "conv1d": (lambda: L.Conv1D(3, 3), (2, 9, 4), _F),
    "conv1d_same_strided": (lambda: L.Conv1D(3, 3, strides=2, padding="same"), (2, 9, 4), _F),
    "conv1d_causal": (lambda: L.Conv1D(3, 3, padding="causal", dilation_rate=2), (2, 9, 4), _F),
    "global_avg1d": (lambda: L.GlobalAveragePooling1D(), (2, 5, 3), _F),
    "global_max1d_keepdims": (lambda: L.GlobalMaxPooling1D(keepdims=True), (2, 5, 3), _F),
    "global_avg2d": (lambda: L.GlobalAveragePooling2D(), (2, 5, 4, 3), _F),
    "global_max2d_keepdims": (lambda: L.GlobalMaxPooling2D(keepdims=True), (2, 5, 4, 3), _F),
    "layer_norm": (lambda: L.LayerNormalization(), (2, 3, 4), _F),
    "batch_norm": (lambda: L.BatchNormalization(), (2, 3, 4), _F),
    "simple_rnn": (lambda: L.SimpleRNN(3), (2, 5, 4), _F),
    "lstm_sequences": (lambda: L.LSTM(3, return_sequences=True), (2, 5, 4), _F),
    "gru_state": (lambda: L.GRU(3, return_state=True), (2, 5, 4), _F),
    "lstm_both": (lambda: L.LSTM(3, return_sequences=True, return_state=True), (2, 5, 4), _F),
    "bidirectional": (lambda: L.Bidirectional(L.LSTM(3)), (2, 5, 4), _F),
    "bidirectional_sum": (
        lambda: L.Bidirectional(L.GRU(3, return_sequences=True), merge_mode="sum"),
        (2, 5, 4),
        _F,
    ),
    "bidirectional_pair_states": (
        lambda: L.Bidirectional(L.LSTM(3, return_state=True), merge_mode=None),
        (2, 5, 4),
        _F,
    ),
    "add": (lambda: L.Add(), [(2, 3, 4), (2, 3, 4)], _F),
    "add_broadcast": (lambda: L.Add(), [(2, 1, 4), (2, 3, 4)], _F),
    "subtract": (lambda: L.Subtract(), [(2, 3, 4), (2, 3, 4)], _F),
    "multiply": (lambda: L.Multiply(), [(2, 3), (2, 3), (2, 3)], _F),
    "average": (lambda: L.Average(), [(2, 3), (2, 3)], _F),
    "maximum": (lambda: L.Maximum(), [(2, 3), (2, 3)], _F),
    "minimum": (lambda: L.Minimum(), [(2, 3), (2, 3)], _F),
    "concatenate": (lambda: L.Concatenate(axis=1), [(2, 3, 4), (2, 5, 4)], _F),
    "concatenate_int": (lambda: L.Concatenate(), [(2, 3, 4), (2, 3, 1)], _I),
    "dot": (lambda: L.Dot(axes=(1, 1)), [(2, 3, 4), (2, 3, 5)], _F),
    "dot_vectors": (lambda: L.Dot(1), [(2, 4), (2, 4)], _F),
    "reshape": (lambda: L.Reshape((-1, 2)), (2, 3, 4), _F),
    "permute": (lambda: L.Permute((2, 1)), (2, 3, 4), _F),
    "repeat_vector": (lambda: L.RepeatVector(3), (2, 4), _F),
    "repeat_vector_int": (lambda: L.RepeatVector(3), (2, 4), _I),
    "zero_padding1d": (lambda: L.ZeroPadding1D(2), (2, 5, 3), _F),
    "zero_padding2d": (lambda: L.ZeroPadding2D(((1, 2), (0, 1))), (2, 5, 4, 3), _F),
    "cropping1d": (lambda: L.Cropping1D((1, 2)), (2, 6, 3), _F),
    "cropping2d": (lambda: L.Cropping2D(1), (2, 5, 6, 3), _F),
    "upsampling1d": (lambda: L.UpSampling1D(3), (2, 4, 3), _F),
    "upsampling2d": (lambda: L.UpSampling2D(2), (2, 3, 4, 2), _F),
    "upsampling2d_bilinear": (lambda: L.UpSampling2D(2, interpolation="bilinear"), (2, 3, 4, 2), _F),
}


def _data(shape, dtype, seed=0):
    if isinstance(shape, list):
        return [_data(s, dtype, seed + k) for k, s in enumerate(shape)]
    if dtype == _I:
        return np.random.default_rng(seed).integers(0, 10, shape).astype(_I)
    return _x(*shape, seed=seed)


def _shapes(outputs):
    if isinstance(outputs, (list, tuple)):
        return [_shapes(o) for o in outputs]
    return tuple(outputs.shape)


def _unknown_middle(shape):
    """``shape`` with the batch axis and every axis between the first and the last unknown."""
    if isinstance(shape, list):
        return [_unknown_middle(s) for s in shape]
    return (None, *[None] * (len(shape) - 2), shape[-1]) if len(shape) > 2 else (None, shape[-1])


def _fits(rule, real):
    """Whether a shape with ``None`` axes holds the real one."""
    if isinstance(real, list):
        return isinstance(rule, list) and len(rule) == len(real) and all(map(_fits, rule, real))
    return len(rule) == len(real) and all(r is None or r == n for r, n in zip(rule, real))


@pytest.mark.parametrize("name", sorted(_CASES))
def test_compute_output_shape_agrees_with_the_real_output(name):
    make, shape, dtype = _CASES[name]
    layer = make()
    assert tp.layers.symbolic.has_rule(layer)
    real = layer(_data(shape, dtype))
    real_shapes = _shapes(real)
    rule = make().compute_output_shape(shape)
    assert _shapes_as_lists(rule) == _shapes_as_lists(real_shapes)
    assert layer.compute_output_shape(shape) == rule  # built, it says the same
    unknown = make().compute_output_shape(_unknown_middle(shape))
    assert _fits(_shapes_as_lists(unknown), _shapes_as_lists(real_shapes))
    # called on symbolic inputs: the rule's shapes, the real output's dtypes, no data
    inputs = (
        [tp.Input(s[1:], dtype=dtype) for s in shape]
        if isinstance(shape, list)
        else tp.Input(shape[1:], dtype=dtype)
    )
    symbolic = make()(inputs)
    flat_symbolic = tp.core.nest.flatten(symbolic) if isinstance(symbolic, (list, tuple)) else [symbolic]
    flat_real = tp.core.nest.flatten(real) if isinstance(real, (list, tuple)) else [real]
    assert [s.dtype for s in flat_symbolic] == [r.dtype for r in flat_real]
    assert _fits([s.shape for s in flat_symbolic], [tuple(r.shape) for r in flat_real])
    assert all(s.shape[1:] == tuple(r.shape[1:]) for s, r in zip(flat_symbolic, flat_real))
    assert [s.has_mask for s in flat_symbolic] == [name == "embedding_masked"] * len(flat_symbolic)


def _shapes_as_lists(shapes):
    return [_shapes_as_lists(s) for s in shapes] if isinstance(shapes, list) else tuple(shapes)


def test_attention_and_containers_say_their_outputs_without_data():
    query, value = tp.Input((None, 4)), tp.Input((None, 6))
    mha = L.MultiHeadAttention(2, 3)
    out, scores = mha(query, value, return_attention_scores=True)
    assert (out.shape, scores.shape) == ((None, None, 4), (None, 2, None, None))
    real_out, real_scores = mha(_x(2, 5, 4), _x(2, 7, 6), return_attention_scores=True)
    assert (real_out.shape, real_scores.shape) == ((2, 5, 4), (2, 2, 5, 7))
    stack = L.Sequential([L.Conv1D(3, 3), L.GlobalMaxPooling1D(), L.Dense(2)])
    inner = tp.Model(query, L.Dense(5)(query))
    y = stack(inner(query))
    assert y.shape == (None, 2) and stack.built
    assert tp.Model(query, y)(_x(2, 6, 4)).shape == (2, 2)


def test_a_masked_sequence_keeps_its_mask_through_rules():
    ids = tp.Input((None,), dtype="int32")
    h = L.Embedding(10, 4, mask_zero=True)(ids)
    h = L.Dense(4)(h)
    assert h.has_mask
    s = L.LSTM(3, return_sequences=True)(h)
    assert s.has_mask and not L.LSTM(3)(h).has_mask
    assert not L.GlobalAveragePooling1D()(s).has_mask
    assert L.Concatenate()([s, h]).has_mask and L.Add()([h, h]).has_mask
