"""The benchmark suite: every figure a ratio against references measured in the same run.

``python -m benchmarks`` runs it, prints one table and writes the figures as JSON. Each row
times its systems alternately (A, B, A, B, ..., in a new order each round) and reports the
median of the per-pair ratios, so the drift of a shared machine (10-35% between runs here)
falls on both sides alike. Peers that are not installed (PyTorch, JAX, HIPS autograd: the ``bench`` extra) are
shown as skipped.

The rows with a target, and their targets: an op chain recorded + backward <= 1.0x PyTorch, an
op with no tape <= 1.5x NumPy, the MLP step eagerly <= 1.25x the lean NumPy step at batch 32,
under ``tp.function`` <= 1.05x ``jax.jit`` and <= 1.15x the floor at batch 32, <= 1.0x
``jax.jit`` at 128, the bidirectional GRU step eagerly <= 1.5x PyTorch, ``lstm_step.py``'s
LSTM eagerly <= 1.1x ``torch.nn.LSTM``, a compiled Adam step <= 1.0x the lean one. The other
rows are reported, to show that nothing got slower. ``jit`` is ``tp.function(jit_compile=True)``
(fused kernels, with Numba: the ``jit`` extra), skipped when Numba is missing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import tapefit as tp

SIZES = (784, 512, 256, 10)
LR = np.float32(0.01)
ROOT = Path(__file__).resolve().parents[1]


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


# ----------------------------------------------------------------------------- timing


def paired(fns: dict[str, Callable[[], object]], pairs: int, inner: int = 1) -> dict[str, list[float]]:
    """Seconds per call of every function, the functions alternating round after round.

    Each round runs the systems in a new (seeded) random order: a system that leaves the
    machine busy (a peer's thread pool winding down, a large free) then slows a different
    system each round instead of always the one after it.
    """
    for fn in fns.values():
        fn()  # warm up: caches, traces, lazy builds
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    order = random.Random(0)
    for _ in range(pairs):
        order.shuffle(names)
        for name in names:
            fn = fns[name]
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            times[name].append((time.perf_counter() - start) / inner)
    return times


def ratio(times: dict[str, list[float]], a: str, b: str) -> float:
    """The median of the per-round ratios ``a / b``."""
    return statistics.median(x / y for x, y in zip(times[a], times[b]))


@dataclass
class Row:
    """One line of the table: a figure, the ratios against its references, a target."""

    name: str
    ms: dict[str, float] = field(default_factory=dict)  # median ms per call of each system
    ratios: dict[str, float] = field(default_factory=dict)  # "a/b": median per-pair ratio
    target: str = ""
    met: bool | None = None
    note: str = ""


def row_from(name: str, times: dict[str, list[float]], pairs: list[tuple[str, str]], **kwargs: Any) -> Row:
    row = Row(name, {k: statistics.median(v) * 1e3 for k, v in times.items()}, **kwargs)
    for a, b in pairs:
        row.ratios[f"{a}/{b}"] = ratio(times, a, b)
    return row


# ----------------------------------------------------------------------------- the MLP step


def init_params(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    params = []
    for n_in, n_out in itertools.pairwise(SIZES):
        limit = np.sqrt(6.0 / (n_in + n_out))
        params.append(rng.uniform(-limit, limit, (n_in, n_out)).astype(np.float32))
        params.append(np.zeros(n_out, np.float32))
    return params


class LeanMLP:
    """The MLP step as a NumPy expert writes it: every buffer allocated once, ``out=`` throughout."""

    def __init__(self, params: list[np.ndarray], batch: int) -> None:
        self.params = params
        f32 = np.float32
        self.h1, self.h2 = np.empty((batch, SIZES[1]), f32), np.empty((batch, SIZES[2]), f32)
        self.p = np.empty((batch, SIZES[3]), f32)
        self.d2, self.d1 = np.empty_like(self.h2), np.empty_like(self.h1)
        self.m2, self.m1 = np.empty(self.h2.shape, bool), np.empty(self.h1.shape, bool)
        self.grads = [np.empty_like(p) for p in params]
        self.rows = np.arange(batch)

    def gradients(self, x: np.ndarray, y: np.ndarray) -> float:
        """Forward and backward; leaves the gradients in ``self.grads``; returns the loss."""
        w1, b1, w2, b2, w3, b3 = self.params
        h1, h2, p, d2, d1 = self.h1, self.h2, self.p, self.d2, self.d1
        gw1, gb1, gw2, gb2, gw3, gb3 = self.grads
        np.matmul(x, w1, out=h1)
        h1 += b1
        np.maximum(h1, 0, out=h1)
        np.matmul(h1, w2, out=h2)
        h2 += b2
        np.maximum(h2, 0, out=h2)
        np.matmul(h2, w3, out=p)
        p += b3
        p -= p.max(axis=1, keepdims=True)
        np.exp(p, out=p)
        p /= p.sum(axis=1, keepdims=True)
        loss = -float(np.mean(np.log(p[self.rows, y])))
        p[self.rows, y] -= 1  # d(loss)/d(logits), times the batch size
        p /= np.float32(len(y))
        np.matmul(h2.T, p, out=gw3)
        p.sum(axis=0, out=gb3)
        np.matmul(p, w3.T, out=d2)
        np.greater(h2, 0, out=self.m2)
        d2 *= self.m2
        np.matmul(h1.T, d2, out=gw2)
        d2.sum(axis=0, out=gb2)
        np.matmul(d2, w2.T, out=d1)
        np.greater(h1, 0, out=self.m1)
        d1 *= self.m1
        np.matmul(x.T, d1, out=gw1)
        d1.sum(axis=0, out=gb1)
        return loss

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        loss = self.gradients(x, y)
        for param, grad in zip(self.params, self.grads):
            grad *= LR
            param -= grad
        return loss


class Floor:
    """The step's matrix products alone, into preallocated outputs: what no system can beat."""

    def __init__(self, params: list[np.ndarray], batch: int) -> None:
        self.lean = LeanMLP(params, batch)

    def step(self, x: np.ndarray, y: np.ndarray) -> None:
        w1, _, w2, _, w3, _ = self.lean.params
        lean = self.lean
        gw1, _, gw2, _, gw3, _ = lean.grads
        np.matmul(x, w1, out=lean.h1)
        np.matmul(lean.h1, w2, out=lean.h2)
        np.matmul(lean.h2, w3, out=lean.p)
        np.matmul(lean.h2.T, lean.p, out=gw3)
        np.matmul(lean.p, w3.T, out=lean.d2)
        np.matmul(lean.h1.T, lean.d2, out=gw2)
        np.matmul(lean.d2, w2.T, out=lean.d1)
        np.matmul(x.T, lean.d1, out=gw1)


def tapefit_mlp(params: list[np.ndarray]) -> tuple[tp.Module, Any, Any]:
    """The same network as a tapefit user writes it: Dense layers, a loss object, SGD."""
    model = tp.layers.Sequential(
        [
            tp.layers.Dense(SIZES[1], activation="relu"),
            tp.layers.Dense(SIZES[2], activation="relu"),
            tp.layers.Dense(SIZES[3]),
        ]
    )
    model(tp.constant(np.zeros((1, SIZES[0]), np.float32)))
    for variable, value in zip(model.trainable_variables, params):
        variable.assign(value.copy())
    return (
        model,
        tp.losses.SparseCategoricalCrossentropy(from_logits=True),
        tp.optimizers.SGD(learning_rate=float(LR)),
    )


def tapefit_step_fn(params: list[np.ndarray], compiled: bool, jit: bool = False) -> Callable[[Any, Any], Any]:
    model, loss_fn, optimizer = tapefit_mlp(params)

    def step(x: Any, y: Any) -> Any:
        with tp.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    return tp.function(step, jit_compile=jit) if compiled else step


def torch_step_fn(params: list[np.ndarray]) -> Callable[[Any, Any], Any] | None:
    if not installed("torch"):
        return None
    import torch

    layers = [torch.nn.Linear(SIZES[i], SIZES[i + 1]) for i in range(3)]
    with torch.no_grad():
        for layer, w, b in zip(layers, params[0::2], params[1::2]):
            layer.weight.copy_(torch.from_numpy(w.T.copy()))
            layer.bias.copy_(torch.from_numpy(b))
    model = torch.nn.Sequential(layers[0], torch.nn.ReLU(), layers[1], torch.nn.ReLU(), layers[2])
    optimizer = torch.optim.SGD(model.parameters(), lr=float(LR))
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x: Any, y: Any) -> Any:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return step


