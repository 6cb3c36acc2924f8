"""tp.function: traced programs replay bit for bit what eager code computes."""

from __future__ import annotations

import collections
import functools
import re
import warnings

import numpy as np
import pytest

import tapefit as tp
from tapefit.core.function import host_call


def _data(n=12, features=6, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = rng.integers(0, classes, n)
    return x, y


def _train(make_model, make_optimizer, batches, compiled, loss_fn=None):
    """Runs one training step per batch, eagerly or through tp.function; returns what it saw."""
    tp.random.set_seed(0)
    model = make_model()
    optimizer = make_optimizer()
    loss_fn = loss_fn or tp.losses.SparseCategoricalCrossentropy(from_logits=True)

    def step(x, y):
        with tp.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    fn = tp.function(step) if compiled else step
    losses = [np.asarray(fn(x, y)) for x, y in batches]
    state = {
        "variables": [v.numpy() for v in model.variables],
        "optimizer": optimizer.get_state(),
        "random": tp.random.normal((3,)).numpy(),  # the generator's position after the run
    }
    return losses, state, fn


def _assert_same(a, b):
    losses_a, state_a, _ = a
    losses_b, state_b, fn = b
    assert not fn.eager and fn.experimental_get_tracing_count() == 1  # replayed, no fallback
    for x, y in zip(losses_a, losses_b):
        np.testing.assert_array_equal(x, y)
    assert len(state_a["variables"]) == len(state_b["variables"])
    for x, y in zip(state_a["variables"], state_b["variables"]):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)
    assert state_a["optimizer"].keys() == state_b["optimizer"].keys()
    for key, value in state_a["optimizer"].items():
        np.testing.assert_array_equal(value, state_b["optimizer"][key], err_msg=key)
    np.testing.assert_array_equal(state_a["random"], state_b["random"])


def _replays(fn) -> int:
    return fn.experimental_get_tracing_count()


def test_mlp_training_loop_compiled_equals_eager_bit_for_bit():
    x, y = _data(24)
    batches = [(x[i : i + 8], y[i : i + 8]) for i in (0, 8, 16)] * 3

    def make_model():
        return tp.layers.Sequential(
            [
                tp.layers.Dense(16, activation="relu"),
                tp.layers.Dense(8, activation="tanh"),
                tp.layers.Dense(3),
            ]
        )

    def make_optimizer():  # a schedule: the learning rate must follow the step, not the trace
        return tp.optimizers.Adam(tp.optimizers.schedules.ExponentialDecay(0.05, 2, 0.5))

    eager = _train(make_model, make_optimizer, batches, compiled=False)
    compiled = _train(make_model, make_optimizer, batches, compiled=True)
    _assert_same(eager, compiled)
    assert _replays(compiled[2]) == 1  # traced (twice, to check), then replayed
    assert compiled[1]["optimizer"]["iterations"] == 9


