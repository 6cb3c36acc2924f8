"""Losses: Keras's documented numbers, reductions, sample weights, logits stability, gradients, names."""

import warnings

import numpy as np
import pytest

import tapefit as tp
from tapefit import losses

Y2 = [[0.0, 1.0], [0.0, 0.0]]
P2 = [[0.6, 0.4], [0.4, 0.6]]
Y3 = [[0, 1, 0], [0, 0, 1]]
P3 = [[0.05, 0.95, 0], [0.1, 0.8, 0.1]]


def test_mean_squared_and_absolute_error():
    assert float(losses.MeanSquaredError()(Y2, [[1.0, 1.0], [1.0, 0.0]])) == pytest.approx(0.5)
    assert float(losses.MeanAbsoluteError()(Y2, [[1.0, 1.0], [1.0, 0.0]])) == pytest.approx(0.5)
    mse = losses.MeanSquaredError()
    assert float(mse(Y2, [[1.0, 1.0], [1.0, 0.0]], sample_weight=[0.7, 0.3])) == pytest.approx(0.25)
    assert float(losses.MeanSquaredError(reduction="sum")(Y2, [[1.0, 1.0], [1.0, 0.0]])) == pytest.approx(1.0)
    none = losses.MeanSquaredError(reduction=None)(Y2, [[1.0, 1.0], [1.0, 0.0]])
    np.testing.assert_allclose(none.numpy(), [0.5, 0.5])


def test_huber():
    assert float(losses.Huber()(Y2, P2)) == pytest.approx(0.155, abs=1e-6)
    # beyond delta the loss is linear: delta * (|e| - delta / 2)
    assert float(losses.Huber(delta=0.5)([[0.0]], [[3.0]])) == pytest.approx(0.5 * (3.0 - 0.25))


def test_binary_crossentropy_on_probabilities_and_logits():
    bce = losses.BinaryCrossentropy()
    assert float(bce(Y2, P2)) == pytest.approx(0.81492424, rel=1e-5)
    assert float(bce(Y2, P2, sample_weight=[1, 0])) == pytest.approx(0.45814, rel=1e-4)
    assert float(losses.BinaryCrossentropy(reduction="sum")(Y2, P2)) == pytest.approx(1.6298485, rel=1e-5)
    np.testing.assert_allclose(
        losses.BinaryCrossentropy(reduction="none")(Y2, P2).numpy(), [0.9162907, 0.7135582], rtol=1e-5
    )
    logits = [[-18.6, 0.51], [2.94, -12.8]]
    assert float(losses.BinaryCrossentropy(from_logits=True)(Y2, logits)) == pytest.approx(0.865458, rel=1e-5)
    # probabilities of exactly 0 and 1 are clipped to [1e-7, 1 - 1e-7] (in float32), as Keras
    low, high = np.float32(1e-7), np.float32(1 - 1e-7)
    expected = -(np.log(low) + np.log(np.float32(1) - high)) / 2
    assert float(bce([[1.0, 0.0]], [[0.0, 1.0]])) == pytest.approx(expected, rel=1e-6)


def test_categorical_crossentropy():
    cce = losses.CategoricalCrossentropy()
    assert float(cce(Y3, P3)) == pytest.approx(1.1769392, rel=1e-5)
    assert float(cce(Y3, P3, sample_weight=tp.constant([0.3, 0.7]))) == pytest.approx(0.8135988, rel=1e-5)
    np.testing.assert_allclose(
        losses.CategoricalCrossentropy(reduction="none")(Y3, P3).numpy(), [0.0513, 2.3026], atol=1e-4
    )
    # probabilities are renormalized first
    assert float(cce([[0.0, 1.0]], [[1.0, 3.0]])) == pytest.approx(-np.log(0.75), rel=1e-6)
    logits = np.log(np.array([[0.2, 0.3, 0.5]]))
    assert float(losses.CategoricalCrossentropy(from_logits=True)([[0, 0, 1]], logits)) == pytest.approx(
        -np.log(0.5), rel=1e-6
    )
    smoothed = losses.CategoricalCrossentropy(label_smoothing=0.3)([[0.0, 1.0]], [[0.5, 0.5]])
    assert float(smoothed) == pytest.approx(np.log(2.0), rel=1e-6)


