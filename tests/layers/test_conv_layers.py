"""Conv1DTranspose, Conv2DTranspose, DepthwiseConv2D, SeparableConv2D, MaxPooling1D,
AveragePooling1D, GroupNormalization and SpatialDropout1D/2D: Keras 3's numbers (saved by
``scripts/keras_reference_conv.py``), configs, gradients, shapes, model files, tp.function."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp
from tapefit import layers as L

DATA = Path(__file__).parent / "data" / "keras_conv.npz"
with np.load(DATA) as _saved:
    SAVED = dict(_saved)
CASES = sorted(key.split("/")[0] for key in SAVED if key.endswith("/config"))
RNG = np.random.default_rng(3)


def keras_case(case: str) -> tuple[tp.layers.Layer, np.ndarray, list[np.ndarray]]:
    spec = json.loads(str(SAVED[f"{case}/config"]))
    layer = getattr(L, spec["class_name"])(**spec["config"])
    count = sum(key.startswith(f"{case}/w/") for key in SAVED)
    return layer, SAVED[f"{case}/x"], [SAVED[f"{case}/w/{i}"] for i in range(count)]


def test_the_saved_file_covers_every_new_layer():
    classes = {json.loads(str(SAVED[f"{c}/config"]))["class_name"] for c in CASES}
    assert classes == {
        "Conv1DTranspose",
        "Conv2DTranspose",
        "DepthwiseConv2D",
        "SeparableConv2D",
        "MaxPooling1D",
        "AveragePooling1D",
        "GroupNormalization",
    }


@pytest.mark.parametrize("case", CASES)
def test_outputs_and_gradients_equal_keras(case):
    layer, x, weights = keras_case(case)
    layer.build(x.shape)
    assert [tuple(v.shape) for v in layer.variables] == [w.shape for w in weights]
    layer.set_weights(weights)
    x = tp.constant(x)
    with tp.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        loss = tp.reduce_sum(y * SAVED[f"{case}/r"])
    grads = tape.gradient(loss, [x, *layer.trainable_variables])
    tol = {"rtol": 1e-4, "atol": 2e-5}
    np.testing.assert_allclose(y.numpy(), SAVED[f"{case}/out"], **tol)
    assert layer.compute_output_shape(tuple(x.shape)) == tuple(y.shape)
    np.testing.assert_allclose(grads[0].numpy(), SAVED[f"{case}/grad/x"], **tol)
    for i, g in enumerate(grads[1:]):
        np.testing.assert_allclose(g.numpy(), SAVED[f"{case}/grad/{i}"], **tol, err_msg=f"weight {i}")


# -- gradients -------------------------------------------------------------------------

GRADIENT_CASES = [
    (lambda: L.Conv2DTranspose(2, 3, strides=2, padding="same", dtype="float64"), (2, 3, 4, 2)),
    (
        lambda: L.Conv2DTranspose(2, (2, 3), strides=(2, 1), output_padding=(1, 0), dtype="float64"),
        (2, 3, 3, 2),
    ),
    (lambda: L.Conv2DTranspose(3, 2, dilation_rate=2, activation="tanh", dtype="float64"), (1, 3, 3, 2)),
    (lambda: L.Conv1DTranspose(2, 3, strides=2, padding="same", dtype="float64"), (2, 4, 3)),
    (lambda: L.Conv1DTranspose(2, 3, strides=2, output_padding=1, dtype="float64"), (2, 4, 3)),
    (lambda: L.DepthwiseConv2D(3, padding="same", depth_multiplier=2, dtype="float64"), (2, 4, 5, 2)),
    (lambda: L.DepthwiseConv2D(2, strides=2, activation="tanh", dtype="float64"), (2, 5, 4, 3)),
    (lambda: L.SeparableConv2D(3, 3, depth_multiplier=2, dtype="float64"), (2, 5, 4, 2)),
    (
        lambda: L.SeparableConv2D(2, 2, strides=2, padding="same", dilation_rate=1, dtype="float64"),
        (2, 5, 4, 3),
    ),
    (lambda: L.GroupNormalization(2, dtype="float64"), (2, 3, 2, 4)),
    (lambda: L.GroupNormalization(-1, axis=1, epsilon=0.1, dtype="float64"), (2, 3, 4)),
]


@pytest.mark.parametrize("make, shape", GRADIENT_CASES)
def test_gradients_match_finite_differences(check_layer, make, shape):
    layer = make()
    names = check_layer(layer, RNG.normal(size=shape))
    assert names


@pytest.mark.parametrize(
    "layer", [L.MaxPooling1D(3, 2, "same", dtype="float64"), L.AveragePooling1D(2, 1, dtype="float64")]
)
def test_pooling_1d_gradients(layer):
    # distinct values: max pooling's gradient is defined away from ties
    x = RNG.permutation(60).reshape(2, 10, 3).astype(np.float64) / 7
    tp.testing.check_gradients(layer, x)


def test_spatial_dropout_gradient_is_its_mask():
    layer = L.SpatialDropout2D(0.5, seed=3)
    x = tp.Variable(np.ones((4, 3, 3, 5), np.float32))
    with tp.GradientTape() as tape:
        y = layer(x, training=True)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), y.numpy())


# -- pooling 1-D: the 2-D ops over a height of one -----------------------------------------


@pytest.mark.parametrize("padding", ["valid", "same"])
@pytest.mark.parametrize("pool_size, strides", [(2, None), (3, 1), (3, 2)])
@pytest.mark.parametrize("kind", ["max", "average"])
def test_pooling_1d_equals_2d_pooling_of_a_row(kind, pool_size, strides, padding):
    x = RNG.normal(size=(2, 9, 3)).astype(np.float32)
    one = {"max": L.MaxPooling1D, "average": L.AveragePooling1D}[kind](pool_size, strides, padding)
    two = {"max": L.MaxPooling2D, "average": L.AveragePooling2D}[kind](
        (1, pool_size), None if strides is None else (1, strides), padding
    )
    np.testing.assert_array_equal(one(x).numpy(), two(x[:, None]).numpy()[:, 0])
    assert one.strides == (pool_size if strides is None else strides)


# -- configs, names, shapes --------------------------------------------------------------

CONFIGURED = [
    L.Conv2DTranspose(
        4, (3, 2), strides=2, padding="same", output_padding=1, activation="relu", use_bias=False,
        kernel_initializer="he_normal", kernel_regularizer="l2", activity_regularizer="l1",
        kernel_constraint="max_norm", name="up",
    ),
    L.Conv1DTranspose(3, 4, strides=2, output_padding=1, bias_initializer="ones", bias_regularizer="l1"),
    L.DepthwiseConv2D(
        3, strides=2, padding="same", depth_multiplier=2, depthwise_initializer="he_uniform",
        depthwise_regularizer="l2", depthwise_constraint="non_neg", bias_constraint="max_norm",
    ),
    L.SeparableConv2D(
        5, 3, padding="same", dilation_rate=2, depth_multiplier=3, activation="tanh",
        pointwise_initializer="zeros", pointwise_regularizer="l1", pointwise_constraint="unit_norm",
    ),
    L.MaxPooling1D(3, 2, "same"),
    L.AveragePooling1D(pool_size=4),
    L.GroupNormalization(3, axis=1, epsilon=0.01, center=False, gamma_regularizer="l2", beta_constraint="non_neg"),
    L.SpatialDropout1D(0.3, seed=4),
    L.SpatialDropout2D(0.2),
]  # fmt: skip


@pytest.mark.parametrize("layer", CONFIGURED, ids=lambda layer: type(layer).__name__)
def test_config_round_trip(layer):
    config = layer.get_config()
    again = type(layer).from_config(config)
    assert again.get_config() == config
    assert json.loads(json.dumps(config)) == config
    assert tp.layers.deserialize(tp.layers.serialize(layer)).get_config() == config


def test_keras_default_names_and_weight_names():
    shapes = {
        L.Conv2DTranspose(2, 3): ((1, 4, 4, 3), ["kernel", "bias"], "conv2d_transpose"),
        L.Conv1DTranspose(2, 3): ((1, 4, 3), ["kernel", "bias"], "conv1d_transpose"),
        L.DepthwiseConv2D(3): ((1, 4, 4, 3), ["kernel", "bias"], "depthwise_conv2d"),
        L.SeparableConv2D(2, 3): (
            (1, 4, 4, 3),
            ["depthwise_kernel", "pointwise_kernel", "bias"],
            "separable_conv2d",
        ),
        L.GroupNormalization(3): ((1, 4, 3), ["gamma", "beta"], "group_normalization"),
        L.MaxPooling1D(): ((1, 4, 3), [], "max_pooling1d"),
        L.AveragePooling1D(): ((1, 4, 3), [], "average_pooling1d"),
        L.SpatialDropout1D(0.1): ((1, 4, 3), [], "spatial_dropout1d"),
        L.SpatialDropout2D(0.1): ((1, 4, 4, 3), [], "spatial_dropout2d"),
    }
    for layer, (shape, weights, name) in shapes.items():
        layer(np.ones(shape, np.float32))
        assert layer.name.startswith(name), (layer.name, name)
        assert [v.name.split("/")[-1].split(":")[0] for v in layer.variables] == weights


def test_keras_other_spellings_of_the_1d_pools():
    assert L.MaxPool1D is L.MaxPooling1D and L.AvgPool1D is L.AveragePooling1D
    assert L.MaxPool1D().name.startswith("max_pooling1d")


def test_weight_shapes_follow_keras():
    conv = L.Conv2DTranspose(5, (3, 2))
    conv(np.ones((1, 4, 4, 3), np.float32))
    assert conv.kernel.shape == (3, 2, 5, 3)
    conv1 = L.Conv1DTranspose(5, 4)
    conv1(np.ones((1, 4, 3), np.float32))
    assert conv1.kernel.shape == (4, 5, 3)
    depthwise = L.DepthwiseConv2D(3, depth_multiplier=2)
    depthwise(np.ones((1, 4, 4, 3), np.float32))
    assert (depthwise.kernel.shape, depthwise.bias.shape) == ((3, 3, 3, 2), (6,))
    separable = L.SeparableConv2D(7, 3, depth_multiplier=2)
    separable(np.ones((1, 4, 4, 3), np.float32))
    assert separable.depthwise_kernel.shape == (3, 3, 3, 2)
    assert separable.pointwise_kernel.shape == (1, 1, 6, 7)
    assert separable.bias.shape == (7,)


SYMBOLIC = [
    (lambda: L.Conv2DTranspose(4, 3, strides=2, padding="same"), (None, 5, 3), (None, None, 10, 4)),
    (lambda: L.Conv2DTranspose(4, 3, strides=2), (6, None, 3), (None, 13, None, 4)),
    (lambda: L.Conv2DTranspose(4, 3, strides=2, padding="same", output_padding=0), (5, 5, 3), (None, 9, 9, 4)),
    (lambda: L.Conv1DTranspose(4, 3, strides=3, output_padding=2), (None, 3), (None, None, 4)),
    (lambda: L.Conv1DTranspose(4, 2, strides=3), (5, 3), (None, 15, 4)),
    (lambda: L.DepthwiseConv2D(3, depth_multiplier=2), (None, 7, 3), (None, None, 5, 6)),
    (lambda: L.SeparableConv2D(4, 3, strides=2, padding="same"), (7, None, 3), (None, 4, None, 4)),
    (lambda: L.MaxPooling1D(), (None, 3), (None, None, 3)),
    (lambda: L.AveragePooling1D(3, 2, "same"), (9, 3), (None, 5, 3)),
    (lambda: L.GroupNormalization(3), (None, 6), (None, None, 6)),
    (lambda: L.SpatialDropout1D(0.5), (None, 6), (None, None, 6)),
    (lambda: L.SpatialDropout2D(0.5), (4, None, 6), (None, 4, None, 6)),
]  # fmt: skip


@pytest.mark.parametrize("make, shape, expected", SYMBOLIC)
def test_symbolic_shapes_and_the_real_ones_agree(make, shape, expected):
    layer = make()
    out = layer(tp.Input(shape))
    assert out.shape == expected
    real = tuple(n if n is not None else 4 for n in shape)
    y = layer(np.ones((2, *real), np.float32))
    assert all(e is None or e == r for e, r in zip(expected, y.shape))
    assert layer.compute_output_shape((2, *real)) == y.shape


# -- model files, tp.function -------------------------------------------------------------


def small_model() -> tp.Model:
    tp.random.set_seed(5)
    images = tp.Input((6, 6, 4))
    x = L.DepthwiseConv2D(3, padding="same", depth_multiplier=2)(images)
    x = L.GroupNormalization(4)(x)
    x = L.SpatialDropout2D(0.3, seed=2)(x)
    x = L.SeparableConv2D(4, 3, strides=2, padding="same", activation="relu")(x)
    x = L.Conv2DTranspose(3, 3, strides=2, padding="same", output_padding=1)(x)
    x = L.Reshape((36, 3))(x)
    x = L.Conv1DTranspose(4, 2, strides=2)(x)
    x = L.MaxPooling1D(3)(x)
    x = L.SpatialDropout1D(0.2, seed=1)(x)
    x = L.AveragePooling1D(2, padding="same")(x)
    return tp.Model(images, L.Dense(1)(L.Flatten()(x)))


def test_a_model_file_keeps_every_new_layer(tmp_path):
    model = small_model()
    for v in model.variables:
        v.assign(RNG.normal(scale=0.3, size=v.shape).astype(v.dtype))
    x = RNG.normal(size=(3, 6, 6, 4)).astype(np.float32)
    model.save(tmp_path / "model.tapefit")
    loaded = tp.models.load_model(tmp_path / "model.tapefit")
    assert [type(layer).__name__ for layer in loaded.layers] == [
        type(layer).__name__ for layer in model.layers
    ]
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


def test_a_compiled_training_step_equals_the_eager_one():
    def stepper():
        model = small_model()
        optimizer = tp.optimizers.Adam(0.01)

        def step(x, y):
            with tp.GradientTape() as tape:
                loss = tp.reduce_mean(tp.square(model(x, training=True) - y))
            optimizer.apply_gradients(
                zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
            )
            return loss

        return model, step

    x = RNG.normal(size=(4, 6, 6, 4)).astype(np.float32)
    y = RNG.normal(size=(4, 1)).astype(np.float32)
    (eager_model, eager), (compiled_model, compiled) = stepper(), stepper()
    compiled = tp.function(compiled)
    tp.random.set_seed(9)
    eager_losses = [float(eager(x, y)) for _ in range(3)]
    tp.random.set_seed(9)
    compiled_losses = [float(compiled(x, y)) for _ in range(3)]
    assert eager_losses == compiled_losses and eager_losses[2] < eager_losses[0]
    for a, b in zip(eager_model.variables, compiled_model.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


# -- spatial dropout -------------------------------------------------------------------


@pytest.mark.parametrize(
    "layer, shape", [(L.SpatialDropout1D, (50, 7, 8)), (L.SpatialDropout2D, (50, 3, 4, 8))]
)
def test_spatial_dropout_drops_whole_channels_only_in_training(layer, shape):
    x = tp.constant(RNG.uniform(1, 2, size=shape).astype(np.float32))
    drop = layer(0.4, seed=7)
    np.testing.assert_array_equal(drop(x).numpy(), x.numpy())
    np.testing.assert_array_equal(drop(x, training=False).numpy(), x.numpy())
    tp.random.set_seed(11)
    y = drop(x, training=True).numpy()
    kept = (y != 0).reshape(shape[0], -1, shape[-1])
    # a channel of an example is kept at every step (pixel) or at none
    assert np.all(kept.all(axis=1) | ~kept.any(axis=1))
    assert abs(kept[:, 0].mean() - 0.6) < 0.1
    np.testing.assert_allclose(y[y != 0], x.numpy()[y != 0] / 0.6, rtol=1e-6)
    tp.random.set_seed(11)
    np.testing.assert_array_equal(layer(0.4, seed=7)(x, training=True).numpy(), y)


# -- errors ----------------------------------------------------------------------------


def test_bad_arguments_and_inputs_are_named():
    with pytest.raises(ValueError, match="output_padding must be smaller than its stride"):
        L.Conv2DTranspose(2, 3, strides=2, output_padding=2)
    with pytest.raises(ValueError, match="Conv1DTranspose: dilation_rate 2 needs strides of 1"):
        L.Conv1DTranspose(2, 3, strides=2, dilation_rate=2)
    with pytest.raises(ValueError, match="Conv2DTranspose: kernel_size must be a positive int or 2 of them"):
        L.Conv2DTranspose(2, (3, 3, 3))
    with pytest.raises(ValueError, match="output_padding must be an int >= 0"):
        L.Conv2DTranspose(2, 3, strides=2, output_padding=-1)
    with pytest.raises(ValueError, match="DepthwiseConv2D: depth_multiplier must be a positive integer"):
        L.DepthwiseConv2D(3, depth_multiplier=0)
    with pytest.raises(ValueError, match=r"SeparableConv2D: dilation_rate \(2, 2\) needs strides of 1"):
        L.SeparableConv2D(2, 3, strides=2, dilation_rate=2)
    with pytest.raises(ValueError, match="MaxPooling1D: padding must be 'valid' or 'same'"):
        L.MaxPooling1D(padding="causal")
    with pytest.raises(
        ValueError, match=r"AveragePooling1D '.*': sequences of shape \(1, 2, 3\) are shorter"
    ):
        L.AveragePooling1D(3)(np.ones((1, 2, 3), np.float32))
    with pytest.raises(ValueError, match=r"MaxPooling1D '.*' needs sequences"):
        L.MaxPooling1D()(np.ones((1, 4, 4, 3), np.float32))
    with pytest.raises(ValueError, match=r"groups \(4\) must divide the 6 channels"):
        L.GroupNormalization(4)(np.ones((2, 6), np.float32))
    with pytest.raises(ValueError, match="groups must be a positive int or -1"):
        L.GroupNormalization(0)
    with pytest.raises(ValueError, match="is the batch axis"):
        L.GroupNormalization(1, axis=0)(np.ones((2, 6), np.float32))
    with pytest.raises(ValueError, match=r"SpatialDropout2D: rate must be a number in \[0, 1\)"):
        L.SpatialDropout2D(1.0)
    with pytest.raises(ValueError, match=r"SpatialDropout1D '.*' needs sequences"):
        L.SpatialDropout1D(0.5)(np.ones((2, 3), np.float32), training=True)
    # an even kernel, "same" padding and output_padding 0: 4 rows, which a stride-2 convolution
    # takes to 2, not back to 3 (TensorFlow refuses it too)
    with pytest.raises(
        ValueError, match=r"output_padding \(0, 0\) gives outputs of length 4 from inputs of length 3"
    ):
        L.Conv2DTranspose(2, 4, strides=2, padding="same", output_padding=0)(
            np.ones((1, 3, 3, 1), np.float32)
        )
    with pytest.raises(ValueError, match="output_padding 0 gives outputs of length 4"):
        L.Conv1DTranspose(2, 4, strides=2, padding="same", output_padding=0)(tp.Input((3, 1)))
    conv = L.Conv2DTranspose(2, 3)
    conv(np.ones((1, 4, 4, 3), np.float32))
    with pytest.raises(ValueError, match="was built for inputs with 3 channels"):
        conv(np.ones((1, 4, 4, 2), np.float32))
    with pytest.raises(TypeError, match="data_format"):
        L.Conv2DTranspose(2, 3, data_format="channels_last")
    # Keras's data_format by position is refused, never taken for the next argument
    with pytest.raises(TypeError, match="positional"):
        L.Conv2DTranspose(2, 3, 1, "same", None, "channels_last")
    with pytest.raises(TypeError, match="positional"):
        L.SeparableConv2D(2, 3, 1, "same", "channels_last")
    with pytest.raises(TypeError, match="positional"):
        L.SpatialDropout2D(0.5, "channels_last")


def test_masks_pass_through_group_normalization_and_spatial_dropout_only():
    mask = np.array([[True, True, False]])
    x = np.ones((1, 3, 4), np.float32)
    for layer in (L.GroupNormalization(2), L.SpatialDropout1D(0.5)):
        np.testing.assert_array_equal(layer.compute_mask(x, mask), mask)
    for layer in (L.Conv1DTranspose(2, 2), L.MaxPooling1D(), L.AveragePooling1D()):
        assert layer.compute_mask(x, mask) is None
