"""The active-tape stack and ``pause_recording``."""

import tapefit as tp
from tapefit.core.record import active_tapes, current_tapes, pause_recording


def test_pause_recording_suspends_every_active_tape():
    x = tp.Variable([1.0, 2.0])
    with tp.GradientTape(persistent=True) as outer, tp.GradientTape(persistent=True) as inner:
        y = x * 2.0
        with pause_recording():
            assert current_tapes() == ()
            assert outer not in active_tapes and inner not in active_tapes
            z = x * 3.0  # recorded by neither tape
        assert current_tapes() == (outer, inner)
        w = x * 4.0
    for tape in (outer, inner):
        assert tape.gradient(y, x).numpy().tolist() == [2.0, 2.0]
        assert tape.gradient(z, x) is None
        assert tape.gradient(w, x).numpy().tolist() == [4.0, 4.0]
    assert current_tapes() == () and not active_tapes


def test_a_tape_entered_while_paused_records():
    x = tp.Variable(3.0)
    with tp.GradientTape() as outer:
        with pause_recording(), tp.GradientTape() as inner:
            y = x * x
        assert inner.gradient(y, x).numpy() == 6.0
    assert outer.gradient(y, x) is None


def test_a_tape_exited_while_paused_stays_exited():
    tape = tp.GradientTape()
    tape.__enter__()
    with pause_recording():
        tape.__exit__(None, None, None)
    assert current_tapes() == () and not active_tapes


def test_optimizer_updates_are_not_recorded():
    v = tp.Variable([1.0, 2.0])
    opt = tp.optimizers.SGD(0.5)
    with tp.GradientTape(persistent=True) as tape:
        loss = tp.reduce_sum(v * v)
        opt.apply_gradients([(tp.constant([1.0, 1.0]), v)])
        after = v * 1.0
    assert len(tape._entries) == 3  # Mul, Sum, Mul: nothing from the update
    assert tape.gradient(loss, v) is not None and after is not None
