"""Keras 3's numbers for ``RNN`` and its cells, ``stateful``, ``Masking``, ``TimeDistributed``
and the guides "Working with RNNs" and "Understanding masking & padding", saved for CI.

CI has no Keras, so ``tests/layers/test_rnn_cells.py``, ``tests/layers/test_sequence_layers.py``
and ``tests/layers/test_keras_guides_rnn.py`` compare tapefit with what this script computed
once with Keras 3 and saved in ``tests/layers/data/keras_rnn.npz``. Weights are not stored:
both sides fill every weight, in ``get_weights`` order, with ``weights(shapes, seed)`` below
(uniform in [-0.3, 0.3) from NumPy's seeded generator), and the larger inputs with
``uniform(shape, seed)``, so the file holds only small inputs and results. The guides' shapes
are kept except where they are large (noted at each case). Only NumPy, TensorFlow and Keras
are used, not tapefit.

- ``cell/<kind>/...``: ``RNN(<Cell>(3), return_sequences=True, return_state=True)`` on ``x``
  with the mask ``mask``: outputs ``y/<i>``, and the gradients of ``sum(y0 * r)`` for the
  weights ``g/<i>`` and for ``x`` (``gx``). ``stacked``: ``RNN([SimpleRNNCell(3),
  LSTMCell(2)], return_state=True)`` the same way (states flattened in order).
- ``stateful/<kind>/<chunk>``: a stateful layer called on ``x6``'s time chunks of 2 steps,
  then ``after_reset`` for the first chunk again after ``reset_states()``.
- ``masking/...``: ``Masking()`` on ``xm`` (output and mask), ``Masking(0.5)``, and
  ``Masking() -> LSTM(3)`` with its gradients. ``td/...``: ``TimeDistributed(Dense(2,
  activation="tanh"))`` with its gradients.
- ``rnn_guide/...`` and ``mask_guide/...``: the guides' blocks (see ``guides``).

    KERAS_BACKEND=tensorflow python scripts/keras_reference_rnn.py          # writes the file
    KERAS_BACKEND=tensorflow python scripts/keras_reference_rnn.py --check  # compares
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

PATH = Path(__file__).resolve().parents[1] / "tests" / "layers" / "data" / "keras_rnn.npz"


def weights(shapes: list[tuple[int, ...]], seed: int) -> list[np.ndarray]:
    """The weights both sides use: uniform in [-0.3, 0.3), float32, from ``seed``."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(-0.3, 0.3, shape).astype(np.float32) for shape in shapes]


