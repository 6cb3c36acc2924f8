"""Updates without per-step allocation: kept work arrays, and gradients a replay lends.

The optimizers compute into work arrays they keep, and under ``tp.function`` SGD scales a
gradient in place when the replay lends it (nothing reads it after the update). Neither may
change a result, nor an array the caller can hold.
"""

from __future__ import annotations

import numpy as np
import pytest

import tapefit as tp

OPTIMIZERS = {
    "sgd": lambda: tp.optimizers.SGD(0.05),
    "momentum": lambda: tp.optimizers.SGD(0.05, momentum=0.9),
    "nesterov": lambda: tp.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
    "sgd_decay": lambda: tp.optimizers.SGD(0.05, weight_decay=0.1),
    "sgd_clipnorm": lambda: tp.optimizers.SGD(0.05, clipnorm=0.1),
    "sgd_schedule": lambda: tp.optimizers.SGD(tp.optimizers.schedules.ExponentialDecay(0.05, 2, 0.5)),
    "adam_clipvalue": lambda: tp.optimizers.Adam(0.01, clipvalue=0.01),
    "adam": lambda: tp.optimizers.Adam(0.01, amsgrad=True),
    "adamw": lambda: tp.optimizers.AdamW(0.01),
    "rmsprop": lambda: tp.optimizers.RMSprop(0.01, momentum=0.5, centered=True),
    "adagrad": lambda: tp.optimizers.Adagrad(0.05),
}


def _model_step(make_optimizer, compiled, return_grads=False):
    model = tp.layers.Sequential([tp.layers.Dense(7, activation="relu"), tp.layers.Dense(3)])
    model(tp.constant(np.zeros((1, 5), np.float32)))
    rng = np.random.default_rng(0)
    for v in model.trainable_variables:
        v.assign(rng.standard_normal(v.shape).astype(np.float32))
    loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = make_optimizer()

    def step(x, y):
        with tp.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return (loss, grads) if return_grads else loss

    return model, (tp.function(step) if compiled else step)