def test_sparse_categorical_crossentropy():
    scce = losses.SparseCategoricalCrossentropy()
    assert float(scce([1, 2], P3)) == pytest.approx(1.1769392, rel=1e-5)
    assert float(scce(np.array([[1], [2]]), P3)) == pytest.approx(1.1769392, rel=1e-5)
    assert float(scce([1.0, 2.0], P3, sample_weight=[0.3, 0.7])) == pytest.approx(0.8135988, rel=1e-5)
    logits = np.log(np.array(P3, np.float64) + 1e-30)
    value = losses.SparseCategoricalCrossentropy(from_logits=True)([1, 2], logits)
    assert float(value) == pytest.approx((-np.log(0.95) - np.log(0.1)) / 2, rel=1e-6)


def test_logits_of_1000_stay_finite_with_finite_gradients():
    cases = [
        (losses.BinaryCrossentropy(from_logits=True), [[0.0, 1.0]], [[1000.0, -1000.0]], 1000.0),
        (losses.CategoricalCrossentropy(from_logits=True), [[0.0, 1.0]], [[1000.0, -1000.0]], 2000.0),
        (losses.SparseCategoricalCrossentropy(from_logits=True), [1], [[1000.0, -1000.0]], 2000.0),
    ]
    for loss, y, logits, expected in cases:
        z = tp.Variable(logits)
        with tp.GradientTape() as tape:
            value = loss(y, z)
        grad = tape.gradient(value, z)
        assert np.isfinite(float(value)) and float(value) == pytest.approx(expected, rel=1e-6)
        assert np.all(np.isfinite(grad.numpy()))


@pytest.mark.parametrize(
    "loss, y_true",
    [
        (losses.MeanSquaredError(), [[0.1, 0.9, 0.3], [0.5, 0.1, 0.8]]),
        (losses.MeanAbsoluteError(), [[0.1, 0.9, 0.3], [0.5, 0.1, 0.8]]),
        (losses.Huber(delta=0.25), [[0.1, 0.9, 0.3], [0.5, 0.1, 0.8]]),
        (losses.BinaryCrossentropy(), [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]]),
        (
            losses.BinaryCrossentropy(from_logits=True, label_smoothing=0.1),
            [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]],
        ),
        (losses.CategoricalCrossentropy(), [[0.0, 1.0, 0.0], [0.2, 0.0, 0.8]]),
        (losses.CategoricalCrossentropy(from_logits=True), [[0.0, 1.0, 0.0], [0.2, 0.0, 0.8]]),
        (losses.SparseCategoricalCrossentropy(), [1, 2]),
        (losses.SparseCategoricalCrossentropy(from_logits=True), [1, 2]),
    ],
)
def test_loss_gradients(loss, y_true):
    y_pred = np.array([[0.3, 0.45, 0.6], [0.7, 0.2, 0.35]])
    tp.testing.check_gradients(lambda p: loss(y_true, p, sample_weight=[0.4, 1.5]), y_pred)
    if not isinstance(loss, losses.MeanAbsoluteError | losses.Huber):
        tp.testing.check_gradients(lambda p: loss(y_true, p), y_pred, order=2)


