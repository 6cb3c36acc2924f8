"""The functional API: ``tp.Input`` and ``tp.Model(inputs, outputs)``, as Keras 3's.

A ``Model`` keeps the calls (``symbolic.Node``) that lead from its inputs to its outputs,
sorted so that every call comes after the calls that made its inputs, and runs them in that
order on real tensors. Masks travel as Keras passes them: a layer's ``compute_mask`` gives the
mask of its output, and a later layer whose ``call`` takes ``mask`` receives it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tapefit.core import dtypes as _dt
from tapefit.core import nest
from tapefit.core.messages import shown
from tapefit.core.ops.math import cast
from tapefit.core.tensor import Tensor, as_tensor
from tapefit.layers.module import Layer, Module, unique_name
from tapefit.layers.symbolic import Node, SymbolicTensor, format_shape, mask_marker, symbolic_outputs

__all__ = ["Input", "InputLayer", "Model", "SymbolicTensor"]


class InputLayer(Layer):
    """The layer a ``tp.Input`` tensor comes from, as Keras's ``InputLayer``: it has no weights,
    and a functional model lists it in ``layers`` (``model.get_layer("title")`` finds it).

    Made by ``tp.Input``; its ``output`` (and ``input``) is that tensor.
    """

    def __init__(self, shape: Any = None, dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(name=name)
        self.shape = None if shape is None else tuple(shape)
        self.input_dtype = _dt.input_dtype(dtype).name
        self._tensor: SymbolicTensor | None = None

    def call(self, inputs: Any) -> Any:
        """Gives its input back."""
        return inputs

    @property
    def input(self) -> Any:
        """The ``tp.Input`` tensor."""
        return self.output

    @property
    def output(self) -> Any:
        """The ``tp.Input`` tensor."""
        if self._tensor is None:
            raise AttributeError(f"The input layer '{self.name}' has no tensor")
        return self._tensor


def input_layer(tensor: SymbolicTensor) -> InputLayer:
    """The ``InputLayer`` of a model's input tensor (made the first time it is asked for)."""
    layer = tensor.__dict__.get("_input_layer")
    if layer is None:
        layer = InputLayer(tensor.shape[1:], tensor.dtype, name=tensor.name)
        layer._tensor = tensor
        tensor.__dict__["_input_layer"] = layer
    return layer


def Input(
    shape: Any = None,
    dtype: Any = "float32",
    name: str | None = None,
    *,
    batch_size: int | None = None,
    batch_shape: Any = None,
) -> SymbolicTensor:
    """A symbolic input of a functional model (``keras.Input``).

    Args:
        shape: the shape of one sample, without the batch axis: ``(40,)``, ``(None, 8)``
            for sequences of any length.
        dtype: the dtype of the values the model will be given (``"int32"`` for ids, ``"string"``
            for text that a preprocessing layer takes).
        name: the input's name (the key of a dict of inputs); default ``input_layer``,
            ``input_layer_1``, ...
        batch_size: Keras's fixed batch size; taken, but a model takes any batch size.
        batch_shape: the shape with the batch axis first, instead of ``shape`` and ``batch_size``.

    Returns:
        A ``SymbolicTensor`` of shape ``(None, *shape)``.

    Raises:
        ValueError: neither or both of ``shape`` and ``batch_shape``, or a shape that is not a
            tuple of non-negative ints or ``None``.
    """
    if (shape is None) == (batch_shape is None):
        raise ValueError("Input: give shape (without the batch axis) or batch_shape (with it), one of them")
    if batch_size is not None and (
        not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1
    ):
        raise ValueError(f"Input: batch_size must be a positive integer, got {shown(batch_size)}")
    if batch_shape is not None:
        if not isinstance(batch_shape, (tuple, list)) or not batch_shape:
            raise ValueError(
                f"Input: batch_shape must be a tuple with the batch axis first, got {shown(batch_shape)}"
            )
        shape = tuple(batch_shape)[1:]
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(
        n is None or (isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0) for n in shape
    ):
        raise ValueError(f"Input: shape must be a tuple of non-negative ints or None, got {shown(shape)}")
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"Input: name must be a non-empty string, got {shown(name)}")
    dims: tuple[int | None, ...] = tuple(None if n is None else int(n) for n in shape)
    tensor = SymbolicTensor((None, *dims), _dt.input_dtype(dtype), name or unique_name("input_layer"))
    input_layer(tensor)
    return tensor


def _symbolic_leaves(value: Any, what: str) -> list[SymbolicTensor]:
    leaves = nest.flatten(value)
    for leaf in leaves:
        if not isinstance(leaf, SymbolicTensor):
            raise TypeError(
                f"Model: {what} must be symbolic tensors (from tp.Input and layers), got {shown(leaf)}"
            )
    if not leaves:
        raise ValueError(f"Model: {what} are empty")
    return leaves


