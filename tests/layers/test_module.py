"""Module: tracking, names, paths, calling, training propagation, freezing, state_dict, summary."""

import re

import numpy as np
import pytest

import tapefit as tp
from tapefit.layers import Dense, Sequential


class TwoDense(tp.Module):
    """The issue's example: two Dense layers in a list and a dict of variables."""

    def __init__(self, name=None):
        super().__init__(name=name)
        self.blocks = [Dense(4, activation="tanh"), Dense(2)]
        self.extra = {
            "scale": tp.Variable(np.ones(2, np.float32)),
            "shift": tp.Variable(np.zeros(2, np.float32)),
        }

    def call(self, x):
        for block in self.blocks:
            x = block(x)
        return x * self.extra["scale"] + self.extra["shift"]


def test_list_and_dict_of_variables_are_tracked_and_differentiated():
    model = TwoDense()
    x = tp.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    with tp.GradientTape() as tape:
        loss = tp.reduce_mean(model(x) ** 2)
    variables = model.trainable_variables
    assert [v.shape for v in variables] == [(3, 4), (4,), (4, 2), (2,), (2,), (2,)]
    assert variables[4] is model.extra["scale"] and variables[5] is model.extra["shift"]
    grads = tape.gradient(loss, variables)
    assert len(grads) == len(variables)
    for g, v in zip(grads, variables):
        assert g is not None and g.shape == v.shape
    assert model.submodules == model.blocks
    assert model.non_trainable_variables == []


def test_variables_reachable_twice_are_listed_once_in_assignment_order():
    shared = tp.Variable(1.0)
    layer = Dense(1)
    m = tp.Module()
    m.b = tp.Variable(2.0)
    m.a = shared
    m.again = [shared, (shared, {"x": shared})]
    m.layer = layer
    m.same_layer = layer
    layer(tp.ones((1, 2)))
    assert m.variables[:2] == [m.b, shared]
    assert len(m.variables) == 4
    assert m.submodules == [layer]


def test_cyclic_structures_terminate():
    m = tp.Module()
    box = []
    box.append(box)
    m.box = box
    m.me = m
    m.v = tp.Variable(1.0)
    assert m.variables == [m.v]


def test_the_fast_walk_and_the_path_walk_find_the_same_variables_in_the_same_order():
    # variables/trainable_variables/submodules/losses use a walk without paths (they are read at
    # every step); state_dict/summary use the one with paths. Both must agree on every structure.
    inner = Sequential([Dense(2, name="shared"), tp.layers.BatchNormalization()])
    frozen = Dense(3, kernel_regularizer="l2")
    frozen.trainable = False
    m = tp.Module(name="root")
    m.first = {"b": [tp.Variable(1.0), (inner, {"x": tp.Variable(2.0, trainable=False)})], "a": frozen}
    m.again = [inner, m.first, m]
    m.lone = m.add_weight((2,), "ones", name="lone")
    m.add_weight((1,), "zeros", name="hidden")
    m.tail = tp.Variable([3.0])
    inner(tp.ones((4, 3)), training=True)
    frozen(tp.ones((1, 2)))
    walked = [v for _, v in m.named_variables()]
    assert [id(v) for v in m.variables] == [id(v) for v in walked]
    assert len(walked) == 1 + 2 + 4 + 1 + 2 + 1 + 1 + 1  # nothing found twice
    trainable = {id(v) for v in m.trainable_variables}
    expected = [v for v in walked if v.trainable and not any(v is w for w in frozen.variables)]
    assert [id(v) for v in m.trainable_variables] == [id(v) for v in expected]
    assert trainable.isdisjoint(id(v) for v in m.non_trainable_variables)
    assert len(m.trainable_variables) + len(m.non_trainable_variables) == len(walked)
    assert [id(x) for x in m.submodules] == [id(inner), id(inner.layers[0]), id(inner.layers[1]), id(frozen)]
    assert len(m.losses) == 1


def test_later_additions_and_replacements_are_seen():
    m = tp.Module()
    m.layers = []
    assert m.variables == []
    v = tp.Variable([1.0, 2.0])
    m.layers.append(v)
    assert m.variables == [v]
    w = tp.Variable(3.0)
    m.layers = [w]
    assert m.variables == [w]
    m.layers = None
    assert m.variables == []