def _batches(n=6):
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((4, 5)).astype(np.float32), rng.integers(0, 3, 4)) for _ in range(n)]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_compiled_updates_match_eager_bit_for_bit(name):
    eager_model, eager = _model_step(OPTIMIZERS[name], compiled=False)
    compiled_model, compiled = _model_step(OPTIMIZERS[name], compiled=True)
    for x, y in _batches():
        eager(x, y)
        compiled(x, y)
    for a, b in zip(eager_model.trainable_variables, compiled_model.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_replay_lends_the_dying_gradients_to_the_optimizer():
    # Clipping keeps the update a host call, which the replay lends the gradients to.
    _model, compiled = _model_step(OPTIMIZERS["sgd_clipnorm"], compiled=True)
    for x, y in _batches(3):
        compiled(x, y)
    (program,) = compiled._programs.values()
    calls = [line for line in program._replay.source.splitlines() if "scratch=" in line]
    assert len(calls) == 1 and calls[0].count(", ") >= 4  # the gradients of the four variables


def test_returned_gradients_are_never_overwritten():
    eager_model, eager = _model_step(OPTIMIZERS["sgd"], compiled=False, return_grads=True)
    compiled_model, compiled = _model_step(OPTIMIZERS["sgd"], compiled=True, return_grads=True)
    for x, y in _batches():
        _, eager_grads = eager(x, y)
        _, compiled_grads = compiled(x, y)
        for a, b in zip(eager_grads, compiled_grads):
            np.testing.assert_array_equal(a.numpy(), b.numpy())  # not scaled by the learning rate
    for a, b in zip(eager_model.trainable_variables, compiled_model.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_eager_gradients_are_not_written(name):
    variables = [tp.Variable(np.ones((3, 2), np.float32)), tp.Variable(np.ones(5, np.float32))]
    grads = [np.full((3, 2), 0.5, np.float32), np.full(5, 0.25, np.float32)]
    tensors = [tp.constant(g) for g in grads]
    optimizer = OPTIMIZERS[name]()
    for _ in range(3):
        optimizer.apply_gradients(zip(grads, variables))
        optimizer.apply_gradients(zip(tensors, variables))
    for g, t, value in zip(grads, tensors, (0.5, 0.25)):
        assert np.all(g == value) and np.all(t.numpy() == value)


def test_work_arrays_are_shared_and_grow():
    optimizer = tp.optimizers.SGD(0.1, momentum=0.9)
    small, large = tp.Variable(np.ones(3)), tp.Variable(np.ones((4, 5)))
    for _ in range(2):
        optimizer.apply_gradients([(np.ones(3), small), (np.ones((4, 5)), large)])
    assert sorted(a.size for a in optimizer._work_flat.values()) == [20, 20]
    np.testing.assert_allclose(small.numpy(), 1 - 0.1 - (0.9 * 0.1 + 0.1))


def test_gradients_read_after_the_update_are_not_lent():
    def make(compiled):
        w = tp.Variable(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
        v = tp.Variable(np.linspace(1, 2, 12, dtype=np.float32).reshape(3, 4))
        optimizer = tp.optimizers.SGD(0.1)

        def step(x):
            with tp.GradientTape() as tape:
                loss = tp.reduce_sum(tp.nn.relu(x @ w) * 2.0)
            (g,) = tape.gradient(loss, [w])
            optimizer.apply_gradients([(g, w), (g, v)])  # one gradient for two variables
            return tp.reduce_sum(g * g)  # read after the update

        return (tp.function(step) if compiled else step), w, v

    eager, ew, ev = make(False)
    compiled, cw, cv = make(True)
    rng = np.random.default_rng(2)
    for _ in range(4):
        x = rng.standard_normal((5, 3)).astype(np.float32)
        np.testing.assert_array_equal(eager(x).numpy(), compiled(x).numpy())
    np.testing.assert_array_equal(ew.numpy(), cw.numpy())
    np.testing.assert_array_equal(ev.numpy(), cv.numpy())


@pytest.mark.parametrize("order", ["C", "F"])
def test_sgd_on_a_variable_of_several_blocks_gives_the_whole_products_bits(order):
    from tapefit.core.tensor import _BLOCK

    rng = np.random.default_rng(5)
    shape = (3, _BLOCK // 2 + 7)  # 1.5 blocks and a ragged end
    start = np.asarray(rng.standard_normal(shape), np.float32, order=order)
    grad = rng.standard_normal(shape).astype(np.float32)
    v = tp.Variable(start.copy(order=order))
    held = np.asarray(v)  # a reader of the old value: it must keep it
    old = held.copy()
    tp.optimizers.SGD(0.05).apply_gradients([(tp.constant(grad), v)])
    expected = start - np.multiply(grad, 0.05)
    assert v.numpy().tobytes() == expected.tobytes()
    np.testing.assert_array_equal(held, old)
    tp.optimizers.SGD(0.05).apply_gradients([(tp.constant(grad), v)])  # nothing holds it now
    assert v.numpy().tobytes() == (expected - np.multiply(grad, 0.05)).tobytes()


def test_plain_sgd_updates_are_ops_writing_into_the_gradient_buffers():
    _model, compiled = _model_step(OPTIMIZERS["sgd"], compiled=True)
    for x, y in _batches(3):
        compiled(x, y)
    (program,) = compiled._programs.values()
    source = program._replay.source
    assert "scratch=" not in source  # no update as a host call: only the learning rate is one
    assert source.count("(_w, _v, out=_w)") == 5  # the four variables and iterations, in place
    buffers = {k for k, v in program._replay.__globals__.items() if k.startswith("b")}
    products = [line for line in source.splitlines() if ".assign_sub(" not in line and "out=b" in line]
    assert buffers and len(products) >= 4


@pytest.mark.parametrize(
    "change",
    [
        lambda optimizer, model: setattr(optimizer, "clipvalue", 0.001),
        lambda optimizer, model: setattr(optimizer, "clipnorm", 0.01),
        lambda optimizer, model: setattr(optimizer, "weight_decay", 0.1),
        lambda optimizer, model: setattr(model.trainable_variables[0], "constraint", lambda w: w * 0.5),
        lambda optimizer, model: setattr(optimizer, "learning_rate", 0.5),
        lambda optimizer, model: setattr(
            optimizer, "learning_rate", tp.optimizers.schedules.ExponentialDecay(0.5, 2, 0.5)
        ),
    ],
    ids=["clipvalue", "clipnorm", "weight_decay", "constraint", "learning_rate", "schedule"],
)
def test_an_optimizer_changed_between_calls_updates_as_eager(change):
    runs = []
    for compiled in (False, True):
        model, step = _model_step(OPTIMIZERS["sgd"], compiled=compiled)
        runs.append((model, step))
    (eager_model, eager), (compiled_model, compiled) = runs
    optimizers = [_optimizer_of(eager), _optimizer_of(compiled.python_function)]
    batches = _batches(8)
    for x, y in batches[:4]:
        eager(x, y)
        compiled(x, y)
    change(optimizers[0], eager_model)
    change(optimizers[1], compiled_model)
    for x, y in batches[4:]:
        eager(x, y)
        compiled(x, y)
    assert not compiled.eager
    for a, b in zip(eager_model.trainable_variables, compiled_model.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def _optimizer_of(step):
    (optimizer,) = [
        c.cell_contents for c in step.__closure__ if isinstance(c.cell_contents, tp.optimizers.Optimizer)
    ]
    return optimizer


def test_a_subclass_that_changes_update_step_is_not_inlined():
    class Halved(tp.optimizers.SGD):
        def update_step(self, gradient, variable, learning_rate):
            super().update_step(gradient, variable, learning_rate / 2)

    eager_model, eager = _model_step(lambda: Halved(0.05), compiled=False)
    compiled_model, compiled = _model_step(lambda: Halved(0.05), compiled=True)
    for x, y in _batches():
        eager(x, y)
        compiled(x, y)
    for a, b in zip(eager_model.trainable_variables, compiled_model.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    (program,) = compiled._programs.values()
    assert "scratch=" in program._replay.source


@pytest.mark.parametrize("when", ["before the first call", "after tracing"])
def test_an_update_step_set_on_the_instance_is_what_a_compiled_step_runs(when):
    def halve(optimizer):
        original = optimizer.update_step
        optimizer.update_step = lambda g, v, lr: original(g, v, lr / 2)

    eager_model, eager = _model_step(lambda: tp.optimizers.SGD(0.05), compiled=False)
    compiled_model, compiled = _model_step(lambda: tp.optimizers.SGD(0.05), compiled=True)
    batches = list(_batches())
    if when == "after tracing":
        eager(*batches[0])
        compiled(*batches[0])
        batches = batches[1:]
    halve(_optimizer_of(eager))
    halve(_optimizer_of(compiled.python_function))
    for x, y in batches:
        eager(x, y)
        compiled(x, y)
    for a, b in zip(eager_model.trainable_variables, compiled_model.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


INLINE = ["sgd", "momentum", "nesterov", "sgd_decay", "sgd_schedule", "adam", "adamw", "rmsprop", "adagrad"]


@pytest.mark.parametrize("name", INLINE)
def test_every_optimizer_updates_inside_the_replay_as_array_code(name):
    _model, compiled = _model_step(OPTIMIZERS[name], compiled=True)
    for x, y in _batches(3):
        compiled(x, y)
    (program,) = compiled._programs.values()
    source = program._replay.source
    assert "scratch=" not in source  # the update is ops; at most its scalars come from host calls
    assert source.count("(_w, _v, out=_w)") >= 5  # in-place assign_add/assign_sub of the updates


@pytest.mark.parametrize(
    ("name", "attribute", "value"),
    [
        ("momentum", "momentum", 0.5),
        ("nesterov", "nesterov", False),
        ("adam", "beta_1", 0.5),
        ("adam", "amsgrad", False),
        ("adamw", "weight_decay", 0.5),
        ("rmsprop", "centered", False),
        ("rmsprop", "rho", 0.5),
        ("adagrad", "epsilon", 0.5),
    ],
)
def test_a_hyperparameter_changed_between_compiled_calls_is_followed(name, attribute, value):
    runs = []
    for compiled in (False, True):
        model, step = _model_step(OPTIMIZERS[name], compiled=compiled)
        runs.append((model, step))
    (eager_model, eager), (compiled_model, compiled) = runs
    batches = _batches(8)
    for x, y in batches[:4]:
        eager(x, y)
        compiled(x, y)
    for step in (eager, compiled.python_function):
        optimizer = _optimizer_of(step)
        setattr(optimizer, attribute, value)
    for x, y in batches[4:]:
        eager(x, y)
        compiled(x, y)
    for a, b in zip(eager_model.trainable_variables, compiled_model.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_a_variable_excluded_from_weight_decay_after_tracing_is_followed():
    runs = []
    for compiled in (False, True):
        model, step = _model_step(OPTIMIZERS["adamw"], compiled=compiled)
        runs.append((model, step))
    batches = _batches(8)
    for x, y in batches[:4]:
        for _model, step in runs:
            step(x, y)
    for model, step in runs:
        optimizer = _optimizer_of(getattr(step, "python_function", step))
        optimizer.exclude_from_weight_decay(var_list=[model.trainable_variables[1]])
    for x, y in batches[4:]:
        for _model, step in runs:
            step(x, y)
    for a, b in zip(runs[0][0].trainable_variables, runs[1][0].trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