def _graph(inputs: list[SymbolicTensor], outputs: list[SymbolicTensor]) -> list[Node]:
    """The nodes that lead from ``inputs`` to ``outputs``, each after the nodes it reads from."""
    given = {id(t) for t in inputs}
    nodes: dict[int, Node] = {}
    stack = list(outputs)
    seen: set[int] = set()
    while stack:
        tensor = stack.pop()
        if id(tensor) in seen or id(tensor) in given:
            continue
        seen.add(id(tensor))
        if tensor.node is None:
            raise ValueError(
                f"Model: the outputs depend on the input '{tensor.name}', which is not among the "
                f"model's inputs ({', '.join(t.name for t in inputs)})"
            )
        nodes[tensor.node.id] = tensor.node
        stack.extend(tensor.node.inputs)
    return [nodes[k] for k in sorted(nodes)]


def _keras_order(inputs: list[SymbolicTensor], outputs: list[SymbolicTensor]) -> list[Module]:
    """The model's layers in Keras 3's order (``Functional.layers``), input layers included.

    Keras walks the graph depth first from each output in turn, through each call's inputs in
    order, numbering each layer when it first meets it. A call's depth is its distance from the
    outputs (the longest one), a layer's the largest of its calls'; layers come deepest first,
    and the walk's numbers order those of equal depth. Inputs that no output uses come last but
    one depth, first among the depth-0 layers. Weights follow this order, so that
    ``set_weights(keras_model.get_weights())`` fits.
    """
    given = {id(t): t for t in inputs}

    def producer(tensor: SymbolicTensor) -> tuple[int, Module, list[SymbolicTensor]]:
        """(key, layer, inputs) of the call that made ``tensor``; an input's layer has none."""
        if id(tensor) in given or tensor.node is None:
            return -1 - id(tensor), input_layer(tensor), []
        return tensor.node.id, tensor.node.layer, tensor.node.inputs

    numbers: dict[int, int] = {}  # id(layer) -> its number in the walk
    layers: dict[int, Module] = {}
    parents: dict[int, list[int]] = {}
    post_order: list[tuple[int, Module]] = []
    finished: set[int] = set()
    for output in outputs:
        key, layer, sources = producer(output)
        if key in finished:
            continue
        numbers.setdefault(id(layer), len(numbers))
        stack = [(key, layer, iter(sources))]
        parents[key] = [producer(t)[0] for t in sources]
        while stack:
            key, layer, pending = stack[-1]
            for tensor in pending:
                child_key, child, child_sources = producer(tensor)
                if child_key in finished:  # met before (calls cannot form a cycle)
                    continue
                numbers.setdefault(id(child), len(numbers))
                parents[child_key] = [producer(t)[0] for t in child_sources]
                stack.append((child_key, child, iter(child_sources)))
                break
            else:
                stack.pop()
                finished.add(key)
                layers[id(layer)] = layer
                post_order.append((key, layer))
    node_depth: dict[int, int] = {}
    layer_depth: dict[int, int] = {}
    for key, layer in reversed(post_order):
        depth = max(node_depth.setdefault(key, 0), layer_depth.get(id(layer), 0))
        layer_depth[id(layer)] = depth
        node_depth[key] = depth
        for parent in parents[key]:
            node_depth[parent] = max(depth + 1, node_depth.get(parent, 0))
    for tensor in inputs:  # inputs no output uses
        layer = input_layer(tensor)
        if id(layer) not in layer_depth:
            layer_depth[id(layer)], numbers[id(layer)], layers[id(layer)] = 0, -1, layer
    order = sorted(layer_depth, key=lambda k: (-layer_depth[k], numbers[k]))
    return [layers[k] for k in order]


