"""The Optimizer base class: gradient checks, clipping, state, the assign-only rule, tapes."""

from __future__ import annotations

import io
import json
import logging
import tracemalloc

import numpy as np
import pytest

import tapefit as tp
from tapefit.optimizers import schedules
from tapefit.optimizers.optimizer import clip_by_global_norm, clip_by_norm, global_norm

O = tp.optimizers

# Every optimizer with every slot-creating option on, plus a common option each.
FULL = {
    "sgd": lambda: O.SGD(0.1, momentum=0.9, nesterov=True, weight_decay=0.01, clipnorm=1.0),
    "adam": lambda: O.Adam(schedules.ExponentialDecay(0.1, 3, 0.7), amsgrad=True, global_clipnorm=1.0),
    "adamw": lambda: O.AdamW(0.05, amsgrad=True, clipvalue=0.5),
    "rmsprop": lambda: O.RMSprop(0.01, momentum=0.5, centered=True, weight_decay=0.01),
    "adagrad": lambda: O.Adagrad(0.1, clipnorm=2.0),
}
full_optimizers = pytest.mark.parametrize("make", FULL.values(), ids=FULL.keys())


def fresh_variables(values=None):
    rng = np.random.default_rng(1)
    values = values or [rng.normal(size=(4, 3)), rng.normal(size=(3,)), rng.normal(size=())]
    return [tp.Variable(np.asarray(v, np.float32), name=f"v{i}") for i, v in enumerate(values)]


def gradient_sequence(n, seed=2):
    rng = np.random.default_rng(seed)
    return [
        [(rng.normal(size=s) * rng.uniform(0.1, 3)).astype(np.float32) for s in [(4, 3), (3,), ()]]
        for _ in range(n)
    ]


# -- iterations, learning rate ---------------------------------------------------


def test_iterations_start_at_zero_and_count_applies():
    w = tp.Variable([1.0, 2.0])
    opt = O.SGD(0.1)
    assert int(opt.iterations) == 0
    for i in range(3):
        returned = opt.apply_gradients([(tp.constant([1.0, 1.0]), w)])
        assert returned is opt.iterations and int(opt.iterations) == i + 1
    np.testing.assert_allclose(w.numpy(), [0.7, 1.7], rtol=1e-6)


def test_schedule_is_called_with_iterations_before_increment():
    seen = []

    class Recording(schedules.LearningRateSchedule):
        def __call__(self, step):
            seen.append(step)
            return 0.5 / (1 + step)

        def get_config(self):
            return {}

    w = tp.Variable([0.0])
    opt = O.SGD(Recording())
    for _ in range(3):
        opt.apply_gradients([(np.ones(1, np.float32), w)])
    assert seen == [0, 1, 2]
    np.testing.assert_allclose(w.numpy(), [-(0.5 + 0.25 + 0.5 / 3)], rtol=1e-6)
    assert opt.learning_rate == pytest.approx(0.5 / 4)  # the rate of the next step


def test_callable_learning_rates():
    w = tp.Variable([0.0])
    opt = O.SGD(lambda step: 0.1 * (step + 1))  # a function of the step
    opt.apply_gradients([(np.ones(1, np.float32), w)])
    opt.apply_gradients([(np.ones(1, np.float32), w)])
    np.testing.assert_allclose(w.numpy(), [-0.3], rtol=1e-6)
    rate = [0.2]
    opt = O.SGD(lambda: rate[0])  # Keras 3's zero-argument callable
    w.assign([0.0])
    opt.apply_gradients([(np.ones(1, np.float32), w)])
    rate[0] = 0.05
    opt.apply_gradients([(np.ones(1, np.float32), w)])
    np.testing.assert_allclose(w.numpy(), [-0.25], rtol=1e-6)