def test_cnn_with_dropout_and_batch_norm_compiled_equals_eager_bit_for_bit():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(6, 6, 6, 2)).astype(np.float32)
    y = rng.integers(0, 3, 6)
    batches = [(x, y)] * 5

    def make_model():
        return tp.layers.Sequential(
            [
                tp.layers.Conv2D(4, 3, padding="same", activation="relu"),
                tp.layers.MaxPool2D(2),
                tp.layers.BatchNormalization(),
                tp.layers.Dropout(0.4),
                tp.layers.Flatten(),
                tp.layers.Dense(3),
            ]
        )

    def make_optimizer():
        return tp.optimizers.SGD(0.05, momentum=0.9)

    eager = _train(make_model, make_optimizer, batches, compiled=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback to eager
        compiled = _train(make_model, make_optimizer, batches, compiled=True)
    _assert_same(eager, compiled)  # moving statistics, dropout masks and generator state included
    assert _replays(compiled[2]) == 1
    assert not np.array_equal(eager[1]["variables"][4], np.zeros(4))  # moving_mean moved


def test_user_module_with_python_control_flow_compiled_equals_eager():
    class Residual(tp.Module):
        def __init__(self, depth, skip_every):
            super().__init__()
            self.depth, self.skip_every = depth, skip_every
            self.layers = [tp.layers.Dense(5, activation="tanh") for _ in range(depth)]
            self.head = tp.layers.Dense(3)

        def call(self, x, training=False):
            h = None
            for i, layer in enumerate(self.layers):
                out = layer(x if i == 0 else h)
                h = out + h if i % self.skip_every and i > 0 else out
            if training:
                h = tp.nn.dropout(h, 0.2)
            return self.head(h)

    x, y = _data(8, features=5)
    batches = [(x, y)] * 4
    eager = _train(lambda: Residual(4, 2), lambda: tp.optimizers.RMSprop(0.01), batches, compiled=False)
    compiled = _train(lambda: Residual(4, 2), lambda: tp.optimizers.RMSprop(0.01), batches, compiled=True)
    _assert_same(eager, compiled)


def test_a_new_shape_or_python_value_traces_again():
    traces = []

    @tp.function
    def f(x, scale):
        traces.append((x.shape, scale))  # a Python side effect: runs at trace time only
        return tp.reduce_sum(x * scale)

    a = np.ones((2, 3), np.float32)
    for _ in range(4):
        assert float(f(a, 2.0)) == 12.0
    assert traces == [((2, 3), 2.0)] * 2  # traced, then traced again to check the trace
    assert float(f(np.ones((4, 3), np.float32), 2.0)) == 24.0
    assert float(f(a, 3.0)) == 18.0
    assert float(f(a.astype(np.float64), 2.0)) == 12.0
    assert [t for t in traces[2:]] == [((4, 3), 2.0), ((2, 3), 3.0), ((2, 3), 2.0)]
    for _ in range(3):  # each known signature replays: no more traces
        f(a, 2.0)
    assert len(traces) == 5


def test_python_side_effects_run_at_trace_time_only():
    seen = []
    v = tp.Variable([1.0, 2.0])

    @tp.function
    def f(x):
        seen.append("traced")
        v.assign_add(x)
        return v * 2.0

    outputs = [f(tp.constant([1.0, 1.0])).numpy() for _ in range(5)]
    assert seen == ["traced", "traced"]  # the first call traces, the second checks it
    np.testing.assert_array_equal(v.numpy(), [6.0, 7.0])  # the assigns ran on every call
    np.testing.assert_array_equal(outputs[-1], [12.0, 14.0])


def test_variables_are_read_and_assigned_at_replay_time():
    w = tp.Variable([[1.0, 2.0]])

    @tp.function
    def f(x):
        return tp.matmul(x, w, transpose_b=True)

    x = tp.constant([[1.0, 1.0]])
    for _ in range(3):
        f(x)
    w.assign([[5.0, 7.0]])  # changed outside the function
    assert float(f(x)[0, 0]) == 12.0


def test_random_ops_draw_fresh_values_from_the_eager_generators():
    def draws(fn):
        tp.random.set_seed(3)
        return [fn(tp.constant(0.0)).numpy() for _ in range(5)]

    def sample(shift):
        return tp.random.normal((4,)) + tp.random.uniform((2,), seed=7)[0] + shift

    eager = draws(sample)
    f = tp.function(sample)
    compiled = draws(f)
    assert not f.eager
    for a, b in zip(eager, compiled):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(compiled[3], compiled[4])  # fresh numbers on each replay


def test_a_tensor_value_used_in_python_falls_back_to_eager_with_a_warning_naming_the_line():
    calls = []

    @tp.function
    def f(x):
        calls.append(1)
        if tp.reduce_sum(x) > 0:  # depends on the value: cannot be traced
            return x * 2.0
        return x - 1.0

    with pytest.warns(RuntimeWarning, match=r"test_function\.py:\d+ \('if tp\.reduce_sum\(x\) > 0:"):
        assert f(tp.constant([1.0])).numpy() == 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once only
        assert f(tp.constant([-1.0])).numpy() == -2.0  # eager: the other branch, correctly
        assert f(tp.constant([3.0])).numpy() == 6.0
    assert f.eager and len(calls) == 3


def test_a_partial_without_a_name_falls_back_with_the_warning():
    def scale(x, k):
        if tp.reduce_sum(x) > 0:
            return x * k
        return x

    f = tp.function(functools.partial(scale, k=2.0))  # a partial has no __name__ to copy
    with pytest.warns(RuntimeWarning, match=r"tp\.function 'functools\.partial\(.*runs eagerly"):
        assert f(tp.constant([1.0])).numpy() == 2.0
    assert f.eager


def test_float_of_a_loss_falls_back_and_keeps_eager_results():
    v = tp.Variable(1.0)

    @tp.function
    def f():
        v.assign_add(1.0)
        return float(v)  # the value leaves for Python

    with pytest.warns(RuntimeWarning, match="return float"):
        assert f() == 2.0
    assert f() == 3.0 and f() == 4.0


def test_indexing_with_a_traced_tensor_falls_back_naming_the_line():
    xs = [tp.constant(np.roll(np.arange(5, dtype=np.float32), i)) for i in range(4)]  # maxima move

    def pick(x):
        return x[tp.argmax(x)] * 2.0

    f = tp.function(pick)
    with pytest.warns(RuntimeWarning, match=r"test_function\.py:\d+ \('return x\[tp\.argmax"):
        results = [f(x).numpy() for x in xs]
    for x, r in zip(xs, results):
        np.testing.assert_array_equal(r, pick(x).numpy())
    assert f.eager


def test_code_that_reads_arrays_directly_is_caught_by_the_second_trace():
    # Reading the private array bypasses every check: the constant it makes differs between
    # the first two traces, so the function falls back to eager instead of freezing it.
    xs = [tp.constant(np.roll(np.arange(5, dtype=np.float32), i)) for i in range(4)]

    def centred(x):
        return x - tp.constant(x._value[0])

    f = tp.function(centred)
    with pytest.warns(RuntimeWarning, match="two traces of the same signature differ"):
        results = [f(x).numpy() for x in xs]
    for x, r in zip(xs, results):
        np.testing.assert_array_equal(r, centred(x).numpy())


def test_an_active_tape_sees_the_ops_of_a_compiled_function():
    @tp.function
    def f(x):
        return x * x

    x = tp.Variable(3.0)
    for _ in range(3):
        f(x)
    with tp.GradientTape() as tape:
        y = f(x)
    assert float(tape.gradient(y, x)) == 6.0


def test_decorator_forms_methods_and_ndarray_arguments():
    class Model(tp.Module):
        def __init__(self):
            super().__init__()
            self.w = tp.Variable(2.0)

        @tp.function
        def scaled(self, x):
            return x * self.w

    m = Model()
    for _ in range(3):
        assert m.scaled(np.float32(3.0)).numpy() == 6.0
    m.w.assign(4.0)
    assert m.scaled(np.float32(3.0)).numpy() == 12.0

    @tp.function(reduce_retracing=True)
    def g(d):
        return {"sum": d["a"] + d["b"]}

    for _ in range(3):
        out = g({"a": np.ones(2, np.float32), "b": tp.constant([1.0, 2.0])})
    np.testing.assert_array_equal(out["sum"].numpy(), [2.0, 3.0])
    assert isinstance(out["sum"], tp.Tensor)


def test_reduce_logsumexp_shifts_by_each_calls_maximum():
    # The overflow guard's shift is an op, so a replay does not keep the traced call's maximum.
    f = tp.function(tp.reduce_logsumexp)
    for i in range(5):
        x = tp.constant([1.0, 2.0, 40.0 * i])
        np.testing.assert_array_equal(f(x).numpy(), tp.reduce_logsumexp(x).numpy())
    assert not f.eager and f.experimental_get_tracing_count() == 1


def test_clipping_ops_and_an_update_inside_the_function_replay():
    v = tp.Variable(np.ones(3, np.float32))

    def step(x):
        with tp.GradientTape() as tape:
            loss = tp.reduce_sum(v * x * x)
        (g,) = tape.gradient(loss, [v])
        (clipped,), norm = tp.clip_by_global_norm([g], 1.0)
        v.assign_sub(0.1 * clipped)
        return norm

    f = tp.function(step)
    xs = [tp.constant([1.0, 2.0, float(i)]) for i in range(5)]
    compiled = [f(x).numpy() for x in xs]
    after = v.numpy()
    v.assign(np.ones(3, np.float32))
    eager = [step(x).numpy() for x in xs]
    np.testing.assert_array_equal(compiled, eager)
    np.testing.assert_array_equal(after, v.numpy())
    assert not f.eager


def test_a_constant_made_from_a_variable_reads_it_on_each_call():
    v = tp.Variable([1.0, 2.0])

    @tp.function
    def f():
        return tp.constant(v) * 2.0

    for _ in range(3):
        f()
    v.assign([3.0, 4.0])
    np.testing.assert_array_equal(f().numpy(), [6.0, 8.0])


def test_a_gradient_summed_over_several_uses_replays_right():
    # The tape sums the gradients of a tensor used twice in place when no one else holds
    # them; while tracing that sum must be an op, or replays would keep the traced sum.
    w = tp.Variable(np.ones(3, np.float32))

    @tp.function
    def grad(x):
        with tp.GradientTape() as tape:
            h = w * x
            y = tp.reduce_sum(h * h + h)
        return tape.gradient(y, w)

    for seed in range(4):
        x = np.random.default_rng(seed).normal(size=3).astype(np.float32)
        expected = 2 * x * x + x  # d/dw of (w x)^2 + w x at w = 1
        np.testing.assert_allclose(grad(x).numpy(), expected, rtol=1e-6)


def test_multi_output_ops_scalars_and_python_outputs_replay_as_eager():
    def run(compiled):
        v = tp.Variable(np.arange(6, dtype=np.float32).reshape(2, 3))

        def step(x):
            a, b = tp.unstack(x * v)  # one op, two outputs
            first, rest = tp.split(a + b, [1, 2])
            s = tp.reduce_sum(first) * 2.0 - tp.reduce_max(rest)  # 0-d results
            v.assign_add(tp.stack([a, b]) * 0.5)
            return {"s": s, "rest": rest, "tag": "done", "n": 3}

        fn = tp.function(step) if compiled else step
        xs = [np.full((2, 3), i, np.float32) for i in range(1, 6)]
        return [fn(x) for x in xs], v.numpy(), fn

    eager, v_eager, _ = run(False)
    compiled, v_compiled, fn = run(True)
    assert not fn.eager and fn.experimental_get_tracing_count() == 1
    for e, c in zip(eager, compiled):
        assert c.keys() == e.keys() and c["tag"] == "done" and c["n"] == 3
        assert isinstance(c["s"], tp.Tensor) and c["s"].shape == () and c["s"].dtype == np.float32
        np.testing.assert_array_equal(c["s"].numpy(), e["s"].numpy())
        np.testing.assert_array_equal(c["rest"].numpy(), e["rest"].numpy())
    np.testing.assert_array_equal(v_compiled, v_eager)


def test_results_keep_their_structure_however_nested():
    pair = collections.namedtuple("pair", "first rest")

    @tp.function
    def f(x):
        return {"b": pair(x + 1.0, (x, "tag")), "a": [], "t": ()}

    @tp.function
    def deep(x):  # deeper than the replay writes out as one expression
        result = x * 2.0
        for _ in range(40):
            result = [result]
        return result

    for value in (1.0, 2.0, 3.0, 4.0):
        out, nested = f(tp.constant([value])), deep(tp.constant([value]))
    for fn in (f, deep):
        assert not fn.eager and fn.experimental_get_tracing_count() == 1
    assert list(out) == ["b", "a", "t"] and out["a"] == [] and out["t"] == ()
    assert isinstance(out["b"], pair) and out["b"].rest[1] == "tag"
    np.testing.assert_array_equal(out["b"].first.numpy(), [5.0])
    np.testing.assert_array_equal(out["b"].rest[0].numpy(), [4.0])
    for _ in range(40):
        assert isinstance(nested, list) and len(nested) == 1
        (nested,) = nested
    np.testing.assert_array_equal(nested.numpy(), [8.0])


# -- the replay's buffer plan ------------------------------------------------------------


def _program(fn):
    (program,) = fn._programs.values()
    return program


class _SelfAttention(tp.Module):
    def __init__(self):
        super().__init__()
        self.attention = tp.layers.MultiHeadAttention(num_heads=2, key_dim=4)
        self.pool = tp.layers.GlobalAveragePooling1D()
        self.head = tp.layers.Dense(3)

    def call(self, x, training=False):
        return self.head(self.pool(self.attention(x, x, use_causal_mask=True)))


@pytest.mark.parametrize("name", ["mlp", "conv", "lstm", "gru", "simple_rnn", "attention"])
def test_planned_replays_equal_eager_bit_for_bit(name):
    rng = np.random.default_rng(7)
    if name in ("mlp",):
        x = rng.normal(size=(8, 6)).astype(np.float32)
    elif name == "conv":
        x = rng.normal(size=(4, 6, 6, 2)).astype(np.float32)
    else:
        x = rng.normal(size=(4, 5, 6)).astype(np.float32)
    y = rng.integers(0, 3, len(x))
    batches = [(x * (1 + i / 10), y) for i in range(5)]
    layers = {
        "mlp": lambda: [tp.layers.Dense(16, activation="relu"), tp.layers.Dense(8, activation="relu")],
        "conv": lambda: [tp.layers.Conv2D(4, 3, padding="same", activation="relu"), tp.layers.Flatten()],
        "lstm": lambda: [tp.layers.LSTM(5, return_sequences=True), tp.layers.LSTM(4)],
        "gru": lambda: [tp.layers.Bidirectional(tp.layers.GRU(4))],
        "simple_rnn": lambda: [tp.layers.SimpleRNN(3)],
    }

    def make_model():
        if name == "attention":
            return _SelfAttention()
        return tp.layers.Sequential([*layers[name](), tp.layers.Dense(3)])

    eager = _train(make_model, lambda: tp.optimizers.SGD(0.05), batches, compiled=False)
    compiled = _train(make_model, lambda: tp.optimizers.SGD(0.05), batches, compiled=True)
    _assert_same(eager, compiled)
    assert _program(compiled[2]).buffers  # the replay wrote into planned buffers


def test_the_plan_reuses_buffers_and_writes_into_them():
    w1 = tp.Variable(np.full((6, 6), 0.1, np.float32))
    w2 = tp.Variable(np.full((6, 6), 0.2, np.float32))

    @tp.function
    def f(x):
        h = x
        for _ in range(4):  # eight (8, 6) intermediates, at most three alive at once
            h = tp.nn.relu(tp.matmul(h, w1))
            h = tp.matmul(h, w2) * 0.5
        return tp.reduce_sum(h)

    x = np.random.default_rng(0).normal(size=(8, 6)).astype(np.float32)
    expected = [float(f.python_function(tp.constant(x * i))) for i in range(1, 5)]
    got = [float(f(x * i)) for i in range(1, 5)]
    assert got == expected
    program = _program(f)
    source = program._replay.source
    planned = source.count("out=b")
    assert planned >= 8
    assert len(program.buffers) < planned  # buffers are reused once their readers have run
    assert all(b.shape == (8, 6) for b in program.buffers)


def test_results_and_views_of_them_never_alias_a_buffer():
    w = tp.Variable(np.eye(4, dtype=np.float32) * 2)

    @tp.function
    def f(x):
        h = tp.matmul(x, w)  # returned, so not planned
        t = tp.transpose(tp.matmul(h, w))  # a view of an intermediate, returned
        r = tp.reshape(tp.matmul(t, w), [-1])  # a reshape of a planned matmul, returned
        return h, t, r, tp.matmul(r[None, :4], w)

    rng = np.random.default_rng(1)
    xs = [rng.normal(size=(4, 4)).astype(np.float32) for _ in range(5)]
    kept = [f(x) for x in xs]
    copies = [[t.numpy() for t in out] for out in kept]
    for _ in range(3):
        f(xs[0])  # later calls must not write over what earlier calls returned
    for out, saved, x in zip(kept, copies, xs):
        for t, c in zip(out, saved):
            np.testing.assert_array_equal(t.numpy(), c)
        expected = f.python_function(tp.constant(x))
        for t, e in zip(out, expected):
            np.testing.assert_array_equal(t.numpy(), e.numpy())
    program = _program(f)
    for t in kept[-1]:
        assert not any(np.shares_memory(t._value, b) for b in program.buffers)


def test_views_keep_their_base_buffer_alive():
    w = tp.Variable(np.arange(16, dtype=np.float32).reshape(4, 4) / 10)

    @tp.function
    def f(x):
        a = tp.matmul(x, w)
        view = tp.transpose(a)  # lives after a's last direct read
        b = tp.matmul(x * 2.0, w)  # same shape as a: would take a's buffer if a were dead
        c = tp.matmul(b, w) + 1.0
        return tp.reduce_sum(view * c)

    rng = np.random.default_rng(2)
    for _ in range(5):
        x = rng.normal(size=(4, 4)).astype(np.float32)
        np.testing.assert_array_equal(f(x).numpy(), f.python_function(tp.constant(x)).numpy())
    assert not f.eager and _replays(f) == 1


def test_a_host_call_that_keeps_its_gradient_keeps_its_values():
    w = tp.Variable(np.ones((3, 3), np.float32))
    kept = []

    def keep(g):
        kept.append(g)

    @tp.function
    def f(x):
        with tp.GradientTape() as tape:
            loss = tp.reduce_sum(tp.matmul(x, w) ** 2)
        g = tape.gradient(loss, w)
        host_call(keep, g)  # lent a planned buffer: the replay sees that it was kept
        return loss

    rng = np.random.default_rng(3)
    xs = [rng.normal(size=(2, 3)).astype(np.float32) for _ in range(5)]
    for x in xs:
        f(x)
    assert not f.eager and _replays(f) == 1
    # Every call's gradient, as each call saw it: none written over by a later call.
    expected = []
    for x in xs:
        with tp.GradientTape() as tape:
            loss = tp.reduce_sum(tp.matmul(tp.constant(x), w) ** 2)
        expected.append(tape.gradient(loss, w).numpy())
    for g, e in zip(kept, expected):
        np.testing.assert_array_equal(g.numpy(), e)
    assert len({id(g._value) for g in kept}) == len(kept)
    assert "_refcount(b" in _program(f)._replay.source


def test_replays_call_a_host_calls_replay_form_and_the_trace_calls_fn():
    calls = []

    def checked(t, scale):
        calls.append(("checked", scale))
        assert t.shape == (2, 3)  # what no replay can change: the trace checked it once

    def replay(t, scale):
        calls.append(("replay", scale))

    @tp.function
    def f(x):
        h = x * 2.0
        host_call(checked, h, 3, replay=replay)
        return h

    for _ in range(4):
        f(np.ones((2, 3), np.float32))
    assert calls == [("checked", 3)] * 2 + [("replay", 3)] * 2  # two traces, then two replays


def test_a_failing_guard_traces_again_before_anything_runs():
    from tapefit.core.function import guard

    scale = [2.0]
    seen = []

    @tp.function
    def f(x):
        factor = scale[0]  # a choice made on Python state
        guard(lambda: scale[0] == factor)
        seen.append(factor)
        return x * factor

    x = np.ones(3, np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(f(x).numpy(), x * 2.0)
    scale[0] = 5.0
    for _ in range(3):
        np.testing.assert_array_equal(f(x).numpy(), x * 5.0)
    assert seen == [2.0, 2.0, 5.0, 5.0]  # two traces each, replays in between
    assert not f.eager and _replays(f) == 1


@pytest.mark.parametrize("planned", [True, False])
def test_forwards_written_out_in_the_replay_source_compute_what_they_return(planned):
    from tapefit.core.marks import _SOURCES
    from tapefit.core.ops import linalg, nn, reduce

    rng = np.random.default_rng(5)
    x, k = rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=(3, 5)).astype(np.float32)
    b, y = rng.normal(size=5).astype(np.float32), rng.normal(size=(4, 5)).astype(np.float32)
    cases = [
        (nn._dense, [x, k, b], {"relu": True}),
        (nn._dense, [x, k], {"relu": False}),
        (nn._relu_backprop, [y, np.maximum(y, 0)], {}),
        (linalg._matmul, [x, k.T.copy()], {"transpose_a": False, "transpose_b": True}),
        (linalg._matmul, [x.T.copy(), k], {"transpose_a": True, "transpose_b": False}),
        (reduce._sum, [y], {"axis": (0,), "keepdims": False}),
        (reduce._sum, [y > 0], {"axis": (0, 1), "keepdims": True}),  # bools sum as int32
    ]
    for forward, args, attrs in cases:
        expected = forward(*args, **attrs)
        names = {}

        def name(value, names=names):
            names[f"n{len(names)}"] = value
            return f"n{len(names) - 1}"

        out = np.empty_like(expected) if planned else None
        arguments = [f"a{i}" for i in range(len(args))]
        lines = _SOURCES[forward](name, arguments, attrs, "out" if planned else "None")
        scope = {**names, **dict(zip(arguments, args)), "out": out}
        exec("\n".join(lines), scope)
        np.testing.assert_array_equal(scope["_r"], expected)
        assert scope["_r"] is out if planned else scope["_r"] is not None


def _compiled_mlp_step(hidden, learning_rate):
    """A Dense-ReLU-Dense classifier's SGD training step under tp.function."""
    model = tp.layers.Sequential([tp.layers.Dense(hidden, activation="relu"), tp.layers.Dense(3)])
    loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = tp.optimizers.SGD(learning_rate)

    @tp.function
    def step(x, y):
        with tp.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def test_the_mlp_replay_calls_numpy_without_the_forwards_python_functions():
    step = _compiled_mlp_step(8, 0.1)
    x, y = _data(6, 4)
    for _ in range(3):
        step(x, y)
    scope = _program(step)._replay.__globals__
    from tapefit.core.ops import linalg, nn

    called = {value for value in scope.values() if callable(value)}
    assert not called & {nn._dense, nn._relu_backprop, linalg._matmul}
    assert np.matmul in called


def test_written_out_assign_sub_swaps_an_array_someone_holds():
    v = tp.Variable(np.ones(3, np.float32))
    counter = tp.Variable(np.int64(0))

    @tp.function
    def f(x):
        v.assign_sub(x * 2.0)
        counter.assign_add(np.int64(1))
        return v + 0.0

    x = np.full(3, 0.25, np.float32)
    for _ in range(3):
        f(x)
    assert "(_w, _v, out=_w)" in _program(f)._replay.source
    held = v.numpy()  # a read-only view: v's array now has another holder
    value = v._value
    np.testing.assert_array_equal(f(x).numpy(), np.full(3, -1.0, np.float32))
    assert v._value is not value and np.all(held == -0.5)  # swapped, as assign_sub does
    np.testing.assert_array_equal(f(x).numpy(), np.full(3, -1.5, np.float32))
    assert int(counter) == 5


def test_the_key_of_a_call_with_tensors_only_is_its_signature():
    from tapefit.core.function import _signature, _tensors_key

    a, b = tp.constant(np.ones((2, 3), np.float32)), tp.constant(np.arange(2))
    for args in [(a, b), (b,), ()]:
        arrays = []
        assert _tensors_key(args, arrays) == _signature((args, {}), [])[1]
        assert all(x is t._value for x, t in zip(arrays, args, strict=True))
    assert _tensors_key((a, np.ones(2)), []) is None and _tensors_key((tp.Variable(1.0),), []) is None


def test_unchanged_checks_attributes_by_identity_or_equality():
    from tapefit.core.function import unchanged

    class Config:
        pass

    config = Config()
    config.rate, config.hook = 0.5, None
    check = unchanged((config, "rate"), (config, "hook"))
    assert check()
    config.rate = float("0.5")  # another, equal float
    assert check()
    config.hook = print
    assert not check()
    assert unchanged()()
    with pytest.raises(ValueError, match="not an attribute name"):
        unchanged((config, "rate + 1"))


def test_repeated_replays_do_not_grow_memory():
    import tracemalloc

    step = _compiled_mlp_step(32, 0.01)
    x, y = _data(16, 8)
    for _ in range(5):
        step(x, y)
    replay = _program(step)._replay
    buffers = {k: v for k, v in replay.__globals__.items() if k.startswith("b")}
    assert buffers
    tracemalloc.start()
    try:
        for _ in range(10):
            step(x, y)
        first = tracemalloc.get_traced_memory()[0]
        for _ in range(100):
            step(x, y)
        second = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert second - first < 16 * 1024
    assert not step.eager and _replays(step) == 1
    # The optimizer is lent the gradients' buffers and keeps none: the same buffers serve every call.
    assert all(replay.__globals__[k] is v for k, v in buffers.items())


def test_ops_on_constants_are_computed_once_at_plan_time():
    calls = []  # the results, each checked as it comes

    @tp.function
    def f(x):
        scale = tp.reshape(tp.constant([2.0, 3.0]) / 4.0, [1, 2])  # constants only: folded
        return x * scale

    x = np.ones((3, 2), np.float32)
    for i in range(4):
        calls.append(f(x * i).numpy())
        np.testing.assert_array_equal(calls[-1], (x * i) * np.array([[0.5, 0.75]], np.float32))
    source = _program(f)._replay.source
    assert source.count(" = g") == 1  # one op call left: the multiply


def test_a_call_while_the_program_runs_does_not_share_its_buffers():
    w = tp.Variable(np.full((3, 3), 0.5, np.float32))
    inner, nested = [], [False]

    def again(t):  # a host call that calls the function again, while its replay runs
        if not nested[0]:
            nested[0] = True
            try:
                inner.append(f(t.numpy() * 2.0).numpy())
            finally:
                nested[0] = False

    @tp.function
    def f(x):
        h = tp.nn.relu(tp.matmul(x, w))
        host_call(again, h)
        return tp.reduce_sum(tp.matmul(h, w) * h)

    def eager(x):
        nested[0] = True
        try:
            return f.python_function(tp.constant(x)).numpy()
        finally:
            nested[0] = False

    rng = np.random.default_rng(4)
    for _ in range(5):
        x = rng.normal(size=(2, 3)).astype(np.float32)
        inner.clear()
        got = f(x).numpy()
        h = np.maximum(x @ w.numpy(), 0)
        assert len(inner) == 1
        np.testing.assert_array_equal(inner[0], eager(h * 2.0))
        np.testing.assert_array_equal(got, eager(x))
    assert not f.eager and _replays(f) == 1
    assert _program(f)._unplanned is not None  # the inner calls replayed without the buffers


@pytest.mark.parametrize("schedule", [False, True])
def test_a_host_call_that_changes_the_optimizer_changes_that_calls_update(schedule):
    x = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)

    def run(compiled):
        a = tp.Variable(np.ones(3, np.float32))
        rate = tp.optimizers.schedules.ExponentialDecay(0.1, 2, 0.5) if schedule else 0.1
        opt = tp.optimizers.SGD(rate)

        def maybe_clip():
            if int(opt.iterations) == 3:
                opt.clipvalue = 0.001

        def step(x):
            with tp.GradientTape() as tape:
                loss = tp.reduce_sum(x * a)
            g = tape.gradient(loss, [a])
            host_call(maybe_clip)  # before the update, in the same call
            opt.apply_gradients(zip(g, [a]))
            return loss

        f = tp.function(step) if compiled else step
        out = []
        for i in range(6):
            f(tp.constant(x[i]))
            out.append(a.numpy())
            if compiled and i == 2:  # the replay about to run the changing host call
                assert re.search(r"^ *if g\d+\(\):$", _program(f)._replay.source, re.M)
        return out, f

    expected, _ = run(False)
    got, f = run(True)
    for e, g in zip(expected, got):
        assert e.tobytes() == g.tobytes()
    assert not f.eager