class Model(Layer):
    """A model made by calling layers on ``tp.Input`` tensors (Keras 3's functional ``Model``).

    ``Model(inputs, outputs)`` runs the layer calls that lead from ``inputs`` to ``outputs``:
    a layer called twice shares its weights, a ``Model`` can be called as a layer inside
    another, and masks (``Embedding(mask_zero=True)``, ``compute_mask``) reach the layers
    whose ``call`` takes ``mask``. It is a ``Module``: ``trainable_variables``,
    ``state_dict``, ``save_weights`` and ``tp.Trainer`` work as for any other.

    Args:
        inputs: a ``tp.Input`` tensor, or a list or dict of them; the model is called with
            the same structure (a list may also be given as a dict keyed by input names).
        outputs: a symbolic tensor made from ``inputs``, or a list or dict of them; the model
            returns that structure.
        name: the model's name.
        trainable: whether its variables are trainable.

    Raises:
        ValueError: the outputs depend on a ``tp.Input`` not among ``inputs``.
        TypeError: ``inputs`` or ``outputs`` hold something other than symbolic tensors.
    """

    _functional = True

    def __init__(
        self,
        inputs: Any = None,
        outputs: Any = None,
        name: str | None = None,
        trainable: bool = True,
        dtype: Any = None,
    ) -> None:
        super().__init__(trainable=trainable, name=name, dtype=dtype)
        if inputs is None and outputs is None:
            # Keras's subclassing base: the subclass defines call (and its own steps).
            self._functional = False
            self._layers = []
            self._has_output_masks = False
            return
        if inputs is None or outputs is None:
            raise TypeError(
                "Model: give both inputs and outputs (the functional API), or neither (a subclass that "
                "defines call)"
            )
        flat_inputs = _symbolic_leaves(inputs, "inputs")
        flat_outputs = _symbolic_leaves(outputs, "outputs")
        if len({id(t) for t in flat_inputs}) != len(flat_inputs):
            raise ValueError("Model: an input is given twice in inputs")
        names = [t.name for t in flat_inputs]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(
                f"Model: the inputs {twice} are each named more than once; an input's name is its key in a "
                "dict of inputs, so give each tp.Input its own name"
            )
        self._inputs_structure = inputs
        self._outputs_structure = outputs
        self._flat_inputs = flat_inputs
        self._flat_outputs = flat_outputs
        self._nodes = _graph(flat_inputs, flat_outputs)
        ordered = _keras_order(flat_inputs, flat_outputs)
        # ``_layers`` (tracked, so it orders the weights) holds the layers that compute; the
        # input layers join them in ``layers`` only, at the positions Keras gives them.
        self._layers = [layer for layer in ordered if not isinstance(layer, InputLayer)]
        self._input_slots = [
            (position, next(k for k, t in enumerate(flat_inputs) if input_layer(t) is layer))
            for position, layer in enumerate(ordered)
            if isinstance(layer, InputLayer)
        ]
        self._has_output_masks = any(t.has_mask for t in flat_outputs)
        self._last_masks: tuple[Any, Any] | None = None  # (inputs, output masks) of the last call
        self._built = True

    # -- the graph -------------------------------------------------------------

    def _graph_only(self, what: str) -> None:
        if not self._functional:
            raise AttributeError(
                f"{type(self).__name__}.{what}: this Model was made without inputs and outputs (a "
                "subclass), so it has no graph"
            )

    @property
    def inputs(self) -> list[SymbolicTensor]:
        """The input symbolic tensors, flattened (dict inputs in sorted key order)."""
        self._graph_only("inputs")
        return list(self._flat_inputs)

    @property
    def outputs(self) -> list[SymbolicTensor]:
        """The output symbolic tensors, flattened (dict outputs in sorted key order)."""
        self._graph_only("outputs")
        return list(self._flat_outputs)

    @property
    def input_names(self) -> list[str]:
        """The names of the inputs (dict keys for dict inputs), in the order of ``inputs``."""
        self._graph_only("input_names")
        if isinstance(self._inputs_structure, dict):
            return sorted(self._inputs_structure)
        return [t.name for t in self._flat_inputs]

    @property
    def output_names(self) -> list[str]:
        """The names of the outputs, in the order of ``outputs``: dict keys for dict outputs,
        else the names of the layers that made them (the keys of per-output losses)."""
        self._graph_only("output_names")
        if isinstance(self._outputs_structure, dict):
            return sorted(self._outputs_structure)
        return [t.node.layer.name if t.node is not None else t.name for t in self._flat_outputs]

    @property
    def layers(self) -> list[Module]:
        """The layers, each once, in Keras 3's order: the ``InputLayer`` of each input and the
        layers called, deepest first (farthest from the outputs), as Keras lists them; the
        weights (``get_weights``) come in this order. Of a subclass: the modules it holds
        directly, in attribute order."""
        if not self._functional:
            return [module for module, depth in self._walk(paths=False)[2] if depth == 1]
        layers: list[Module] = list(self._layers)
        for position, k in self._input_slots:
            layers.insert(position, input_layer(self._flat_inputs[k]))
        return layers

    def get_layer(self, name: str | None = None, index: int | None = None) -> Module:
        """The layer called ``name``, or the one at ``index`` in ``layers`` (Keras's ``get_layer``).

        Raises:
            ValueError: both or neither of ``name`` and ``index``, an index past the last layer,
                or no layer of that name (the message lists them).
        """
        layers = self.layers
        if name is not None and index is not None:
            raise ValueError(f"get_layer: give a name or an index, not both (got {shown(name)} and {index})")
        if index is not None:
            if not -len(layers) <= index < len(layers):
                raise ValueError(
                    f"get_layer: no layer at index {index}; model '{self.name}' has {len(layers)} layers"
                )
            return layers[index]
        if name is None:
            raise ValueError("get_layer: give the name or the index of a layer")
        for layer in layers:
            if layer.name == name:
                return layer
        raise ValueError(
            f"Model '{self.name}' has no layer {shown(name)}; its layers: {[la.name for la in layers]}"
        )

    # -- running -------------------------------------------------------------

    def _bind_inputs(self, inputs: Any) -> list[Any]:
        """The values given for the model's inputs, in the order of ``self._flat_inputs``: from a
        dict by input name, from a list or tuple by position, or one value for one input."""
        count = len(self._flat_inputs)
        if isinstance(inputs, dict):
            missing = [n for n in self.input_names if n not in inputs]
            if missing:
                raise ValueError(
                    f"Model '{self.name}': the inputs have no {missing} (keys given: {sorted(inputs)})"
                )
            return [inputs[n] for n in self.input_names]
        if isinstance(self._inputs_structure, dict):
            raise TypeError(
                f"Model '{self.name}' takes a dict with keys {self.input_names}, got {type(inputs).__name__}"
            )
        if isinstance(inputs, (list, tuple)):
            if len(inputs) != count:
                raise ValueError(f"Model '{self.name}' takes {count} inputs, got a list of {len(inputs)}")
            return list(inputs)
        if count != 1:
            raise ValueError(
                f"Model '{self.name}' takes a list of {count} inputs, got one {type(inputs).__name__}"
            )
        return [inputs]

    def _checked(self, value: Any, spec: SymbolicTensor, position: int) -> Tensor | np.ndarray:
        """``value`` as a Tensor of the input's dtype, its shape checked against the input's (a
        string input's value stays a NumPy array of strings)."""
        x: Tensor | np.ndarray
        if spec.dtype.kind == "U":
            x = np.asarray(value)
            if x.dtype.kind not in "USO":
                raise TypeError(
                    f"Model '{self.name}': input {position} ('{spec.name}') takes strings, got dtype {x.dtype.name}"
                )
        else:
            x = as_tensor(value)
        shape = tuple(x.shape)
        if len(shape) != len(spec.shape) or any(
            n is not None and n != m for n, m in zip(spec.shape[1:], shape[1:])
        ):
            raise ValueError(
                f"Model '{self.name}': input {position} ('{spec.name}') expects shape "
                f"{format_shape(spec.shape)}, got {shape}"
            )
        if isinstance(x, Tensor) and x.dtype != spec.dtype and x.dtype.kind == "f" and spec.dtype.kind == "f":
            x = cast(x, spec.dtype)
        return x

    def call(self, inputs: Any, training: bool | None = None, mask: Any = None) -> Any:
        """Runs the layer calls in order; ``training`` reaches the layers that take it.

        Args:
            inputs: the inputs, in the structure ``Model`` was given them.
            training: passed on to the layers.
            mask: masks of the inputs' steps, in the inputs' structure (``None``: none).
        """
        if not self._functional:
            raise NotImplementedError(
                f"{type(self).__name__} was made without inputs and outputs: a Model subclass defines call(...)"
            )
        values: dict[int, Any] = {}
        masks: dict[int, Any] = {}
        given_masks = self._bind_masks(mask)
        for position, (spec, value) in enumerate(zip(self._flat_inputs, self._bind_inputs(inputs))):
            values[id(spec)] = self._checked(value, spec, position)
            masks[id(spec)] = given_masks[position]
        for node in self._nodes:
            self._run_node(node, values, masks)
        outputs = nest.pack_sequence_as(self._outputs_structure, [values[id(t)] for t in self._flat_outputs])
        if self._has_output_masks:  # kept for compute_mask, which a caller asks right after
            output_masks = [masks.get(id(t)) for t in self._flat_outputs]
            self._last_masks = (inputs, nest.pack_sequence_as(self._outputs_structure, output_masks))
        return outputs

    def _bind_masks(self, mask: Any) -> list[Any]:
        if mask is None:
            return [None] * len(self._flat_inputs)
        flat = nest.flatten(mask) if nest.is_nested(self._inputs_structure) else [mask]
        if len(flat) != len(self._flat_inputs):
            raise ValueError(
                f"Model '{self.name}': got {len(flat)} masks for {len(self._flat_inputs)} inputs"
            )
        return flat

    @staticmethod
    def _run_node(node: Node, values: dict[int, Any], masks: dict[int, Any]) -> None:
        """Calls ``node``'s layer on the values of its inputs; stores its outputs and their masks."""

        def value_of(leaf: Any) -> Any:
            return values[id(leaf)] if isinstance(leaf, SymbolicTensor) else leaf

        def mask_of(leaf: Any) -> Any:
            return masks.get(id(leaf)) if isinstance(leaf, SymbolicTensor) else None

        args = nest.pack_sequence_as(node.args, [value_of(v) for v in nest.flatten(node.args)])
        kwargs = nest.pack_sequence_as(node.kwargs, [value_of(v) for v in nest.flatten(node.kwargs)])
        first = node.args[0] if node.args else None
        first_mask = None
        if first is not None and any(
            isinstance(v, SymbolicTensor) and v.has_mask for v in nest.flatten(first)
        ):
            first_mask = nest.pack_sequence_as(first, [mask_of(v) for v in nest.flatten(first)])
        if node.pass_mask:
            kwargs["mask"] = first_mask
        outputs = node.layer(*args, **kwargs)
        flat_symbolic = node.flat_outputs
        flat_values = nest.flatten(outputs)
        for symbolic, value in zip(flat_symbolic, flat_values):
            values[id(symbolic)] = value
        if not any(t.has_mask for t in flat_symbolic):
            return
        compute_mask: Callable[..., Any] | None = getattr(node.layer, "compute_mask", None)
        out_mask = compute_mask(args[0] if args else None, first_mask) if compute_mask else None
        flat_masks = nest.flatten(out_mask) if nest.is_nested(out_mask) else [out_mask] * len(flat_symbolic)
        if len(flat_masks) != len(flat_symbolic):
            flat_masks = [flat_masks[0]] * len(flat_symbolic)
        for symbolic, value_mask in zip(flat_symbolic, flat_masks):
            masks[id(symbolic)] = value_mask

    def compute_output_spec(self, inputs: Any, training: bool | None = None, mask: Any = None) -> Any:
        """The symbolic outputs for symbolic ``inputs``: the graph walked with each layer's rule
        (its layers are built already), as ``call`` runs it."""
        if not self._functional:
            raise NotImplementedError(f"{type(self).__name__} has no graph to walk")
        values: dict[int, Any] = {}
        for position, (spec, value) in enumerate(zip(self._flat_inputs, self._bind_inputs(inputs))):
            if not isinstance(value, SymbolicTensor):
                raise TypeError(f"Model '{self.name}': input {position} is not symbolic, got {shown(value)}")
            if len(value.shape) != len(spec.shape) or any(
                n is not None and m is not None and n != m for n, m in zip(spec.shape[1:], value.shape[1:])
            ):
                raise ValueError(
                    f"Model '{self.name}': input {position} ('{spec.name}') expects shape "
                    f"{format_shape(spec.shape)}, got {format_shape(value.shape)}"
                )
            values[id(spec)] = SymbolicTensor(value.shape, spec.dtype, value.name, has_mask=spec.has_mask)

        def value_of(leaf: Any) -> Any:
            return values[id(leaf)] if isinstance(leaf, SymbolicTensor) else leaf

        for node in self._nodes:
            args = nest.pack_sequence_as(node.args, [value_of(v) for v in nest.flatten(node.args)])
            kwargs = nest.pack_sequence_as(node.kwargs, [value_of(v) for v in nest.flatten(node.kwargs)])
            outputs = symbolic_outputs(node.layer, tuple(args), dict(kwargs))
            for symbolic, value in zip(node.flat_outputs, nest.flatten(outputs)):
                values[id(symbolic)] = value
        return nest.pack_sequence_as(self._outputs_structure, [values[id(t)] for t in self._flat_outputs])

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        """The masks of the outputs for ``inputs`` (those of the last call when it had these
        inputs, else the model runs again)."""
        if not self._has_output_masks:
            return None
        if any(isinstance(v, SymbolicTensor) for v in nest.flatten(inputs)):
            marks = [mask_marker(t) if t.has_mask else None for t in self._flat_outputs]
            return nest.pack_sequence_as(self._outputs_structure, marks)
        if self._last_masks is None or self._last_masks[0] is not inputs:
            self.call(inputs, mask=mask)
        assert self._last_masks is not None
        return self._last_masks[1]

    # -- configs -------------------------------------------------------------

    def get_config(self) -> dict[str, Any]:
        """The graph as plain values: ``name``, ``trainable``, ``layers`` (each once, serialized),
        ``calls`` (in the order the model runs them, tensors as ``{"tensor": [layer, call,
        output]}``), ``inputs`` (name, shape, dtype of each) and ``outputs``, with the
        structures (one, list, dict) ``Model`` was given.

        Raises:
            ValueError: (``ConfigError``) two inputs or layers share a name, or a layer holds
                what a file cannot describe.
        """
        if not self._functional:
            return super().get_config()
        return _model_get_config(self)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Model:
        """Rebuilds the graph of ``get_config``: makes the layers, then replays the calls. A
        subclass with a constructor of its own is made from its arguments, as any layer.

        Raises:
            ValueError: (``ConfigError``) an unknown key, class, layer or tensor, named.
        """
        if cls.__init__ is not Model.__init__:  # Keras's rule: only Model's own arguments revive a graph
            model: Model = super().from_config(config)  # type: ignore[assignment]
            return model
        return _model_from_config(cls, config)

    # -- summary -------------------------------------------------------------

    def summary(self, line_length: int = 100, print_fn: Callable[[str], Any] | None = None) -> None:
        """Prints the layers with their output shapes, parameter counts and inputs, as Keras does.

        One row per input and per layer (a shared layer once, connected to the inputs of
        every call); ``Connected to`` names each input as ``layer[call][output]``.

        Args:
            line_length: the table width.
            print_fn: where lines go (default ``print``).
        """
        print_fn = print_fn or print
        if not self._functional:
            return Layer.summary(self, line_length=line_length, print_fn=print_fn)
        rows = [(f"{t.name} (InputLayer)", format_shape(t.shape), "0", "-") for t in self._flat_inputs]
        calls: dict[int, int] = {}  # node id -> its index among its layer's calls in this model
        per_layer: dict[int, list[Node]] = {}
        for node in self._nodes:
            per_layer.setdefault(id(node.layer), []).append(node)
            calls[node.id] = len(per_layer[id(node.layer)]) - 1
        for layer in self._layers:
            nodes = per_layer[id(layer)]
            shapes = [format_shape(t.shape) for n in nodes for t in n.flat_outputs]
            shown = shapes[0] if len(shapes) == 1 else "[" + ", ".join(shapes) + "]"
            sources = [self._source_name(t, calls) for n in nodes for t in n.inputs]
            params = sum(v.size for v in layer.variables)
            rows.append((f"{layer.name} ({type(layer).__name__})", shown, str(params), ", ".join(sources)))
        entries = self._walk()[0]
        total = sum(e.variable.size for e in entries)
        trainable = sum(e.variable.size for e in entries if e.variable.trainable and e.modules_trainable)
        heads = ("Layer (type)", "Output Shape", "Param #", "Connected to")
        col = [max(len(h), *(len(r[i]) for r in rows)) + 2 for i, h in enumerate(heads)]
        col[3] = max(col[3], line_length - sum(col[:3]))
        width = sum(col)

        def line(row: tuple[str, str, str, str]) -> str:
            return f"{row[0]:<{col[0]}}{row[1]:<{col[1]}}{row[2]:>{col[2] - 2}}  {row[3]}".rstrip()

        print_fn(f'Model: "{self.name}"')
        print_fn("_" * width)
        print_fn(line(heads))
        print_fn("=" * width)
        for k, row in enumerate(rows):
            print_fn(line(row))
            print_fn("_" * width if k < len(rows) - 1 else "=" * width)
        print_fn(f"Total params: {total:,}")
        print_fn(f"Trainable params: {trainable:,}")
        print_fn(f"Non-trainable params: {total - trainable:,}")
        print_fn("_" * width)

    @staticmethod
    def _source_name(tensor: SymbolicTensor, calls: dict[int, int]) -> str:
        if tensor.node is None or tensor.node.id not in calls:
            return f"{tensor.name}[0][0]"
        return f"{tensor.node.layer.name}[{calls[tensor.node.id]}][{tensor.index}]"