def test_learning_rate_setter():
    opt = O.Adam(0.01)
    opt.learning_rate = 0.5
    assert opt.learning_rate == 0.5 and opt.get_state()["learning_rate"] == 0.5
    opt.learning_rate = schedules.PiecewiseConstantDecay([0], [1.0, 2.0])
    assert opt.learning_rate == 1.0
    with pytest.raises(TypeError, match="cannot be set to a number"):
        opt.learning_rate = 0.1


def test_learning_rate_dict_config_and_bad_values():
    opt = O.Adam({"type": "cosine_decay", "initial_learning_rate": 0.1, "decay_steps": 10})
    assert isinstance(opt.get_config()["learning_rate"], dict)
    assert opt.learning_rate == pytest.approx(0.1)
    with pytest.raises(TypeError, match=r"YAML reads 1e-3 as a string: write 1.0e-3"):
        O.Adam("1e-3")
    with pytest.raises(ValueError, match=r"`learning_rate` must be in \[0, inf\]"):
        O.SGD(-0.1)
    with pytest.raises(TypeError, match="`learning_rate` must be a number"):
        O.SGD([0.1])


def test_only_one_clipping_option():
    with pytest.raises(ValueError, match="only one of `clipnorm`, `clipvalue` and `global_clipnorm`"):
        O.SGD(clipnorm=1.0, clipvalue=0.5)
    with pytest.raises(ValueError, match=r"`clipnorm` must be in \(0, inf\]"):
        O.SGD(clipnorm=0.0)


# -- apply_gradients input checks ------------------------------------------------


def test_none_gradients_are_skipped_with_one_warning(caplog):
    a, b = tp.Variable([1.0], name="a"), tp.Variable([2.0], name="frozen")
    opt = O.Adam(0.1)
    with caplog.at_level(logging.WARNING, logger="tapefit"):
        opt.apply_gradients([(np.ones(1, np.float32), a), (None, b)])
        opt.apply_gradients([(np.ones(1, np.float32), a), (None, b)])
    warnings = [r for r in caplog.records if "Gradients do not exist" in r.getMessage()]
    assert len(warnings) == 1 and "frozen" in warnings[0].getMessage()
    assert b.numpy()[0] == 2.0 and a.numpy()[0] < 1.0
    assert int(opt.iterations) == 2
    # b has its position and slots (as in Keras 3), left at their initial values
    np.testing.assert_array_equal(opt.get_slot(b, "momentum").numpy(), [0.0])
    with pytest.raises(ValueError, match="not updated"):
        opt.get_slot(tp.Variable([3.0], name="never_passed"), "momentum")


def test_all_none_gradients_raise_naming_the_variables():
    a, b = tp.Variable([1.0], name="kernel"), tp.Variable([2.0], name="bias")
    opt = O.SGD()
    with pytest.raises(ValueError, match=r"no gradients provided for any variable \('kernel', 'bias'\)"):
        opt.apply_gradients([(None, a), (None, b)])
    assert int(opt.iterations) == 0


def test_shape_mismatch_names_both_shapes_and_the_variable():
    w, b = tp.Variable(tp.zeros((2, 3)), name="kernel"), tp.Variable([0.0], name="bias")
    opt = O.Adam()
    with pytest.raises(ValueError, match=r"'kernel' has shape \(3, 2\), but the variable has shape \(2, 3\)"):
        opt.apply_gradients([(np.zeros(1, np.float32), b), (np.zeros((3, 2), np.float32), w)])
    # Checked before anything changed: no slots, no step.
    assert int(opt.iterations) == 0 and opt.variables == [opt.iterations]


def test_accepts_zip_generator_and_nested_lists():
    w, b = tp.Variable([1.0, 2.0]), tp.Variable(0.5)
    opt = O.SGD(1.0)
    opt.apply_gradients(zip([tp.constant([1.0, 1.0]), tp.constant(0.5)], [w, b]))
    opt.apply_gradients((g, v) for g, v in [([1.0, 1.0], w), (0.5, b)])
    np.testing.assert_allclose(w.numpy(), [-1.0, 0.0])
    assert float(b) == pytest.approx(-0.5)