def test_add_weight_variables_are_tracked_without_an_attribute():
    class Holder(tp.layers.Layer):
        def build(self, input_shape):
            self.add_weight((2,), "ones", name="hidden")

        def call(self, x):
            return x

    h = Holder()
    h(tp.ones((1, 2)))
    assert [v.name for v in h.variables] == ["hidden"]
    assert list(h.state_dict()) == [f"{h.name}/hidden"]


def test_add_weight_defaults_follow_keras_3():
    """No initializer: glorot_uniform for floats, zeros otherwise; no shape: a scalar."""

    class Holder(tp.layers.Layer):
        def build(self, input_shape):
            self.kernel = self.add_weight(shape=(input_shape[-1], 3), name="kernel")
            self.count = self.add_weight(shape=(2,), dtype="int32", trainable=False, name="count")
            self.scale = self.add_weight(shape=None, initializer="ones", name="scale")

        def call(self, x):
            return tp.matmul(x, self.kernel) * self.scale

    tp.random.set_seed(0)
    h = Holder()
    assert h(tp.ones((5, 4))).shape == (5, 3)
    kernel = h.kernel.numpy()
    limit = np.sqrt(6.0 / (4 + 3))
    assert kernel.dtype == np.float32 and np.all(np.abs(kernel) <= limit) and np.std(kernel) > 0
    assert h.count.dtype == np.int32 and h.count.numpy().tolist() == [0, 0]
    assert h.scale.shape == () and float(h.scale) == 1.0
    assert [v.name for v in h.trainable_variables] == ["kernel", "scale"]


def test_replacing_an_add_weight_attribute_drops_the_old_weight():
    layer = Dense(2)
    layer(tp.ones((1, 3)))
    old_kernel, bias = layer.kernel, layer.bias
    layer.kernel = tp.Variable(np.zeros((3, 2), np.float32), name="kernel")
    assert [id(v) for v in layer.variables] == [id(layer.kernel), id(bias)]
    assert not any(v is old_kernel for v in layer.variables)
    assert list(layer.state_dict()) == ["dense/kernel", "dense/bias"]
    del layer.bias
    assert [id(v) for v in layer.variables] == [id(layer.kernel)]
    # A weight created by add_weight and never held by an attribute is still tracked.
    hidden = layer.add_weight((1,), "zeros", name="hidden")
    assert [id(v) for v in layer.variables] == [id(layer.kernel), id(hidden)]


def test_default_names_are_unique_snake_case_per_class():
    class MyBlockForNames(tp.Module):
        pass

    class Conv2DLikeThing(tp.Module):
        pass

    assert [MyBlockForNames().name for _ in range(3)] == [
        "my_block_for_names",
        "my_block_for_names_1",
        "my_block_for_names_2",
    ]
    assert Conv2DLikeThing().name == "conv2d_like_thing"
    a, b = Dense(1), Dense(1)
    assert a.name != b.name
    assert re.fullmatch(r"dense(_\d+)?", a.name) and re.fullmatch(r"dense_\d+", b.name)
    assert tp.layers.BatchNormalization().name.startswith("batch_normalization")
    assert Dense(1, name="head").name == "head"
    with pytest.raises(ValueError, match="'/'"):
        Dense(1, name="a/b")


def test_variable_paths_use_given_names_or_structural_ones_then_attributes():
    model = Sequential([Dense(2, name="d1"), Dense(1, name="d2")], name="seq")
    model(tp.ones((1, 3)))
    assert list(model.state_dict()) == ["seq/d1/kernel", "seq/d1/bias", "seq/d2/kernel", "seq/d2/bias"]
    user = TwoDense(name="net")
    user(tp.ones((1, 3)))
    assert list(user.state_dict()) == [
        "net/dense/kernel",
        "net/dense/bias",
        "net/dense_1/kernel",
        "net/dense_1/bias",
        "net/extra/scale",
        "net/extra/shift",
    ]
    assert [p for p, _ in user.named_variables()] == list(user.state_dict())
    # default names are global (dense_12, ...); path segments of unnamed modules depend on the structure only
    assert user.blocks[0].name != "dense"
    anonymous = Sequential([Dense(1), Sequential([Dense(1), Dense(1, name="dense_1")]), Dense(1)])
    anonymous(tp.ones((1, 1)))
    assert list(anonymous.state_dict()) == [
        "sequential/dense/kernel",
        "sequential/dense/bias",
        "sequential/sequential/dense/kernel",
        "sequential/sequential/dense/bias",
        "sequential/sequential/dense_1/kernel",
        "sequential/sequential/dense_1/bias",
        "sequential/dense_1/kernel",
        "sequential/dense_1/bias",
    ]