# -- configs ------------------------------------------------------------------------------
#
# A functional model's config lists its layers once each (their serialized configs, by name),
# then its calls in the order the model runs them: {"layer": name, "args": [...], "kwargs": {...}}
# where a symbolic tensor is {"tensor": [layer name, call index, output index]} (an input is
# [its name, 0, 0]); "inputs" and "outputs" keep the structure the model was given.

_CONFIG_KEYS = ("name", "trainable", "layers", "calls", "inputs", "outputs")


def _structure(value: Any, leaves: list[Any]) -> dict[str, Any]:
    """``{"structure": "one" | "list" | "dict", "keys": [...], "items": leaves}``."""
    if isinstance(value, dict):
        return {"structure": "dict", "keys": sorted(value), "items": leaves}
    if isinstance(value, (list, tuple)):
        return {"structure": "list", "keys": None, "items": leaves}
    return {"structure": "one", "keys": None, "items": leaves}


def _unstructure(config: Any, what: str) -> tuple[Any, list[Any]]:
    """The leaves of a ``_structure`` dict, and a function packing values into its structure."""
    _expect_keys(config, ("structure", "keys", "items"), f"Model: '{what}'")
    kind, keys, items = config["structure"], config["keys"], config["items"]
    if not isinstance(items, list) or not items:
        raise _error(f"Model: '{what}.items' must be a non-empty list")
    if kind == "dict":
        if not isinstance(keys, list) or len(keys) != len(items) or not all(isinstance(k, str) for k in keys):
            raise _error(f"Model: '{what}.keys' must name each item")
        return (lambda values: dict(zip(keys, values))), items
    if kind == "list":
        return (lambda values: list(values)), items
    if kind == "one" and len(items) == 1:
        return (lambda values: values[0]), items
    raise _error(f"Model: '{what}.structure' must be 'one' (one item), 'list' or 'dict'")