def test_an_inline_update_with_no_host_call_before_it_is_checked_at_entry_only():
    a = tp.Variable(np.ones(3, np.float32))
    opt = tp.optimizers.SGD(0.1)

    @tp.function
    def step(x):
        with tp.GradientTape() as tape:
            loss = tp.reduce_sum(x * a)
        opt.apply_gradients(zip(tape.gradient(loss, [a]), [a]))
        return loss

    for _ in range(3):
        step(tp.constant(np.ones(3, np.float32)))
    source = _program(step)._replay.source
    assert not re.search(r"^ *if g\d+\(\):$", source, re.M)  # no check in the replay itself


@pytest.mark.parametrize("late", [np.ones(1, np.float32), np.ones(3, np.float64)], ids=["shape", "dtype"])
@pytest.mark.parametrize("through_op", [False, True], ids=["into-assign", "through-an-op"])
def test_a_host_call_result_unlike_the_traced_one_is_refused_on_every_replay(late, through_op):
    results = [np.ones(3, np.float32), late]
    v = tp.Variable(np.zeros(3, np.float32))

    def delta():
        return tp.constant(results[0])

    @tp.function
    def step():
        value = host_call(delta)
        v.assign_add(value * 2.0 if through_op else value)  # a planned op, or the assign itself

    for _ in range(3):  # two traces and a replay
        step()
    results.pop(0)
    for _ in range(2):
        with pytest.raises(
            ValueError, match=r"host call \S*delta returned shape .* when the function was traced"
        ):
            step()
    np.testing.assert_array_equal(v.numpy(), [6.0 if through_op else 3.0] * 3)  # refused calls change nothing


