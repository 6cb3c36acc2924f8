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
    """Rebuilds ``structure`` with the leaves replaced by ``flat``, in order.

    An explicit stack, not a recursive closure: a closure that calls itself is a reference
    cycle, and every gradient call would leave one (with the gradients in it) for the
    cyclic collector.
    """
    leaves = iter(flat)
    if not is_nested(structure):
        return next(leaves)
    stack: list[tuple[Any, Iterator[Any], list[Any]]] = [(structure, iter(_children(structure) or ()), [])]
    while True:
        node, children, built = stack[-1]
        child = next(children, _END)
        if child is _END:
            stack.pop()
            value = _rebuild(node, built)
            if not stack:
                return value
            stack[-1][2].append(value)
        elif is_nested(child):
            stack.append((child, iter(_children(child) or ()), []))
        else:
            built.append(next(leaves))


def _rebuild(node: Any, items: list[Any]) -> Any:
    """``node``'s container type around ``items`` (given in flatten order)."""
    if isinstance(node, dict):
        by_key = dict(zip(sorted(node), items))
        return type(node)((k, by_key[k]) for k in node)  # the caller's key order
    if isinstance(node, tuple) and hasattr(node, "_fields"):  # namedtuple
        return type(node)(*items)
    return type(node)(items)


class _End:
    pass


_END = _End()