def uniform(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """The larger inputs both sides make rather than store: uniform in [0, 1), float32."""
    return np.random.default_rng(seed).random(shape).astype(np.float32)


def fill(model: Any, seed: int) -> None:
    model.set_weights(weights([tuple(w.shape) for w in model.get_weights()], seed))


def data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((2, 5, 4)).astype(np.float32)
    mask = np.ones((2, 5), bool)
    mask[0, 3:] = False
    mask[1, 0] = False
    xm = x.copy()
    xm[0, 3:] = 0.0
    xm[1, 1, :] = 0.5
    return {
        "x": x,
        "mask": mask,
        "r": rng.standard_normal((2, 5, 3)).astype(np.float32),
        "x6": rng.standard_normal((2, 6, 4)).astype(np.float32),
        "xm": xm,
    }


def _flat(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _flat(v)]
    return [value]


def _with_grads(
    out: dict[str, np.ndarray], case: str, layer: Any, x: np.ndarray, r: np.ndarray, **kw: Any
) -> None:
    import tensorflow as tf

    xv = tf.Variable(x)
    with tf.GradientTape() as tape:
        ys = _flat(layer(xv, **kw))
        first = ys[0]
        weight = r[..., : first.shape[-1]] if first.ndim == 3 else r[:, 0, : first.shape[-1]]
        loss = tf.reduce_sum(first * weight)
    grads = tape.gradient(loss, [*layer.trainable_weights, xv])
    for i, y in enumerate(ys):
        out[f"{case}/y/{i}"] = np.asarray(y)
    for i, g in enumerate(grads[:-1]):
        out[f"{case}/g/{i}"] = np.asarray(g)
    out[f"{case}/gx"] = np.asarray(grads[-1])


def layers_cases(out: dict[str, np.ndarray], d: dict[str, np.ndarray]) -> None:
    import keras
    from keras import layers

    cells = {
        "simple": lambda: layers.SimpleRNNCell(3),
        "lstm": lambda: layers.LSTMCell(3),
        "gru": lambda: layers.GRUCell(3),
        "gru_before": lambda: layers.GRUCell(3, reset_after=False),
    }
    for seed, (kind, make) in enumerate(cells.items()):
        layer = layers.RNN(make(), return_sequences=True, return_state=True)
        layer(d["x"])
        fill(layer, 100 + seed)
        _with_grads(out, f"cell/{kind}", layer, d["x"], d["r"], mask=d["mask"])
    layer = layers.RNN(layers.LSTMCell(3), go_backwards=True)
    layer(d["x"])
    fill(layer, 110)
    _with_grads(out, "cell/lstm_backwards", layer, d["x"], d["r"])
    layer = layers.RNN([layers.SimpleRNNCell(3), layers.LSTMCell(2)], return_state=True)
    layer(d["x"])
    fill(layer, 111)
    _with_grads(out, "cell/stacked", layer, d["x"], d["r"])

    stateful = {
        "lstm": lambda: layers.LSTM(3, stateful=True),
        "gru": lambda: layers.GRU(3, stateful=True, return_sequences=True),
        "simple": lambda: layers.SimpleRNN(3, stateful=True),
        "rnn_gru": lambda: layers.RNN(layers.GRUCell(3), stateful=True),
    }
    for seed, (kind, make) in enumerate(stateful.items()):
        layer = make()
        chunks = [d["x6"][:, i : i + 2] for i in (0, 2, 4)]
        layer(chunks[0])
        fill(layer, 120 + seed)
        layer.reset_states()
        for i, chunk in enumerate(chunks):
            out[f"stateful/{kind}/{i}"] = np.asarray(layer(chunk))
        layer.reset_states()
        out[f"stateful/{kind}/after_reset"] = np.asarray(layer(chunks[0]))

    masking = layers.Masking()
    out["masking/y"] = np.asarray(masking(d["xm"]))
    out["masking/mask"] = np.asarray(masking.compute_mask(d["xm"]))
    half = layers.Masking(mask_value=0.5)
    out["masking/half/y"] = np.asarray(half(d["xm"]))
    out["masking/half/mask"] = np.asarray(half.compute_mask(d["xm"]))
    model = keras.Sequential([keras.Input((5, 4)), layers.Masking(), layers.LSTM(3)])
    fill(model, 130)
    _with_grads(out, "masking/lstm", model, d["xm"], d["r"])

    td = keras.Sequential([keras.Input((5, 4)), layers.TimeDistributed(layers.Dense(2, activation="tanh"))])
    fill(td, 140)
    _with_grads(out, "td", td, d["x"], d["r"])


def rnn_guide(out: dict[str, np.ndarray]) -> None:
    """ "Working with RNNs": its models with the guide's sizes, on inputs made here."""
    import keras
    import tensorflow as tf
    from keras import layers

    rng = np.random.default_rng(7)
    ids = rng.integers(0, 1000, (3, 7))
    out["rnn_guide/ids"] = ids
    model = keras.Sequential()
    model.add(layers.Embedding(input_dim=1000, output_dim=64))
    model.add(layers.LSTM(128))
    model.add(layers.Dense(10))
    model(ids)
    fill(model, 200)
    out["rnn_guide/simple/y"] = np.asarray(model(ids))
    out["rnn_guide/simple/params"] = np.array(model.count_params())

    model = keras.Sequential()
    model.add(layers.Embedding(input_dim=1000, output_dim=64))
    model.add(layers.GRU(256, return_sequences=True))
    model.add(layers.SimpleRNN(128))
    model.add(layers.Dense(10))
    model(ids)
    fill(model, 201)
    out["rnn_guide/gru_simple/y"] = np.asarray(model(ids))
    out["rnn_guide/gru_simple/params"] = np.array(model.count_params())

    encoder_vocab, decoder_vocab = 1000, 2000
    encoder_input = layers.Input(shape=(None,))
    encoder_embedded = layers.Embedding(input_dim=encoder_vocab, output_dim=64)(encoder_input)
    output, state_h, state_c = layers.LSTM(64, return_state=True, name="encoder")(encoder_embedded)
    encoder_state = [state_h, state_c]
    decoder_input = layers.Input(shape=(None,))
    decoder_embedded = layers.Embedding(input_dim=decoder_vocab, output_dim=64)(decoder_input)
    decoder_output = layers.LSTM(64, name="decoder")(decoder_embedded, initial_state=encoder_state)
    output = layers.Dense(10)(decoder_output)
    model = keras.Model([encoder_input, decoder_input], output)
    fill(model, 202)
    decoder_ids = rng.integers(0, 2000, (3, 5))
    out["rnn_guide/seq2seq/decoder_ids"] = decoder_ids
    out["rnn_guide/seq2seq/y"] = np.asarray(model([ids, decoder_ids]))
    out["rnn_guide/seq2seq/params"] = np.array(model.count_params())

    # Cross-batch statefulness, the guide's shapes
    paragraphs = [uniform((20, 10, 50), 250 + i) for i in range(3)]
    lstm_layer = layers.LSTM(64, stateful=True)
    lstm_layer(paragraphs[0])
    fill(lstm_layer, 203)
    lstm_layer.reset_states()
    for i, p in enumerate(paragraphs):
        out[f"rnn_guide/stateful/{i + 1}"] = np.asarray(lstm_layer(p))
    lstm_layer.reset_states()
    # State reuse: the states after two paragraphs start a new layer (same weights)
    lstm_layer(paragraphs[0])
    lstm_layer(paragraphs[1])
    existing_state = lstm_layer.states
    new_lstm_layer = layers.LSTM(64)
    new_lstm_layer(paragraphs[2], initial_state=existing_state)
    new_lstm_layer.set_weights(lstm_layer.get_weights())
    out["rnn_guide/reuse"] = np.asarray(new_lstm_layer(paragraphs[2], initial_state=existing_state))

    model = keras.Sequential()
    model.add(layers.Bidirectional(layers.LSTM(64, return_sequences=True), input_shape=(5, 10)))
    model.add(layers.Bidirectional(layers.LSTM(32)))
    model.add(layers.Dense(10))
    fill(model, 204)
    xb = rng.standard_normal((4, 5, 10)).astype(np.float32)
    out["rnn_guide/bidirectional/x"] = xb
    out["rnn_guide/bidirectional/y"] = np.asarray(model(xb))
    out["rnn_guide/bidirectional/params"] = np.array(model.count_params())

    # build_model: MNIST rows as steps; 64 random "images" instead of the data set
    batch_size, input_dim, units, output_size = 64, 28, 64, 10

    def build_model(allow_cudnn_kernel: bool = True) -> Any:
        if allow_cudnn_kernel:
            lstm = keras.layers.LSTM(units, input_shape=(None, input_dim))
        else:
            lstm = keras.layers.RNN(keras.layers.LSTMCell(units), input_shape=(None, input_dim))
        return keras.models.Sequential(
            [lstm, keras.layers.BatchNormalization(), keras.layers.Dense(output_size)]
        )

    images = uniform((batch_size, 28, 28), 260)
    labels = rng.integers(0, 10, batch_size)
    out["rnn_guide/mnist/y"] = labels
    model = build_model(allow_cudnn_kernel=True)
    fill(model, 205)
    positive = model.get_weights()
    positive[-3] = np.abs(positive[-3]) + 0.5  # BatchNormalization's moving variance
    model.set_weights(positive)
    model.compile(
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer="sgd",
        metrics=["accuracy"],
    )
    out["rnn_guide/mnist/predict"] = np.asarray(model.predict_on_batch(images))
    out["rnn_guide/mnist/loss"] = np.array(model.train_on_batch(images, labels)[0])
    noncudnn_model = build_model(allow_cudnn_kernel=False)
    noncudnn_model.set_weights(model.get_weights())
    out["rnn_guide/mnist/after_step"] = np.asarray(noncudnn_model.predict_on_batch(images))

    # NestedCell: the guide's units and input sizes, one batch of 8 sequences of 5 steps
    class NestedCell(keras.layers.Layer):
        def __init__(self, unit_1: int, unit_2: int, unit_3: int, **kwargs: Any) -> None:
            self.unit_1, self.unit_2, self.unit_3 = unit_1, unit_2, unit_3
            self.state_size = [(unit_1,), (unit_2, unit_3)]
            self.output_size = [(unit_1,), (unit_2, unit_3)]
            super().__init__(**kwargs)

        def build(self, input_shapes: Any) -> None:
            i1, i2, i3 = input_shapes[0][1], input_shapes[1][1], input_shapes[1][2]
            self.kernel_1 = self.add_weight(shape=(i1, self.unit_1), initializer="uniform", name="kernel_1")
            self.kernel_2_3 = self.add_weight(
                shape=(i2, i3, self.unit_2, self.unit_3), initializer="uniform", name="kernel_2_3"
            )

        def call(self, inputs: Any, states: Any) -> Any:
            import tensorflow as tf

            input_1, input_2 = tf.nest.flatten(inputs)
            s1, s2 = states
            output_1 = tf.matmul(input_1, self.kernel_1)
            output_2_3 = tf.einsum("bij,ijkl->bkl", input_2, self.kernel_2_3)
            return (output_1, output_2_3), (s1 + output_1, s2 + output_2_3)

    unit_1, unit_2, unit_3 = 10, 20, 30
    i1, i2, i3 = 32, 64, 32
    batch, timestep = 8, 5
    cell = NestedCell(unit_1, unit_2, unit_3)
    # Keras 3's RNN.build hands a nested input's shapes to the cell as one shape (and the
    # guide's cell then fails); built by hand first, the cell is left alone.
    cell.build([(None, i1), (None, i2, i3)])
    # Keras 3's RNN takes no nested inputs (it reads ``sequences.shape``), so the loop the
    # guide's RNN runs is written out here around the guide's cell: the outputs after the last
    # step, the compiled loss (the sum of each output's MSE) and its gradients.
    input_1_data = uniform((batch, timestep, i1), 270)
    input_2_data = uniform((batch, timestep, i2, i3), 271)
    target_1_data = uniform((batch, unit_1), 272)
    target_2_data = uniform((batch, unit_2, unit_3), 273)
    fill(cell, 206)
    with tf.GradientTape() as tape:
        states = (tf.zeros((batch, unit_1)), tf.zeros((batch, unit_2, unit_3)))
        for t in range(timestep):
            (y1, y2), states = cell((input_1_data[:, t], input_2_data[:, t]), states)
        loss = tf.reduce_mean((y1 - target_1_data) ** 2) + tf.reduce_mean((y2 - target_2_data) ** 2)
    grads = tape.gradient(loss, cell.trainable_weights)
    out["rnn_guide/nested/y1"], out["rnn_guide/nested/y2"] = np.asarray(y1), np.asarray(y2)
    out["rnn_guide/nested/loss"] = np.asarray(loss)
    out["rnn_guide/nested/g/0"] = np.asarray(grads[0])
    out["rnn_guide/nested/g/1"] = np.asarray(grads[1])[::8, ::8]  # a sample of its 1.2M entries


def mask_guide(out: dict[str, np.ndarray]) -> None:
    """ "Understanding masking & padding": its layers and models on the guide's inputs."""
    import keras
    import tensorflow as tf
    from keras import layers

    raw_inputs = [[711, 632, 71], [73, 8, 3215, 55, 927], [83, 91, 1, 645, 1253, 927]]
    padded_inputs = keras.utils.pad_sequences(raw_inputs, padding="post")
    out["mask_guide/padded"] = padded_inputs
    embedding = layers.Embedding(input_dim=5000, output_dim=16, mask_zero=True)
    out["mask_guide/embedding_mask"] = np.asarray(embedding.compute_mask(padded_inputs))
    masking_layer = layers.Masking()
    unmasked_embedding = tf.cast(tf.tile(tf.expand_dims(padded_inputs, axis=-1), [1, 1, 10]), tf.float32)
    masked_embedding = masking_layer(unmasked_embedding)
    out["mask_guide/masking_mask"] = np.asarray(masked_embedding._keras_mask)

    model = keras.Sequential(
        [layers.Embedding(input_dim=5000, output_dim=16, mask_zero=True), layers.LSTM(32)]
    )
    model(padded_inputs)
    fill(model, 300)
    out["mask_guide/sequential"] = np.asarray(model(padded_inputs))
    inputs = keras.Input(shape=(None,), dtype="int32")
    x = layers.Embedding(input_dim=5000, output_dim=16, mask_zero=True)(inputs)
    outputs = layers.LSTM(32)(x)
    model = keras.Model(inputs, outputs)
    fill(model, 300)
    out["mask_guide/functional"] = np.asarray(model(padded_inputs))

    class MyLayer(layers.Layer):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.embedding = layers.Embedding(input_dim=5000, output_dim=16, mask_zero=True)
            self.lstm = layers.LSTM(32)

        def call(self, inputs: Any) -> Any:
            x = self.embedding(inputs)
            mask = self.embedding.compute_mask(inputs)
            return self.lstm(x, mask=mask)

    rng = np.random.default_rng(8)
    layer = MyLayer()
    x = (rng.random((32, 10)) * 100).astype("int32")
    out["mask_guide/my_layer/x"] = x
    layer(x)
    fill(layer, 301)
    out["mask_guide/my_layer/y"] = np.asarray(layer(x))

    class TemporalSplit(keras.layers.Layer):
        def call(self, inputs: Any) -> Any:
            return tf.split(inputs, 2, axis=1)

        def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
            return None if mask is None else tf.split(mask, 2, axis=1)

    first_half, second_half = TemporalSplit()(masked_embedding)
    out["mask_guide/split/first"] = np.asarray(first_half._keras_mask)
    out["mask_guide/split/second"] = np.asarray(second_half._keras_mask)

    class MyActivation(keras.layers.Layer):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.supports_masking = True

        def call(self, inputs: Any) -> Any:
            return tf.nn.relu(inputs)

    inputs = keras.Input(shape=(None,), dtype="int32")
    x = layers.Embedding(input_dim=5000, output_dim=16, mask_zero=True)(inputs)
    x = MyActivation()(x)
    outputs = layers.LSTM(32)(x)
    model = keras.Model(inputs, outputs)
    fill(model, 302)
    out["mask_guide/activation"] = np.asarray(model(padded_inputs))

    class TemporalSoftmax(keras.layers.Layer):
        def call(self, inputs: Any, mask: Any = None) -> Any:
            broadcast_float_mask = tf.expand_dims(tf.cast(mask, "float32"), -1)
            inputs_exp = tf.exp(inputs) * broadcast_float_mask
            inputs_sum = tf.reduce_sum(inputs * broadcast_float_mask, axis=1, keepdims=True)
            return inputs_exp / inputs_sum

    inputs = keras.Input(shape=(None,), dtype="int32")
    x = layers.Embedding(input_dim=10, output_dim=32, mask_zero=True)(inputs)
    x = layers.Dense(1)(x)
    outputs = TemporalSoftmax()(x)
    model = keras.Model(inputs, outputs)
    fill(model, 303)
    ids = rng.integers(0, 10, size=(32, 100))
    out["mask_guide/softmax/ids"] = ids
    out["mask_guide/softmax/y"] = np.asarray(model(ids))


def compute() -> dict[str, np.ndarray]:
    import keras

    keras.utils.set_random_seed(0)
    d = data()
    out: dict[str, np.ndarray] = dict(d)
    layers_cases(out, d)
    rnn_guide(out)
    mask_guide(out)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the saved file")
    args = parser.parse_args()
    out = compute()
    if not args.check:
        np.savez_compressed(PATH, **out)
        print(f"wrote {PATH} ({len(out)} arrays)")
        return 0
    saved = dict(np.load(PATH))
    bad = [k for k in out if k not in saved or not np.allclose(out[k], saved[k], rtol=1e-5, atol=1e-5)]
    bad += [k for k in out if out[k].dtype.kind == "f" and not np.all(np.isfinite(out[k]))]
    print("differs: " + ", ".join(bad) if bad else "same")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