def test_a_host_call_whose_result_nothing_reads_replays():
    a = tp.Variable(np.ones(3, np.float32))
    seen = []

    def side(x):
        seen.append(float(tp.reduce_sum(x)))
        return tp.constant(np.float32(0.0))  # a result the function drops

    @tp.function
    def step(x):
        host_call(side, x)
        return tp.reduce_sum(x * a)

    for k in range(3):  # a trace, then replays
        assert float(step(tp.constant(np.full(3, k, np.float32)))) == 3.0 * k
    assert seen == [0.0, 3.0, 6.0]


@pytest.mark.parametrize(
    "make", [lambda: tp.optimizers.SGD(0.5), lambda: tp.optimizers.Adam(0.5)], ids=["sgd", "adam"]
)
def test_an_eager_update_in_another_thread_during_a_trace_runs_eagerly(make):
    import threading

    started, release = threading.Event(), threading.Event()
    a = tp.Variable(np.ones(3, np.float32))

    @tp.function
    def traced(x):
        started.set()
        release.wait(10)  # the trace stays open while the other thread updates
        return tp.reduce_sum(x * a)

    thread = threading.Thread(target=traced, args=(tp.constant(np.ones(3, np.float32)),))
    thread.start()
    try:
        assert started.wait(10)
        b = tp.Variable(np.ones(3, np.float32))
        optimizer = make()
        optimizer.apply_gradients([(tp.constant(np.ones(3, np.float32)), b)])
    finally:
        release.set()
        thread.join()
    np.testing.assert_allclose(b.numpy(), 0.5, rtol=1e-5)  # lr * g/|g| for both on a first step
    assert int(optimizer.iterations) == 1


