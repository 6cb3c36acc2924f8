"""``MultiHeadAttention`` with Keras 3's arguments, call signature and weight layout."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tapefit.core.messages import shown
from tapefit.core.ops import math as _math
from tapefit.core.ops import nn as _nn
from tapefit.core.ops import shape as _shape
from tapefit.core.ops.linalg import einsum
from tapefit.core.tensor import Tensor, Variable, as_tensor
from tapefit.layers import constraints, initializers, regularizers
from tapefit.layers.module import Layer
from tapefit.layers.symbolic import SymbolicTensor, format_shape

__all__ = ["MultiHeadAttention"]


class MultiHeadAttention(Layer):
    """Keras's ``MultiHeadAttention``: scaled dot-product attention over ``num_heads`` heads.

    Weights, as Keras's ``EinsumDense`` layers lay them out: ``query_kernel``
    ``(query_dim, num_heads, key_dim)``, ``key_kernel`` ``(key_dim_in, num_heads, key_dim)``,
    ``value_kernel`` ``(value_dim_in, num_heads, value_dim)``, each with a bias ``(num_heads,
    dim)``, and ``output_kernel`` ``(num_heads, value_dim, output_dim)`` with a bias
    ``(output_dim,)``.

    Args:
        num_heads: the number of heads.
        key_dim: the size of each head's queries and keys.
        value_dim: the size of each head's values (default ``key_dim``).
        dropout: in training, the dropout rate on the attention weights (after the softmax,
            before they weigh the values, as Keras; the returned scores are before it).
        use_bias: whether the projections have biases.
        output_shape: the last axis of the output (default the query's).
        kernel_initializer: initializer of the kernels (name or callable), as Keras.
        bias_initializer: initializer of the biases (name or callable), as Keras.
        seed: the dropout's op seed; with ``tp.random.set_seed`` the masks repeat.
        kernel_regularizer: ``None``, a regularizer name or a callable for each of the four
            kernels; the penalties go to ``losses``.
        bias_regularizer: as ``kernel_regularizer``, for each bias.
        activity_regularizer: as ``kernel_regularizer``, for the output of each of the four
            projections (as Keras, which hands it to its ``EinsumDense`` sublayers): each call
            adds the penalties divided by the batch size to ``losses``.
        kernel_constraint: ``None``, a constraint name or a callable for each kernel;
            optimizers project the weights with it after each update.
        bias_constraint: as ``kernel_constraint``, for each bias.

    Called as ``mha(query, value, key=None, query_mask=None, value_mask=None, key_mask=None,
    attention_mask=None, return_attention_scores=False, training=None, use_causal_mask=False)``
    (Keras 3's order) with ``query`` ``(batch, T, dim)`` and ``value``/``key`` ``(batch, S,
    dim)``. Masks are booleans, true where attending is allowed, and combine by "and":
    ``attention_mask`` ``(batch, T, S)`` says which keys each query may attend to;
    ``query_mask`` ``(batch, T)`` and ``value_mask``/``key_mask`` ``(batch, S)`` mark the
    real steps, as ``Embedding(mask_zero=True).compute_mask(ids)`` gives them (a Keras
    tensor carries its mask; pass it here); ``use_causal_mask`` lets query ``t`` attend to
    keys ``<= t`` only. Returns ``(batch, T, output_dim)``, and with
    ``return_attention_scores`` also the weights ``(batch, num_heads, T, S)``.
    """

    # Made by build (with setattr, one projection at a time).
    query_kernel: Variable
    query_bias: Variable | None
    key_kernel: Variable
    key_bias: Variable | None
    value_kernel: Variable
    value_bias: Variable | None
    output_kernel: Variable
    output_bias: Variable | None

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        value_dim: int | None = None,
        dropout: float = 0.0,
        use_bias: bool = True,
        output_shape: int | None = None,
        *,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        name: str | None = None,
        seed: int | None = None,
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        activity_regularizer: Any = None,
        kernel_constraint: Any = None,
        bias_constraint: Any = None,
    ) -> None:
        super().__init__(name=name)
        for what, value in (
            ("num_heads", num_heads),
            ("key_dim", key_dim),
            ("value_dim", value_dim or key_dim),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"MultiHeadAttention: {what} must be a positive integer, got {shown(value)}")
        if not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"MultiHeadAttention: dropout must be in [0, 1), got {shown(dropout)}")
        self.num_heads, self.key_dim = int(num_heads), int(key_dim)
        self.value_dim = int(value_dim or key_dim)
        self.dropout, self.use_bias, self.output_dim = float(dropout), bool(use_bias), output_shape
        self.seed = seed
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_constraint = constraints.get(kernel_constraint)
        self.bias_constraint = constraints.get(bias_constraint)
        # As Keras's, on each of the four projections' outputs, not on the layer's output.
        self._projection_activity = regularizers.get(activity_regularizer)
        for projection in ("query", "key", "value", "output"):
            self._add_regularizer(f"{projection}_kernel", kernel_regularizer)
            self._add_regularizer(f"{projection}_bias", bias_regularizer)
        self._built_dims: tuple[int, int, int] | None = None

    def _projection(self, name: str, shape: tuple[int, ...], bias_shape: tuple[int, ...]) -> None:
        kernel = self.add_weight(
            shape, self.kernel_initializer, name=f"{name}/kernel", constraint=self.kernel_constraint
        )
        setattr(self, f"{name}_kernel", kernel)
        bias = (
            self.add_weight(
                bias_shape, self.bias_initializer, name=f"{name}/bias", constraint=self.bias_constraint
            )
            if self.use_bias
            else None
        )
        setattr(self, f"{name}_bias", bias)

    def _build_for(self, query: Tensor, value: Tensor, key: Tensor) -> None:
        dims = (query.shape[-1], key.shape[-1], value.shape[-1])
        if self._built_dims is None:
            heads = self.num_heads
            self._projection("query", (dims[0], heads, self.key_dim), (heads, self.key_dim))
            self._projection("key", (dims[1], heads, self.key_dim), (heads, self.key_dim))
            self._projection("value", (dims[2], heads, self.value_dim), (heads, self.value_dim))
            out = int(self.output_dim or dims[0])
            self._projection("output", (heads, self.value_dim, out), (out,))
            self._built_dims = dims
        elif dims != self._built_dims:
            raise ValueError(
                f"MultiHeadAttention '{self.name}' was built for (query, key, value) feature sizes "
                f"{self._built_dims}, got {dims}"
            )

    def compute_output_spec(
        self,
        query: Any,
        value: Any,
        key: Any = None,
        query_mask: Any = None,
        value_mask: Any = None,
        key_mask: Any = None,
        attention_mask: Any = None,
        return_attention_scores: bool = False,
        training: Any = None,
        use_causal_mask: bool = False,
    ) -> Any:
        """The symbolic output ``(batch, T, output_dim)`` (and the scores ``(batch, heads, T,
        S)``) for symbolic ``query``, ``value`` and ``key``; builds the projections."""
        key = value if key is None else key
        for what, tensor in (("query", query), ("value", value), ("key", key)):
            if len(tensor.shape) != 3:
                raise ValueError(
                    f"MultiHeadAttention '{self.name}': {what} must have shape (batch, steps, features), "
                    f"got {format_shape(tensor.shape)}"
                )
            if tensor.shape[-1] is None:
                raise ValueError(
                    f"MultiHeadAttention '{self.name}': the features of {what} need a known size, "
                    f"got {format_shape(tensor.shape)}"
                )
        if not all(a is None or b is None or a == b for a, b in zip(key.shape[1:2], value.shape[1:2])):
            raise ValueError(
                f"MultiHeadAttention '{self.name}': key {format_shape(key.shape)} and value "
                f"{format_shape(value.shape)} must share the steps"
            )
        self._build_for(query, value, key)
        batch, steps = query.shape[0], query.shape[1]
        output = SymbolicTensor(
            (batch, steps, int(self.output_dim or query.shape[-1])), self.dtype, self.name
        )
        if not return_attention_scores:
            return output
        scores = SymbolicTensor((batch, self.num_heads, steps, key.shape[1]), self.dtype, self.name)
        return output, scores

    def call(
        self,
        query: Any,
        value: Any,
        key: Any = None,
        query_mask: Any = None,
        value_mask: Any = None,
        key_mask: Any = None,
        attention_mask: Any = None,
        return_attention_scores: bool = False,
        training: Any = None,
        use_causal_mask: bool = False,
    ) -> Any:
        """Attends from ``query`` to ``key``/``value``; see the class docstring."""
        query, value = as_tensor(query), as_tensor(value)
        key = value if key is None else as_tensor(key)
        for what, tensor in (("query", query), ("value", value), ("key", key)):
            if tensor.ndim != 3:
                raise ValueError(
                    f"MultiHeadAttention '{self.name}': {what} must have shape (batch, steps, features), "
                    f"got {tensor.shape}"
                )
        if key.shape[:2] != value.shape[:2] or query.shape[0] != key.shape[0]:
            raise ValueError(
                f"MultiHeadAttention '{self.name}': query {query.shape}, key {key.shape} and value "
                f"{value.shape} must share the batch, and key and value the steps"
            )
        self._build_for(query, value, key)
        q = self._project(query, "query", "btd,dhk->bthk")
        k = self._project(key, "key", "bsd,dhk->bshk")
        v = self._project(value, "value", "bsd,dhk->bshk")
        scores = einsum("bthk,bshk->bhts", q * (1.0 / math.sqrt(self.key_dim)), k)
        mask = self._mask(
            (query.shape[0], query.shape[1], key.shape[1]),
            query_mask,
            value_mask,
            key_mask,
            attention_mask,
            use_causal_mask,
        )
        if mask is None:
            weights = _nn.softmax(scores, axis=-1)
        else:
            if mask.ndim == 3:  # (batch, T, S) against (batch, heads, T, S)
                mask = _shape.expand_dims(mask, -3)
            weights = _nn.masked_softmax(scores, mask, axis=-1)  # -1e9 where masked, as Keras
        attended = weights
        if training and self.dropout > 0.0:
            attended = _nn.dropout(weights, self.dropout, seed=self.seed)
        context = einsum("bhts,bshk->bthk", attended, v)
        output = einsum("bthk,hko->bto", context, self.output_kernel)
        if self.output_bias is not None:
            output = output + self.output_bias
        if self._projection_activity is not None:
            self._add_activity_penalty(self._projection_activity, output)
        return (output, weights) if return_attention_scores else output

    def _project(self, x: Tensor, name: str, equation: str) -> Tensor:
        projected = einsum(equation, x, getattr(self, f"{name}_kernel"))
        bias = getattr(self, f"{name}_bias")
        projected = projected + bias if bias is not None else projected
        if self._projection_activity is not None:
            self._add_activity_penalty(self._projection_activity, projected)
        return projected

    def _mask(
        self,
        sizes: tuple[int, int, int],
        query_mask: Any,
        value_mask: Any,
        key_mask: Any,
        attention_mask: Any,
        causal: bool,
    ) -> Tensor | None:
        """Every mask given, "and"-ed into one boolean Tensor that broadcasts against
        (batch, T, S); ``None`` for no mask. Masks are Tensors and their combination ops,
        so that ``tp.function`` replays them; the causal mask is a constant of the shapes."""
        batch, steps, keys = sizes
        parts: list[Tensor] = []
        for what, given, length, axis in (
            ("query_mask", query_mask, steps, -1),
            ("value_mask", value_mask, keys, -2),
            ("key_mask", key_mask, keys, -2),
        ):
            if given is not None:
                step_mask = self._boolean(given, what, ((batch, length),), "(batch, steps)")
                parts.append(_shape.expand_dims(step_mask, axis))
        if causal:
            parts.append(as_tensor(np.tril(np.ones((steps, keys), bool))))
        if attention_mask is not None:
            shapes = ((batch, steps, keys), (steps, keys), (1, steps, keys))
            parts.append(self._boolean(attention_mask, "attention_mask", shapes, "(batch, T, S)"))
        if not parts:
            return None
        combined = parts[0]
        for part in parts[1:]:
            combined = _math.logical_and(combined, part)
        return combined

    def _boolean(self, mask: Any, what: str, shapes: tuple[tuple[int, ...], ...], form: str) -> Tensor:
        """``mask`` as a boolean Tensor of one of ``shapes``."""
        tensor = as_tensor(mask)
        if tuple(tensor.shape) not in shapes:
            raise ValueError(
                f"MultiHeadAttention '{self.name}': {what} must have shape {form} = {shapes[0]}, "
                f"got {tuple(tensor.shape)}"
            )
        return tensor if tensor.dtype == bool else _math.cast(tensor, bool)