def test_float64_gradient_is_cast_to_the_variable_dtype():
    w = tp.Variable([1.0, 2.0])
    O.SGD(0.1).apply_gradients([(np.array([1.0, 2.0]), w)])
    assert w.dtype == np.float32
    np.testing.assert_allclose(w.numpy(), [0.9, 1.8], rtol=1e-6)


@pytest.mark.parametrize(
    "pairs, error, message",
    [
        (lambda w: [(np.array([1, 2]), w)], TypeError, "has dtype int64; gradients must be floating"),
        (lambda w: [(np.ones(2), tp.constant([1.0, 2.0]))], TypeError, "tp.Tensor is immutable"),
        (lambda w: [(np.ones(2), tp.Variable([1, 2]))], TypeError, "floating variables only"),
        (lambda w: [], ValueError, "no \\(gradient, variable\\) pairs"),
        (lambda w: [w], TypeError, "entry 0 is not a \\(gradient, variable\\) pair"),
        (lambda w: 3, TypeError, "iterable of \\(gradient, variable\\) pairs"),
        (lambda w: [("a", w)], TypeError, "must be a Tensor, ndarray or list of numbers"),
    ],
    ids=["int_gradient", "tensor_target", "int_variable", "empty", "not_a_pair", "not_iterable", "string"],
)
def test_bad_input_errors(pairs, error, message):
    w = tp.Variable([1.0, 2.0], name="w")
    with pytest.raises(error, match=message):
        O.Adam().apply_gradients(pairs(w))


@full_optimizers
def test_gradients_passed_in_are_not_changed(make):
    variables = fresh_variables()
    grads = gradient_sequence(1)[0]
    kept = [g.copy() for g in grads]
    opt = make()
    opt.apply_gradients(zip(grads, variables))
    opt.apply_gradients(zip([tp.constant(g) for g in grads], variables))
    for g, k in zip(grads, kept):
        np.testing.assert_array_equal(g, k)


@full_optimizers
def test_scalar_variables(make):
    # A scalar variable is updated exactly as the one element of a shape-(1,) variable.
    w, w1 = tp.Variable(1.5), tp.Variable([1.5])
    opt, opt1 = make(), make()
    for g in (0.7, -0.2, 0.4):
        opt.apply_gradients([(tp.constant(g), w)])
        opt1.apply_gradients([(tp.constant([g]), w1)])
    assert w.shape == () and w.dtype == np.float32
    assert w.numpy() == w1.numpy()[0] and float(w) != 1.5


# -- minimize ---------------------------------------------------------------------


def test_minimize_with_tensor_loss_and_tape():
    w = tp.Variable([1.0, -2.0])
    with tp.GradientTape() as tape:
        loss = tp.reduce_sum(w * w)
    O.SGD(0.25).minimize(loss, [w], tape=tape)
    np.testing.assert_allclose(w.numpy(), [0.5, -1.0])  # w - 0.25 * 2w


def test_minimize_with_callable_loss_watches_var_list():
    frozen = tp.Variable([3.0], trainable=False)  # listed explicitly, so it is updated (as in Keras)
    opt = O.SGD(0.5)
    opt.minimize(lambda: tp.reduce_sum(tp.square(frozen)), lambda: [frozen])
    np.testing.assert_allclose(frozen.numpy(), [0.0])


def test_minimize_tensor_loss_needs_tape():
    w = tp.Variable([1.0])
    with pytest.raises(ValueError, match="`tape` is required"):
        O.SGD().minimize(tp.reduce_sum(w * w), [w])


# -- state -----------------------------------------------------------------------


def through_json_and_npz(state, scalars_in_npz=False):
    """What a checkpoint does: arrays to npz, numbers to JSON (or everything to npz)."""
    in_npz = {k: v for k, v in state.items() if scalars_in_npz or isinstance(v, np.ndarray)}
    buffer = io.BytesIO()
    np.savez(buffer, **in_npz)
    buffer.seek(0)
    with np.load(buffer) as data:
        loaded = {k: data[k] for k in data.files}
    numbers = {k: v for k, v in state.items() if k not in in_npz}
    return {**json.loads(json.dumps(numbers)), **loaded}


