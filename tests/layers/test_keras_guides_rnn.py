"""Keras's guides "Working with RNNs" and "Understanding masking & padding", translated
(``keras`` -> ``tp``) and compared with Keras 3's numbers on the same weights and inputs
(``scripts/keras_reference_rnn.py``, ``tests/layers/data/keras_rnn.npz``; CI has no Keras).

Both sides fill every weight from one seed (``fill``); the guides' random inputs are made
here the way the script made them. Where the guide shows a summary or prints a mask, the test
compares the parameter count or the mask.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import tapefit as tp
from tapefit import layers

REFERENCE = dict(np.load(Path(__file__).parent / "data" / "keras_rnn.npz"))
TOL = {"rtol": 1e-4, "atol": 1e-5}


def fill(model, seed):
    rng = np.random.default_rng(seed)
    model.set_weights([rng.uniform(-0.3, 0.3, w.shape).astype(np.float32) for w in model.get_weights()])


def uniform(shape, seed):
    return np.random.default_rng(seed).random(shape).astype(np.float32)


def test_the_saved_numbers_are_finite():
    assert all(np.all(np.isfinite(v)) for v in REFERENCE.values() if v.dtype.kind == "f")


def count_params(model):
    return sum(int(np.prod(v.shape)) for v in model.variables)


IDS = REFERENCE["rnn_guide/ids"]


# -- Working with RNNs -----------------------------------------------------------------------


def test_built_in_rnn_layers_a_simple_example():
    model = tp.layers.Sequential()
    model.add(layers.Embedding(input_dim=1000, output_dim=64))
    model.add(layers.LSTM(128))
    model.add(layers.Dense(10))
    model(IDS)
    lines = []
    model.summary(print_fn=lines.append)
    fill(model, 200)
    assert count_params(model) == int(REFERENCE["rnn_guide/simple/params"])
    np.testing.assert_allclose(model(IDS).numpy(), REFERENCE["rnn_guide/simple/y"], **TOL)


def test_outputs_and_states():
    model = tp.layers.Sequential()
    model.add(layers.Embedding(input_dim=1000, output_dim=64))
    # The output of GRU will be a 3D tensor of shape (batch_size, timesteps, 256)
    model.add(layers.GRU(256, return_sequences=True))
    # The output of SimpleRNN will be a 2D tensor of shape (batch_size, 128)
    model.add(layers.SimpleRNN(128))
    model.add(layers.Dense(10))
    model(IDS)
    fill(model, 201)
    assert count_params(model) == int(REFERENCE["rnn_guide/gru_simple/params"])
    np.testing.assert_allclose(model(IDS).numpy(), REFERENCE["rnn_guide/gru_simple/y"], **TOL)


def test_encoder_states_as_the_decoders_initial_state():
    encoder_vocab = 1000
    decoder_vocab = 2000

    encoder_input = layers.Input(shape=(None,))
    encoder_embedded = layers.Embedding(input_dim=encoder_vocab, output_dim=64)(encoder_input)

    # Return states in addition to output
    output, state_h, state_c = layers.LSTM(64, return_state=True, name="encoder")(encoder_embedded)
    encoder_state = [state_h, state_c]

    decoder_input = layers.Input(shape=(None,))
    decoder_embedded = layers.Embedding(input_dim=decoder_vocab, output_dim=64)(decoder_input)

    # Pass the 2 states to a new LSTM layer, as initial state
    decoder_output = layers.LSTM(64, name="decoder")(decoder_embedded, initial_state=encoder_state)
    output = layers.Dense(10)(decoder_output)

    model = tp.Model([encoder_input, decoder_input], output)
    model.summary(print_fn=lambda line: None)
    fill(model, 202)
    assert count_params(model) == int(REFERENCE["rnn_guide/seq2seq/params"])
    y = model([IDS, REFERENCE["rnn_guide/seq2seq/decoder_ids"]])
    np.testing.assert_allclose(y.numpy(), REFERENCE["rnn_guide/seq2seq/y"], **TOL)


def test_rnn_layers_and_rnn_cells():
    # Mathematically, RNN(LSTMCell(10)) produces the same result as LSTM(10).
    x = uniform((4, 6, 3), 1)
    lstm, rnn = layers.LSTM(10), layers.RNN(layers.LSTMCell(10))
    lstm(x), rnn(x)
    rnn.set_weights(lstm.get_weights())
    np.testing.assert_allclose(rnn(x).numpy(), lstm(x).numpy(), rtol=1e-5, atol=1e-6)


def test_cross_batch_statefulness():
    paragraph1, paragraph2, paragraph3 = (uniform((20, 10, 50), 250 + i) for i in range(3))

    lstm_layer = layers.LSTM(64, stateful=True)
    lstm_layer(paragraph1)
    fill(lstm_layer, 203)
    lstm_layer.reset_states()  # (the weights were set after a first call)

    output = lstm_layer(paragraph1)
    np.testing.assert_allclose(output.numpy(), REFERENCE["rnn_guide/stateful/1"], **TOL)
    output = lstm_layer(paragraph2)
    np.testing.assert_allclose(output.numpy(), REFERENCE["rnn_guide/stateful/2"], **TOL)
    output = lstm_layer(paragraph3)
    np.testing.assert_allclose(output.numpy(), REFERENCE["rnn_guide/stateful/3"], **TOL)

    # reset_states() will reset the cached state to the original initial_state.
    # If no initial_state was provided, zero-states will be used by default.
    lstm_layer.reset_states()
    np.testing.assert_allclose(lstm_layer(paragraph1).numpy(), REFERENCE["rnn_guide/stateful/1"], **TOL)


def test_rnn_state_reuse():
    paragraph1, paragraph2, paragraph3 = (uniform((20, 10, 50), 250 + i) for i in range(3))

    lstm_layer = layers.LSTM(64, stateful=True)
    lstm_layer(paragraph1)
    fill(lstm_layer, 203)
    lstm_layer.reset_states()
    output = lstm_layer(paragraph1)
    output = lstm_layer(paragraph2)

    existing_state = lstm_layer.states

    new_lstm_layer = layers.LSTM(64)
    new_output = new_lstm_layer(paragraph3, initial_state=existing_state)
    new_lstm_layer.set_weights(lstm_layer.get_weights())
    new_output = new_lstm_layer(paragraph3, initial_state=existing_state)
    np.testing.assert_allclose(new_output.numpy(), REFERENCE["rnn_guide/reuse"], **TOL)
    assert output.shape == (20, 64)


def test_bidirectional_rnns():
    model = tp.layers.Sequential()

    model.add(layers.Bidirectional(layers.LSTM(64, return_sequences=True), input_shape=(5, 10)))
    model.add(layers.Bidirectional(layers.LSTM(32)))
    model.add(layers.Dense(10))

    model.summary(print_fn=lambda line: None)
    fill(model, 204)
    assert count_params(model) == int(REFERENCE["rnn_guide/bidirectional/params"])
    y = model(REFERENCE["rnn_guide/bidirectional/x"])
    np.testing.assert_allclose(y.numpy(), REFERENCE["rnn_guide/bidirectional/y"], **TOL)


def test_using_the_fused_layer_and_the_cell_gives_one_model():
    # The guide's MNIST rows as steps, on 64 random "images" (no data set download in tests).
    batch_size = 64
    input_dim = 28

    units = 64
    output_size = 10  # labels are from 0 to 9

    # Build the RNN model
    def build_model(allow_cudnn_kernel=True):
        if allow_cudnn_kernel:
            # The LSTM layer with default options (tapefit's fused sequence op).
            lstm_layer = tp.layers.LSTM(units, input_shape=(None, input_dim))
        else:
            # Wrapping a LSTMCell in a RNN layer: the cell's step on the tape.
            lstm_layer = tp.layers.RNN(tp.layers.LSTMCell(units), input_shape=(None, input_dim))
        model = tp.layers.Sequential(
            [
                lstm_layer,
                tp.layers.BatchNormalization(),
                tp.layers.Dense(output_size),
            ]
        )
        return model

    sample, sample_label = uniform((batch_size, 28, 28), 260), REFERENCE["rnn_guide/mnist/y"]

    model = build_model(allow_cudnn_kernel=True)
    model.build((None, None, input_dim))
    fill(model, 205)
    positive = model.get_weights()
    positive[-3] = np.abs(positive[-3]) + 0.5  # BatchNormalization's moving variance
    model.set_weights(positive)
    model.compile(
        loss=tp.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer="sgd",
        metrics=["accuracy"],
    )
    np.testing.assert_allclose(model.predict_on_batch(sample), REFERENCE["rnn_guide/mnist/predict"], **TOL)
    loss = model.train_on_batch(sample, sample_label)[0]
    np.testing.assert_allclose(loss, REFERENCE["rnn_guide/mnist/loss"], rtol=1e-5)

    noncudnn_model = build_model(allow_cudnn_kernel=False)
    noncudnn_model.build((None, None, input_dim))
    noncudnn_model.set_weights(model.get_weights())
    np.testing.assert_allclose(
        noncudnn_model.predict_on_batch(sample), REFERENCE["rnn_guide/mnist/after_step"], **TOL
    )
    np.testing.assert_allclose(noncudnn_model.predict_on_batch(sample), model.predict_on_batch(sample), **TOL)


@tp.register_serializable(package="rnn_guide")
class NestedCell(tp.layers.Layer):
    def __init__(self, unit_1, unit_2, unit_3, **kwargs):
        self.unit_1 = unit_1
        self.unit_2 = unit_2
        self.unit_3 = unit_3
        self.state_size = [(unit_1,), (unit_2, unit_3)]
        self.output_size = [(unit_1,), (unit_2, unit_3)]
        super().__init__(**kwargs)

    def build(self, input_shapes):
        # expect input_shape to contain 2 items, [(batch, i1), (batch, i2, i3)]
        i1 = input_shapes[0][1]
        i2 = input_shapes[1][1]
        i3 = input_shapes[1][2]

        self.kernel_1 = self.add_weight(shape=(i1, self.unit_1), initializer="uniform", name="kernel_1")
        self.kernel_2_3 = self.add_weight(
            shape=(i2, i3, self.unit_2, self.unit_3),
            initializer="uniform",
            name="kernel_2_3",
        )

    def call(self, inputs, states):
        # inputs should be in [(batch, input_1), (batch, input_2, input_3)]
        # state should be in shape [(batch, unit_1), (batch, unit_2, unit_3)]
        input_1, input_2 = inputs
        s1, s2 = states

        output_1 = tp.matmul(input_1, self.kernel_1)
        output_2_3 = tp.einsum("bij,ijkl->bkl", input_2, self.kernel_2_3)
        state_1 = s1 + output_1
        state_2_3 = s2 + output_2_3

        output = (output_1, output_2_3)
        new_states = (state_1, state_2_3)

        return output, new_states

    def get_config(self):
        return {"unit_1": self.unit_1, "unit_2": self.unit_2, "unit_3": self.unit_3}


def test_a_custom_cell_with_nested_inputs_and_states(tmp_path):
    unit_1 = 10
    unit_2 = 20
    unit_3 = 30

    i1 = 32
    i2 = 64
    i3 = 32
    batch_size = 8  # the guide's 64 * 10 sequences of 50 steps, shrunk
    timestep = 5

    cell = NestedCell(unit_1, unit_2, unit_3)
    rnn = tp.layers.RNN(cell)

    input_1 = tp.Input((None, i1))
    input_2 = tp.Input((None, i2, i3))

    outputs = rnn((input_1, input_2))

    model = tp.Model([input_1, input_2], outputs)
    assert [o.shape for o in outputs] == [(None, unit_1), (None, unit_2, unit_3)]

    # The guide adds metrics=["accuracy"]; Keras 3 refuses one flat metric for two outputs.
    model.compile(optimizer="adam", loss="mse")

    input_1_data = uniform((batch_size, timestep, i1), 270)
    input_2_data = uniform((batch_size, timestep, i2, i3), 271)
    target_1_data = uniform((batch_size, unit_1), 272)
    target_2_data = uniform((batch_size, unit_2, unit_3), 273)
    input_data = [input_1_data, input_2_data]
    target_data = [target_1_data, target_2_data]

    fill(model, 206)
    y1, y2 = model.predict_on_batch(input_data)
    np.testing.assert_allclose(y1, REFERENCE["rnn_guide/nested/y1"], **TOL)
    np.testing.assert_allclose(y2, REFERENCE["rnn_guide/nested/y2"], **TOL)
    with tp.GradientTape() as tape:
        p1, p2 = model(input_data)
        loss = tp.reduce_mean((p1 - target_1_data) ** 2) + tp.reduce_mean((p2 - target_2_data) ** 2)
    g1, g2 = tape.gradient(loss, model.trainable_variables)
    np.testing.assert_allclose(loss.numpy(), REFERENCE["rnn_guide/nested/loss"], rtol=1e-5)
    np.testing.assert_allclose(g1.numpy(), REFERENCE["rnn_guide/nested/g/0"], **TOL)
    np.testing.assert_allclose(g2.numpy()[::8, ::8], REFERENCE["rnn_guide/nested/g/1"], **TOL)

    history = model.fit(input_data, target_data, batch_size=batch_size, verbose=0)
    np.testing.assert_allclose(history.history["loss"][0], REFERENCE["rnn_guide/nested/loss"], rtol=1e-5)

    model.save(tmp_path / "nested.tapefit")
    loaded = tp.models.load_model(tmp_path / "nested.tapefit")
    for a, b in zip(loaded.predict_on_batch(input_data), model.predict_on_batch(input_data)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


# -- Understanding masking & padding ---------------------------------------------------------


RAW_INPUTS = [
    [711, 632, 71],
    [73, 8, 3215, 55, 927],
    [83, 91, 1, 645, 1253, 927],
]


def pad_sequences(sequences, padding="post"):
    """What ``keras.utils.pad_sequences(raw_inputs, padding="post")`` gives (no tapefit twin)."""
    width = max(len(s) for s in sequences)
    out = np.zeros((len(sequences), width), np.int32)
    for i, s in enumerate(sequences):
        out[i, : len(s)] = s
    return out


PADDED = pad_sequences(RAW_INPUTS, padding="post")


def test_padding_sequence_data():
    np.testing.assert_array_equal(PADDED, REFERENCE["mask_guide/padded"])


def masked_embedding():
    masking_layer = layers.Masking()
    # Simulate the embedding lookup by expanding the 2D input to 3D,
    # with embedding dimension of 10.
    unmasked_embedding = tp.cast(tp.tile(tp.expand_dims(PADDED, axis=-1), [1, 1, 10]), "float32")
    masked = masking_layer(unmasked_embedding)
    return masking_layer, unmasked_embedding, masked


def test_mask_generating_layers_embedding_and_masking():
    embedding = layers.Embedding(input_dim=5000, output_dim=16, mask_zero=True)
    embedding(PADDED)
    np.testing.assert_array_equal(
        embedding.compute_mask(PADDED).numpy(), REFERENCE["mask_guide/embedding_mask"]
    )

    masking_layer, unmasked_embedding, _ = masked_embedding()
    # tapefit attaches no mask to eager tensors: the layer's compute_mask gives it
    mask = masking_layer.compute_mask(unmasked_embedding)
    np.testing.assert_array_equal(mask.numpy(), REFERENCE["mask_guide/masking_mask"])


def test_mask_propagation_in_the_functional_and_sequential_api():
    model = tp.layers.Sequential(
        [
            layers.Embedding(input_dim=5000, output_dim=16, mask_zero=True),
            layers.LSTM(32),
        ]
    )
    model(PADDED)
    fill(model, 300)
    np.testing.assert_allclose(model(PADDED).numpy(), REFERENCE["mask_guide/sequential"], **TOL)

    inputs = tp.Input(shape=(None,), dtype="int32")
    x = layers.Embedding(input_dim=5000, output_dim=16, mask_zero=True)(inputs)
    outputs = layers.LSTM(32)(x)

    model = tp.Model(inputs, outputs)
    fill(model, 300)
    np.testing.assert_allclose(model(PADDED).numpy(), REFERENCE["mask_guide/functional"], **TOL)


def test_passing_mask_tensors_directly_to_layers():
    class MyLayer(layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.embedding = layers.Embedding(input_dim=5000, output_dim=16, mask_zero=True)
            self.lstm = layers.LSTM(32)

        def call(self, inputs):
            x = self.embedding(inputs)
            # Note that you could also prepare a `mask` tensor manually.
            # It only needs to be a boolean tensor
            # with the right shape, i.e. (batch_size, timesteps).
            mask = self.embedding.compute_mask(inputs)
            output = self.lstm(x, mask=mask)  # The layer will ignore the masked values
            return output

    layer = MyLayer()
    x = REFERENCE["mask_guide/my_layer/x"]
    layer(x)
    fill(layer, 301)
    np.testing.assert_allclose(layer(x).numpy(), REFERENCE["mask_guide/my_layer/y"], **TOL)


def test_supporting_masking_in_your_custom_layers():
    class TemporalSplit(tp.layers.Layer):
        """Split the input tensor into 2 tensors along the time dimension."""

        def call(self, inputs):
            # Expect the input to be 3D and mask to be 2D, split the input tensor into 2
            # subtensors along the time axis (axis 1).
            return tp.split(inputs, 2, axis=1)

        def compute_mask(self, inputs, mask=None):
            # Also split the mask into 2 if it presents.
            if mask is None:
                return None
            return tp.split(mask, 2, axis=1)

    masking_layer, unmasked_embedding, masked = masked_embedding()
    split = TemporalSplit()
    first_half, second_half = split(masked)
    first_mask, second_mask = split.compute_mask(masked, masking_layer.compute_mask(unmasked_embedding))
    np.testing.assert_array_equal(first_mask.numpy(), REFERENCE["mask_guide/split/first"])
    np.testing.assert_array_equal(second_mask.numpy(), REFERENCE["mask_guide/split/second"])
    assert first_half.shape == (3, 3, 10) and second_half.shape == (3, 3, 10)

    class CustomEmbedding(tp.layers.Layer):
        def __init__(self, input_dim, output_dim, mask_zero=False, **kwargs):
            super().__init__(**kwargs)
            self.input_dim = input_dim
            self.output_dim = output_dim
            self.mask_zero = mask_zero

        def build(self, input_shape):
            self.embeddings = self.add_weight(
                shape=(self.input_dim, self.output_dim),
                initializer="random_normal",
                dtype="float32",
            )

        def call(self, inputs):
            return tp.gather(self.embeddings, inputs)

        def compute_mask(self, inputs, mask=None):
            if not self.mask_zero:
                return None
            return tp.not_equal(inputs, 0)

    layer = CustomEmbedding(10, 32, mask_zero=True)
    x = np.random.random((3, 10)) * 9
    x = x.astype("int32")

    y = layer(x)
    mask = layer.compute_mask(x)
    np.testing.assert_array_equal(mask.numpy(), x != 0)
    assert y.shape == (3, 10, 32)


def test_opting_in_to_mask_propagation_on_compatible_layers():
    class MyActivation(tp.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            # Signal that the layer is safe for mask propagation
            self.supports_masking = True

        def call(self, inputs):
            return tp.nn.relu(inputs)

    inputs = tp.Input(shape=(None,), dtype="int32")
    x = layers.Embedding(input_dim=5000, output_dim=16, mask_zero=True)(inputs)
    x = MyActivation()(x)  # Will pass the mask along
    assert x.has_mask  # the guide prints "Mask found: ..."
    outputs = layers.LSTM(32)(x)  # Will receive the mask

    model = tp.Model(inputs, outputs)
    fill(model, 302)
    np.testing.assert_allclose(model(PADDED).numpy(), REFERENCE["mask_guide/activation"], **TOL)


def test_writing_layers_that_need_mask_information():
    class TemporalSoftmax(tp.layers.Layer):
        def call(self, inputs, mask=None):
            broadcast_float_mask = tp.expand_dims(tp.cast(mask, "float32"), -1)
            inputs_exp = tp.exp(inputs) * broadcast_float_mask
            inputs_sum = tp.reduce_sum(inputs * broadcast_float_mask, axis=1, keepdims=True)
            return inputs_exp / inputs_sum

    inputs = tp.Input(shape=(None,), dtype="int32")
    x = layers.Embedding(input_dim=10, output_dim=32, mask_zero=True)(inputs)
    x = layers.Dense(1)(x)
    outputs = TemporalSoftmax()(x)

    model = tp.Model(inputs, outputs)
    fill(model, 303)
    y = model(REFERENCE["mask_guide/softmax/ids"])
    np.testing.assert_allclose(y.numpy(), REFERENCE["mask_guide/softmax/y"], rtol=1e-4, atol=1e-4)
