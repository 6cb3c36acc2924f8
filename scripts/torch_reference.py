"""Writes ``tests/layers/data/torch_recurrent.npz``: PyTorch's outputs and gradients for
tapefit's recurrent layers to match, so that the tests compare with PyTorch without it.

Each case draws small weights in Keras's layouts from a seeded NumPy generator, maps them to
``torch.nn.RNN``/``LSTM``/``GRU`` (gates ``i, f, c, o`` are PyTorch's ``i, f, g, o``; Keras's
GRU ``z, r, h`` is PyTorch's ``r, z, n``; Keras's one LSTM/SimpleRNN bias is PyTorch's
``bias_ih`` with ``bias_hh`` zero), runs the module in float64 and maps the gradients back.
The loss is ``sum(output_k * weight_k)`` over the outputs in Keras's order (the sequence,
then the states). Masked cases use packed sequences of lengths 5 and 3, which give Keras's
results with ``zero_output_for_mask=True`` (set by ``Bidirectional`` itself). Keys:

- ``x``, ``mask``: the inputs (float32) and the steps' mask (for the masked cases);
- ``CASE/DIRECTION/kernel``, ``.../recurrent_kernel``, ``.../bias``: Keras's weights
  (``DIRECTION`` is ``forward``, or also ``backward`` for a ``Bidirectional`` case);
- ``CASE/weight_K``, ``CASE/output_K``: the loss weight (float32) and PyTorch's value of
  output ``K``;
- ``CASE/grad_x``, ``CASE/DIRECTION/grad_kernel`` and so on: the loss's gradients.

    python scripts/torch_reference.py           # rewrites the file (byte for byte the same)
    python scripts/torch_reference.py --check   # compares a fresh computation with the file
"""

from __future__ import annotations

import argparse
import io
import sys
import zipfile
from pathlib import Path

import numpy as np

PATH = Path(__file__).resolve().parents[1] / "tests" / "layers" / "data" / "torch_recurrent.npz"
BATCH, STEPS, FEATURES, UNITS = 2, 5, 3, 4
LENGTHS = (5, 3)  # of the masked cases' sequences (right-padded, as Keras pads)
GATES = {"simple": 1, "lstm": 4, "gru": 3}
# name: (kind, bidirectional, masked)
CASES = {
    "simple": ("simple", False, False),
    "lstm": ("lstm", False, False),
    "gru": ("gru", False, False),
    "simple_masked": ("simple", False, True),
    "lstm_masked": ("lstm", False, True),
    "gru_masked": ("gru", False, True),
    "bilstm": ("lstm", True, False),
    "bilstm_masked": ("lstm", True, True),
}
# Keras's GRU gates z, r, h as PyTorch's r, z, n (the permutation is its own inverse).
GRU_ORDER = np.concatenate([np.arange(UNITS, 2 * UNITS), np.arange(UNITS), np.arange(2 * UNITS, 3 * UNITS)])


def keras_weights(rng: np.random.Generator, kind: str) -> dict[str, np.ndarray]:
    """Kernel, recurrent kernel and bias in Keras's layouts (float32)."""
    width = GATES[kind] * UNITS
    bias_shape = (2, width) if kind == "gru" else (width,)
    shapes = {"kernel": (FEATURES, width), "recurrent_kernel": (UNITS, width), "bias": bias_shape}
    return {name: rng.uniform(-0.6, 0.6, shape).astype(np.float32) for name, shape in shapes.items()}