def test_state_dict_with_duplicate_paths_is_an_error():
    model = Sequential([Dense(1, name="same"), Dense(1, name="same")])
    model(tp.ones((1, 1)))
    with pytest.raises(ValueError, match="same/kernel"):
        model.state_dict()


def test_build_runs_once_with_the_input_shape_then_call():
    seen = []

    class Probe(tp.Module):
        def build(self, input_shape):
            seen.append(input_shape)
            self.w = tp.Variable(np.ones(input_shape[-1], np.float32))

        def call(self, x):
            return x * self.w

    p = Probe()
    assert not p.built
    p(tp.ones((2, 3)))
    p(tp.ones((5, 3)))
    assert seen == [(2, 3)]
    assert p.built and [v.shape for v in p.variables] == [(3,)]


def test_build_sees_nested_shapes_and_python_lists():
    seen = []

    class Probe(tp.Module):
        def build(self, input_shape):
            seen.append(input_shape)

        def call(self, x):
            return x

    Probe()([tp.ones((2, 3)), tp.ones((4,))])
    Probe()([[1, 2, 3]])
    assert seen == [[(2, 3), (4,)], (1, 3)]


def test_subclass_may_override_call_dunder_like_tf_module():
    class Affine(tp.Module):
        def __init__(self):
            super().__init__()
            self.w = tp.Variable(2.0)
            self.b = tp.Variable(1.0)

        def __call__(self, x):
            return x * self.w + self.b

    m = Affine()
    x = tp.constant(3.0)
    with tp.GradientTape() as tape:
        y = m(x)
    dw, db = tape.gradient(y, m.trainable_variables)
    assert float(y) == 7.0 and float(dw) == 3.0 and float(db) == 1.0


def test_module_without_call_says_so():
    with pytest.raises(NotImplementedError, match="Module defines neither call"):
        tp.Module()(1.0)


def test_subclass_forgetting_super_init_still_works():
    class NoInit(tp.Module):
        def __init__(self):
            self.v = tp.Variable(1.0)

    m = NoInit()
    assert m.variables == [m.v] and m.name.startswith("no_init")

    class LayerNoInit(tp.layers.Layer):
        def __init__(self):
            self.w = tp.Variable([2.0])

        def call(self, x):
            return self._cast_input(x) * self.w

    layer = LayerNoInit()
    model = Sequential([layer, Dense(1, kernel_regularizer="l2")])
    assert model(tp.constant([[1, 2]])).dtype == np.float32
    assert len(model.losses) == 1 and layer.losses == []


class Recorder(tp.Module):
    def __init__(self):
        super().__init__()
        self.seen = []

    def call(self, x, training=None):
        self.seen.append(training)
        return x


class NoTraining(tp.Module):
    def call(self, x):
        return x


