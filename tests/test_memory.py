"""A training step frees what it made by reference counting alone (no reference cycles)."""

import gc

import numpy as np

import tapefit as tp


def test_a_training_step_leaves_no_reference_cycles():
    tp.random.set_seed(0)
    model = tp.layers.Sequential(
        [tp.layers.Dense(16, activation="relu"), tp.layers.Dense(8, activation="relu"), tp.layers.Dense(3)]
    )
    opt = tp.optimizers.SGD(0.01, momentum=0.9)
    rng = np.random.default_rng(0)
    x = rng.random((4, 5), dtype=np.float32)
    y = rng.integers(0, 3, 4)

    def step() -> None:
        with tp.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tp.reduce_mean(tp.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        tape.explain(loss, model.trainable_variables[0])

    step()  # builds the model and the optimizer's slots
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # keep what a collection finds, to say what it is
    try:
        step()
        gc.collect()
        # Only the step's own garbage counts: a thread an earlier test left running in this
        # process (a writer, a pool) may make cycles of its own meanwhile.
        found = [repr(o)[:80] for o in gc.garbage if _made_by_tapefit(o)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()
    assert found == []


def _made_by_tapefit(obj: object) -> bool:
    if isinstance(obj, np.ndarray):
        return True
    module = getattr(obj, "__module__", None) or getattr(type(obj), "__module__", "")
    return isinstance(module, str) and module.startswith("tapefit")
