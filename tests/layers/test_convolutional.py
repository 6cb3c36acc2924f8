"""Conv2D, MaxPool2D, AvgPool2D: against direct NumPy loops, gradients, and a small CNN that learns."""

import re

import numpy as np
import pytest

import tapefit as tp
from tapefit.layers import AvgPool2D, Conv2D, Dense, Flatten, MaxPool2D, Sequential


def _same_pads(size, k, s):
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return out, total // 2


def _windows(x, k, s, padding):
    """Yields (n, i, j, rows, cols) for every output position: the input rows/cols of its window."""
    n, h, w, _ = x.shape
    if padding == "valid":
        oh, ow, top, left = (h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1, 0, 0
    else:
        (oh, top), (ow, left) = _same_pads(h, k[0], s[0]), _same_pads(w, k[1], s[1])
    for b in range(n):
        for i in range(oh):
            for j in range(ow):
                rows = [r for r in range(i * s[0] - top, i * s[0] - top + k[0])]
                cols = [c for c in range(j * s[1] - left, j * s[1] - left + k[1])]
                yield b, i, j, oh, ow, rows, cols


def conv_reference(x, kernel, bias, strides, padding):
    kh, kw, _, f = kernel.shape
    out = None
    for b, i, j, oh, ow, rows, cols in _windows(x, (kh, kw), strides, padding):
        if out is None:
            out = np.zeros((x.shape[0], oh, ow, f))
        for a, r in enumerate(rows):
            for c_, c in enumerate(cols):
                if 0 <= r < x.shape[1] and 0 <= c < x.shape[2]:  # zero padding outside
                    out[b, i, j] += x[b, r, c] @ kernel[a, c_]
        out[b, i, j] += bias
    return out


def pool_reference(x, k, s, padding, kind):
    out = None
    for b, i, j, oh, ow, rows, cols in _windows(x, k, s, padding):
        if out is None:
            out = np.zeros((x.shape[0], oh, ow, x.shape[3]))
        window = [x[b, r, c] for r in rows for c in cols if 0 <= r < x.shape[1] and 0 <= c < x.shape[2]]
        out[b, i, j] = np.max(window, axis=0) if kind == "max" else np.mean(window, axis=0)
    return out


CASES = [  # (input shape, kernel size, strides, padding)
    ((2, 5, 5, 2), (3, 3), (1, 1), "valid"),
    ((1, 6, 7, 3), (3, 2), (2, 1), "valid"),
    ((2, 5, 6, 2), (3, 3), (1, 1), "same"),
    ((1, 7, 5, 1), (2, 3), (2, 2), "same"),
]


@pytest.mark.parametrize("shape, kernel_size, strides, padding", CASES)
def test_conv2d_matches_a_direct_loop(shape, kernel_size, strides, padding):
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape)
    layer = Conv2D(
        3, kernel_size, strides=strides, padding=padding, dtype="float64", bias_initializer="random_normal"
    )
    y = layer(x).numpy()
    assert layer.kernel.shape == (*kernel_size, shape[-1], 3) and layer.bias.shape == (3,)
    np.testing.assert_allclose(
        y,
        conv_reference(x, layer.kernel.numpy(), layer.bias.numpy(), strides, padding),
        rtol=1e-10,
        atol=1e-12,
    )


@pytest.mark.parametrize("shape, pool_size, strides, padding", CASES)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pooling_matches_a_direct_loop(shape, pool_size, strides, padding, kind):
    x = np.random.default_rng(1).normal(size=shape)
    cls = MaxPool2D if kind == "max" else AvgPool2D
    y = cls(pool_size, strides=strides, padding=padding, dtype="float64")(x).numpy()
    np.testing.assert_allclose(y, pool_reference(x, pool_size, strides, padding, kind), rtol=1e-12)