def test_training_reaches_sublayers_called_without_it():
    inner = Recorder()

    class Outer(tp.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner
            self.plain = NoTraining()

        def call(self, x, training=None):
            return self.plain(self.inner(x))

    outer = Outer()
    outer(1.0, training=True)
    outer(1.0, training=False)
    outer(1.0)
    assert inner.seen == [True, False, None]
    inner(1.0)
    assert inner.seen[-1] is None  # the context does not outlive the outer call


def test_explicit_training_wins_and_unsupported_training_is_dropped():
    inner = Recorder()

    class Outer(tp.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def call(self, x):  # takes no training itself: still passes it down
            return self.inner(x, training=False)

    Outer()(1.0, training=True)
    assert inner.seen == [False]
    assert NoTraining()(2.0, training=True) == 2.0


def test_training_given_positionally_is_used_and_not_passed_twice():
    inner = Recorder()

    class Outer(tp.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def call(self, x, training=None):
            self.inner(x, False)  # positional, inside a call that has training=True
            return self.inner(
                x, None
            )  # None given positionally: the enclosing call's value, as a keyword would

    Outer()(1.0, training=True)
    assert inner.seen == [False, True]

    class Dunder(tp.Module):
        def __call__(self, x, training=False):
            return training

    class Caller(tp.Module):
        def __init__(self):
            super().__init__()
            self.dunder = Dunder()

        def call(self, x):
            return self.dunder(x, False)

    assert Caller()(1.0, training=True) is False


def test_sequential_passes_training_to_its_layers():
    rec = Recorder()
    model = Sequential([NoTraining(), rec])
    model(1.0, training=True)
    model(1.0)
    assert rec.seen == [True, None]


def test_freezing_moves_variables_out_of_trainable_and_back():
    model = Sequential([Dense(2), tp.layers.BatchNormalization(), Dense(1)])
    model(tp.ones((4, 3)))
    first, bn, last = model.layers
    assert len(model.trainable_variables) == 6 and len(model.non_trainable_variables) == 2
    first.trainable = False
    assert first.trainable_variables == []
    assert model.trainable_variables == [bn.gamma, bn.beta, last.kernel, last.bias]
    assert model.non_trainable_variables[:2] == [first.kernel, first.bias]
    assert first.kernel.trainable  # the variable's own flag is left alone
    model.trainable = False
    assert model.trainable_variables == [] and len(model.non_trainable_variables) == 8
    model.trainable = True
    assert first.trainable and len(model.trainable_variables) == 6
    assert all(v is not bn.moving_mean for v in model.trainable_variables)


def test_frozen_layer_gets_no_gradient_from_a_model_loop():
    model = Sequential([Dense(3), Dense(1)])
    x = tp.ones((2, 2))
    model(x)
    model.layers[0].trainable = False
    before = model.layers[0].kernel.numpy()
    with tp.GradientTape() as tape:
        loss = tp.reduce_sum(model(x))
    grads = tape.gradient(loss, model.trainable_variables)
    for g, v in zip(grads, model.trainable_variables):
        v.assign_sub(0.1 * g)
    np.testing.assert_array_equal(model.layers[0].kernel.numpy(), before)
    assert len(grads) == 2


def _two_layer_model():
    model = Sequential([Dense(3, activation="relu"), tp.layers.BatchNormalization(), Dense(2)])
    model(tp.ones((2, 4)), training=True)
    return model


def test_state_dict_round_trip_into_a_second_copy():
    tp.random.set_seed(1)
    a = _two_layer_model()
    b = _two_layer_model()  # same structure: same paths, though the layers' names differ (dense_7 vs dense_5)
    assert list(a.state_dict()) == list(b.state_dict())
    assert a.layers[0].name != b.layers[0].name
    x = tp.constant(np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32))
    assert not np.allclose(a(x).numpy(), b(x).numpy())
    state = a.state_dict()
    b.load_state_dict(state)
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
    for va, vb in zip(state.values(), b.state_dict().values()):
        np.testing.assert_array_equal(va, vb)
    # state_dict holds copies, not live views
    state[next(iter(state))][...] = 123.0
    assert not np.any(a.variables[0].numpy() == 123.0)


def test_load_state_dict_matches_paths_that_differ_in_root_name_and_numbers():
    a = Sequential([Dense(2, name="block_1"), Dense(1, name="block_2")], name="net")
    b = Sequential([Dense(2, name="block_5"), Dense(1, name="block_6")], name="net_copy")
    x = tp.ones((1, 3))
    a(x), b(x)
    b.load_state_dict(a.state_dict())
    for va, vb in zip(a.variables, b.variables):
        np.testing.assert_array_equal(va.numpy(), vb.numpy())


def test_load_state_dict_under_another_root_name_ignores_the_order_of_the_dict():
    # Sorted keys put dense_10 before dense_2: matching by order alone would swap the layers.
    def model(name):
        return Sequential([Dense(2) for _ in range(12)], name=name)

    a, b = model("a"), model("b")
    x = tp.ones((1, 2))
    a(x), b(x)
    b.load_state_dict(dict(sorted(a.state_dict().items())))
    for va, vb in zip(a.variables, b.variables):
        np.testing.assert_array_equal(va.numpy(), vb.numpy())


def test_load_state_dict_exact_paths():
    model = Sequential([Dense(2, name="p")], name="m")
    model(tp.ones((1, 2)))
    model.load_state_dict({"m/p/kernel": np.full((2, 2), 3.0), "m/p/bias": [1.0, 2.0]})
    np.testing.assert_array_equal(model.layers[0].kernel.numpy(), np.full((2, 2), 3.0, np.float32))
    assert model.layers[0].kernel.dtype == np.float32


def test_load_state_dict_names_every_problem_and_assigns_nothing():
    model = Sequential([Dense(2, name="p"), Dense(1, name="q")], name="m")
    model(tp.ones((1, 2)))
    before = model.state_dict()
    bad = {
        "m/p/kernel": np.zeros((3, 2)),  # mis-shaped
        "m/p/bias": np.zeros(2),
        # m/q/kernel missing
        "m/q/bias": np.zeros(1),
        "m/r/kernel": np.zeros(1),  # unexpected
    }
    with pytest.raises(ValueError) as info:
        model.load_state_dict(bad)
    message = str(info.value)
    assert "'m/p/kernel' has shape (3, 2), the variable has (2, 2)" in message
    assert "missing: m/q/kernel" in message
    assert "unexpected: m/r/kernel" in message
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(value, before[key])
    with pytest.raises(TypeError, match="dict"):
        model.load_state_dict([1, 2])


def test_load_state_dict_into_an_unbuilt_model_says_to_call_it_first():
    # Keras users load weights into a fresh model; its Dense layers have no variables yet,
    # and the error only listed every entry as "unexpected".
    trained = Sequential([Dense(2), Dense(1)])
    trained(tp.ones((1, 3)))
    fresh = Sequential([Dense(2), Dense(1)])
    with pytest.raises(ValueError, match=r"unexpected: .*; .*not built yet.*call the model on a batch"):
        fresh.load_state_dict(trained.state_dict())
    fresh(tp.ones((1, 3)))
    fresh.load_state_dict(trained.state_dict())


def test_load_state_dict_rejects_non_numeric_entries_before_assigning_anything():
    m = tp.Module(name="m")
    m.a = tp.Variable(1.0)
    m.b = tp.Variable(2.0)
    m.c = tp.Variable(3.0)
    with pytest.raises(ValueError) as info:
        m.load_state_dict({"m/a": 5.0, "m/b": "abc", "m/c": None})
    message = str(info.value)
    assert "entry 'm/b' is not a number array (dtype <U3)" in message
    assert "entry 'm/c' is not a number array (dtype object)" in message
    assert [float(v) for v in m.variables] == [1.0, 2.0, 3.0]


def test_load_state_dict_refuses_fractions_for_integer_variables():
    m = tp.Module(name="m")
    m.step = tp.Variable(4, trainable=False)
    m.w = tp.Variable(1.0)
    m.load_state_dict({"m/step": np.array(7.0), "m/w": 2})  # whole floats and ints convert
    assert m.step.dtype == np.int32 and int(m.step) == 7 and float(m.w) == 2.0
    # 2.7 would become 2 and NaN -2147483648 without a word
    for bad in (2.7, np.nan):
        with pytest.raises(
            ValueError, match="entry 'm/step' has non-integral values for a variable of dtype int32"
        ):
            m.load_state_dict({"m/step": np.array(bad), "m/w": 3.0})
        assert int(m.step) == 7 and float(m.w) == 2.0


def test_summary_table():
    model = Sequential(
        [
            Dense(4, activation="relu", name="hidden"),
            tp.layers.BatchNormalization(name="bn"),
            Dense(2, name="out"),
        ],
        name="clf",
    )
    lines = []
    model.summary(print_fn=lines.append)
    text = "\n".join(lines)
    assert 'Model: "clf"' in text and "0 (unbuilt)" in text and "?" in text
    model(tp.ones((8, 3)))
    lines.clear()
    model.summary(print_fn=lines.append)
    rows = {
        line.split()[0]: line for line in lines if line.split() and line.split()[0] in ("hidden", "bn", "out")
    }
    assert (
        "(Dense)" in rows["hidden"] and "(None, 4)" in rows["hidden"] and rows["hidden"].split()[-1] == "16"
    )
    assert "(BatchNormalization)" in rows["bn"] and rows["bn"].split()[-1] == "16"
    assert "(None, 2)" in rows["out"] and rows["out"].split()[-1] == "10"
    assert (
        "Total params: 42" in lines and "Trainable params: 34" in lines and "Non-trainable params: 8" in lines
    )


def test_summary_marks_a_nested_model_of_unbuilt_layers_unbuilt():
    model = Sequential([Sequential([Dense(4)], name="block"), tp.layers.Flatten(name="flat")], name="outer")
    lines = []
    model.summary(print_fn=lines.append)
    rows = {line.split()[0]: line for line in lines if line.split() and line.split()[0] in ("block", "flat")}
    assert rows["block"].endswith("0 (unbuilt)")
    assert rows["flat"].split()[-1] == "0"  # nothing to build: no parameters, not "unbuilt"


def test_summary_prints_by_default_and_lists_own_variables(capsys):
    model = TwoDense(name="netsum")
    model(tp.ones((1, 3)))
    model.summary()
    out = capsys.readouterr().out
    assert "extra/scale (Variable)" in out and "Total params: 30" in out


def test_regularization_losses_are_differentiable():
    layer = Dense(
        2, kernel_regularizer=tp.layers.regularizers.L2(0.5), bias_initializer="ones", bias_regularizer="l1"
    )
    model = Sequential([layer])
    with tp.GradientTape() as tape:
        model(tp.ones((1, 3)))
        penalty = tp.add_n(model.losses)
    kernel = layer.kernel.numpy()
    np.testing.assert_allclose(float(penalty), 0.5 * np.sum(kernel**2) + 0.01 * 2, rtol=1e-6)
    dk, db = tape.gradient(penalty, [layer.kernel, layer.bias])
    np.testing.assert_allclose(dk.numpy(), kernel, rtol=1e-6)
    np.testing.assert_allclose(db.numpy(), [0.01, 0.01], rtol=1e-6)
    assert Sequential([Dense(1)]).losses == []


def test_call_dunder_override_gets_training_only_if_declared_and_passes_it_on():
    inner = Recorder()

    class Plain(tp.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def __call__(self, x):
            return self.inner(x)

    class Declares(tp.Module):
        def __call__(self, x, training=False):
            return x * (2.0 if training else 1.0)

    plain = Plain()
    assert plain(1.0, training=True) == 1.0
    assert inner.seen == [True]
    model = Sequential([Plain(), tp.layers.Dense(1, kernel_initializer="ones")])
    model(tp.ones((1, 2)), training=False)
    assert inner.seen == [True, False]
    assert float(Declares()(tp.constant(3.0), training=True)) == 6.0
    assert float(Declares()(tp.constant(3.0))) == 3.0
    lines = []
    model.summary(print_fn=lines.append)
    assert any("(Plain)" in line and "(None, 2)" in line for line in lines)


def test_build_called_directly_builds_the_layer_and_the_first_call_keeps_its_weights():
    # Keras's habit: build, set_weights, call. The first call used to build again, drawing new
    # weights over the ones set.
    x = np.ones((2, 4), np.float32)
    dense = tp.layers.Dense(3)
    dense.build((None, 4))
    assert dense.built and [tuple(w.shape) for w in dense.get_weights()] == [(4, 3), (3,)]
    dense.set_weights([np.ones((4, 3), np.float32), np.arange(3, dtype=np.float32)])
    np.testing.assert_array_equal(np.asarray(dense(x)), np.tile([4.0, 5.0, 6.0], (2, 1)))
    norm = tp.layers.BatchNormalization()
    norm.build((None, 4))
    assert norm.built and len(norm.weights) == 4
    norm.set_weights([np.full(4, 2.0, np.float32), np.ones(4, np.float32), np.zeros(4), np.ones(4)])
    np.testing.assert_allclose(
        np.asarray(norm(x, training=False)), 2.0 * x / np.sqrt(1 + 1e-3) + 1, rtol=1e-6
    )


def test_a_subclass_build_that_calls_super_is_built_once():
    class Scale(tp.layers.Layer):
        builds = 0

        def build(self, input_shape):
            type(self).builds += 1
            self.w = self.add_weight(shape=(input_shape[-1],), initializer="ones")
            super().build(input_shape)

        def call(self, x):
            return x * self.w

    layer = Scale()
    layer.build((None, 3))
    layer(np.ones((2, 3), np.float32))
    assert Scale.builds == 1 and layer.built
