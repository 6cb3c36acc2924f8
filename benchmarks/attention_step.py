"""MultiHeadAttention forward + backward, and the attention softmax's share of it.

The case is self-attention over batch 32, 64 steps, 4 heads of 16 (width 64), float32:
``sum(mha(x, x, ...) ** 2)`` on a tape, then its gradient with respect to ``x`` and every
weight, with no mask, a causal mask, and a padding mask (``query_mask`` and ``value_mask``
from sequences of 40-64 real steps). ``--part softmax`` times the attention softmax alone
(``(32, 4, 64, 64)`` scores, a causal mask, forward + backward on a tape).

Prints the median and the fastest milliseconds of each. To compare two checkouts, run it under
each alternately (the machines drift between runs), with one BLAS thread for steadier figures:
``OPENBLAS_NUM_THREADS=1 PYTHONPATH=path/to/tree python benchmarks/attention_step.py``. The
figures behind fusing the softmax are in ``tapefit/core/ops/nn.py``, above its gradient.

    python benchmarks/attention_step.py [--part layer|softmax] [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import tapefit as tp
from tapefit.core.ops import nn as _nn

BATCH, STEPS, HEADS, KEY_DIM = 32, 64, 4, 16


def timings_ms(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """The median and the fastest of ``repeats`` calls, in milliseconds."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times), 1000 * min(times)


def layer_steps() -> dict[str, Callable[[], object]]:
    rng = np.random.default_rng(0)
    x = tp.constant(rng.standard_normal((BATCH, STEPS, HEADS * KEY_DIM)).astype(np.float32))
    lengths = rng.integers(40, STEPS + 1, BATCH)
    steps_mask = tp.constant(np.arange(STEPS) < lengths[:, None])
    tp.random.set_seed(0)
    layer = tp.layers.MultiHeadAttention(HEADS, KEY_DIM)
    layer(x, x)

    def step(**masks: object) -> Callable[[], object]:
        def run() -> object:
            with tp.GradientTape() as tape:
                tape.watch(x)
                y = layer(x, x, **masks)
                loss = tp.reduce_sum(y * y)
            return tape.gradient(loss, [x, *layer.trainable_variables])

        return run

    return {
        "no mask": step(),
        "causal": step(use_causal_mask=True),
        "padding": step(query_mask=steps_mask, value_mask=steps_mask),
    }


def softmax_steps() -> dict[str, Callable[[], object]]:
    rng = np.random.default_rng(0)
    scores = tp.constant(rng.standard_normal((BATCH, HEADS, STEPS, STEPS)).astype(np.float32))
    upstream = tp.constant(rng.standard_normal(scores.shape).astype(np.float32))
    causal = tp.constant(np.tril(np.ones((STEPS, STEPS), bool)))
    masked_softmax = getattr(_nn, "masked_softmax", None)  # absent before it was fused

    def run(fn: Callable[[tp.Tensor], tp.Tensor]) -> Callable[[], object]:
        def step() -> object:
            with tp.GradientTape() as tape:
                tape.watch(scores)
                probs = fn(scores)
            return tape.gradient(probs, scores, output_gradients=upstream)

        return step

    steps = {
        "where + softmax": run(lambda s: tp.nn.softmax(tp.where(causal, s, np.float32(-1e9)))),
        "softmax, no mask": run(tp.nn.softmax),
    }
    if masked_softmax is not None:
        steps["masked_softmax"] = run(lambda s: masked_softmax(s, causal))
    return steps


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["layer", "softmax"], default="layer")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args(argv)
    steps = layer_steps() if args.part == "layer" else softmax_steps()
    for name, fn in steps.items():
        median, fastest = timings_ms(fn, args.repeats)
        print(f"{args.part:8s} {name:18s} median {median:7.2f} ms  min {fastest:7.2f} ms")


if __name__ == "__main__":
    main()
