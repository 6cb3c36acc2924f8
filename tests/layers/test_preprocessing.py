"""The preprocessing layers' behaviour: configs and model files that keep vocabularies and
statistics, models on strings, shapes without data, gradients of Normalization, tp.function
replays, ONNX export, and the errors for bad input. Keras's numbers: test_preprocessing_keras.py."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp
from tapefit import layers
from tapefit.layers import saving
from tapefit.layers.preprocessing.hashes import fingerprint64, siphash24

TEXTS = np.asarray(["the cat sat", "the dog ran far", "a cat and a dog", "birds fly, dogs run!"])
TOKENS = np.asarray([["a", "b", "a"], ["c", "a", "b"], ["d", "", "a"]])
INTEGERS = np.asarray([[4, 8, 8], [15, 4, 8], [16, 23, 42]])


def adapted(layer, data):
    layer.adapt(data)
    return layer


def made_layers():
    """One of each layer, adapted where it learns, with the inputs it takes."""
    return [
        (adapted(layers.TextVectorization(max_tokens=12, output_sequence_length=5), TEXTS), TEXTS),
        (adapted(layers.TextVectorization(output_mode="tf_idf", ngrams=2), TEXTS), TEXTS),
        (adapted(layers.StringLookup(mask_token="", num_oov_indices=2), TOKENS), TOKENS),
        (adapted(layers.StringLookup(output_mode="count"), TOKENS), TOKENS),
        (layers.StringLookup(vocabulary=["a", "b"], invert=True), np.asarray([[0, 1, 2, 3]])),
        (
            adapted(
                layers.IntegerLookup(output_mode="multi_hot", max_tokens=4, pad_to_max_tokens=True), INTEGERS
            ),
            INTEGERS,
        ),
        (
            adapted(layers.IntegerLookup(num_oov_indices=3, oov_method="farmhash", salt=5), INTEGERS[:2]),
            INTEGERS,
        ),
        (layers.CategoryEncoding(50, output_mode="count"), INTEGERS),
        (layers.Hashing(10, mask_value="", salt=[1, 2]), TOKENS),
        (adapted(layers.Normalization(axis=None), INTEGERS.astype(np.float32)), INTEGERS.astype(np.float32)),
        (
            layers.Normalization(mean=[1.0, 2.0, 3.0], variance=[1.0, 4.0, 9.0], invert=True),
            INTEGERS.astype(np.float32),
        ),
    ]


def values(out):
    return out if isinstance(out, np.ndarray) else out.numpy()


@pytest.mark.parametrize("index", range(11))
def test_config_round_trip_keeps_the_vocabulary(index):
    layer, inputs = made_layers()[index]
    config = layer.get_config()
    assert config["name"] == layer.name
    again = type(layer).from_config(config)
    if isinstance(layer, layers.Normalization) and layer.input_mean is None:
        again.build(inputs.shape)
        again.set_weights(layer.get_weights())  # learned statistics are weights
    if hasattr(layer, "get_vocabulary"):
        assert again.get_vocabulary() == layer.get_vocabulary()
    np.testing.assert_array_equal(values(again(inputs)), values(layer(inputs)))
    assert again.get_config() == config
    assert layers.deserialize(layers.serialize(layer)).get_config() == config


def test_keras_arguments_and_defaults():
    tv = layers.TextVectorization()
    assert (tv.max_tokens, tv.standardize, tv.split, tv.ngrams, tv.output_mode) == (
        None,
        "lower_and_strip_punctuation",
        "whitespace",
        None,
        "int",
    )
    sl = layers.StringLookup()
    assert (sl.num_oov_indices, sl.mask_token, sl.oov_token, sl.output_mode) == (1, None, "[UNK]", "int")
    il = layers.IntegerLookup()
    assert (il.oov_token, il.oov_method, il.vocabulary_dtype) == (-1, "floormod", "int64")
    assert layers.CategoryEncoding(3).output_mode == "multi_hot"
    assert layers.Hashing(3).output_dtype == np.int64
    assert layers.Normalization().axis == (-1,)
    # Keras's old mode names
    assert layers.StringLookup(output_mode="binary").output_mode == "multi_hot"
    assert layers.TextVectorization(output_mode="tf-idf").output_mode == "tf_idf"


def test_vocabulary_order_special_tokens_and_set_vocabulary():
    tv = adapted(layers.TextVectorization(), np.asarray(["b a c", "c b", "c"]))
    assert tv.get_vocabulary() == ["", "[UNK]", "c", "b", "a"]
    assert tv.get_vocabulary(include_special_tokens=False) == ["c", "b", "a"]
    assert tv.vocabulary_size() == 5
    tv.set_vocabulary(["x", "y"])
    assert tv.get_vocabulary() == ["", "[UNK]", "x", "y"]
    tv.set_vocabulary(["", "[UNK]", "z"])  # the special tokens first are taken as such
    assert tv.get_vocabulary() == ["", "[UNK]", "z"]
    np.testing.assert_array_equal(tv(np.asarray(["z q", "z"])).numpy(), [[2, 1], [2, 0]])
    ties = adapted(layers.IntegerLookup(), np.asarray([1, 2, 3, 3, 2, 10]))
    assert ties.get_vocabulary() == [-1, 3, 2, 10, 1]  # by count, ties the greater first


def test_vocabulary_from_a_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("dog\ncat\n\n", encoding="utf-8")
    layer = layers.StringLookup(vocabulary=str(path))
    assert layer.get_vocabulary() == ["[UNK]", "dog", "cat"]
    assert layer.get_config()["vocabulary"] == ["[UNK]", "dog", "cat"]


def test_outputs_are_tensors_no_tape_records():
    sl = layers.StringLookup(vocabulary=["a", "b"])
    embedding = layers.Embedding(4, 2)
    with tp.GradientTape() as tape:
        ids = sl(np.asarray([["a", "b", "zz"]]))
        loss = tp.reduce_sum(embedding(ids))
    assert isinstance(ids, tp.Tensor) and ids.dtype == np.int64
    (grad,) = tape.gradient(loss, [embedding.embeddings])
    np.testing.assert_array_equal(tp.convert_to_tensor(grad).numpy()[:3], np.ones((3, 2)))
    ce = layers.CategoryEncoding(3)
    x = tp.constant(np.asarray([[0, 2]]))
    with tp.GradientTape() as tape:
        tape.watch(x)
        out = ce(x)
    assert tape.gradient(tp.reduce_sum(out), x) is None


def test_tp_function_replays_lookups_with_each_calls_values():
    lookup = layers.IntegerLookup(vocabulary=[10, 20, 30])
    hashing = layers.Hashing(7)
    encode = layers.CategoryEncoding(5, output_mode="count")

    @tp.function
    def f(x):
        return lookup(x), hashing(x), encode(lookup(x))

    for batch in ([10, 99], [30, 20], [20, 20]):
        x = tp.constant(np.asarray(batch, dtype=np.int64))
        for got, eager in zip(f(x), (lookup(x), hashing(x), encode(lookup(x)))):
            np.testing.assert_array_equal(got.numpy(), eager.numpy())


def test_normalization_gradient_and_finite_differences():
    layer = adapted(layers.Normalization(dtype="float64"), np.random.default_rng(0).normal(2, 3, (20, 4)))
    x = np.random.default_rng(1).normal(size=(3, 4))
    tp.testing.check_gradients(lambda v: layer(v), x)
    inverted = layers.Normalization(mean=[1.0, 2.0], variance=[4.0, 9.0], invert=True, dtype="float64")
    tp.testing.check_gradients(lambda v: inverted(v), np.random.default_rng(2).normal(size=(3, 2)))
    scale = np.sqrt(layer.variance.numpy())
    with tp.GradientTape() as tape:
        v = tp.constant(x)
        tape.watch(v)
        total = tp.reduce_sum(layer(v))
    np.testing.assert_allclose(tape.gradient(total, v).numpy(), np.broadcast_to(1 / scale, x.shape))


def test_normalization_adapts_on_batches_as_on_the_whole():
    data = np.random.default_rng(0).normal(5, 2, (50, 3)).astype(np.float32)
    whole = adapted(layers.Normalization(), data)
    batched = layers.Normalization()
    batched.adapt(batch for batch in np.array_split(data, 7))
    np.testing.assert_allclose(batched.mean.numpy(), whole.mean.numpy(), rtol=1e-5)
    np.testing.assert_allclose(batched.variance.numpy(), whole.variance.numpy(), rtol=1e-5)
    pairs = layers.Normalization()
    pairs.adapt([(data[:25], None), (data[25:], None)])  # (x, y) batches: x is taken
    np.testing.assert_allclose(pairs.mean.numpy(), whole.mean.numpy(), rtol=1e-5)
    assert int(whole.count.numpy()) == 50


def test_text_and_lookup_models_in_model_files(tmp_path):
    tp.random.set_seed(0)
    vectorize = adapted(layers.TextVectorization(max_tokens=20, output_sequence_length=6), TEXTS)
    inputs = tp.Input(shape=(1,), dtype="string")
    x = layers.Embedding(20, 4)(vectorize(inputs))
    outputs = layers.Dense(1)(layers.GlobalAveragePooling1D()(x))
    functional = tp.Model(inputs, outputs)
    sequential = layers.Sequential(
        [
            adapted(layers.StringLookup(output_mode="multi_hot"), TOKENS),
            layers.Dense(2),
        ]
    )
    normalized = layers.Sequential(
        [tp.Input((3,)), adapted(layers.Normalization(), INTEGERS.astype(np.float32)), layers.Dense(2)]
    )
    cases = [(functional, TEXTS[:, None]), (sequential, TOKENS), (normalized, INTEGERS.astype(np.float32))]
    for i, (model, data) in enumerate(cases):
        expected = model(data).numpy()
        path = tmp_path / f"model_{i}.tapefit"
        model.save(path)
        loaded = tp.models.load_model(path)
        np.testing.assert_allclose(loaded(data).numpy(), expected, rtol=1e-6)
    loaded = tp.models.load_model(tmp_path / "model_0.tapefit")
    assert loaded.layers[1].get_vocabulary() == vectorize.get_vocabulary()
    assert "vocabulary" not in str(saving.read_model_file(tmp_path / "model_2.tapefit").weights)


def test_a_model_file_refuses_a_config_larger_than_the_loader_reads(tmp_path, monkeypatch):
    layer = layers.StringLookup(vocabulary=[f"token{i}" for i in range(2000)])
    model = layers.Sequential([layer])
    model(np.asarray(["token1"]))
    monkeypatch.setattr(saving, "MAX_CONFIG_BYTES", 10_000)
    with pytest.raises(ValueError, match=r"^save: the model's config is \d+ bytes, more than the 10000"):
        model.save(tmp_path / "big.tapefit")


def test_symbolic_shapes_and_dtypes():
    text = tp.Input(shape=(1,), dtype="string")
    assert text.dtype.kind == "U"
    ids = layers.TextVectorization(output_sequence_length=7, vocabulary=["a"])(text)
    assert (ids.shape, ids.dtype) == ((None, 7), np.dtype(np.int64))
    hot = layers.TextVectorization(output_mode="multi_hot", vocabulary=["a", "b"])(text)
    assert (hot.shape, hot.dtype) == ((None, 3), np.dtype(np.int64))
    idf = layers.TextVectorization(output_mode="tf_idf", vocabulary=["a"], idf_weights=[0.5])(text)
    assert (idf.shape, idf.dtype) == ((None, 2), np.dtype(np.float32))
    tokens = tp.Input(shape=(4,), dtype="string")
    assert layers.StringLookup(vocabulary=["a"])(tokens).shape == (None, 4)
    assert layers.StringLookup(vocabulary=["a"], output_mode="count")(tokens).shape == (None, 2)
    padded = layers.StringLookup(max_tokens=9, pad_to_max_tokens=True, output_mode="multi_hot")
    assert padded(tokens).shape == (None, 9)
    numbers = tp.Input(shape=(4,), dtype="int64")
    assert layers.IntegerLookup(vocabulary=[1], invert=True)(numbers).dtype == np.int64
    assert layers.StringLookup(vocabulary=["a"], invert=True)(numbers).dtype.kind == "U"
    assert layers.CategoryEncoding(6)(numbers).shape == (None, 6)
    assert layers.CategoryEncoding(6, "one_hot")(tp.Input((1,), dtype="int64")).shape == (None, 6)
    assert layers.Hashing(5)(tokens).shape == (None, 4)
    assert layers.Hashing(5, output_mode="count")(tokens).shape == (None, 5)
    assert layers.Normalization(mean=0.0, variance=1.0)(tp.Input((3,))).shape == (None, 3)


@pytest.mark.parametrize(
    ("make", "inputs", "error", "match"),
    [
        (
            lambda: layers.StringLookup(vocabulary=["a"]),
            np.asarray([1, 2]),
            TypeError,
            "takes strings, got values of dtype int64",
        ),
        (
            lambda: layers.IntegerLookup(vocabulary=[1]),
            np.asarray(["a"]),
            TypeError,
            "takes integers, got values of dtype str",
        ),
        (
            lambda: layers.IntegerLookup(vocabulary=[1]),
            np.asarray([1.5]),
            TypeError,
            "takes integers, got values of dtype float64",
        ),
        (lambda: layers.TextVectorization(), TEXTS, ValueError, "has no vocabulary: call adapt"),
        (lambda: layers.StringLookup(), TOKENS, ValueError, "has no vocabulary: call adapt"),
        (lambda: layers.Normalization(), np.ones((2, 3)), ValueError, "has no statistics yet: call adapt"),
        (
            lambda: layers.StringLookup(vocabulary=["a"], num_oov_indices=0),
            np.asarray(["b"]),
            ValueError,
            "'b' is not in the vocabulary",
        ),
        (
            lambda: layers.CategoryEncoding(3),
            np.asarray([[0, 3]]),
            ValueError,
            r"the id 3 is outside \[0, 3\)",
        ),
        (lambda: layers.CategoryEncoding(3), np.asarray([[0.0, 1.0]]), TypeError, "takes integers"),
        (
            lambda: layers.TextVectorization(vocabulary=["a"]),
            np.asarray([["a b", "c"]]),
            ValueError,
            r"shape \(batch,\) or \(batch, 1\)",
        ),
        (
            lambda: layers.TextVectorization(vocabulary=["a"]),
            tp.constant([1.0]),
            TypeError,
            "takes strings, got a tensor",
        ),
        (
            lambda: adapted(layers.Normalization(), np.ones((4, 3))),
            np.ones((2, 5)),
            ValueError,
            r"built for inputs of shape \(4, 3\)",
        ),
    ],
)
def test_bad_inputs_are_named(make, inputs, error, match):
    with pytest.raises(error, match=match):
        make()(inputs)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: layers.StringLookup(output_mode="dense"), "output_mode must be one of int, one_hot"),
        (lambda: layers.StringLookup(max_tokens=1), "max_tokens must be None or an int greater than 1"),
        (lambda: layers.StringLookup(pad_to_max_tokens=True), "pad_to_max_tokens=True needs max_tokens"),
        (
            lambda: layers.StringLookup(invert=True, output_mode="count"),
            "invert=True needs output_mode='int'",
        ),
        (lambda: layers.StringLookup(vocabulary=["a", "a"]), "the vocabulary repeats 'a'"),
        (
            lambda: layers.StringLookup(vocabulary=["a", ""], mask_token=""),
            "the mask token '' is in the vocabulary",
        ),
        (lambda: layers.StringLookup(vocabulary=["a", "b", "c"], max_tokens=3), "larger than max_tokens=3"),
        (lambda: layers.StringLookup(output_mode="tf_idf", vocabulary=["a"]), "give idf_weights too"),
        (lambda: layers.StringLookup(idf_weights=[1.0]), "idf_weights are for output_mode='tf_idf' only"),
        (lambda: layers.TextVectorization(standardize="upper"), "standardize must be one of"),
        (lambda: layers.TextVectorization(split="comma"), "split must be 'whitespace', 'character'"),
        (lambda: layers.TextVectorization(ngrams=0), "ngrams must be None"),
        (
            lambda: layers.TextVectorization(output_mode="count", output_sequence_length=3),
            "output_sequence_length is for",
        ),
        (lambda: layers.IntegerLookup(vocabulary_dtype="int32"), "vocabulary_dtype must be 'int64'"),
        (lambda: layers.IntegerLookup(salt=3), "salt is for oov_method='farmhash' only"),
        (lambda: layers.CategoryEncoding(), "num_tokens is required"),
        (lambda: layers.Hashing(0), "num_bins must be an int > 0"),
        (lambda: layers.Hashing(3, dtype="float32"), "dtype must be int32 or int64"),
        (lambda: layers.Normalization(mean=1.0), "give both mean and variance"),
        (lambda: layers.Normalization(mean=[1.0, 2.0], variance=[1.0]), "must have one shape"),
    ],
)
def test_bad_arguments_are_named(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_adapting_a_layer_given_its_vocabulary_or_statistics_is_refused():
    with pytest.raises(ValueError, match="was given its vocabulary when it was made; it cannot adapt"):
        layers.TextVectorization(vocabulary=["a"]).adapt(TEXTS)
    with pytest.raises(ValueError, match="was given its mean and variance; it cannot adapt"):
        layers.Normalization(mean=0.0, variance=1.0).adapt(np.ones((2, 3)))


def test_a_string_input_refuses_numbers_and_a_numeric_layer_refuses_strings():
    inputs = tp.Input(shape=(1,), dtype="string")
    model = tp.Model(inputs, layers.TextVectorization(vocabulary=["a"])(inputs))
    with pytest.raises(TypeError, match=r"input 0 \('.*'\) takes strings, got dtype float32"):
        model(np.ones((2, 1), np.float32))
    with pytest.raises(ValueError, match=r"StringLookup '.*' takes strings, got an input of dtype int64"):
        layers.StringLookup(vocabulary=["a"])(tp.Input((2,), dtype="int64"))
    with pytest.raises(
        ValueError, match=r"CategoryEncoding '.*' takes integer ids, got an input of dtype str"
    ):
        layers.CategoryEncoding(3)(inputs)


def test_onnx_export_refuses_string_layers_by_name_and_exports_the_numeric_ones(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    inputs = tp.Input(shape=(1,), dtype="string")
    model = tp.Model(
        inputs, layers.Embedding(4, 2)(layers.TextVectorization(vocabulary=["a"], name="vec")(inputs))
    )
    with pytest.raises(
        ValueError, match=r"^ONNX export: layer 'vec' \(TextVectorization\) works on its inputs in NumPy"
    ):
        model.export(tmp_path / "text.onnx")
    lookup = tp.Model(
        numbers := tp.Input((3,), dtype="int64"), layers.IntegerLookup(vocabulary=[1], name="ids")(numbers)
    )
    with pytest.raises(ValueError, match=r"^ONNX export: layer 'ids' \(IntegerLookup\)"):
        lookup.export(tmp_path / "ids.onnx")
    numbers = tp.Input((4,), dtype="int64")
    encoded = tp.Model(numbers, layers.Dense(2)(layers.CategoryEncoding(6, "count")(numbers)))
    normal = layers.Sequential(
        [tp.Input((3,)), adapted(layers.Normalization(), np.random.rand(9, 3)), layers.Dense(2)]
    )
    for model, x in [
        (encoded, np.random.default_rng(0).integers(0, 6, (5, 4))),
        (normal, np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32)),
    ]:
        path = tmp_path / f"{model.name}.onnx"
        model.export(path)
        session = ort.InferenceSession(str(path))
        (got,) = session.run(None, {session.get_inputs()[0].name: x})
        np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_fit_predict_and_evaluate_take_strings_for_a_model_that_does():
    tp.random.set_seed(0)
    labels = np.asarray([[1.0], [0.0], [1.0], [0.0]], np.float32)
    inputs = tp.Input(shape=(1,), dtype="string")
    vectorize = adapted(layers.TextVectorization(output_mode="multi_hot"), TEXTS)
    functional = tp.Model(inputs, layers.Dense(1, activation="sigmoid")(vectorize(inputs)))
    sequential = layers.Sequential([vectorize, layers.Dense(1, activation="sigmoid")])
    for model, x in [(functional, TEXTS[:, None]), (sequential, TEXTS)]:
        model.compile("adam", "binary_crossentropy")
        history = model.fit(x, labels, epochs=2, batch_size=2, validation_data=(x, labels), verbose=0)
        assert np.all(np.isfinite(history.history["loss"] + history.history["val_loss"]))
        np.testing.assert_allclose(model.predict(x, verbose=0), model(x).numpy(), rtol=1e-6)
    plain = layers.Sequential([layers.Dense(1)])
    plain.compile("adam", "mse")
    with pytest.raises(TypeError, match=r"^x holds strings"):
        plain.fit(TEXTS[:, None], labels, verbose=0)


def test_predict_and_evaluate_take_strings():
    tp.random.set_seed(0)
    model = layers.Sequential(
        [
            adapted(layers.TextVectorization(output_mode="multi_hot"), TEXTS),
            layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile("adam", "binary_crossentropy")
    np.testing.assert_allclose(model.predict(TEXTS, verbose=0), model(TEXTS).numpy(), rtol=1e-6)
    labels = np.asarray([[1.0], [0.0], [1.0], [0.0]], np.float32)
    logs = model.evaluate(iter([(TEXTS, labels)]), verbose=0, return_dict=True)
    assert np.isfinite(logs["loss"])


def test_hashes_of_known_values():
    # FarmHash Fingerprint64 and SipHash-2-4 test vectors
    assert fingerprint64(b"") == 0x9AE16A3B2F90404F
    assert siphash24((0x0706050403020100, 0x0F0E0D0C0B0A0908), bytes(range(15))) == 0xA129CA6149BE45E5
    layer = layers.Hashing(3, mask_value="m")
    np.testing.assert_array_equal(layer(np.asarray(["m", "m"])).numpy(), [0, 0])


def test_a_compiled_step_replays_the_vectorization_of_each_batch():
    texts = np.asarray(["the cat sat", "the dog ran", "a cat", "birds fly", "cat cat", "dog"])
    labels = np.asarray([[1.0], [0.0], [1.0], [0.0], [1.0], [0.0]], np.float32)
    losses = []
    for jit_compile in (False, True):
        tp.random.set_seed(0)
        model = layers.Sequential(
            [
                adapted(layers.TextVectorization(output_mode="count"), texts),
                layers.Dense(1, activation="sigmoid"),
            ]
        )
        model.compile("adam", "binary_crossentropy", jit_compile=jit_compile)
        losses.append(model.fit(texts, labels, epochs=3, batch_size=2, verbose=0).history["loss"])
    assert losses[0] == losses[1]  # bit for bit: each replay looked its own batch up
