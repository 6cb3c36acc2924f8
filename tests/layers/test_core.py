"""Dense, Activation, Flatten, Embedding, Dropout, Lambda, Sequential."""

import numpy as np
import pytest

import tapefit as tp
from tapefit.layers import Activation, Dense, Dropout, Embedding, Flatten, Lambda, Sequential


def test_dense_seed_case_shapes_and_closed_form_gradient():
    layer = Dense(2, activation="relu")
    x = tp.constant([[1, 2, 3]])
    assert x.dtype == tp.int32
    with tp.GradientTape() as tape:
        y = layer(x)
        loss = tp.reduce_mean(y**2)
    assert [v.shape for v in layer.trainable_variables] == [(3, 2), (2,)]
    assert layer.trainable_variables[0] is layer.kernel and layer.trainable_variables[1] is layer.bias
    assert y.dtype == tp.float32 and y.shape == (1, 2)
    dk, db = tape.gradient(loss, layer.trainable_variables)
    # y = relu(x W + b), loss = mean(y^2) over 2 entries: dloss/dz = y * (z > 0), dW = x^T dz, db = dz
    xs = np.array([[1.0, 2.0, 3.0]], np.float32)
    z = xs @ layer.kernel.numpy() + layer.bias.numpy()
    dz = np.maximum(z, 0) * (z > 0)
    np.testing.assert_allclose(dk.numpy(), xs.T @ dz, rtol=1e-6)
    np.testing.assert_allclose(db.numpy(), dz[0], rtol=1e-6)
    np.testing.assert_allclose(y.numpy(), np.maximum(z, 0), rtol=1e-6)


def test_dense_gradients_against_finite_differences(check_layer):
    x = np.random.default_rng(0).normal(size=(3, 4))
    for activation in [None, "tanh", "softmax", "gelu"]:
        tp.random.set_seed(0)
        names = check_layer(
            Dense(3, activation=activation, dtype="float64", bias_initializer="random_normal"), x, order=2
        )
        assert names == ["kernel", "bias"]


def test_dense_on_rank3_and_rank1_inputs(check_layer):
    layer = Dense(2, use_bias=False)
    x = np.random.default_rng(1).normal(size=(2, 5, 3)).astype(np.float32)
    y = layer(x)
    assert y.shape == (2, 5, 2) and layer.bias is None and len(layer.variables) == 1
    np.testing.assert_allclose(y.numpy(), x @ layer.kernel.numpy(), rtol=1e-5)
    assert layer(x[0, 0]).shape == (2,)
    check_layer(Dense(2, dtype="float64"), np.random.default_rng(2).normal(size=(2, 3, 4)))


def test_dense_activation_by_name_callable_and_unknown():
    x = tp.constant([[-1.0, 2.0]])
    layer = Dense(2, activation="sigmoid", kernel_initializer="ones")
    np.testing.assert_allclose(layer(x).numpy(), 1 / (1 + np.exp(-np.array([[1.0, 1.0]]))), rtol=1e-6)
    doubled = Dense(1, activation=lambda t: t * 2.0, kernel_initializer="ones")
    np.testing.assert_allclose(doubled(x).numpy(), [[2.0]])
    with pytest.raises(ValueError, match=r"unknown activation 'relux'.*relu"):
        Dense(1, activation="relux")


def test_dense_errors_name_the_shapes():
    layer = Dense(2)
    layer(tp.ones((1, 3)))
    with pytest.raises(ValueError, match=r"last dimension 3, got shape \(1, 4\)"):
        layer(tp.ones((1, 4)))
    with pytest.raises(ValueError, match="units must be a positive integer"):
        Dense(0)
    with pytest.raises(ValueError, match="rank >= 1"):
        Dense(2)(tp.constant(1.0))
    with pytest.raises(TypeError, match="dtype must be floating"):
        Dense(2, dtype="int32")


def test_dense_initializers_and_seeded_repeatability():
    tp.random.set_seed(3)
    a = Dense(4)
    a(tp.ones((1, 5)))
    tp.random.set_seed(3)
    b = Dense(4)
    b(tp.ones((1, 5)))
    np.testing.assert_array_equal(a.kernel.numpy(), b.kernel.numpy())
    limit = np.sqrt(6 / (5 + 4))
    assert np.all(np.abs(a.kernel.numpy()) <= limit) and np.all(a.bias.numpy() == 0)
    c = Dense(3, kernel_initializer="zeros", bias_initializer="ones")
    c(tp.ones((1, 2)))
    assert np.all(c.kernel.numpy() == 0) and np.all(c.bias.numpy() == 1)


def test_float64_layer_casts_float32_and_int_inputs():
    layer = Dense(1, dtype="float64")
    assert layer(np.ones((1, 2), np.float32)).dtype == tp.float64
    assert layer(tp.constant([[1, 2]])).dtype == tp.float64
    assert layer.kernel.dtype == tp.float64


