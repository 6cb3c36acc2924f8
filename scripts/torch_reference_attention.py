"""PyTorch's outputs and gradients for MultiHeadAttention, Conv2D and Conv1D, saved for CI.

CI has no PyTorch, so tapefit's layers are compared there with the numbers this script
computed once and saved in ``tests/layers/data/torch_attention.npz``: for each case, the
float32 inputs, weights (in Keras's layouts) and upstream gradient, and PyTorch's float64
output and gradients of ``sum(output * upstream)`` with respect to the inputs and every
weight, stored as float32. Only NumPy and PyTorch are used, not tapefit.

- ``mha_<mask>``: attention through ``torch.nn.functional.scaled_dot_product_attention``,
  with Keras's ``EinsumDense`` projections mapped onto it, with no mask, a causal mask and a
  padding ``attention_mask`` (keys past each sequence's length hidden).
- ``conv2d_<n>``, ``conv1d_<n>``: ``torch.nn.functional.conv2d``/``conv1d`` on channels-first
  copies, with dilation, groups and strides; ``"same"`` padded as TensorFlow does (the odd
  extra step at the end), ``"causal"`` with ``(kernel_size - 1) * dilation`` zeros in front.

    python scripts/torch_reference_attention.py          # writes the file
    python scripts/torch_reference_attention.py --check  # recomputes it, compares, exit 1 if not equal
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

PATH = Path(__file__).resolve().parents[1] / "tests" / "layers" / "data" / "torch_attention.npz"
PROJECTIONS = ("query", "key", "value", "output")
MHA = {"num_heads": 3, "key_dim": 4, "value_dim": 5}
CONV2D = [  # strides, padding, dilation, groups
    ((1, 1), "same", (2, 3), 2),
    ((1, 1), "valid", (2, 2), 4),
    ((2, 2), "same", (1, 1), 2),
    ((2, 1), "valid", (1, 1), 1),
]
CONV1D = [(1, "causal", 2, 2), (2, "same", 1, 1), (1, "valid", 3, 4), (1, "same", 2, 1)]


def _torch() -> Any:
    import torch

    torch.use_deterministic_algorithms(True)
    return torch


def _leaf(torch: Any, array: np.ndarray) -> Any:
    return torch.tensor(np.asarray(array, np.float64), requires_grad=True)


def attention(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    weights: dict[str, np.ndarray],
    mask: np.ndarray | None,
    upstream: np.ndarray,
) -> dict[str, np.ndarray]:
    """Keras's MultiHeadAttention through ``scaled_dot_product_attention``, in float64.

    Args:
        query, key, value: ``(batch, T, dim)``, ``(batch, S, dim)``, ``(batch, S, dim)``.
        weights: ``<name>_kernel`` and ``<name>_bias`` for query, key, value (kernels
            ``(dim, heads, size)``, biases ``(heads, size)``) and output (``(heads,
            value_dim, out)``, ``(out,)``), as Keras's ``EinsumDense`` layers hold them.
        mask: booleans ``(batch, T, S)``, true where a query may attend to a key, or ``None``.
        upstream: the gradient of the output, ``(batch, T, out)``.

    Returns:
        ``output``, and ``d_<name>`` for the inputs and every weight, in their own layouts.
    """
    torch = _torch()
    functional = torch.nn.functional
    leaves = {"query": query, "key": key, "value": value, **weights}
    t = {name: _leaf(torch, array) for name, array in leaves.items()}
    heads = {}
    for name in ("query", "key", "value"):  # (batch, steps, dim) -> (batch, heads, steps, size)
        projected = torch.einsum("bsd,dhk->bhsk", t[name], t[f"{name}_kernel"])
        heads[name] = projected + t[f"{name}_bias"][:, None, :]
    attn_mask = None if mask is None else torch.from_numpy(mask)[:, None]  # over the heads
    context = functional.scaled_dot_product_attention(
        heads["query"], heads["key"], heads["value"], attn_mask=attn_mask
    )  # softmax(q k^T / sqrt(key_dim)) v: Keras's scaling
    output = torch.einsum("bhtv,hvo->bto", context, t["output_kernel"]) + t["output_bias"]
    (output * torch.from_numpy(np.asarray(upstream, np.float64))).sum().backward()
    result = {"output": output.detach().numpy()}
    result.update({f"d_{name}": leaf.grad.numpy() for name, leaf in t.items()})
    return result


def _same_pads(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TensorFlow's "same" padding: the odd extra step at the end."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def convolution(
    x: np.ndarray,
    kernel: np.ndarray,
    bias: np.ndarray,
    strides: tuple[int, ...],
    padding: str,
    dilation: tuple[int, ...],
    groups: int,
    upstream: np.ndarray | None,
) -> dict[str, np.ndarray]:
    """Keras's Conv1D or Conv2D (channels last) through ``torch.nn.functional.conv1d/2d``.

    Args:
        x: ``(batch, steps, channels)`` or ``(batch, height, width, channels)``.
        kernel: ``(*kernel_size, channels // groups, filters)``, Keras's layout.
        bias: ``(filters,)``.
        strides, dilation: one int per spatial axis.
        padding: ``"valid"``, ``"same"`` or (1-D) ``"causal"``.
        groups: the number of channel groups.
        upstream: the gradient of the output (channels last); ``None``: the output alone.

    Returns:
        ``output``, ``d_x``, ``d_kernel``, ``d_bias``, in Keras's layouts.
    """
    torch = _torch()
    functional = torch.nn.functional
    rank = x.ndim - 2
    xt, wt, bt = (_leaf(torch, a) for a in (x, kernel, bias))
    first = (0, rank + 1, *range(1, rank + 1))  # channels last -> channels first
    inputs = xt.permute(*first)
    weight = wt.permute(rank + 1, rank, *range(rank))  # (filters, channels // groups, *kernel_size)
    pads: list[int] = []
    for axis in reversed(range(rank)):  # functional.pad takes the last axis first
        size, k, s, d = x.shape[1 + axis], kernel.shape[axis], strides[axis], dilation[axis]
        if padding == "same":
            pads += _same_pads(size, k, s, d)
        elif padding == "causal":
            pads += [(k - 1) * d, 0]
        else:
            pads += [0, 0]
    conv = functional.conv1d if rank == 1 else functional.conv2d
    y = conv(functional.pad(inputs, pads), weight, bt, stride=strides, dilation=dilation, groups=groups)
    output = y.permute(0, *range(2, rank + 2), 1)  # back to channels last
    if upstream is None:
        return {"output": output.detach().numpy()}
    (output * torch.from_numpy(np.asarray(upstream, np.float64))).sum().backward()
    return {
        "output": output.detach().numpy(),
        "d_x": xt.grad.numpy(),
        "d_kernel": wt.grad.numpy(),
        "d_bias": bt.grad.numpy(),
    }


def _float32(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def _attention_cases(rng: np.random.Generator) -> dict[str, np.ndarray]:
    batch, steps, keys, query_dim, key_in, value_in = 2, 4, 5, 6, 4, 3
    heads, key_dim, value_dim = MHA["num_heads"], MHA["key_dim"], MHA["value_dim"]
    query, key, value = (
        _float32(rng, batch, n, d) for n, d in ((steps, query_dim), (keys, key_in), (keys, value_in))
    )
    shapes = {
        "query": ((query_dim, heads, key_dim), (heads, key_dim)),
        "key": ((key_in, heads, key_dim), (heads, key_dim)),
        "value": ((value_in, heads, value_dim), (heads, value_dim)),
        "output": ((heads, value_dim, query_dim), (query_dim,)),
    }
    weights = {}
    for name in PROJECTIONS:
        kernel, bias = shapes[name]
        weights[f"{name}_kernel"] = _float32(rng, *kernel, scale=0.5)
        weights[f"{name}_bias"] = _float32(rng, *bias, scale=0.5)
    causal = np.broadcast_to(np.tril(np.ones((steps, keys), bool)), (batch, steps, keys))
    lengths = np.array([keys, 3])[:, None, None]  # the second sequence's last 2 keys are padding
    padding = np.broadcast_to(np.arange(keys) < lengths, (batch, steps, keys)).copy()
    out: dict[str, np.ndarray] = {f"mha/{k}": np.asarray(v) for k, v in MHA.items()}
    out.update({"mha/query": query, "mha/key": key, "mha/value": value})
    out.update({f"mha/{name}": array for name, array in weights.items()})
    for case, mask in (("none", None), ("causal", causal), ("padding", padding)):
        upstream = _float32(rng, batch, steps, query_dim)
        result = attention(
            query, key, value, weights, None if mask is None else np.ascontiguousarray(mask), upstream
        )
        out[f"mha_{case}/upstream"] = upstream
        if case == "padding":
            out[f"mha_{case}/attention_mask"] = padding
        out.update({f"mha_{case}/{name}": array.astype(np.float32) for name, array in result.items()})
    return out


def _convolution_cases(rng: np.random.Generator) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    families = (("conv2d", CONV2D, (2, 7, 6, 4), (3, 3)), ("conv1d", CONV1D, (2, 11, 4), (3,)))
    for family, cases, shape, kernel_size in families:
        x = _float32(rng, *shape)
        out[f"{family}/x"] = x
        for n, (strides, padding, dilation, groups) in enumerate(cases):
            rank = len(kernel_size)
            strides_, dilation_ = ((v,) * rank if isinstance(v, int) else v for v in (strides, dilation))
            filters = 4
            kernel = _float32(rng, *kernel_size, shape[-1] // groups, filters, scale=0.5)
            bias = _float32(rng, filters, scale=0.5)
            forward = convolution(x, kernel, bias, strides_, padding, dilation_, groups, None)
            upstream = _float32(rng, *forward["output"].shape)
            result = convolution(x, kernel, bias, strides_, padding, dilation_, groups, upstream)
            prefix = f"{family}_{n}"
            out.update(
                {
                    f"{prefix}/strides": np.asarray(strides_),
                    f"{prefix}/padding": np.asarray(padding),
                    f"{prefix}/dilation": np.asarray(dilation_),
                    f"{prefix}/groups": np.asarray(groups),
                    f"{prefix}/kernel": kernel,
                    f"{prefix}/bias": bias,
                    f"{prefix}/upstream": upstream,
                }
            )
            out.update({f"{prefix}/{name}": array.astype(np.float32) for name, array in result.items()})
    return out


def build() -> dict[str, np.ndarray]:
    """Every case's inputs, weights, upstream gradient and PyTorch's results."""
    rng = np.random.default_rng(16)  # issue 16
    return {**_attention_cases(rng), **_convolution_cases(rng)}


def compare(expected: dict[str, np.ndarray], saved: Any) -> list[str]:
    """The differences between ``build()`` and a saved file, one line each (none: equal).

    Inputs must be equal; PyTorch's results may differ by float32 rounding (another BLAS).
    """
    problems = sorted(f"{key}: missing" for key in set(expected) - set(saved.files))
    problems += sorted(f"{key}: unexpected" for key in set(saved.files) - set(expected))
    for key in sorted(set(expected) & set(saved.files)):
        want, got = expected[key], saved[key]
        if want.dtype != got.dtype or want.shape != got.shape:
            problems.append(f"{key}: {got.dtype}{got.shape} saved, {want.dtype}{want.shape} computed")
        elif "/d_" in key or key.endswith("/output"):  # computed by PyTorch
            if not np.allclose(got, want, rtol=1e-6, atol=1e-7):
                problems.append(f"{key}: differs by up to {np.max(np.abs(got - want)):.3g}")
        elif not np.array_equal(got, want):
            problems.append(f"{key}: differs")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the saved file, write nothing")
    parser.add_argument("--path", type=Path, default=PATH)
    args = parser.parse_args(argv)
    arrays = build()
    if args.check:
        with np.load(args.path, allow_pickle=False) as saved:
            problems = compare(arrays, saved)
        print("\n".join(problems) or f"{args.path}: reproduced ({len(arrays)} arrays)")
        return 1 if problems else 0
    args.path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.path, **arrays)
    print(f"wrote {args.path} ({args.path.stat().st_size / 1024:.0f} KB, {len(arrays)} arrays)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
