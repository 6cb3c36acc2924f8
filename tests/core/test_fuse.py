"""``tp.function(jit_compile=True)``: runs of elementwise ops and optimizer updates as fused
kernels, within the stated tolerance of eager; the default path stays bit for bit eager.

Each model's training step runs eagerly, under ``tp.function`` and under
``tp.function(jit_compile=True)`` on the same batches from the same start.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import tapefit as tp

numba_missing = importlib.util.find_spec("numba") is None
needs_numba = pytest.mark.skipif(numba_missing, reason="the jit path needs numba (the jit extra)")

ROOT = Path(__file__).resolve().parents[2]
RTOL = 1e-6  # the documented tolerance, per float32 step
STEPS = 4


def _mlp():
    return tp.layers.Sequential([tp.layers.Dense(16, activation="relu"), tp.layers.Dense(3)])


def _cnn():
    return tp.layers.Sequential(
        [
            tp.layers.Conv2D(4, 3, activation="relu"),
            tp.layers.MaxPooling2D(2),
            tp.layers.Flatten(),
            tp.layers.Dense(3),
        ]
    )


def _lstm():
    return tp.layers.Sequential([tp.layers.LSTM(6), tp.layers.Dense(3)])


def _gru():
    return tp.layers.Sequential(
        [tp.layers.GRU(6, return_sequences=True), tp.layers.GRU(5), tp.layers.Dense(3)]
    )


class _Attention(tp.Module):
    def __init__(self):
        super().__init__()
        self.attention = tp.layers.MultiHeadAttention(num_heads=2, key_dim=4)
        self.norm = tp.layers.LayerNormalization()
        self.head = tp.layers.Dense(3)

    def call(self, x):
        return self.head(tp.reduce_mean(self.norm(x + self.attention(x, x)), axis=1))


MODELS = {
    "mlp": (_mlp, (8, 5)),
    "cnn": (_cnn, (8, 6, 6, 2)),
    "lstm": (_lstm, (8, 7, 4)),
    "gru": (_gru, (8, 7, 4)),
    "attention": (_Attention, (8, 5, 8)),
}
OPTIMIZERS = {
    "sgd": lambda: tp.optimizers.SGD(0.1),
    "momentum": lambda: tp.optimizers.SGD(0.1, momentum=0.9, nesterov=True),
    "adam": lambda: tp.optimizers.Adam(0.01),
    "adamw": lambda: tp.optimizers.AdamW(0.01),
    "rmsprop": lambda: tp.optimizers.RMSprop(0.01, momentum=0.5, centered=True),
    "adagrad": lambda: tp.optimizers.Adagrad(0.1),
}


def _data(shape, steps=STEPS):
    rng = np.random.default_rng(3)
    return [
        (rng.standard_normal(shape).astype(np.float32), rng.integers(0, 3, shape[0])) for _ in range(steps)
    ]


def _run(make_model, make_optimizer, shape, mode):
    tp.random.set_seed(0)
    model = make_model()
    optimizer = make_optimizer()
    loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)

    def step(x, y):
        with tp.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    run = step if mode == "eager" else tp.function(step, jit_compile=mode == "jit")
    losses = [float(run(tp.constant(x), tp.constant(y))) for x, y in _data(shape)]
    return losses, [v.numpy() for v in model.trainable_variables], run


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_default_compiled_step_is_bit_for_bit_eager(name):
    make, shape = MODELS[name]
    losses, weights, _ = _run(make, OPTIMIZERS["adam"], shape, "eager")
    got_losses, got_weights, run = _run(make, OPTIMIZERS["adam"], shape, "function")
    assert losses == got_losses
    for a, b in zip(weights, got_weights):
        assert a.tobytes() == b.tobytes()
    assert not run.eager


# Every model with Adam, every optimizer on the MLP (each kernel costs a compilation).
CASES = [(name, "adam") for name in sorted(MODELS)] + [("mlp", o) for o in sorted(OPTIMIZERS) if o != "adam"]


@needs_numba
@pytest.mark.parametrize(("name", "optimizer"), CASES)
def test_the_fused_step_is_eager_within_its_tolerance(name, optimizer):
    make, shape = MODELS[name]
    losses, weights, _ = _run(make, OPTIMIZERS[optimizer], shape, "eager")
    got_losses, got_weights, run = _run(make, OPTIMIZERS[optimizer], shape, "jit")
    np.testing.assert_allclose(got_losses, losses, rtol=RTOL * STEPS)
    for a, b in zip(weights, got_weights):
        np.testing.assert_allclose(b, a, rtol=RTOL * STEPS, atol=1e-7)
    assert not run.eager


def _source(run):
    (program,) = run._programs.values()
    return program._replay.source


@needs_numba
def test_adam_updates_each_variable_in_one_fused_pass_per_slot():
    _, _, run = _run(_mlp, OPTIMIZERS["adam"], MODELS["mlp"][1], "jit")
    source = _source(run)
    # Per variable: its momentum, its velocity and itself, each updated by one kernel in place.
    assert len(re.findall(r"^ *if _refcount\(_w\) <= \d+ .*: g\d+\(_w\.reshape", source, re.M)) == 3 * 4
    assert "(_w, _v, out=_w)" in source  # iterations (an int64) still by NumPy


@needs_numba
def test_a_chain_with_a_bias_row_and_a_scalar_becomes_one_kernel():
    rng = np.random.default_rng(0)
    w = tp.Variable(rng.standard_normal((5, 4)).astype(np.float32))
    b = tp.Variable(rng.standard_normal(4).astype(np.float32))

    def forward(x):
        return tp.nn.relu(tp.matmul(x, w) + b) * 0.5 - 1.0

    fused = tp.function(forward, jit_compile=True)
    plain = tp.function(forward)
    for _ in range(3):
        x = tp.constant(rng.standard_normal((3, 5)).astype(np.float32))
        np.testing.assert_allclose(fused(x).numpy(), plain(x).numpy(), rtol=RTOL)
    source = _source(fused)
    # The matrix product, then the add, relu, multiply and subtract as one kernel call.
    assert len(re.findall(r"^    g\d+\(_r\.reshape\(3, 4\), ", source, re.M)) == 1
    assert source.count("out=") == 1


@needs_numba
def test_an_intermediate_read_after_the_run_is_still_computed():
    a = tp.Variable(np.linspace(-1, 1, 6, dtype=np.float32))

    def f(x):
        t = x * a  # read again below, after other work
        u = tp.exp(t) + 1.0
        s = tp.reduce_sum(u)
        return s + tp.reduce_sum(t)

    fused, plain = tp.function(f, jit_compile=True), tp.function(f)
    for k in range(3):
        x = tp.constant(np.full(6, k + 0.5, np.float32))
        np.testing.assert_allclose(fused(x).numpy(), plain(x).numpy(), rtol=RTOL)


@needs_numba
def test_an_update_of_a_variable_whose_array_is_held_elsewhere_leaves_that_array_alone():
    v = tp.Variable(np.ones(4, np.float32))
    opt = tp.optimizers.SGD(0.5)

    @tp.function(jit_compile=True)
    def step(x):
        with tp.GradientTape() as tape:
            loss = tp.reduce_sum(x * v)
        opt.apply_gradients(zip(tape.gradient(loss, [v]), [v]))

    x = tp.constant(np.arange(4, dtype=np.float32))
    step(x)
    step(x)
    held = np.asarray(v)  # a reader of the current value, as a tape would hold it
    before = held.copy()
    step(x)
    np.testing.assert_array_equal(held, before)
    np.testing.assert_allclose(v.numpy(), before - 0.5 * np.arange(4, dtype=np.float32))


@needs_numba
def test_a_division_by_zero_gives_inf_as_numpy_does():
    @tp.function(jit_compile=True)
    def f(x, y):
        return (x / y) * 2.0 + 1.0

    x, y = tp.constant(np.array([1.0, -1.0, 0.0], np.float32)), tp.constant(np.zeros(3, np.float32))
    for _ in range(3):
        with np.errstate(divide="ignore", invalid="ignore"):
            out = f(x, y).numpy()
    assert out[0] == np.inf and out[1] == -np.inf and np.isnan(out[2])


@needs_numba
def test_the_gan_step_fuses_within_tolerance():
    sys.path.insert(0, str(ROOT))
    from examples.gan import GAN

    real = np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32)

    def run(mode):
        tp.random.set_seed(1)
        model = GAN()
        step = (
            model.train_step if mode == "eager" else tp.function(model.train_step, jit_compile=mode == "jit")
        )
        logs = [step(tp.constant(real)) for _ in range(STEPS)]
        return [float(logs[-1]["d_loss"]), float(logs[-1]["g_loss"])], [v.numpy() for v in model.variables]

    (losses, weights), (function_losses, function_weights), (jit_losses, jit_weights) = (
        run("eager"),
        run("function"),
        run("jit"),
    )
    assert losses == function_losses
    assert all(a.tobytes() == b.tobytes() for a, b in zip(weights, function_weights))
    np.testing.assert_allclose(jit_losses, losses, rtol=RTOL * STEPS)
    for a, b in zip(weights, jit_weights):
        np.testing.assert_allclose(b, a, rtol=RTOL * STEPS, atol=1e-7)


def test_jit_compile_without_numba_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba now fails
    with pytest.raises(ImportError, match=r"pip install 'tapefit\[jit\]'"):
        tp.function(lambda x: x, jit_compile=True)
    assert tp.function(lambda x: x * 2.0)(tp.constant(1.0)).numpy() == 2.0  # the default needs none


@needs_numba
def test_a_fused_forward_called_directly_computes_its_run():
    from tapefit.core.capture import OP
    from tapefit.core.emit import Source
    from tapefit.core.fuse import Fused

    b = tp.Variable(np.linspace(-1, 1, 4, dtype=np.float32))
    fused = tp.function(lambda x: tp.nn.relu(x + b) * 2.0, jit_compile=True)
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    for _ in range(3):
        fused(tp.constant(x))
    (program,) = fused._programs.values()
    (forward,) = [ins[1] for ins in Source(program, True).code if ins[0] == OP and isinstance(ins[1], Fused)]
    expected = np.maximum(x + b.numpy(), 0) * np.float32(2.0)
    constants = [np.float32(2.0)]  # the kernel's inputs: x, the bias row, the scalar
    np.testing.assert_allclose(forward(x, b.numpy(), *constants), expected, rtol=RTOL)
    out = np.empty_like(x)
    assert forward(x, b.numpy(), *constants, out=out) is out