@pytest.mark.parametrize("restore_into", ["fresh", "built", "ran_ahead"])
@pytest.mark.parametrize("scalars_in_npz", [False, True], ids=["json", "npz"])
@full_optimizers
def test_restored_optimizer_continues_bit_identically(make, restore_into, scalars_in_npz):
    grads = gradient_sequence(7)
    variables = fresh_variables()
    reference = make()
    for g in grads[:3]:
        reference.apply_gradients(zip(g, variables))
    if not isinstance(reference.get_config()["learning_rate"], dict):
        reference.learning_rate = reference.learning_rate * 0.5  # as reduce_lr_on_plateau would
    state = reference.get_state()
    assert all(isinstance(v, np.ndarray) for k, v in state.items() if "/" in k)
    assert isinstance(state["iterations"], int)

    restored_vars = fresh_variables([v.numpy() for v in variables])
    restored = make()
    if restore_into == "built":
        restored.build(restored_vars)
    elif restore_into == "ran_ahead":  # its own slots must all be overwritten
        for g in gradient_sequence(5, seed=9):
            restored.apply_gradients(zip(g, restored_vars))
        for v, w in zip(restored_vars, variables):
            v.assign(w.numpy())
    restored.set_state(through_json_and_npz(state, scalars_in_npz))
    assert restored.learning_rate == reference.learning_rate

    for g in grads[3:]:
        reference.apply_gradients(zip(g, variables))
        restored.apply_gradients(zip(g, restored_vars))
    for v, w in zip(restored_vars, variables):
        np.testing.assert_array_equal(v.numpy(), w.numpy())
    a, b = reference.get_state(), restored.get_state()
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_resume_is_exact_when_a_variable_had_no_gradient_on_the_first_step():
    # Positions follow the order of the pairs, as Keras 3 builds on every variable it is given:
    # had `a` (no gradient at first) been numbered after `b`, the resumed run would number it
    # first, and with equal shapes the two would silently swap their slots.
    grads = gradient_sequence(6)
    start = [np.array([1.0, 2.0, 3.0], np.float32), np.array([4.0, 5.0, 6.0], np.float32)]

    def steps(opt, a, b, which):
        for s in which:
            opt.apply_gradients([(None if s == 0 else grads[s][1], a), (grads[s][1] * 0.5, b)])

    a, b = (tp.Variable(v, name=n) for v, n in zip(start, "ab"))
    reference = O.Adam(0.1)
    steps(reference, a, b, range(6))
    a2, b2 = (tp.Variable(v, name=n) for v, n in zip(start, "ab"))
    first = O.Adam(0.1)
    steps(first, a2, b2, range(3))
    a3, b3 = (tp.Variable(v.numpy(), name=v.name) for v in (a2, b2))
    resumed = O.Adam(0.1)
    resumed.set_state(first.get_state())
    steps(resumed, a3, b3, range(3, 6))
    np.testing.assert_array_equal(a3.numpy(), a.numpy())
    np.testing.assert_array_equal(b3.numpy(), b.numpy())


def test_state_keys_and_slots_restored_before_first_step_survive_get_state():
    variables = fresh_variables()
    opt = O.Adam(0.1)
    opt.apply_gradients(zip(gradient_sequence(1)[0], variables))
    state = opt.get_state()
    assert sorted(state) == sorted(
        ["iterations", "learning_rate"] + [f"{s}/{i}" for s in ("momentum", "velocity") for i in range(3)]
    )
    fresh = O.Adam(0.1)
    fresh.set_state(state)  # no variables seen yet: slots wait for them
    again = fresh.get_state()
    for key in state:
        np.testing.assert_array_equal(again[key], state[key])