def _expect_keys(value: Any, keys: tuple[str, ...], at: str) -> None:
    """Checks that ``value`` is a dict with exactly ``keys``; the error names the first other one."""
    if not isinstance(value, dict):
        raise _error(f"{at} must be an object with the keys {', '.join(keys)}")
    for key in value:
        if key not in keys:
            raise _error(f"{at}: unknown key {shown(key)} (known: {', '.join(keys)})")
    for key in keys:
        if key not in value:
            raise _error(f"{at}: the key {shown(key)} is missing")


def _error(message: str) -> Exception:
    from tapefit.layers.serialization import ConfigError

    return ConfigError(message)


def _model_get_config(model: Model) -> dict[str, Any]:
    from tapefit.layers import serialization

    where = f"Model '{model.name}'"
    names = [t.name for t in model._flat_inputs] + [layer.name for layer in model._layers]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise serialization.ConfigError(
            f"{where}: its inputs and layers must have distinct names to be saved; used twice: {twice}"
        )
    index: dict[int, tuple[str, int]] = {}
    counts: dict[int, int] = {}
    for node in model._nodes:
        index[node.id] = (node.layer.name, counts.get(id(node.layer), 0))
        counts[id(node.layer)] = counts.get(id(node.layer), 0) + 1
    inputs = {id(t) for t in model._flat_inputs}

    def reference(tensor: SymbolicTensor) -> dict[str, Any]:
        if id(tensor) in inputs or tensor.node is None:
            return {"tensor": [tensor.name, 0, 0]}
        layer_name, call = index[tensor.node.id]
        return {"tensor": [layer_name, call, tensor.index]}

    def plain(value: Any, at: str) -> Any:
        leaves = nest.flatten(value)
        converted = [
            reference(v) if isinstance(v, SymbolicTensor) else serialization.to_plain(v, at) for v in leaves
        ]
        return serialization.to_plain(nest.pack_sequence_as(value, converted), at)

    calls = [
        {
            "layer": node.layer.name,
            "args": plain(list(node.args), f"{where}, call of '{node.layer.name}'"),
            "kwargs": plain(dict(node.kwargs), f"{where}, call of '{node.layer.name}'"),
        }
        for node in model._nodes
    ]
    specs = [{"name": t.name, "shape": list(t.shape[1:]), "dtype": t.dtype.name} for t in model._flat_inputs]
    return {
        "name": model.name,
        "trainable": model.trainable,
        # Each layer's name beside its entry (as Keras keeps it): a layer's own get_config
        # may leave its name out, and the calls find their layers by these names.
        "layers": [
            {**serialization.serialize(layer, f"{where}, layer '{layer.name}'"), "name": layer.name}
            for layer in model._layers
        ],
        "calls": calls,
        "inputs": _structure(model._inputs_structure, specs),
        "outputs": _structure(model._outputs_structure, [reference(t) for t in model._flat_outputs]),
    }


