"""Keras's preprocessing layers for text and tables: ``TextVectorization``, ``StringLookup``,
``IntegerLookup``, ``CategoryEncoding``, ``Hashing`` and ``Normalization``.

They take NumPy arrays (strings or integers) and give Tensors that no tape records, except
``Normalization``, which is differentiable. Vocabularies learned by ``adapt`` are part of a
layer's config, so model files keep them; ``Normalization``'s statistics are weights.
"""

from tapefit.layers.preprocessing.categorical import CategoryEncoding, Hashing
from tapefit.layers.preprocessing.lookup import IntegerLookup, StringLookup
from tapefit.layers.preprocessing.normalization import Normalization
from tapefit.layers.preprocessing.text import TextVectorization

__all__ = [
    "CategoryEncoding",
    "Hashing",
    "IntegerLookup",
    "Normalization",
    "StringLookup",
    "TextVectorization",
]
