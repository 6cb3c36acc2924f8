"""A loss per output and loss_weights: the total, the per-output logs, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp
from tapefit import layers as L
from tapefit.training.output_losses import OutputLosses, resolve_losses


def _two_outputs():
    x = tp.Input((3,))
    h = L.Dense(4, activation="tanh", name="body")(x)
    return tp.Model(x, [L.Dense(1, name="reg")(h), L.Dense(2, name="cls")(h)])


def _data(n=12, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(n, 3)).astype(np.float32),
        rng.normal(size=(n, 1)).astype(np.float32),
        rng.integers(0, 2, n),
    )


def test_the_total_is_the_weighted_sum_of_the_outputs_losses():
    model = _two_outputs()
    x, ya, yb = _data()
    loss, metrics = resolve_losses(
        {"cls": "sparse_categorical_crossentropy", "reg": "mse"},
        {"reg": 0.25, "cls": 3.0},
        model,
        tp.losses.get,
    )
    assert isinstance(loss, OutputLosses) and [m.name for m in metrics] == ["reg_loss", "cls_loss"]
    pred = model(x)
    mse = float(np.mean((pred[0].numpy() - ya) ** 2))
    xent = float(tp.losses.SparseCategoricalCrossentropy()(yb, pred[1]))
    np.testing.assert_allclose(float(loss([ya, yb], pred)), 0.25 * mse + 3.0 * xent, rtol=1e-6)
    np.testing.assert_allclose(float(loss({"reg": ya, "cls": yb}, pred)), 0.25 * mse + 3.0 * xent, rtol=1e-6)


def test_a_list_of_losses_and_weights_follows_the_outputs_order():
    model = _two_outputs()
    x, ya, yb = _data()
    by_list, _ = resolve_losses(["mse", "sparse_categorical_crossentropy"], [2.0, 0.5], model, tp.losses.get)
    by_dict, _ = resolve_losses(
        {"reg": "mse", "cls": "sparse_categorical_crossentropy"},
        {"cls": 0.5, "reg": 2.0},
        model,
        tp.losses.get,
    )
    pred = model(x)
    assert float(by_list([ya, yb], pred)) == float(by_dict([ya, yb], pred))


def test_one_loss_applies_to_every_output_and_none_skips_one():
    model = _two_outputs()
    x, ya, _ = _data()
    both, metrics = resolve_losses("mse", None, model, tp.losses.get)
    assert [m.name for m in metrics] == ["reg_loss", "cls_loss"]
    only, metrics = resolve_losses(["mse", None], None, model, tp.losses.get)
    assert metrics == []  # one loss: "loss" says it all, as in Keras
    pred = model(x)
    np.testing.assert_allclose(float(only([ya, None], pred)), np.mean((pred[0].numpy() - ya) ** 2), rtol=1e-6)
    assert float(both([ya, np.zeros((12, 2), np.float32)], pred)) > float(only([ya, None], pred))


def test_a_single_output_model_keeps_its_loss_as_it_is():
    x = tp.Input((3,))
    model = tp.Model(x, L.Dense(1)(x))
    mse = tp.losses.MeanSquaredError()
    assert resolve_losses(mse, None, model, lambda one: one) == (mse, [])


@pytest.mark.parametrize(
    ("loss", "weights", "message"),
    [
        ({"reg": "mse", "clz": "mse"}, None, r"loss names \['clz'\], which are not outputs"),
        (["mse"], None, r"loss has 1 entries, the model has 2 outputs \['reg', 'cls'\]"),
        ("mse", {"rag": 1.0}, r"loss_weights names \['rag'\]"),
        ("mse", [1.0], r"loss_weights has 1 entries"),
        ("mse", 2.0, "loss_weights is one number, the model has 2 outputs"),
        ([None, None], None, "gives no output a loss"),
    ],
)
def test_bad_losses_and_weights_are_named(loss, weights, message):
    with pytest.raises(ValueError, match=message):
        resolve_losses(loss, weights, _two_outputs(), tp.losses.get)


def test_targets_that_do_not_fit_the_outputs_are_named():
    model = _two_outputs()
    x, ya, _ = _data()
    loss, _ = resolve_losses("mse", None, model, tp.losses.get)
    with pytest.raises(ValueError, match=r"y has no entry 'cls'"):
        loss({"reg": ya}, model(x))
    with pytest.raises(ValueError, match="y is one array, the model has 2 outputs"):
        loss(ya, model(x))


def test_fit_logs_the_total_and_each_outputs_unweighted_loss():
    tp.random.set_seed(3)
    model = _two_outputs()
    x, ya, yb = _data(20)
    trainer = tp.Trainer(
        model,
        tp.optimizers.SGD(0.0),  # no update: the epoch's losses are those of the initial weights
        {"reg": "mse", "cls": "sparse_categorical_crossentropy"},
        loss_weights={"reg": 0.5, "cls": 2.0},
    )
    history = trainer.fit(
        x, {"reg": ya, "cls": yb}, epochs=1, batch_size=20, verbose=0, validation_data=(x, [ya, yb])
    )
    pred = model(x)
    mse = float(np.mean((pred[0].numpy() - ya) ** 2))
    xent = float(tp.losses.SparseCategoricalCrossentropy()(yb, pred[1]))
    logs = {k: v[0] for k, v in history.history.items()}
    assert set(logs) == {"loss", "reg_loss", "cls_loss", "val_loss", "val_reg_loss", "val_cls_loss"}
    np.testing.assert_allclose(
        [logs["reg_loss"], logs["cls_loss"], logs["loss"]], [mse, xent, 0.5 * mse + 2.0 * xent], rtol=1e-5
    )
    np.testing.assert_allclose(logs["val_loss"], logs["loss"], rtol=1e-5)
    predicted = trainer.predict(x)
    assert [p.shape for p in predicted] == [(20, 1), (20, 2)]


def test_dict_inputs_and_outputs_fit_by_name():
    a, b = tp.Input((2,), name="a"), tp.Input((1,), name="b")
    joined = L.Concatenate()([a, b])
    model = tp.Model({"a": a, "b": b}, {"out": L.Dense(1, name="d")(joined), "aux": L.Dense(1)(joined)})
    rng = np.random.default_rng(0)
    x = {"a": rng.normal(size=(8, 2)).astype(np.float32), "b": rng.normal(size=(8, 1)).astype(np.float32)}
    y = {"out": np.ones((8, 1), np.float32), "aux": np.zeros((8, 1), np.float32)}
    trainer = tp.Trainer(model, "sgd", {"out": "mse", "aux": "mae"}, loss_weights={"aux": 0.1})
    history = trainer.fit(x, y, epochs=2, batch_size=4, verbose=0)
    assert sorted(history.history) == ["aux_loss", "loss", "out_loss"]
    assert history.history["loss"][1] < history.history["loss"][0]
    assert set(trainer.evaluate(x, y)) == {"loss", "out_loss", "aux_loss"}


def _two_output_trainer(seed, plugins=None, compile=False):
    tp.random.set_seed(seed)
    return tp.Trainer(
        _two_outputs(),
        tp.optimizers.SGD(0.05),
        ["mse", "sparse_categorical_crossentropy"],
        loss_weights=[0.3, 1.0],
        plugins=plugins,
        compile=compile,
    )


def test_compiled_steps_give_the_eager_history_bit_for_bit():
    x, ya, yb = _data(20)
    eager = _two_output_trainer(1).fit(x, [ya, yb], epochs=2, batch_size=8, verbose=0)
    compiled = _two_output_trainer(1, compile=True).fit(x, [ya, yb], epochs=2, batch_size=8, verbose=0)
    assert compiled.history == eager.history


class _StopAt:
    def __init__(self, step):
        self.step = step

    @tp.hookimpl
    def on_train_batch_start(self, trainer, step):
        if step == self.step:
            raise KeyboardInterrupt


def test_an_interrupted_fit_resumes_with_the_per_output_losses_as_if_uninterrupted(tmp_path):
    x, ya, yb = _data(20)
    reference = _two_output_trainer(2)
    reference.fit(x, [ya, yb], epochs=3, batch_size=8, verbose=0)
    interrupted = _two_output_trainer(
        2, plugins=[{"type": "checkpoint", "dirpath": str(tmp_path)}, _StopAt(4)]
    )
    with pytest.raises(KeyboardInterrupt):
        interrupted.fit(x, [ya, yb], epochs=3, batch_size=8, verbose=0)
    resumed = _two_output_trainer(99)
    history = resumed.fit(
        x, [ya, yb], epochs=3, batch_size=8, verbose=0, resume_from=tmp_path / "interrupted.npz"
    )
    assert history.history == reference.history.history
    assert {"reg_loss", "cls_loss"} <= set(history.history)
    for key, value in reference.model.state_dict().items():
        np.testing.assert_array_equal(resumed.model.state_dict()[key], value)