def jax_step_fn(params: list[np.ndarray]) -> Callable[[Any, Any], Any] | None:
    if not installed("jax"):
        return None
    import jax
    import jax.numpy as jnp

    def loss_of(ps: list[Any], x: Any, y: Any) -> Any:
        h = x
        for i in range(2):
            h = jax.nn.relu(h @ ps[2 * i] + ps[2 * i + 1])
        logits = h @ ps[4] + ps[5]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    @jax.jit
    def update(ps: list[Any], x: Any, y: Any) -> tuple[list[Any], Any]:
        loss, grads = jax.value_and_grad(loss_of)(ps, x, y)
        return [p - LR * g for p, g in zip(ps, grads)], loss

    state = {"ps": [jnp.asarray(p) for p in params]}

    def step(x: Any, y: Any) -> Any:
        state["ps"], loss = update(state["ps"], x, y)
        return loss.block_until_ready()

    return step


def mlp_rows(batch: int, pairs: int) -> list[Row]:
    # The same batch over and over drives the loss to 0 and the gradients into denormal floats,
    # which the CPU computes many times slower: the systems would be timed on an artifact.
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, SIZES[0]), dtype=np.float32)
    y = rng.integers(0, SIZES[3], batch)
    x /= np.float32(4.0)
    params = init_params()
    lean, floor = LeanMLP([p.copy() for p in params], batch), Floor([p.copy() for p in params], batch)
    eager, compiled = tapefit_step_fn(params, False), tapefit_step_fn(params, True)
    xt, yt = tp.constant(x), tp.constant(y)

    def run_lean() -> None:
        lean.step(x, y)

    fns: dict[str, Callable[[], object]] = {
        "lean": run_lean,
        "floor": lambda: floor.step(x, y),
        "eager": lambda: eager(xt, yt),
        "function": lambda: compiled(xt, yt),
    }
    peers: dict[str, Callable[[], object]] = {}
    torch_step = torch_step_fn(params)
    if torch_step is not None:
        import torch

        xs, ys = torch.from_numpy(x), torch.from_numpy(y)
        peers["torch"] = lambda: torch_step(xs, ys)
    jax_step = jax_step_fn(params)
    if jax_step is not None:
        import jax.numpy as jnp

        xj, yj = jnp.asarray(x), jnp.asarray(y)
        peers["jax.jit"] = lambda: jax_step(xj, yj)
    # The peers' thread pools slow whatever runs after them in this process, so tapefit and
    # its NumPy references are timed first, among themselves; each peer is then timed against
    # the lean step, and tapefit / peer is the product of the two ratios through it.
    times = paired(fns, pairs)
    compare = [
        ("eager", "lean"),
        ("function", "lean"),
        ("eager", "floor"),
        ("function", "floor"),
        ("function", "eager"),
        ("lean", "floor"),
    ]
    row = row_from(f"MLP step, batch {batch}", times, compare)
    if installed("numba"):
        # Timed in a block of its own: interleaved with the eager step, the fused kernels slowed
        # it (eager/lean 1.20x alone, 1.27x beside them at batch 1024), through the allocator.
        jit = tapefit_step_fn(params, True, jit=True)
        fused = paired(
            {"function": lambda: compiled(xt, yt), "jit": lambda: jit(xt, yt), "floor": fns["floor"]}, pairs
        )
        row.ms["jit"] = statistics.median(fused["jit"]) * 1e3
        row.ratios["jit/function"] = ratio(fused, "jit", "function")
        row.ratios["jit/floor"] = ratio(fused, "jit", "floor")
    for peer, step in peers.items():
        against = paired({"lean": run_lean, peer: step}, pairs)
        row.ms[peer] = statistics.median(against[peer]) * 1e3
        lean_per_peer = ratio(against, "lean", peer)
        for ours in ("eager", "function") if peer == "jax.jit" else ("eager",):
            row.ratios[f"{ours}/{peer}"] = row.ratios[f"{ours}/lean"] * lean_per_peer
        if peer == "jax.jit" and "jit/function" in row.ratios:
            row.ratios["jit/jax.jit"] = row.ratios["jit/function"] * row.ratios["function/jax.jit"]
        # The matrix products alone against the peer's whole step: below 1.0 only if NumPy's
        # BLAS leaves room for everything else; the bound under every tapefit figure.
        row.ratios[f"floor/{peer}"] = lean_per_peer / row.ratios["lean/floor"]
    # The targets, and only those: eager <= 1.25x lean and tp.function <= 1.15x the floor and
    # <= 1.05x jax.jit at batch 32; tp.function <= 1.0x jax.jit at 128.
    targets = {"eager/lean": 1.25, "function/floor": 1.15, "function/jax.jit": 1.05} if batch == 32 else {}
    if batch == 128:
        targets["function/jax.jit"] = 1.0
    row.target = ", ".join(f"{k} <= {v}" for k, v in targets.items())
    checked = [row.ratios[k] <= v for k, v in targets.items() if k in row.ratios]
    row.met = all(checked) if checked else None
    if "torch" not in peers or "jax.jit" not in peers:
        row.note = "peers missing: " + ", ".join(k for k in ("torch", "jax.jit") if k not in peers)
    return [row]


