"""The built-in models of configs: ``mlp`` and ``cnn``, small stacks of ``tapefit.layers``.

``train`` fills ``output_units`` (the number of classes for integer labels, else the label
width) and ``output_activation`` (``"softmax"`` for integer labels, else none) from the data
when the config leaves them out; called directly, give them.
"""

from __future__ import annotations

from collections.abc import Sequence

from tapefit import layers


def _output(output_units: int | None, output_activation: str | None) -> tuple[int, str | None]:
    if output_units is None:
        raise ValueError("output_units is missing: the number of classes (or targets) the model predicts")
    if output_units < 1:
        raise ValueError(f"output_units must be at least 1, got {output_units}")
    if output_activation == "auto":
        raise ValueError(
            "output_activation 'auto' is chosen by train from the labels; pass 'softmax' or None"
        )
    return output_units, output_activation


def _check_units(name: str, units: Sequence[int]) -> None:
    for u in units:
        if u < 1:
            raise ValueError(f"{name} must be positive integers, got {list(units)}")


def _check_rate(dropout: float) -> None:
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")


def mlp(
    hidden_units: Sequence[int] = (64, 64),
    activation: str = "relu",
    dropout: float = 0.0,
    output_units: int | None = None,
    output_activation: str | None = "auto",
) -> layers.Sequential:
    """A multilayer perceptron: ``Dense`` hidden layers, then a ``Dense`` output layer.

    Args:
        hidden_units: Units of each hidden layer (an empty list gives a linear model).
        activation: Activation of the hidden layers, by name.
        dropout: Rate of a ``Dropout`` after each hidden layer (0 adds none).
        output_units: Units of the output layer.
        output_activation: Activation of the output layer, by name, or ``None`` for logits.

    Returns:
        A ``Sequential`` named ``mlp``, built on its first call.
    """
    _check_units("hidden_units", hidden_units)
    _check_rate(dropout)
    units, out_activation = _output(output_units, output_activation)
    stack: list[layers.Module] = []
    for u in hidden_units:
        stack.append(layers.Dense(u, activation=activation))
        if dropout > 0.0:
            stack.append(layers.Dropout(dropout))
    stack.append(layers.Dense(units, activation=out_activation))
    return layers.Sequential(stack, name="mlp")


def cnn(
    filters: Sequence[int] = (16, 32),
    kernel_size: int = 3,
    pool_size: int = 2,
    padding: str = "same",
    dense_units: Sequence[int] = (64,),
    activation: str = "relu",
    dropout: float = 0.0,
    output_units: int | None = None,
    output_activation: str | None = "auto",
) -> layers.Sequential:
    """A small convolutional network for NHWC images.

    Each entry of ``filters`` adds a ``Conv2D`` (``kernel_size`` square, stride 1) and a
    ``MaxPool2D`` of ``pool_size``; then ``Flatten``, the ``Dense`` layers of
    ``dense_units`` and the output layer.

    Args:
        filters: Filters of each convolution.
        kernel_size: Height and width of the kernels.
        pool_size: Height and width of the pooling windows (1 adds no pooling).
        padding: ``"same"`` or ``"valid"``, for the convolutions.
        dense_units: Units of the hidden dense layers after flattening.
        activation: Activation of the convolutions and hidden dense layers.
        dropout: Rate of a ``Dropout`` before each dense layer (0 adds none).
        output_units: Units of the output layer.
        output_activation: Activation of the output layer, or ``None`` for logits.

    Returns:
        A ``Sequential`` named ``cnn``, built on its first call.
    """
    _check_units("filters", filters)
    _check_units("dense_units", dense_units)
    _check_rate(dropout)
    if kernel_size < 1 or pool_size < 1:
        raise ValueError(f"kernel_size and pool_size must be at least 1, got {kernel_size} and {pool_size}")
    if padding.lower() not in ("same", "valid"):
        raise ValueError(f"padding must be 'same' or 'valid', got {padding!r}")
    units, out_activation = _output(output_units, output_activation)
    stack: list[layers.Module] = []
    for f in filters:
        stack.append(layers.Conv2D(f, kernel_size, padding=padding.lower(), activation=activation))
        if pool_size > 1:
            stack.append(layers.MaxPool2D(pool_size))
    stack.append(layers.Flatten())
    for u in dense_units:
        if dropout > 0.0:
            stack.append(layers.Dropout(dropout))
        stack.append(layers.Dense(u, activation=activation))
    if dropout > 0.0:
        stack.append(layers.Dropout(dropout))
    stack.append(layers.Dense(units, activation=out_activation))
    return layers.Sequential(stack, name="cnn")