def _config_layers(entries: Any, tables: Any, where: str) -> dict[str, Module]:
    """The layers of a functional config, by name."""
    from tapefit.layers import serialization

    if not isinstance(entries, list):
        raise _error(f"{where}: 'layers' must be a list")
    layers: dict[str, Module] = {}
    for position, entry in enumerate(entries):
        at = f"{where}, layers[{position}]"
        name = None
        if isinstance(entry, dict) and "name" in entry:
            entry = dict(entry)
            name = entry.pop("name")
            if not isinstance(name, str) or not name or "/" in name:
                raise _error(f"{at}: 'name' must be a layer name, got {shown(name)}")
        layer = serialization.deserialize(entry, tables, at)
        if not isinstance(layer, Module):
            raise _error(f"{where}: layers[{position}] is a {type(layer).__name__}, not a layer")
        if name is not None and layer.name != name:
            # Its config left the name out (or gave another): the calls name it as saved.
            layer._name, layer._name_given = name, True
            serialization.forget_default_name(layer)
        if layer.name in layers:
            raise _error(f"{where}: two layers are named {shown(layer.name)}")
        layers[layer.name] = layer
    return layers


def _config_inputs(specs: list[Any], layers: dict[str, Module], where: str) -> list[SymbolicTensor]:
    """The ``tp.Input`` tensors of a functional config's input specs."""
    inputs: list[SymbolicTensor] = []
    for position, spec in enumerate(specs):
        _expect_keys(spec, ("name", "shape", "dtype"), f"{where}: inputs.items[{position}]")
        if (
            not isinstance(spec["name"], str)
            or spec["name"] in layers
            or spec["name"] in [t.name for t in inputs]
        ):
            raise _error(f"{where}: the input name {shown(spec['name'])} is used twice or is not a string")
        if spec["dtype"] not in _INPUT_DTYPES:
            raise _error(f"{where}: inputs.items[{position}] has the dtype {shown(spec['dtype'])}")
        inputs.append(Input(spec["shape"], dtype=spec["dtype"], name=spec["name"]))
    return inputs