def test_rank_mismatch_by_a_trailing_one_is_squeezed_others_are_errors():
    y = np.array([1.0, 2.0, 3.0])
    pred = np.array([[1.5], [2.0], [3.0]], np.float32)
    assert float(losses.MeanSquaredError()(y, pred)) == pytest.approx(0.25 / 3)
    with pytest.raises(ValueError, match=r"y_true has shape \(3,\) but y_pred has shape \(3, 2\)"):
        losses.MeanSquaredError()(y, np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match="use SparseCategoricalCrossentropy"):
        losses.CategoricalCrossentropy()([1, 2], P3)
    with pytest.raises(ValueError, match="use CategoricalCrossentropy"):
        losses.SparseCategoricalCrossentropy()(Y3, np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\).*from 0 to 3"):
        losses.SparseCategoricalCrossentropy()([0, 3], P3)
    with pytest.raises(ValueError, match="integer class labels"):
        losses.SparseCategoricalCrossentropy()([0.5, 1.0], P3)
    with pytest.raises(TypeError, match="y_pred must be floating"):
        losses.MeanSquaredError()([1, 2], tp.constant([1, 2]))
    with pytest.raises(ValueError, match="sample_weight of shape"):
        losses.MeanSquaredError()(Y2, P2, sample_weight=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="reduction must be one of"):
        losses.MeanSquaredError(reduction="mean_of_everything")


def test_float64_predictions_keep_float64():
    value = losses.SparseCategoricalCrossentropy(from_logits=True)([0], np.array([[1.0, 2.0]]))
    assert value.dtype == tp.float64


def test_get_by_name_and_errors():
    assert isinstance(losses.get("mse"), losses.MeanSquaredError)
    assert isinstance(losses.get("mae"), losses.MeanAbsoluteError)
    assert isinstance(losses.get("huber"), losses.Huber)
    assert isinstance(losses.get("binary_crossentropy"), losses.BinaryCrossentropy)
    assert isinstance(losses.get("categorical_crossentropy"), losses.CategoricalCrossentropy)
    scce = losses.get("sparse_categorical_crossentropy")
    assert isinstance(scce, losses.SparseCategoricalCrossentropy) and not scce.from_logits
    assert isinstance(losses.get("MeanSquaredError"), losses.MeanSquaredError)
    mine = losses.Huber(delta=2.0)
    assert losses.get(mine) is mine

    def fn(y, p):
        return tp.reduce_sum(p)

    assert losses.get(fn) is fn
    with pytest.raises(
        ValueError, match=r"unknown loss 'msee'; known: .*mse.*sparse_categorical_crossentropy"
    ):
        losses.get("msee")
    with pytest.raises(TypeError, match="a loss must be"):
        losses.get(3)
    assert tp.losses is losses and losses.get("mse").name == "mean_squared_error"


def test_binary_crossentropy_on_float16_probabilities_of_0_and_1_stays_finite():
    # 1 - 1e-7 rounds to 1 in float16, so clipping there left log(1 - p) = -inf for p = 1.
    y_true = np.array([[0.0, 1.0]], np.float16)
    p = tp.Variable(np.array([[1.0, 0.0]], np.float16))
    with tp.GradientTape() as tape:
        value = losses.BinaryCrossentropy()(y_true, p)
    assert value.dtype == tp.float16
    eps = np.finfo(np.float16).epsneg  # the largest float16 below 1 is 1 - eps
    assert float(value) == pytest.approx(-np.log(eps), rel=1e-3)
    assert np.all(np.isfinite(tape.gradient(value, p).numpy()))


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize(
    "labels, classes",
    [
        (np.array([0, -100], np.int8), 200),  # more classes than int8 has non-negative values
        (np.array([0, -1], np.int16), 70000),
        (np.array([0, 1, 9], ">i4"), 5),  # big-endian, one label too large
    ],
    ids=["int8-200", "int16-70000", "big-endian"],
)
def test_sparse_labels_out_of_range_are_refused_whatever_their_integer_type(labels, classes, compiled):
    loss = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
    fn = tp.function(loss) if compiled else loss
    logits = tp.constant(np.zeros((len(labels), classes), np.float32))
    with pytest.raises(ValueError, match=rf"labels must lie in \[0, {classes}\)"):
        fn(tp.constant(labels), logits)