def test_restore_from_state_saved_before_any_step_resets_slots():
    variables = fresh_variables()
    opt = O.Adagrad(0.1, initial_accumulator_value=0.3)
    initial = opt.get_state()
    opt.apply_gradients(zip(gradient_sequence(1)[0], variables))
    opt.set_state(initial)
    assert int(opt.iterations) == 0
    np.testing.assert_array_equal(
        opt.get_slot(variables[0], "accumulator").numpy(), np.full((4, 3), 0.3, np.float32)
    )


def test_set_state_errors_change_nothing():
    variables = fresh_variables()
    opt = O.Adam(0.1)
    opt.apply_gradients(zip(gradient_sequence(1)[0], variables))
    good = opt.get_state()
    bad_shape = {**good, "iterations": 7, "momentum/1": np.zeros((5,), np.float32)}
    with pytest.raises(
        ValueError, match=r"'momentum/1' has shape \(5,\).*position 1 \('v1'\) has shape \(3,\)"
    ):
        opt.set_state(bad_shape)
    with pytest.raises(ValueError, match=r"unexpected entries \['velocity_hat/0'\]"):
        opt.set_state({**good, "velocity_hat/0": np.zeros((4, 3), np.float32)})
    missing = dict(good)
    del missing["velocity/2"]
    with pytest.raises(ValueError, match=r"missing \['velocity/2'\]"):
        opt.set_state(missing)
    with pytest.raises(ValueError, match="no 'iterations'"):
        opt.set_state({k: v for k, v in good.items() if k != "iterations"})
    with pytest.raises(ValueError, match="uses the schedule"):
        O.Adam(schedules.ExponentialDecay(0.1, 10, 0.5)).set_state(good)
    now = opt.get_state()
    for key in good:
        np.testing.assert_array_equal(now[key], good[key])


def test_restored_slots_for_unseen_variables_check_shapes_on_first_step():
    variables = fresh_variables()
    opt = O.SGD(0.1, momentum=0.9)
    opt.apply_gradients(zip(gradient_sequence(1)[0], variables))
    fresh = O.SGD(0.1, momentum=0.9)
    fresh.set_state(opt.get_state())
    swapped = [variables[1], variables[0], variables[2]]  # a different first-seen order
    with pytest.raises(ValueError, match="matched to variables in the order the optimizer first saw them"):
        fresh.apply_gradients(zip([np.ones(v.shape, np.float32) for v in swapped], swapped))


# -- configs -------------------------------------------------------------------------


@full_optimizers
def test_config_round_trip(make):
    opt = make()
    config = opt.get_config()
    json.dumps(config)  # plain data
    again = type(opt).from_config(config)
    assert again.get_config() == config


# -- how variables are changed ---------------------------------------------------------


@full_optimizers
def test_updates_go_only_through_assign(make, monkeypatch):
    """Every change to a variable or slot happens inside Variable.assign*, nowhere else."""
    variables = fresh_variables()
    opt = make()
    grads = gradient_sequence(4)
    opt.apply_gradients(zip(grads[0], variables))  # slots exist from here on
    tracked = variables + opt.variables
    last = {id(v): v.numpy() for v in tracked}
    calls = {"assign": 0, "assign_add": 0, "assign_sub": 0}

    def spy(method):
        original = getattr(tp.Variable, method)

        def wrapper(self, value):
            if id(self) in last:
                np.testing.assert_array_equal(self.numpy(), last[id(self)], err_msg="changed outside assign*")
            result = original(self, value)
            calls[method] += 1
            last[id(self)] = self.numpy()
            return result

        monkeypatch.setattr(tp.Variable, method, wrapper)

    for method in calls:
        spy(method)
    before = [v.numpy() for v in variables]
    for g in grads[1:]:
        opt.apply_gradients(zip(g, variables))
    for v in tracked:
        np.testing.assert_array_equal(v.numpy(), last[id(v)], err_msg="changed after its last assign*")
    assert all(not np.array_equal(v.numpy(), b) for v, b in zip(variables, before))
    assert sum(calls.values()) >= 3 * (len(variables) + 1)  # at least the variables and iterations