def _model_from_config(cls: type[Model], config: dict[str, Any]) -> Model:
    from tapefit.layers import serialization

    serialization.check_arguments(
        cls, config, function=lambda name, trainable, layers, calls, inputs, outputs: 0
    )
    missing = [k for k in _CONFIG_KEYS if k not in config]
    if missing:
        raise _error(f"Model: its config has no {shown(missing[0])}")
    name = config["name"]
    where = f"Model {shown(name)}"
    tables = serialization.layer_tables()
    if not isinstance(config["calls"], list):
        raise _error(f"{where}: 'calls' must be a list")
    layers = _config_layers(config["layers"], tables, where)
    pack_inputs, specs = _unstructure(config["inputs"], "inputs")
    tensors: dict[tuple[str, int], list[Any]] = {}
    flat_inputs = _config_inputs(specs, layers, where)
    for tensor in flat_inputs:
        tensors[(tensor.name, 0)] = [tensor]

    def resolve(value: Any, at: str) -> Any:
        if isinstance(value, dict) and set(value) == {"tensor"}:
            ref = value["tensor"]
            if not (isinstance(ref, list) and len(ref) == 3 and isinstance(ref[0], str)):
                raise _error(f"{at}: a tensor reference is [layer name, call, output], got {shown(ref)}")
            made = tensors.get((ref[0], ref[1])) if isinstance(ref[1], int) else None
            if made is None or not isinstance(ref[2], int) or not 0 <= ref[2] < len(made):
                raise _error(f"{at}: no tensor {shown(ref)} has been made before this call")
            return made[ref[2]]
        if serialization.is_entry(value):
            return serialization.deserialize(value, tables, at)
        if isinstance(value, list):
            return [resolve(v, at) for v in value]
        if isinstance(value, dict):
            return {k: resolve(v, at) for k, v in value.items()}
        return value

    calls: dict[str, int] = {}
    for position, call in enumerate(config["calls"]):
        at = f"{where}, calls[{position}]"
        _expect_keys(call, ("layer", "args", "kwargs"), at)
        layer = layers.get(call["layer"]) if isinstance(call["layer"], str) else None
        if layer is None:
            raise _error(f"{at}: no layer is named {shown(call['layer'])}")
        args, kwargs = resolve(call["args"], at), resolve(call["kwargs"], at)
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise _error(f"{at}: 'args' must be a list and 'kwargs' an object")
        outputs = layer(*args, **kwargs)
        count = calls.get(layer.name, 0)
        calls[layer.name] = count + 1
        tensors[(layer.name, count)] = [v for v in nest.flatten(outputs) if isinstance(v, SymbolicTensor)]
    pack_outputs, references = _unstructure(config["outputs"], "outputs")
    outputs = [resolve(ref, f"{where}, outputs") for ref in references]
    if not all(isinstance(t, SymbolicTensor) for t in outputs):
        raise _error(f"{where}: every output must be a tensor reference")
    trainable = config["trainable"]
    if not isinstance(trainable, bool):
        raise _error(f"{where}: 'trainable' must be true or false")
    return cls(pack_inputs(flat_inputs), pack_outputs(outputs), name=name, trainable=trainable)


_INPUT_DTYPES = frozenset(
    ["bool", "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32"]
    + ["str"]  # string inputs, for the preprocessing layers
)