def torch_parameters(kind: str, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Keras's weights as PyTorch's ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``."""
    kernel, recurrent, bias = weights["kernel"], weights["recurrent_kernel"], weights["bias"]
    if kind == "gru":
        return {
            "weight_ih": kernel[:, GRU_ORDER].T,
            "weight_hh": recurrent[:, GRU_ORDER].T,
            "bias_ih": bias[0][GRU_ORDER],
            "bias_hh": bias[1][GRU_ORDER],
        }
    return {"weight_ih": kernel.T, "weight_hh": recurrent.T, "bias_ih": bias, "bias_hh": np.zeros_like(bias)}


def keras_gradients(kind: str, grads: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """PyTorch's parameter gradients in Keras's layouts."""
    if kind == "gru":
        return {
            "grad_kernel": grads["weight_ih"].T[:, GRU_ORDER],
            "grad_recurrent_kernel": grads["weight_hh"].T[:, GRU_ORDER],
            "grad_bias": np.stack([grads["bias_ih"][GRU_ORDER], grads["bias_hh"][GRU_ORDER]]),
        }
    # One Keras bias stands for bias_ih + bias_hh: its gradient is either's.
    return {
        "grad_kernel": grads["weight_ih"].T,
        "grad_recurrent_kernel": grads["weight_hh"].T,
        "grad_bias": grads["bias_ih"],
    }


def run_case(torch, name: str, x: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One case's weights, loss weights, outputs and gradients, keyed as the file keys them."""
    kind, bidirectional, masked = CASES[name]
    directions = ["forward", "backward"] if bidirectional else ["forward"]
    weights = {d: keras_weights(rng, kind) for d in directions}
    cls = {"simple": torch.nn.RNN, "lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[kind]
    module = cls(FEATURES, UNITS, batch_first=True, bidirectional=bidirectional).double()
    with torch.no_grad():
        for direction in directions:
            suffix = "_l0_reverse" if direction == "backward" else "_l0"
            for param, value in torch_parameters(kind, weights[direction]).items():
                getattr(module, param + suffix).copy_(
                    torch.from_numpy(np.ascontiguousarray(value, np.float64))
                )
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    if masked:
        packed = torch.nn.utils.rnn.pack_padded_sequence(xt, list(LENGTHS), batch_first=True)
        packed_out, states = module(packed)
        sequence, _ = torch.nn.utils.rnn.pad_packed_sequence(packed_out, batch_first=True, total_length=STEPS)
    else:
        sequence, states = module(xt)
    states = list(states) if kind == "lstm" else [states]  # each (directions, batch, units)
    # Keras's order: the sequence, then each direction's states (h, c for an LSTM).
    outputs = [sequence] + [s[k] for k in range(len(directions)) for s in states]
    result: dict[str, np.ndarray] = {}
    loss = 0.0
    for k, output in enumerate(outputs):
        weight = rng.uniform(0.5, 1.5, tuple(output.shape)).astype(np.float32)
        result[f"{name}/weight_{k}"] = weight
        result[f"{name}/output_{k}"] = output.detach().numpy()
        loss = loss + (output * torch.from_numpy(weight.astype(np.float64))).sum()
    loss.backward()
    result[f"{name}/grad_x"] = xt.grad.numpy()
    for direction in directions:
        suffix = "_l0_reverse" if direction == "backward" else "_l0"
        grads = {
            p: getattr(module, p + suffix).grad.numpy()
            for p in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        }
        for key, value in {**weights[direction], **keras_gradients(kind, grads)}.items():
            result[f"{name}/{direction}/{key}"] = value
    return result


def compute() -> dict[str, np.ndarray]:
    """Every array of the file, from PyTorch (imported here: the tests import this module)."""
    import torch

    rng = np.random.default_rng(2024)
    x = rng.standard_normal((BATCH, STEPS, FEATURES)).astype(np.float32)
    arrays = {"x": x, "mask": np.arange(STEPS) < np.array(LENGTHS)[:, None]}
    for name in CASES:
        arrays.update(run_case(torch, name, x, rng))
    return arrays


def write(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """An ``.npz`` that ``np.load`` reads, written without timestamps or compression, so that
    the same arrays give the same bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name in sorted(arrays):
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            archive.writestr(
                zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0)), buffer.getvalue()
            )


def check(path: Path, arrays: dict[str, np.ndarray], rtol: float = 1e-10) -> list[str]:
    """The keys whose saved values differ from ``arrays`` (or are missing on either side)."""
    with np.load(path) as saved:
        keys = set(saved.files) | set(arrays)
        return [
            key
            for key in sorted(keys)
            if key not in saved.files
            or key not in arrays
            or not np.allclose(saved[key], arrays[key], rtol=rtol, atol=rtol)
        ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the file instead of writing it")
    args = parser.parse_args()
    arrays = compute()
    if args.check:
        differ = check(PATH, arrays)
        print(f"{PATH.name}: " + (f"differs at {', '.join(differ)}" if differ else "up to date"))
        return 1 if differ else 0
    write(PATH, arrays)
    print(f"wrote {PATH} ({PATH.stat().st_size} bytes, {len(arrays)} arrays)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