def test_pool_defaults_stride_to_pool_size():
    x = np.arange(32, dtype=np.float32).reshape(1, 4, 4, 2)
    y = MaxPool2D()(x)
    assert y.shape == (1, 2, 2, 2)
    np.testing.assert_array_equal(y.numpy(), pool_reference(x, (2, 2), (2, 2), "valid", "max"))
    assert AvgPool2D(pool_size=3, padding="same")(x).shape == (1, 2, 2, 2)


@pytest.mark.parametrize("padding, strides", [("valid", 1), ("same", 2)])
def test_conv2d_gradients(check_layer, padding, strides):
    x = np.random.default_rng(2).normal(size=(2, 4, 5, 2))
    tp.random.set_seed(2)
    layer = Conv2D(
        2,
        3,
        strides=strides,
        padding=padding,
        activation="tanh",
        dtype="float64",
        bias_initializer="random_normal",
    )
    assert check_layer(layer, x) == ["kernel", "bias"]


@pytest.mark.parametrize("padding", ["valid", "same"])
def test_pooling_gradients(padding):
    # distinct values so the max is unique and finite differences are well defined
    x = np.random.default_rng(3).permutation(2 * 5 * 5 * 2).reshape(2, 5, 5, 2) / 10.0
    tp.testing.check_gradients(MaxPool2D(2, padding=padding, dtype="float64"), x)
    tp.testing.check_gradients(AvgPool2D(3, strides=2, padding=padding, dtype="float64"), x, order=2)


def test_conv_and_pool_errors():
    with pytest.raises(ValueError, match="padding must be 'valid' or 'same'"):
        Conv2D(2, 3, padding="full")
    with pytest.raises(ValueError, match="kernel_size must be a positive int or a pair"):
        Conv2D(2, (3, 0))
    with pytest.raises(ValueError, match="filters must be a positive integer"):
        Conv2D(0, 3)
    with pytest.raises(ValueError, match=r"\(batch, height, width, channels\), got shape \(4, 4\)"):
        Conv2D(2, 3)(tp.ones((4, 4)))
    layer = Conv2D(2, 3)
    layer(tp.ones((1, 4, 4, 1)))
    with pytest.raises(ValueError, match=r"built for 1 input channels, got shape \(1, 4, 4, 3\)"):
        layer(tp.ones((1, 4, 4, 3)))
    with pytest.raises(ValueError, match="smaller than the kernel"):
        layer(tp.ones((1, 2, 4, 1)))
    with pytest.raises(ValueError, match=r"got shape \(2, 3\)"):
        MaxPool2D()(tp.ones((2, 3)))
    with pytest.raises(ValueError, match="smaller than the pool"):
        AvgPool2D(3)(tp.ones((1, 2, 2, 1)))


def _bars(n, rng):
    """8x8 images with one vertical (label 0) or horizontal (label 1) bar, plus noise."""
    x = rng.normal(0.0, 0.3, size=(n, 8, 8, 1)).astype(np.float32)
    y = rng.integers(0, 2, size=n)
    pos = rng.integers(0, 8, size=n)
    for k in range(n):
        if y[k] == 0:
            x[k, :, pos[k], 0] += 1.0
        else:
            x[k, pos[k], :, 0] += 1.0
    return x, y.astype(np.int32)


