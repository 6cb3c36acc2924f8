"""``tp.layers``: Module, the built-in layers, and (as submodules) losses, metrics, initializers.

Layers import the core; the core never imports layers.
"""

from tapefit.layers import activations, initializers, losses, metrics, regularizers
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
from tapefit.layers.module import Layer, Module
from tapefit.layers.normalization import BatchNormalization, LayerNormalization
from tapefit.layers.recurrent import GRU, LSTM, Bidirectional, SimpleRNN

__all__ = [
    "Activation",
    "AvgPool2D",
    "AveragePooling2D",
    "BatchNormalization",
    "Bidirectional",
    "Conv1D",
    "Conv2D",
    "Convolution2D",
    "Dense",
    "Dropout",
    "Embedding",
    "Flatten",
    "GRU",
    "GlobalAveragePooling1D",
    "GlobalAveragePooling2D",
    "GlobalMaxPooling1D",
    "GlobalMaxPooling2D",
    "LSTM",
    "Lambda",
    "Layer",
    "LayerNormalization",
    "MaxPool2D",
    "MaxPooling2D",
    "Module",
    "MultiHeadAttention",
    "Sequential",
    "SimpleRNN",
    "activations",
    "initializers",
    "losses",
    "metrics",
    "regularizers",
]