def test_big_endian_labels_in_range_give_the_native_loss():
    logits = tp.constant(np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32))
    loss = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
    native = loss(tp.constant(np.array([0, 1, 4], np.int32)), logits)
    swapped = loss(tp.constant(np.array([0, 1, 4], ">i4")), logits)
    assert float(swapped) == float(native)


@pytest.mark.parametrize(
    "loss, y_true, logits",
    [
        (tp.losses.BinaryCrossentropy(), [[1.0], [0.0]], [[2.5], [-1.0]]),
        (tp.losses.CategoricalCrossentropy(), [[1.0, 0.0]], [[2.0, -1.0]]),
        (tp.losses.SparseCategoricalCrossentropy(), [0, 1], [[2.0, -1.0], [0.3, 1.2]]),
    ],
)
def test_a_probability_loss_given_logits_warns_once(loss, y_true, logits):
    y_true, logits = np.asarray(y_true), np.asarray(logits, np.float32)
    with pytest.warns(UserWarning, match=r"outside \[0, 1\].*pass from_logits=True"):
        loss(y_true, logits)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss(y_true, logits)  # once per loss object
        type(loss)()(y_true, np.clip(np.abs(logits) / 4.0, 0.0, 1.0))  # probabilities: no warning


# -- the losses taken from Keras 3 later: their values against Keras are in
# test_keras_metrics_reference.py; here their gradients, configs and names.

NEW_LOSSES = [
    (losses.KLDivergence(), [[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]], "kl_divergence"),
    (losses.CosineSimilarity(), [[0.1, -0.9, 0.3], [0.5, 0.1, -0.8]], "cosine_similarity"),
    (losses.CosineSimilarity(axis=0), [[0.1, -0.9, 0.3], [0.5, 0.1, -0.8]], None),
    (losses.Hinge(), [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]], "hinge"),
    (losses.Hinge(), [[-1.0, 1.0, 1.0], [1.0, -1.0, -1.0]], None),
    (losses.LogCosh(), [[0.1, 0.9, 0.3], [0.5, 0.1, 0.8]], "log_cosh"),
    (losses.Poisson(), [[0.0, 2.0, 1.0], [3.0, 0.0, 1.0]], "poisson"),
    (losses.MeanSquaredLogarithmicError(), [[0.1, 0.9, 0.3], [0.5, 0.1, 0.8]], "msle"),
    (losses.MeanAbsolutePercentageError(), [[0.1, 0.9, -0.3], [0.5, -0.1, 0.8]], "mape"),
    (losses.BinaryFocalCrossentropy(), [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]], "binary_focal_crossentropy"),
    (
        losses.BinaryFocalCrossentropy(apply_class_balancing=True, alpha=0.4, gamma=1.5, from_logits=True),
        [[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]],
        None,
    ),
    (
        losses.CategoricalFocalCrossentropy(),
        [[0.0, 1.0, 0.0], [0.2, 0.0, 0.8]],
        "categorical_focal_crossentropy",
    ),
    (
        losses.CategoricalFocalCrossentropy(
            alpha=[0.2, 0.5, 0.3], gamma=3.0, from_logits=True, label_smoothing=0.1
        ),
        [[0.0, 1.0, 0.0], [0.2, 0.0, 0.8]],
        None,
    ),
]


@pytest.mark.parametrize("loss, y_true, name", NEW_LOSSES)
def test_new_loss_gradients_match_finite_differences(loss, y_true, name):
    y_pred = np.array([[0.3, 0.45, 0.6], [0.7, 0.2, 0.35]])
    weights = [0.4, 1.5] if not (isinstance(loss, losses.CosineSimilarity) and loss.axis == 0) else None
    tp.testing.check_gradients(lambda p: loss(y_true, p, sample_weight=weights), y_pred)
    if not isinstance(loss, losses.MeanAbsolutePercentageError | losses.Hinge):
        tp.testing.check_gradients(lambda p: loss(y_true, p), y_pred, order=2)


