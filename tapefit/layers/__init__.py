"""``tp.layers``: Module, the built-in layers, and (as submodules) losses, metrics, initializers,
regularizers, constraints.

Layers import the core; the core never imports layers.
"""

from tapefit.layers import activations, constraints, initializers, losses, metrics, regularizers
from tapefit.layers.attention import MultiHeadAttention
from tapefit.layers.convolutional import (
    AveragePooling2D,
    AvgPool2D,
    Conv1D,
    Conv2D,
    Convolution2D,
    GlobalAveragePooling1D,
    GlobalAveragePooling2D,
    GlobalMaxPooling1D,
    GlobalMaxPooling2D,
    MaxPool2D,
    MaxPooling2D,
)
from tapefit.layers.core import Activation, Dense, Dropout, Embedding, Flatten, Lambda, Sequential
from tapefit.layers.functional import Input, InputLayer, Model, SymbolicTensor
from tapefit.layers.merging import Add, Average, Concatenate, Dot, Maximum, Minimum, Multiply, Subtract
from tapefit.layers.module import Layer, Module
from tapefit.layers.normalization import BatchNormalization, LayerNormalization
from tapefit.layers.recurrent import GRU, LSTM, Bidirectional, SimpleRNN
from tapefit.layers.reshaping import (
    Cropping1D,
    Cropping2D,
    Permute,
    RepeatVector,
    Reshape,
    UpSampling1D,
    UpSampling2D,
    ZeroPadding1D,
    ZeroPadding2D,
)

__all__ = [
    "Activation",
    "Add",
    "Average",
    "AveragePooling2D",
    "AvgPool2D",
    "BatchNormalization",
    "Bidirectional",
    "Concatenate",
    "Conv1D",
    "Conv2D",
    "Convolution2D",
    "Cropping1D",
    "Cropping2D",
    "Dense",
    "Dot",
    "Dropout",
    "Embedding",
    "Flatten",
    "GRU",
    "GlobalAveragePooling1D",
    "GlobalAveragePooling2D",
    "GlobalMaxPooling1D",
    "GlobalMaxPooling2D",
    "Input",
    "InputLayer",
    "LSTM",
    "Lambda",
    "Layer",
    "LayerNormalization",
    "MaxPool2D",
    "MaxPooling2D",
    "Maximum",
    "Minimum",
    "Model",
    "Module",
    "MultiHeadAttention",
    "Multiply",
    "Permute",
    "RepeatVector",
    "Reshape",
    "Sequential",
    "SimpleRNN",
    "Subtract",
    "SymbolicTensor",
    "UpSampling1D",
    "UpSampling2D",
    "ZeroPadding1D",
    "ZeroPadding2D",
    "activations",
    "constraints",
    "initializers",
    "losses",
    "metrics",
    "regularizers",
]