# ----------------------------------------------------------------------------- op overhead

CHAIN = 100


def chain_rows(pairs: int) -> list[Row]:
    x_np = np.linspace(-1, 1, 16, dtype=np.float32)
    c_np = np.float32(0.5) * np.ones(16, np.float32)
    x, c = tp.constant(x_np), tp.constant(c_np)

    def numpy_chain() -> None:
        v = x_np
        for _ in range(CHAIN // 4):
            v = np.tanh(np.sin(np.add(np.multiply(v, c_np), c_np)))

    def tapefit_chain() -> Any:
        v = x
        for _ in range(CHAIN // 4):
            v = tp.tanh(tp.sin(v * c + c))
        return v

    def recorded_backward() -> None:
        with tp.GradientTape() as tape:
            tape.watch(x)
            out = tapefit_chain()
        tape.gradient(out, x)

    fns: dict[str, Callable[[], object]] = {
        "numpy": numpy_chain,
        "no tape": tapefit_chain,
        "tape+backward": recorded_backward,
    }
    if installed("torch"):
        import torch

        xt, ct = torch.from_numpy(x_np.copy()).requires_grad_(), torch.from_numpy(c_np)

        def torch_backward() -> None:
            v = xt
            for _ in range(CHAIN // 4):
                v = torch.tanh(torch.sin(v * ct + ct))
            v.sum().backward()
            xt.grad = None

        fns["torch backward"] = torch_backward
    if installed("autograd"):
        import autograd
        import autograd.numpy as anp

        def chain_sum(v: Any) -> Any:
            for _ in range(CHAIN // 4):
                v = anp.tanh(anp.sin(v * c_np + c_np))
            return anp.sum(v)

        autograd_grad = autograd.grad(chain_sum)
        fns["autograd backward"] = lambda: autograd_grad(x_np)
    times = paired(fns, pairs, inner=5)
    no_tape = row_from(
        "op, no tape (per op)",
        {k: [t / CHAIN for t in times[k]] for k in ("no tape", "numpy")},
        [("no tape", "numpy")],
        target="no tape/numpy <= 1.5",
    )
    no_tape.met = no_tape.ratios["no tape/numpy"] <= 1.5
    peers = [k for k in ("torch backward", "autograd backward") if k in times]
    backward = row_from(
        "op, recorded + backward (per op)",
        {k: [t / CHAIN for t in times[k]] for k in ("tape+backward", *peers)},
        [("tape+backward", k) for k in peers],
        target="tape+backward/torch <= 1.0",
    )
    backward.met = (
        backward.ratios["tape+backward/torch backward"] <= 1.0 if "torch backward" in times else None
    )
    if "torch backward" not in times:
        backward.note = "torch not installed"
    return [no_tape, backward]


# ----------------------------------------------------------------------------- CNN, Adam, fit


def cnn_rows(pairs: int) -> list[Row]:
    rng = np.random.default_rng(0)
    x = tp.constant(rng.standard_normal((32, 8, 8, 1), dtype=np.float32))
    y = tp.constant(rng.integers(0, 10, 32))

    def make(compiled: bool) -> Callable[[], object]:
        tp.random.set_seed(0)
        model = tp.layers.Sequential(
            [
                tp.layers.Conv2D(16, 3, padding="same", activation="relu"),
                tp.layers.MaxPool2D(2),
                tp.layers.Flatten(),
                tp.layers.Dense(10),
            ]
        )
        loss_fn = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
        optimizer = tp.optimizers.Adam()

        def step(xb: Any, yb: Any) -> Any:
            with tp.GradientTape() as tape:
                loss = loss_fn(yb, model(xb, training=True))
            variables = model.trainable_variables
            optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
            return loss

        fn = tp.function(step) if compiled else step
        return lambda: fn(x, y)

    times = paired({"eager": make(False), "function": make(True)}, pairs)
    return [row_from("CNN step (digits 8x8, batch 32)", times, [("function", "eager")])]


GRU_SHAPE = (100, 40, 8)  # batch, steps, features
GRU_UNITS = 6


def gru_rows(pairs: int) -> list[Row]:
    """A bidirectional GRU (6 units) over 40 steps, batch 100, and a Dense(1) on both final
    states: one SGD training step on mean squared error, tapefit eager and ``tp.function``
    against PyTorch's ``nn.GRU(bidirectional=True)``, alternating in one process."""
    rng = np.random.default_rng(5)
    x_np = rng.standard_normal(GRU_SHAPE, dtype=np.float32)
    y_np = rng.standard_normal((GRU_SHAPE[0], 1), dtype=np.float32)
    x, y = tp.constant(x_np), tp.constant(y_np)

    def make(compiled: bool) -> Callable[[], object]:
        tp.random.set_seed(0)
        model = tp.layers.Sequential([tp.layers.Bidirectional(tp.layers.GRU(GRU_UNITS)), tp.layers.Dense(1)])
        model(x)
        loss_fn = tp.losses.MeanSquaredError()
        optimizer = tp.optimizers.SGD(learning_rate=0.01)

        def step(xb: Any, yb: Any) -> Any:
            with tp.GradientTape() as tape:
                loss = loss_fn(yb, model(xb))
            variables = model.trainable_variables
            optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
            return loss

        fn = tp.function(step) if compiled else step
        return lambda: fn(x, y)

    fns: dict[str, Callable[[], object]] = {"eager": make(False), "function": make(True)}
    if installed("torch"):
        import torch

        torch.manual_seed(0)
        gru = torch.nn.GRU(GRU_SHAPE[2], GRU_UNITS, batch_first=True, bidirectional=True)
        head = torch.nn.Linear(2 * GRU_UNITS, 1)
        optimizer = torch.optim.SGD([*gru.parameters(), *head.parameters()], lr=0.01)
        xt, yt = torch.from_numpy(x_np), torch.from_numpy(y_np)

        def torch_step() -> Any:
            optimizer.zero_grad(set_to_none=True)
            _, h_n = gru(xt)  # (2, batch, units): the forward and the backward final states
            loss = torch.nn.functional.mse_loss(head(torch.cat([h_n[0], h_n[1]], dim=-1)), yt)
            loss.backward()
            optimizer.step()
            return loss

        fns["torch"] = torch_step
    times = paired(fns, pairs)
    name = f"bidirectional GRU step ({GRU_UNITS} units, {GRU_SHAPE[1]} steps, batch {GRU_SHAPE[0]})"
    if "torch" not in times:
        return [row_from(name, times, [("function", "eager")], note="torch not installed")]
    row = row_from(
        name,
        times,
        [("eager", "torch"), ("function", "torch"), ("function", "eager")],
        target="eager/torch <= 1.5",
    )
    row.met = row.ratios["eager/torch"] <= 1.5
    return [row]


def lstm_rows(pairs: int) -> list[Row]:
    """``lstm_step.py``'s LSTM layer (batch 32, 50 steps, 64 inputs, 128 units), forward and
    backward, eagerly: tapefit against ``torch.nn.LSTM`` with the same weights, alternating
    (and against the handwritten NumPy LSTM, alone first, as that script does)."""
    sys.path.insert(0, str(Path(__file__).parent))
    import lstm_step

    rng = np.random.default_rng(0)
    shape = (lstm_step.BATCH, lstm_step.STEPS, lstm_step.FEATURES)
    x = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.5)
    tp.random.set_seed(0)
    layer = tp.layers.LSTM(lstm_step.UNITS, return_sequences=True)
    layer(tp.constant(x))
    weights = [v.numpy() for v in (layer.kernel, layer.recurrent_kernel, layer.bias)]
    xv = tp.Variable(x)

    def eager() -> Any:
        with tp.GradientTape() as tape:
            loss = tp.reduce_sum(tp.square(layer(xv)))
        return tape.gradient(loss, [xv, layer.kernel, layer.recurrent_kernel, layer.bias])

    name = "lstm_step.py: LSTM forward + backward (batch 32, 50 steps, 64 to 128)"
    times = paired({"eager": eager, "numpy": lambda: lstm_step.numpy_lstm(x, *weights)}, pairs)
    torch_step = lstm_step.make_torch_step(x, weights, float(tp.reduce_sum(tp.square(layer(xv)))))
    if torch_step is None:
        return [row_from(name, times, [("eager", "numpy")], note="torch not installed")]
    against = paired({"eager": eager, "torch": torch_step}, pairs)
    row = row_from(name, against, [("eager", "torch")], target="eager/torch <= 1.1")
    row.ratios["eager/numpy"] = ratio(times, "eager", "numpy")
    row.ms["numpy"] = statistics.median(times["numpy"]) * 1e3
    row.met = row.ratios["eager/torch"] <= 1.1
    return [row]


def adam_rows(pairs: int) -> list[Row]:
    params = init_params()
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal(p.shape, dtype=np.float32) * np.float32(0.01) for p in params]
    variables = [tp.Variable(p.copy()) for p in params]
    optimizer = tp.optimizers.Adam(learning_rate=1e-3)
    gradient_tensors = [tp.constant(g) for g in grads]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    scratch = [np.empty_like(p) for p in params]
    lean_params = [p.copy() for p in params]
    count = [0]
    b1, b2, eps = np.float32(0.9), np.float32(0.999), np.float32(1e-7)

    def lean() -> None:
        count[0] += 1
        t = count[0]
        alpha = np.float32(1e-3 * np.sqrt(1 - 0.999**t) / (1 - 0.9**t))
        for p, g, mi, vi, s in zip(lean_params, grads, m, v, scratch):
            mi *= b1
            mi += (1 - b1) * g
            vi *= b2
            np.multiply(g, g, out=s)
            s *= 1 - b2
            vi += s
            np.sqrt(vi, out=s)
            s += eps
            np.divide(mi, s, out=s)
            s *= alpha
            p -= s

    fns: dict[str, Callable[[], object]] = {
        "tapefit": lambda: optimizer.apply_gradients(zip(gradient_tensors, variables)),
        "lean": lean,
    }
    compare = [("tapefit", "lean")]
    for name, jit in (("function", False), ("jit", True)):
        if jit and not installed("numba"):
            continue
        compiled_variables = [tp.Variable(p.copy()) for p in params]
        compiled_optimizer = tp.optimizers.Adam(learning_rate=1e-3)

        def apply(
            grads: list[Any], variables: list[Any] = compiled_variables, opt: Any = compiled_optimizer
        ) -> Any:
            return opt.apply_gradients(zip(grads, variables))

        step = tp.function(apply, jit_compile=jit)
        fns[name] = lambda step=step: step(gradient_tensors)
        compare.append((name, "lean"))
    times = paired(fns, pairs)
    row = row_from("Adam step (535,818 parameters)", times, compare)
    if "function/lean" in row.ratios:
        row.target = "function/lean <= 1.0"
        row.met = row.ratios["function/lean"] <= 1.0
    return [row]


def fit_rows(pairs: int, samples: int) -> list[Row]:
    sys.path.insert(0, str(Path(__file__).parent))
    from fit_overhead import bare_epoch, fit_epoch

    rng = np.random.default_rng(0)
    x = rng.standard_normal((samples, SIZES[0]), dtype=np.float32)
    y = rng.integers(0, SIZES[3], samples)
    times: dict[str, list[float]] = {"fit": [], "bare": []}
    with tempfile.TemporaryDirectory() as folder:
        fit_epoch(x, y, 128, Path(folder))  # warm up
        for _ in range(pairs):
            times["fit"].append(fit_epoch(x, y, 128, Path(folder))[0][0])
            times["bare"].append(bare_epoch(x, y, 128)[0][0])
    return [row_from(f"Trainer.fit epoch + progress + CSV ({samples} samples)", times, [("fit", "bare")])]


def compiled_fit_rows(pairs: int) -> list[Row]:
    """A user's ``fit`` and ``evaluate`` on the digits (64-64-10 MLP, Adam, accuracy, batch 32):
    ``Trainer(compile=True)`` against the eager trainer, one epoch (or one evaluation) each,
    alternating."""
    from tapefit.data import load_digits

    x, y = load_digits(flatten=True)
    x = x.astype(np.float32)

    def trainer(compile: bool) -> tp.Trainer:
        tp.random.set_seed(0)
        model = tp.layers.Sequential(
            [
                tp.layers.Dense(64, activation="relu"),
                tp.layers.Dense(64, activation="relu"),
                tp.layers.Dense(10),
            ]
        )
        loss = tp.losses.SparseCategoricalCrossentropy(from_logits=True)
        made = tp.Trainer(model, tp.optimizers.Adam(1e-3), loss, metrics=["accuracy"], compile=compile)
        made.fit(x, y, epochs=1, batch_size=32, verbose=0)  # builds, traces
        return made

    eager, compiled = trainer(False), trainer(True)
    fits = paired(
        {
            "eager": lambda: eager.fit(x, y, epochs=1, batch_size=32, verbose=0),
            "compiled": lambda: compiled.fit(x, y, epochs=1, batch_size=32, verbose=0),
        },
        pairs,
    )
    evaluations = paired(
        {
            "eager": lambda: eager.evaluate(x, y, batch_size=32, verbose=0),
            "compiled": lambda: compiled.evaluate(x, y, batch_size=32, verbose=0),
        },
        pairs,
    )
    return [
        row_from("digits fit, one epoch (MLP 64-64-10, Adam, accuracy)", fits, [("compiled", "eager")]),
        row_from("digits evaluate (the same trainer)", evaluations, [("compiled", "eager")]),
    ]


def gan_rows(pairs: int, steps: int) -> list[Row]:
    sys.path.insert(0, str(Path(__file__).parent))
    from gan_step import BATCH, step_times

    times = step_times(pairs, steps)
    name = f"GAN step (examples/gan.py, batch {BATCH}, 2 updates)"
    compare = [("function", "eager")] + ([("jit", "eager"), ("jit", "function")] if "jit" in times else [])
    return [row_from(name, times, compare)]


# ----------------------------------------------------------------------------- memory, threads

MEMORY_CHILD = """
import sys
import numpy as np
sys.path.insert(0, {bench!r})
from suite import LeanMLP, init_params, tapefit_step_fn
import tapefit as tp
batch, which = 128, sys.argv[1]
rng = np.random.default_rng(0)
x = rng.standard_normal((batch, 784), dtype=np.float32)
y = rng.integers(0, 10, batch)
params = init_params()
if which == "lean":
    lean = LeanMLP(params, batch)
    for _ in range(30):
        lean.step(x, y)
else:
    step = tapefit_step_fn(params, which != "eager", jit=which == "jit")
    xt, yt = tp.constant(x), tp.constant(y)
    for _ in range(30):
        step(xt, yt)
with open("/proc/self/status") as f:
    print(next(int(line.split()[1]) for line in f if line.startswith("VmHWM")))
"""


def memory_rows() -> list[Row]:
    if not Path("/proc/self/status").exists():
        return [Row("peak memory of the MLP step", note="no /proc here")]
    code = MEMORY_CHILD.format(bench=str(Path(__file__).parent))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    peak = {}
    systems = ("lean", "eager", "function") + (("jit",) if installed("numba") else ())
    for which in systems:
        out = subprocess.run(
            [sys.executable, "-c", code, which], capture_output=True, text=True, check=True, env=env
        )
        peak[which] = int(out.stdout.split()[-1]) / 1024
    row = Row("peak RSS, 30 MLP steps, batch 128 (MB)", ms={})
    row.ratios = {f"{k}/lean": peak[k] / peak["lean"] for k in systems[1:]}
    row.note = ", ".join(f"{k} {v:.0f} MB" for k, v in peak.items())
    if "jit" in peak:
        row.note += " (jit includes Numba's compiler, loaded in the process)"
    return [row]


NEIGHBOUR = """
import numpy as np
a = np.ones((256, 256), np.float32)
while True:
    a @ a
"""


def threads_rows(pairs: int) -> list[Row]:
    from tapefit.distributed.threads import limited, resolve_threads

    rng = np.random.default_rng(0)
    x, y = (
        tp.constant(rng.standard_normal((32, SIZES[0]), dtype=np.float32)),
        tp.constant(rng.integers(0, 10, 32)),
    )
    step = tapefit_step_fn(init_params(), False)
    neighbour = subprocess.Popen(
        [sys.executable, "-c", NEIGHBOUR], env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    )
    try:
        time.sleep(0.5)
        auto = resolve_threads("auto")

        def with_threads(n: int | None) -> Callable[[], object]:
            def run() -> None:
                with limited(n):
                    for _ in range(5):
                        step(x, y)

            return run

        times = paired({"default": with_threads(None), "auto": with_threads(auto)}, pairs)
    finally:
        neighbour.kill()
        neighbour.wait()
    row = row_from("MLP step b32 beside a busy neighbour, 5 steps", times, [("auto", "default")])
    row.note = f"auto chose {auto} BLAS thread(s)"
    return [row]


# ----------------------------------------------------------------------------- the run


def run(quick: bool = False, rounds: int = 40) -> list[Row]:
    """Every benchmark, alternating its systems for ``rounds`` rounds; ``quick`` runs each once
    or twice on small sizes (for the tests)."""
    pairs = 2 if quick else rounds
    rows: list[Row] = []
    rows += chain_rows(pairs)
    for batch in (32,) if quick else (32, 128, 1024):
        rows += mlp_rows(batch, pairs if batch < 1024 else max(2, pairs // 3))
    rows += cnn_rows(pairs)
    rows += gru_rows(max(2, pairs // 4))
    rows += lstm_rows(max(2, pairs // 4))
    rows += adam_rows(pairs)
    rows += fit_rows(2 if quick else 5, 512 if quick else 4096)
    rows += compiled_fit_rows(2 if quick else max(2, pairs // 2))
    rows += gan_rows(2 if quick else max(2, pairs // 4), 5 if quick else 40)
    if not quick:
        rows += memory_rows()
        if len(os.sched_getaffinity(0)) > 1:  # a BLAS thread count to choose needs two cores
            rows += threads_rows(pairs)
    return rows


def table(rows: list[Row]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| figure | ratios (median of per-pair) | target | met | ms per call / notes |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        ratios = ", ".join(f"{k} {v:.2f}x" for k, v in row.ratios.items())
        ms = ", ".join(f"{k} {v:.3g}" for k, v in row.ms.items())
        met = "" if row.met is None else ("yes" if row.met else "no")
        lines.append(
            f"| {row.name} | {ratios} | {row.target} | {met} | {'; '.join(p for p in (ms, row.note) if p)} |"
        )
    peers = {name: installed(name) for name in ("torch", "jax", "autograd")}
    missing = [name for name, ok in peers.items() if not ok]
    if missing:
        lines.append("")
        lines.append(f'Skipped peers (not installed; `pip install "tapefit[bench]"`): {", ".join(missing)}')
    # The kernels decide the matrix products' speed: an environment may force older ones.
    kernels = sorted({f"{api} ({arch} kernels)" for api, _, arch in machine().get("blas", []) if arch})
    if kernels:
        forced = os.environ.get("OPENBLAS_CORETYPE", "unset")
        lines += ["", f"BLAS: {', '.join(kernels)}; OPENBLAS_CORETYPE {forced}"]
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "tapefit": tp.__version__,
        "tapefit_path": str(Path(tp.__file__).parent),  # which tree a before/after run timed
    }
    with contextlib.suppress(Exception):
        info["cores"] = len(os.sched_getaffinity(0))
    with contextlib.suppress(Exception), open("/proc/cpuinfo") as cpuinfo:
        names = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")]
        if names:
            info["cpu"] = names[0]
    with contextlib.suppress(Exception):
        from threadpoolctl import threadpool_info

        info["blas"] = [
            (p.get("internal_api"), p.get("num_threads"), p.get("architecture")) for p in threadpool_info()
        ]
    info["OPENBLAS_CORETYPE"] = os.environ.get("OPENBLAS_CORETYPE")
    return info


def as_json(rows: list[Row]) -> dict[str, Any]:
    return {
        "machine": machine(),
        "rows": [
            {"name": r.name, "ms": r.ms, "ratios": r.ratios, "target": r.target, "met": r.met, "note": r.note}
            for r in rows
        ],
    }


__all__ = ["LeanMLP", "Row", "as_json", "init_params", "run", "table", "tapefit_step_fn"]