def test_assign_writes_in_place_when_nothing_else_holds_the_array():
    w = tp.Variable(np.ones((64, 64), np.float32))
    opt = O.Adam(0.1)
    opt.apply_gradients([(np.ones((64, 64), np.float32), w)])
    arrays = [id(tp.optimizers.optimizer.value_array(v)) for v in [w, *opt.variables[1:]]]
    opt.apply_gradients([(np.ones((64, 64), np.float32), w)])
    assert arrays == [id(tp.optimizers.optimizer.value_array(v)) for v in [w, *opt.variables[1:]]]


def test_adam_step_allocates_about_one_temporary():
    n = 1 << 20
    w, g = tp.Variable(np.zeros(n, np.float32)), tp.constant(np.ones(n, np.float32))
    opt = O.Adam()
    opt.apply_gradients([(g, w)])  # creates the slots
    tracemalloc.start()
    try:
        opt.apply_gradients([(g, w)])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1.5 * w.numpy().nbytes, peak  # one work array of the variable's size


def test_tape_saved_value_is_not_changed_by_an_update():
    x = tp.Variable([1.0, 2.0])
    with tp.GradientTape() as tape:
        y = tp.reduce_sum(x * x * x)
        O.SGD(0.5).apply_gradients([(tp.constant([1.0, 1.0]), x)])
    np.testing.assert_allclose(x.numpy(), [0.5, 1.5])
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [3.0, 12.0])  # 3 x^2 at the old x


class OpsSGD(O.Optimizer):
    """An optimizer written with tapefit ops: recording must be suspended around it."""

    def update_step(self, gradient, variable, learning_rate):
        variable.assign(variable - learning_rate * tp.constant(gradient))


@pytest.mark.parametrize("make", [*FULL.values(), lambda: OpsSGD(0.5)], ids=[*FULL.keys(), "ops_subclass"])
def test_updates_are_not_recorded_by_active_tapes(make):
    x = tp.Variable([1.0, 2.0])
    with tp.GradientTape(persistent=True) as outer, tp.GradientTape() as inner:
        make().apply_gradients([(tp.constant([1.0, 1.0]), x)])
        assert outer.watched_variables() == () and inner.watched_variables() == ()
        assert outer._entries == [] and inner._entries == []
        y = tp.reduce_sum(x * x)  # recording resumed after the update
    np.testing.assert_allclose(outer.gradient(y, x).numpy(), 2 * x.numpy())


# -- clipping helpers --------------------------------------------------------------------


def test_clip_by_norm_invariants():
    g = np.array([3.0, 4.0], np.float32)
    clipped = clip_by_norm(g, 2.0)
    assert global_norm([clipped]) == pytest.approx(2.0, rel=1e-6)
    np.testing.assert_allclose(clipped, [1.2, 1.6], rtol=1e-6)
    np.testing.assert_allclose(clip_by_norm(clipped, 2.0), clipped, rtol=1e-6)  # idempotent
    assert clip_by_norm(g, 10.0) is g  # below the bound: untouched
    assert clipped.dtype == np.float32


def test_clip_by_global_norm_invariants():
    grads = [np.array([3.0], np.float32), np.array([[4.0, 0.0]], np.float32)]
    clipped = clip_by_global_norm(grads, 1.0)
    assert global_norm(clipped) == pytest.approx(1.0, rel=1e-6)
    np.testing.assert_allclose(clipped[1], [[0.8, 0.0]], rtol=1e-6)
    assert global_norm(clip_by_global_norm(clipped, 1.0)) == pytest.approx(1.0, rel=1e-6)
    assert clip_by_global_norm(grads, 6.0) == grads
    assert np.isnan(clip_by_global_norm([np.array([np.inf, 1.0])], 1.0)[0]).all()