def test_activation_layer(check_layer):
    x = tp.constant([[-1.0, 0.5, 2.0]])
    np.testing.assert_allclose(Activation("relu")(x).numpy(), [[0.0, 0.5, 2.0]])
    np.testing.assert_allclose(Activation(tp.math.tanh)(x).numpy(), np.tanh([[-1.0, 0.5, 2.0]]), rtol=1e-6)
    assert Activation("relu")(tp.constant([[1, -2]])).dtype == tp.float32
    for name in ["relu6", "softsign", "silu", "elu", "selu", "leaky_relu", "softplus", "log_softmax"]:
        layer = Activation(name, dtype="float64")
        tp.testing.check_gradients(layer, [[-1.5, 0.3, 2.0, 7.0]])


def test_flatten():
    x = tp.constant(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    y = Flatten()(x)
    assert y.shape == (2, 12)
    np.testing.assert_array_equal(y.numpy(), np.arange(24).reshape(2, 12))
    assert Flatten()(tp.constant([1, 2, 3])).shape == (3, 1)
    assert Flatten()(tp.constant([[1, 2]])).dtype == tp.int32
    tp.testing.check_gradients(Flatten(), np.random.default_rng(0).normal(size=(2, 2, 3)))
    with pytest.raises(ValueError, match="batch axis"):
        Flatten()(tp.constant(1.0))


def test_embedding_lookup_and_gradient():
    layer = Embedding(5, 3)
    assert [v.shape for v in layer.trainable_variables] == [(5, 3)]
    assert np.all(np.abs(layer.embeddings.numpy()) <= 0.05)
    ids = tp.constant([[0, 4], [4, 2]])
    with tp.GradientTape() as tape:
        y = layer(ids)
        loss = tp.reduce_sum(y * tp.constant(np.arange(12, dtype=np.float32).reshape(2, 2, 3)))
    assert y.shape == (2, 2, 3)
    np.testing.assert_array_equal(y.numpy(), layer.embeddings.numpy()[[[0, 4], [4, 2]]])
    (grad,) = tape.gradient(loss, layer.trainable_variables)
    expected = np.zeros((5, 3), np.float32)
    w = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    for (i, j), idx in np.ndenumerate(np.array([[0, 4], [4, 2]])):
        expected[idx] += w[i, j]
    np.testing.assert_array_equal(grad.numpy(), expected)
    assert np.asarray(grad).shape == (5, 3)


def test_embedding_gradient_by_finite_differences(check_layer):
    check_layer(Embedding(4, 2, dtype="float64"), tp.constant([[0, 3, 3]]))


def test_embedding_errors():
    layer = Embedding(3, 2)
    with pytest.raises(ValueError, match=r"\[0, 3\).*from 0 to 3"):
        layer(tp.constant([0, 3]))
    with pytest.raises(TypeError, match="integer ids"):
        layer(tp.constant([0.5]))
    np.testing.assert_array_equal(layer(tp.constant([2.0])).numpy(), layer.embeddings.numpy()[[2]])


def test_dropout_only_in_training_and_seeded():
    x = tp.ones((200, 50))
    layer = Dropout(0.4, seed=7)
    np.testing.assert_array_equal(layer(x).numpy(), x.numpy())
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
    tp.random.set_seed(11)
    y = layer(x, training=True).numpy()
    kept = y != 0
    assert abs(kept.mean() - 0.6) < 0.02
    np.testing.assert_allclose(y[kept], 1 / 0.6, rtol=1e-6)
    tp.random.set_seed(11)
    np.testing.assert_array_equal(Dropout(0.4, seed=7)(x, training=True).numpy(), y)
    # inside a model called with training=True
    model = Sequential([Dropout(0.5)])
    assert np.any(model(x, training=True).numpy() == 0)
    np.testing.assert_array_equal(model(x).numpy(), x.numpy())
    with pytest.raises(ValueError, match=r"rate must be a number in \[0, 1\)"):
        Dropout(1.0)


def test_dropout_takes_a_numpy_rate():
    # A rate computed with NumPy (np.float32 is no Python float) is still a number in [0, 1).
    layer = Dropout(np.float32(0.25))
    assert type(layer.rate) is float and layer.rate == 0.25
    for bad in (np.float32(1.0), True, "0.5"):
        with pytest.raises(ValueError, match=r"rate must be a number in \[0, 1\)"):
            Dropout(bad)


def test_dropout_gradient_is_the_mask():
    layer = Dropout(0.5, seed=1)
    x = tp.Variable(np.ones((4, 6), np.float32))
    with tp.GradientTape() as tape:
        y = layer(x, training=True)
    (g,) = [tape.gradient(y, x)]
    np.testing.assert_allclose(g.numpy(), y.numpy())


def test_lambda_and_sequential_errors():
    model = Sequential([Lambda(lambda t: t * 3.0)])
    assert float(model(tp.constant(2.0))) == 6.0
    with pytest.raises(TypeError, match=r"takes Modules.*Lambda"):
        Sequential([lambda t: t])
    with pytest.raises(TypeError, match="callable"):
        Lambda(3)


def test_sequential_add_pop_layers_and_gradients(check_layer):
    model = Sequential(name="stack")
    model.add(Dense(3, activation="tanh", dtype="float64"))
    model.add(Dense(1, dtype="float64"))
    assert len(model.layers) == 2
    x = np.random.default_rng(0).normal(size=(4, 2))
    model(x)
    assert len(model.trainable_variables) == 4
    last = model.pop()
    assert isinstance(last, Dense) and len(model.layers) == 1 and len(model.trainable_variables) == 2
    model.add(last)
    # through the whole stack: input gradient and each weight, via finite differences
    weights = [v.numpy() for v in model.trainable_variables]

    def f(inputs, k1, b1, k2, b2):
        saved = [(layer, layer.kernel, layer.bias) for layer in model.layers]
        try:
            model.layers[0].kernel, model.layers[0].bias, model.layers[1].kernel, model.layers[1].bias = (
                k1,
                b1,
                k2,
                b2,
            )
            return model(inputs)
        finally:
            for layer, k, b in saved:
                layer.kernel, layer.bias = k, b

    tp.testing.check_gradients(f, x, *weights, order=2)


def test_dense_positional_arguments_follow_the_api_contract():
    layer = Dense(2, "relu", False, "ones", "zeros", "contract")
    assert layer.name == "contract" and not layer.use_bias
    assert layer(tp.constant([[1.0, -3.0]])).numpy().tolist() == [[0.0, 0.0]]


def test_dense_rejects_an_unknown_initializer_when_constructed():
    # As Keras: the name is checked when the layer is made, not at its first call.
    with pytest.raises(ValueError, match="unknown initializer 'glorot'"):
        Dense(2, kernel_initializer="glorot")
    with pytest.raises(ValueError, match="unknown initializer 'zeroes'"):
        Dense(2, bias_initializer="zeroes")


def test_sequential_takes_an_input_first_and_builds_as_it_grows():
    model = tp.layers.Sequential([tp.Input((4,)), tp.layers.Dense(3)])
    assert model.built and [tuple(w.shape) for w in model.weights] == [(4, 3), (3,)]
    model.add(tp.layers.Dense(2))
    assert [tuple(w.shape) for w in model.weights][2:] == [(3, 2), (2,)]
    assert np.asarray(model(np.ones((5, 4), np.float32))).shape == (5, 2)
    with pytest.raises(ValueError, match=r"a tp.Input may only be the first entry"):
        model.add(tp.Input((2,)))


@pytest.mark.parametrize(
    "argument",
    [{"input_shape": (4,)}, {"input_dim": 4}, {"batch_shape": (None, 4)}, {"batch_input_shape": (8, 4)}],
)
def test_a_first_layers_input_arguments_build_the_sequential(argument):
    model = tp.layers.Sequential([tp.layers.Dense(3, **argument), tp.layers.Dense(2)])
    assert model.built and [tuple(w.shape) for w in model.weights] == [(4, 3), (3,), (3, 2), (2,)]


def test_input_arguments_that_disagree_or_are_not_shapes_are_named():
    with pytest.raises(ValueError, match=r"Dense: give one of \['input_dim', 'input_shape'\]"):
        tp.layers.Dense(3, input_shape=(4,), input_dim=4)
    with pytest.raises(ValueError, match=r"Dense: input_shape must be a shape"):
        tp.layers.Dense(3, input_shape="four")


def test_sequential_build_creates_the_weights_as_keras_does():
    tp.random.set_seed(0)
    model = tp.layers.Sequential([tp.layers.Dense(3, activation="relu"), tp.layers.Dense(2)])
    model.build((None, 4))
    assert model.built and [tuple(w.shape) for w in model.weights] == [(4, 3), (3,), (3, 2), (2,)]
    weights = [np.full(w.shape, 0.5, np.float32) for w in model.get_weights()]
    model.set_weights(weights)
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(np.asarray(model(x)), np.full((2, 2), 0.5 * 3 * 2.5 + 0.5), rtol=1e-6)


def test_train_test_and_predict_on_batch():
    tp.random.set_seed(0)
    model = tp.layers.Sequential([tp.Input((4,)), tp.layers.Dense(1)])
    model.compile(optimizer=tp.optimizers.SGD(0.01), loss="mse", metrics=["mae"])
    x, y = np.ones((8, 4), np.float32), np.zeros((8, 1), np.float32)
    before = float(np.mean(np.asarray(model(x)) ** 2))
    loss, _ = model.train_on_batch(x, y)
    np.testing.assert_allclose(loss, before, rtol=1e-5)
    logs = model.test_on_batch(x, y, return_dict=True)
    assert set(logs) == {"loss", "mae"} and logs["loss"] < before
    np.testing.assert_allclose(model.predict_on_batch(x), np.asarray(model(x)), rtol=1e-6)
