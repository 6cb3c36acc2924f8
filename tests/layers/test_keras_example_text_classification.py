"""keras.io's "Text classification from scratch", its vectorization part translated line by line
(sizes made small, a few reviews in place of IMDB): the vocabulary and the vectorized texts are
Keras's, as ``scripts/keras_reference_preprocessing.py`` saved them; then the example's model
is trained on the vectorized texts and wrapped in its end-to-end model on raw strings."""

from __future__ import annotations

import re
import string
from pathlib import Path

import numpy as np

import tapefit as tp
from tapefit import layers

DATA = np.load(Path(__file__).parent / "data" / "keras_preprocessing.npz")
REVIEWS, LABELS = DATA["example/reviews"], DATA["example/labels"]
batch_size = 4


def raw_train_ds():
    """The batched data set of (texts, labels), as text_dataset_from_directory gives it."""
    for start in range(0, len(REVIEWS), batch_size):
        yield REVIEWS[start : start + batch_size], LABELS[start : start + batch_size]


# The raw text holds "<br />" breaks the default standardizer keeps: the example's own one.
# (It receives a NumPy array of strings; tf.strings.lower lowers ASCII, as str.lower does here.)
def custom_standardization(input_data):
    lowercase = np.char.lower(input_data)
    stripped_html = np.char.replace(lowercase, "<br />", " ")
    punctuation = re.compile(f"[{re.escape(string.punctuation)}]")
    return np.vectorize(lambda text: punctuation.sub("", text), otypes=[str])(stripped_html)


max_features = 30
embedding_dim = 8
sequence_length = 12


def make_vectorize_layer():
    vectorize_layer = layers.TextVectorization(
        standardize=custom_standardization,
        max_tokens=max_features,
        output_mode="int",
        output_sequence_length=sequence_length,
    )
    # A data set of texts only (no labels), to adapt the layer on.
    text_ds = (x for x, y in raw_train_ds())
    vectorize_layer.adapt(text_ds)
    return vectorize_layer


def test_the_vectorization_is_kerass():
    vectorize_layer = make_vectorize_layer()
    assert vectorize_layer.get_vocabulary() == DATA["example/vocabulary"].tolist()

    def vectorize_text(text, label):
        text = np.expand_dims(text, -1)
        return vectorize_layer(text), label

    train_ds = [vectorize_text(x, y) for x, y in raw_train_ds()]
    train = np.concatenate([x.numpy() for x, _ in train_ds])
    np.testing.assert_array_equal(train, DATA["example/train"])
    test, _ = vectorize_text(DATA["example/queries"], None)
    np.testing.assert_array_equal(test.numpy(), DATA["example/test"])
    assert test.dtype == np.int64


def test_the_end_to_end_model_takes_raw_strings():
    tp.random.set_seed(0)
    vectorize_layer = make_vectorize_layer()

    def vectorize_text(text, label):
        text = np.expand_dims(text, -1)
        return vectorize_layer(text).numpy(), label

    train_ds = [vectorize_text(x, y) for x, y in raw_train_ds()]

    # The example's model, on integer sequences.
    inputs = tp.Input(shape=(None,), dtype="int64")
    x = layers.Embedding(max_features, embedding_dim)(inputs)
    x = layers.Dropout(0.5)(x)
    x = layers.Conv1D(8, 3, padding="valid", activation="relu", strides=3)(x)
    x = layers.Conv1D(8, 3, padding="valid", activation="relu", strides=1)(x)
    x = layers.GlobalMaxPooling1D()(x)
    x = layers.Dense(8, activation="relu")(x)
    x = layers.Dropout(0.5)(x)
    predictions = layers.Dense(1, activation="sigmoid", name="predictions")(x)
    model = tp.Model(inputs, predictions)
    model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
    model.fit(iter(train_ds), epochs=1, verbose=0)

    # A model that takes raw strings: the vectorization, then the trained model.
    inputs = tp.Input(shape=(1,), dtype="string")
    indices = vectorize_layer(inputs)
    outputs = model(indices)
    end_to_end_model = tp.Model(inputs, outputs)
    end_to_end_model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])
    logs = end_to_end_model.evaluate(
        ((x[:, None], y.astype(np.float32)[:, None]) for x, y in raw_train_ds()), verbose=0, return_dict=True
    )
    assert set(logs) >= {"loss", "accuracy"} and np.isfinite(logs["loss"])

    queries = DATA["example/queries"][:, None]
    expected = model(vectorize_layer(queries), training=False).numpy()
    np.testing.assert_allclose(end_to_end_model(queries).numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(end_to_end_model.predict(queries, verbose=0), expected, rtol=1e-6)