def test_functions_traced_in_several_threads_at_once_each_replay_their_own_program():
    import sys
    import threading
    import warnings

    def make(k):
        def body(x):
            y = x
            for _ in range(20):  # long enough for the threads' traces to overlap
                y = tp.tanh(y * float(k) + 1.0)
            return y

        return body

    x = tp.constant(np.linspace(-1, 1, 16, dtype=np.float32))
    expected = {k: make(k)(x).numpy() for k in range(4)}
    results: dict = {}

    def run(k):
        f = tp.function(make(k))
        results[k] = [f(x).numpy() for _ in range(6)]

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "two traces differ" fallback
            threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    finally:
        sys.setswitchinterval(interval)
    for k in range(4):
        assert len(results[k]) == 6
        for value in results[k]:
            np.testing.assert_array_equal(value, expected[k])


def test_a_none_argument_is_part_of_the_signature_on_the_fast_path_too():
    calls = []

    @tp.function
    def scaled(x, w):
        calls.append(w is None)
        return x * 2.0 if w is None else x * w

    x = tp.constant(np.arange(3, dtype=np.float32))
    w = tp.constant(np.full(3, 3.0, np.float32))
    for _ in range(3):
        np.testing.assert_array_equal(scaled(x, None).numpy(), [0, 2, 4])
        np.testing.assert_array_equal(scaled(x, w).numpy(), [0, 3, 6])
    assert calls == [True, False, True, False]  # each signature traced twice, then replayed