def test_small_cnn_learns_bars():
    tp.random.set_seed(0)
    rng = np.random.default_rng(0)
    x_train, y_train = _bars(128, rng)
    x_test, y_test = _bars(200, rng)
    model = Sequential([Conv2D(8, 3, activation="relu"), MaxPool2D(2), Flatten(), Dense(2)])
    loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
    accuracy = tp.metrics.get("accuracy", loss=loss_fn)

    def evaluate():
        accuracy.reset_state()
        accuracy.update_state(y_test, model(x_test))
        return float(accuracy.result())

    model(x_train[:1])
    before = evaluate()
    optimizer = tp.optimizers.Adam(learning_rate=0.02)
    for step in range(60):
        batch = slice((step % 4) * 32, (step % 4 + 1) * 32)
        with tp.GradientTape() as tape:
            loss = loss_fn(y_train[batch], model(x_train[batch], training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    after = evaluate()
    # chance is 0.5; measured 0.975-0.995 over seeds 0-5
    assert before < 0.75 and after >= 0.95, (before, after)
    assert float(loss) < 0.1
    assert model.layers[0].kernel.shape == (3, 3, 1, 8) and model.layers[3].kernel.shape == (72, 2)


def test_conv2d_rejects_an_unknown_initializer_when_constructed():
    with pytest.raises(ValueError, match="unknown initializer 'he'"):
        tp.layers.Conv2D(2, 3, kernel_initializer="he")


# -- Conv1D and global pooling ----------------------------------------------------------------


def _conv1d_reference(x, kernel, bias, stride, padding, dilation=1, groups=1):
    """Keras's Conv1D in float64 NumPy: causal pads (k-1)*d zeros before, same pads around;
    taps ``dilation`` apart; each group of filters sees its slice of the channels."""
    k, per_group, filters = kernel.shape
    span = (k - 1) * dilation + 1
    steps = x.shape[1]
    if padding == "causal":
        x = np.pad(x, [(0, 0), (span - 1, 0), (0, 0)])
    elif padding == "same":
        out = -(-steps // stride)
        total = max((out - 1) * stride + span - steps, 0)
        x = np.pad(x, [(0, 0), (total // 2, total - total // 2), (0, 0)])
    starts = range(0, x.shape[1] - span + 1, stride)
    per_filters = filters // groups
    y = np.zeros((x.shape[0], len(starts), filters))
    for g in range(groups):
        channels = x[..., g * per_group : (g + 1) * per_group]
        taps = kernel[..., g * per_filters : (g + 1) * per_filters]
        for i, s in enumerate(starts):
            y[:, i, g * per_filters : (g + 1) * per_filters] = np.einsum(
                "bkc,kcf->bf", channels[:, s : s + span : dilation], taps
            )
    return y + bias


@pytest.mark.parametrize("padding", ["valid", "same", "causal"])
@pytest.mark.parametrize("stride", [1, 2])
def test_conv1d_follows_keras(padding, stride):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 7, 3)).astype(np.float32)
    layer = tp.layers.Conv1D(4, 3, strides=stride, padding=padding, bias_initializer="ones")
    y = layer(tp.constant(x)).numpy()
    assert layer.kernel.shape == (3, 3, 4)
    expected = _conv1d_reference(
        x.astype(np.float64), layer.kernel.numpy(), layer.bias.numpy(), stride, padding
    )
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("dilation", "groups", "padding"),
    [(2, 1, "valid"), (2, 2, "same"), (3, 1, "causal"), (1, 4, "valid"), (2, 4, "causal"), (3, 2, "same")],
)
def test_conv1d_dilation_and_groups_follow_keras(dilation, groups, padding):
    x = np.random.default_rng(6).standard_normal((2, 11, 4)).astype(np.float32)
    layer = tp.layers.Conv1D(
        8, 3, padding=padding, dilation_rate=dilation, groups=groups, bias_initializer="ones"
    )
    y = layer(tp.constant(x)).numpy()
    assert layer.kernel.shape == (3, 4 // groups, 8)
    expected = _conv1d_reference(
        x.astype(np.float64), layer.kernel.numpy(), layer.bias.numpy(), 1, padding, dilation, groups
    )
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_conv1d_dilated_causal_output_sees_no_later_step():
    x = np.random.default_rng(7).standard_normal((1, 9, 2)).astype(np.float32)
    layer = tp.layers.Conv1D(3, 3, padding="causal", dilation_rate=2)
    first = layer(tp.constant(x)).numpy()
    later = x.copy()
    later[0, 5:] += 4.0
    second = layer(tp.constant(later)).numpy()
    assert first.shape == (1, 9, 3)
    np.testing.assert_array_equal(first[0, :5], second[0, :5])
    assert not np.allclose(first[0, 5:], second[0, 5:])


def test_conv1d_dilation_and_groups_errors():
    with pytest.raises(ValueError, match="Conv1D: dilation_rate 2 needs strides of 1"):
        tp.layers.Conv1D(4, 3, strides=2, dilation_rate=2)
    with pytest.raises(ValueError, match=r"Conv1D: filters \(6\) must be a multiple of groups \(4\)"):
        tp.layers.Conv1D(6, 3, groups=4)
    with pytest.raises(ValueError, match="the 3 input channels are not a multiple of groups"):
        tp.layers.Conv1D(4, 3, groups=2)(tp.constant(np.zeros((1, 5, 3), np.float32)))
    with pytest.raises(ValueError, match="dilation_rate must be a positive integer, got 0"):
        tp.layers.Conv1D(4, 3, dilation_rate=0)
    with pytest.raises(ValueError, match=r"shape \(1, 4, 2\) are shorter than the kernel 5"):
        tp.layers.Conv1D(4, 3, dilation_rate=2)(tp.constant(np.zeros((1, 4, 2), np.float32)))


@pytest.mark.parametrize("padding", ["valid", "same", "causal"])
@pytest.mark.parametrize(("stride", "dilation", "groups"), [(1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 2, 2)])
def test_conv1d_gradients(check_layer, padding, stride, dilation, groups):
    """Input, kernel and bias against finite differences."""
    x = np.random.default_rng(11).standard_normal((2, 7, 4))
    tp.random.set_seed(11)
    layer = tp.layers.Conv1D(
        4,
        3,
        strides=stride,
        padding=padding,
        dilation_rate=dilation,
        groups=groups,
        activation="tanh",
        dtype="float64",
        bias_initializer="random_normal",
    )
    order = 2 if (stride, dilation, groups) == (1, 2, 2) else 1
    assert check_layer(layer, x, order=order) == ["kernel", "bias"]


def test_conv1d_gradients_and_causality():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 5, 2))
    kernel = rng.standard_normal((3, 2, 2))
    layer = tp.layers.Conv1D(2, 3, padding="causal", dtype="float64")
    layer(tp.constant(x))

    def run(x, kernel):
        layer.kernel = kernel
        layer.bias = tp.constant(np.zeros(2))
        return layer.call(x)

    tp.testing.check_gradients(run, x, kernel)
    later = x.copy()
    later[0, 3:] += 5.0  # a change at step 3 leaves the outputs before it as they were
    first, second = (
        run(tp.constant(x), tp.constant(kernel)).numpy(),
        run(tp.constant(later), tp.constant(kernel)).numpy(),
    )
    np.testing.assert_array_equal(first[0, :3], second[0, :3])
    assert not np.allclose(first[0, 3:], second[0, 3:])
    with pytest.raises(ValueError, match="padding must be 'valid', 'same' or 'causal'"):
        tp.layers.Conv1D(2, 3, padding="full")
    with pytest.raises(ValueError, match=r"needs sequences of shape \(batch, steps, channels\)"):
        tp.layers.Conv1D(2, 3)(tp.constant(np.zeros((2, 4), np.float32)))


@pytest.mark.parametrize(
    ("layer", "shape", "reduce", "axes"),
    [
        (tp.layers.GlobalAveragePooling1D, (2, 5, 3), np.mean, (1,)),
        (tp.layers.GlobalMaxPooling1D, (2, 5, 3), np.max, (1,)),
        (tp.layers.GlobalAveragePooling2D, (2, 4, 5, 3), np.mean, (1, 2)),
        (tp.layers.GlobalMaxPooling2D, (2, 4, 5, 3), np.max, (1, 2)),
    ],
)
def test_global_pooling(layer, shape, reduce, axes):
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(layer()(tp.constant(x)).numpy(), reduce(x, axis=axes), rtol=1e-6)
    kept = layer(keepdims=True)(tp.constant(x))
    assert kept.shape == reduce(x, axis=axes, keepdims=True).shape
    with pytest.raises(ValueError, match="needs inputs of shape"):
        layer()(tp.constant(x[0]))


def test_global_average_pooling_1d_averages_the_real_steps_only():
    x = np.random.default_rng(8).standard_normal((3, 5, 2)).astype(np.float32)
    lengths = np.array([5, 2, 3])
    mask = np.arange(5) < lengths[:, None]
    x[~mask] = np.nan  # what sits at a padded step never reaches the mean, as in Keras
    layer = tp.layers.GlobalAveragePooling1D()
    expected = np.stack([x[b, :n].mean(0) for b, n in enumerate(lengths)])
    np.testing.assert_allclose(layer(tp.constant(x), mask=mask).numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(layer(x, mask=mask.astype(np.int32)).numpy(), expected, rtol=1e-6)
    kept = tp.layers.GlobalAveragePooling1D(keepdims=True)(x, mask=mask)
    np.testing.assert_allclose(kept.numpy(), expected[:, None], rtol=1e-6)
    assert layer.supports_masking and layer.compute_mask(x, mask) is None
    with pytest.raises(ValueError, match=r"mask must have shape \(batch, steps\) = \(3, 5\), got \(3, 4\)"):
        layer(x, mask=mask[:, :4])


def test_global_pooling_after_a_masking_embedding_ignores_padding_as_keras():
    """Sequential hands Embedding(mask_zero=True)'s mask to GlobalAveragePooling1D: padded and
    unpadded sequences pool alike. GlobalMaxPooling1D takes no mask in Keras 3: padding counts."""
    tp.random.set_seed(5)
    embedding = tp.layers.Embedding(10, 4, mask_zero=True)
    average = tp.layers.Sequential([embedding, tp.layers.GlobalAveragePooling1D(), tp.layers.Dense(3)])
    maximum = tp.layers.Sequential([embedding, tp.layers.GlobalMaxPooling1D()])
    sequences = [[3, 1, 4], [1, 5, 9, 2, 6], [5]]
    padded = np.array([s + [0] * (5 - len(s)) for s in sequences])
    together = average(padded).numpy()
    alone = np.concatenate([average(np.array([s])).numpy() for s in sequences])
    np.testing.assert_allclose(together, alone, rtol=1e-6, atol=1e-7)
    table = embedding.embeddings.numpy()
    np.testing.assert_allclose(maximum(padded).numpy(), table[padded].max(axis=1), rtol=1e-6)
    assert not np.allclose(table[padded[2]].max(0), table[[5]].max(0))  # the padding's row counted


@pytest.mark.parametrize(
    ("layer", "shape"),
    [
        (tp.layers.GlobalAveragePooling1D, (2, 4, 3)),
        (tp.layers.GlobalMaxPooling1D, (2, 4, 3)),
        (tp.layers.GlobalAveragePooling2D, (2, 3, 4, 2)),
        (tp.layers.GlobalMaxPooling2D, (2, 3, 4, 2)),
    ],
)
@pytest.mark.parametrize("keepdims", [False, True])
def test_global_pooling_gradients(layer, shape, keepdims):
    # distinct values, so each maximum is unique and finite differences are well defined
    x = np.random.default_rng(9).permutation(int(np.prod(shape))).reshape(shape) / 7.0
    tp.testing.check_gradients(layer(keepdims=keepdims, dtype="float64"), x, order=2)


def test_masked_global_average_pooling_gradients():
    x = np.random.default_rng(10).standard_normal((3, 5, 2))
    mask = np.arange(5) < np.array([[5], [2], [3]])
    layer = tp.layers.GlobalAveragePooling1D(dtype="float64")
    tp.testing.check_gradients(lambda x: layer(x, mask=mask), x, order=2)
    with tp.GradientTape() as tape:
        inputs = tp.constant(x)
        tape.watch(inputs)
        y = tp.reduce_sum(layer(inputs, mask=mask))
    np.testing.assert_array_equal(tape.gradient(y, inputs).numpy()[~mask], 0.0)


# -- Conv2D dilation_rate and groups ---------------------------------------------------------


def _conv2d_reference(x, kernel, bias, dilation, groups):
    """A 'valid' convolution by loops: taps ``dilation`` apart, each group of filters on its channels."""
    kh, kw, per_group, filters = kernel.shape
    dh, dw = dilation
    out_h, out_w = x.shape[1] - (kh - 1) * dh, x.shape[2] - (kw - 1) * dw
    y = np.zeros((x.shape[0], out_h, out_w, filters))
    per_filters = filters // groups
    for f in range(filters):
        g = f // per_filters
        channels = x[..., g * per_group : (g + 1) * per_group]
        for i in range(kh):
            for j in range(kw):
                patch = channels[:, i * dh : i * dh + out_h, j * dw : j * dw + out_w]
                y[..., f] += patch @ kernel[i, j, :, f]
    return y + bias


@pytest.mark.parametrize(("dilation", "groups"), [((2, 1), 1), ((2, 3), 2), ((1, 1), 4), ((3, 2), 4)])
def test_conv2d_dilation_and_groups_follow_keras(dilation, groups):
    x = np.random.default_rng(3).standard_normal((2, 9, 8, 4)).astype(np.float32)
    layer = tp.layers.Conv2D(8, 3, dilation_rate=dilation, groups=groups, bias_initializer="ones")
    y = layer(tp.constant(x)).numpy()
    assert layer.kernel.shape == (3, 3, 4 // groups, 8)
    expected = _conv2d_reference(
        x.astype(np.float64), layer.kernel.numpy(), layer.bias.numpy(), dilation, groups
    )
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("padding", "dilation", "groups"), [("same", 2, 2), ("valid", (2, 1), 2), ("same", (1, 2), 1)]
)
def test_conv2d_dilation_and_groups_gradients(check_layer, padding, dilation, groups):
    """Input, kernel and bias against finite differences."""
    x = np.random.default_rng(4).standard_normal((1, 6, 5, 4))
    tp.random.set_seed(4)
    layer = tp.layers.Conv2D(
        4,
        2,
        padding=padding,
        dilation_rate=dilation,
        groups=groups,
        activation="tanh",
        dtype="float64",
        bias_initializer="random_normal",
    )
    assert check_layer(layer, x) == ["kernel", "bias"]


def test_conv2d_dilation_and_groups_errors():
    with pytest.raises(ValueError, match=r"dilation_rate \(2, 2\) needs strides of 1"):
        tp.layers.Conv2D(4, 3, strides=2, dilation_rate=2)
    with pytest.raises(ValueError, match=r"filters \(6\) must be a multiple of groups \(4\)"):
        tp.layers.Conv2D(6, 3, groups=4)
    with pytest.raises(ValueError, match="the 3 input channels are not a multiple of groups"):
        tp.layers.Conv2D(4, 3, groups=2)(tp.constant(np.zeros((1, 5, 5, 3), np.float32)))


# -- against PyTorch (scripts/torch_reference_attention.py; saved for CI, live with PyTorch) --


def tapefit_convolution(layer, x, upstream):
    """The layer's output and its gradients with respect to ``x``, kernel and bias."""
    inputs = tp.constant(x)
    with tp.GradientTape() as tape:
        tape.watch(inputs)
        output = layer(inputs)
    grads = tape.gradient(output, [inputs, layer.kernel, layer.bias], output_gradients=tp.constant(upstream))
    return {"output": output.numpy(), **{f"d_{n}": g.numpy() for n, g in zip(("x", "kernel", "bias"), grads)}}


def _layer(family, kernel_size, filters, strides, padding, dilation, groups, **options):
    """Conv2D or Conv1D from the script's case (strides and dilation as one int per axis)."""
    cls = tp.layers.Conv2D if family == "conv2d" else tp.layers.Conv1D
    strides, dilation = (
        tuple(int(n) for n in v) if family == "conv2d" else int(v[0]) for v in (strides, dilation)
    )
    return cls(
        filters,
        tuple(kernel_size),
        strides=strides,
        padding=str(padding),
        dilation_rate=dilation,
        groups=int(groups),
        **options,
    )


def _assert_all_close(got, want):
    """rtol 1e-5, atol 1e-6 or 1e-6 of the largest value (float32 sums cancel to small values)."""
    for name, value in want.items():
        atol = 1e-6 * max(1.0, np.abs(value).max())
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=atol, err_msg=name)


SAVED_CASES = [f"conv2d_{n}" for n in range(4)] + [f"conv1d_{n}" for n in range(4)]


@pytest.mark.parametrize("case", SAVED_CASES)
def test_conv_outputs_and_gradients_equal_pytorchs_saved(saved_case, case):
    family = case.split("_")[0]
    x, saved = saved_case(family)["x"], saved_case(case)
    kernel = saved["kernel"]
    layer = _layer(
        family,
        kernel.shape[:-2],
        kernel.shape[-1],
        saved["strides"],
        saved["padding"],
        saved["dilation"],
        saved["groups"],
    )
    layer(tp.constant(x))
    layer.kernel.assign(kernel)
    layer.bias.assign(saved["bias"])
    _assert_all_close(
        tapefit_convolution(layer, x, saved["upstream"]),
        {k: v for k, v in saved.items() if k.startswith(("d_", "output"))},
    )


@pytest.mark.parametrize(
    ("family", "strides", "padding", "dilation", "groups"),
    [
        ("conv2d", *case)
        for case in [((1, 1), "same", (2, 3), 2), ((2, 2), "same", (1, 1), 4), ((1, 1), "valid", (3, 2), 1)]
    ]
    + [
        ("conv1d", *case)
        for case in [((1,), "causal", (2,), 2), ((2,), "same", (1,), 4), ((1,), "valid", (3,), 1)]
    ],
)
def test_conv_outputs_and_gradients_equal_pytorchs_live(
    torch_reference, family, strides, padding, dilation, groups
):
    pytest.importorskip("torch")
    rng = np.random.default_rng(12)
    shape, kernel_size = ((2, 9, 8, 4), (3, 3)) if family == "conv2d" else ((2, 11, 4), (3,))
    x = rng.standard_normal(shape).astype(np.float32)
    tp.random.set_seed(12)
    layer = _layer(
        family, kernel_size, 8, strides, padding, dilation, groups, bias_initializer="random_normal"
    )
    output = layer(tp.constant(x))
    upstream = rng.standard_normal(output.shape).astype(np.float32)
    expected = torch_reference.convolution(
        x, layer.kernel.numpy(), layer.bias.numpy(), strides, padding, dilation, groups, upstream
    )
    _assert_all_close(tapefit_convolution(layer, x, upstream), expected)


def test_pooling_layers_take_keras_class_and_default_names():
    # summary() showed "max_pool2d (MaxPool2D)" where Keras shows "max_pooling2d (MaxPooling2D)".
    assert tp.layers.MaxPool2D is tp.layers.MaxPooling2D and tp.layers.AvgPool2D is tp.layers.AveragePooling2D
    lines = []
    model = tp.layers.Sequential([tp.Input((4, 4, 1)), tp.layers.MaxPool2D(), tp.layers.AvgPool2D()])
    model.summary(print_fn=lines.append)
    # (a default name is made unique in the process: max_pooling2d_3 after three others)
    assert any(re.search(r"\bmax_pooling2d(_\d+)? \(MaxPooling2D\)", line) for line in lines)
    assert any(re.search(r"\baverage_pooling2d(_\d+)? \(AveragePooling2D\)", line) for line in lines)
