"""Flattening and rebuilding nested lists, tuples and dicts (``tf.nest`` in small).

Dicts flatten in sorted key order, as in ``tf.nest``; anything else is a leaf.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def _children(structure: Any) -> list[Any] | None:
    if isinstance(structure, dict):
        return [structure[k] for k in sorted(structure)]
    if isinstance(structure, (list, tuple)):
        return list(structure)
    return None


def flatten(structure: Any) -> list[Any]:
    """The leaves of ``structure`` in order (no recursion: deep nests are fine)."""
    leaves: list[Any] = []
    stack: list[Iterator[Any]] = [iter([structure])]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
            continue
        children = _children(item)
        if children is None:
            leaves.append(item)
        else:
            stack.append(iter(children))
    return leaves


def is_nested(structure: Any) -> bool:
    """Whether ``structure`` is a list, tuple or dict."""
    return isinstance(structure, (list, tuple, dict))


def pack_sequence_as(structure: Any, flat: list[Any]) -> Any:
    """Rebuilds ``structure`` with the leaves replaced by ``flat``, in order."""
    leaves = iter(flat)

    def build(node: Any) -> Any:
        if isinstance(node, dict):
            built = {k: build(node[k]) for k in sorted(node)}
            return type(node)((k, built[k]) for k in node)  # the caller's key order
        if isinstance(node, (list, tuple)):
            items = [build(child) for child in node]
            if isinstance(node, tuple) and hasattr(node, "_fields"):  # namedtuple
                return type(node)(*items)
            return type(node)(items)
        return next(leaves)

    return build(structure)


class _End:
    pass


_END = _End()