@pytest.mark.parametrize("loss, y_true, name", NEW_LOSSES)
def test_new_loss_config_round_trip_and_name(loss, y_true, name):
    config = loss.get_config()
    again = type(loss).from_config(config)
    assert again.get_config() == config
    y_pred = [[0.3, 0.45, 0.6], [0.7, 0.2, 0.35]]
    np.testing.assert_allclose(again(y_true, y_pred).numpy(), loss(y_true, y_pred).numpy())
    rebuilt = losses.deserialize(losses.serialize(loss))
    assert type(rebuilt) is type(loss) and rebuilt.get_config() == config
    if name is not None:
        assert type(losses.get(name)) is type(loss)
        assert type(losses.get(type(loss).__name__)) is type(loss)
        assert tp.metrics.get(name).name == name  # the mean of the loss, as a metric


def test_function_forms_give_per_sample_values():
    y, p = [[0.0, 1.0], [1.0, 0.0]], [[0.2, 0.7], [0.6, 0.1]]
    pairs = [
        (losses.binary_crossentropy, losses.BinaryCrossentropy),
        (losses.categorical_crossentropy, losses.CategoricalCrossentropy),
        (losses.mean_squared_error, losses.MeanSquaredError),
        (losses.mean_absolute_error, losses.MeanAbsoluteError),
        (losses.huber, losses.Huber),
        (losses.kl_divergence, losses.KLDivergence),
        (losses.cosine_similarity, losses.CosineSimilarity),
        (losses.hinge, losses.Hinge),
        (losses.log_cosh, losses.LogCosh),
        (losses.poisson, losses.Poisson),
        (losses.mean_squared_logarithmic_error, losses.MeanSquaredLogarithmicError),
        (losses.mean_absolute_percentage_error, losses.MeanAbsolutePercentageError),
        (losses.binary_focal_crossentropy, losses.BinaryFocalCrossentropy),
        (losses.categorical_focal_crossentropy, losses.CategoricalFocalCrossentropy),
    ]
    for function, cls in pairs:
        values = function(y, p)
        assert values.shape == (2,), function.__name__
        np.testing.assert_allclose(
            values.numpy(), cls(reduction="none")(y, p).numpy(), err_msg=function.__name__
        )
    np.testing.assert_allclose(
        losses.sparse_categorical_crossentropy([1, 0], p).numpy(),
        losses.SparseCategoricalCrossentropy(reduction="none")([1, 0], p).numpy(),
    )
    # as the VAE example uses it: the sum over pixels of the per-pixel cross-entropy, differentiable
    z = tp.Variable(np.full((2, 3, 4), 0.4, np.float32))
    with tp.GradientTape() as tape:
        value = tp.reduce_mean(tp.reduce_sum(losses.binary_crossentropy(np.ones((2, 3, 4)), z), axis=1))
    assert tape.gradient(value, z).shape == (2, 3, 4)
    with pytest.raises(ValueError, match="ignore_class"):
        losses.sparse_categorical_crossentropy([1, 0], p, ignore_class=0)


def test_hinge_reads_0_1_targets_as_signs_and_others_as_they_are():
    p = [[0.3, -0.2]]
    assert float(losses.Hinge()([[1.0, 0.0]], p)) == pytest.approx(float(losses.Hinge()([[1.0, -1.0]], p)))
    # a batch with a target other than 0 and 1 is taken as given (Keras's rule)
    assert float(losses.Hinge()([[1.0, 0.5]], p)) == pytest.approx(np.mean([0.7, 1.1]))


def test_dir_of_losses_lists_public_names_only():
    names = dir(losses)
    assert "KLDivergence" in names and "binary_crossentropy" in names and "serialize" in names
    assert not {"Any", "Callable", "Registry", "Tensor", "np", "math"} & set(names)
