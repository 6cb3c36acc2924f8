"""Reachability over recorded ops: the one walk that ``gradient`` plans with and ``explain`` reads.

A node is a recorded ``Op`` or, after a non-persistent tape has answered, a ``Node``
with the same fields minus the values.
"""

from __future__ import annotations

import operator
from typing import Any, NamedTuple

import numpy as np

from tapefit.core.registry import _NOT_DIFFERENTIABLE


class Node(NamedTuple):
    """What a released tape keeps of an op for ``explain``: no values, not even a custom
    gradient's function (its closure may hold forward values)."""

    type: str
    input_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    input_dtypes: tuple[np.dtype, ...]  # gradients only enter floating inputs
    output_dtypes: tuple[np.dtype, ...]
    custom: bool  # has its own gradient function (``custom_gradient``)


# One C-level call per op when a tape releases: a plain tuple of Node's fields.
node_fields = operator.attrgetter(*Node._fields)


def cuts(node: Any) -> bool:
    """Whether ``node`` passes no gradient back (a ``not_differentiable`` op)."""
    return not node.custom and node.type in _NOT_DIFFERENTIABLE


def upstream(
    nodes: list[Any], ids: set[int], stops: set[int] | frozenset[int] = frozenset(), through_cuts: bool = True
) -> tuple[list[Any], set[int]]:
    """The nodes, in recorded order, whose outputs lead to ``ids``, and every id on the way.

    The inputs of a cutting node are followed only with ``through_cuts``; no path continues
    past an id in ``stops``.
    """
    needed = set(ids) - stops
    back: list[Any] = []
    for n in reversed(nodes):
        if not needed.isdisjoint(n.output_ids):
            back.append(n)
            if through_cuts or n.custom or n.type not in _NOT_DIFFERENTIABLE:
                needed.update(n.input_ids)
                if stops:
                    needed -= stops
    back.reverse()
    return back, needed


def downstream(
    nodes: list[Any], ids: set[int], through_cuts: bool = True, floating_only: bool = False
) -> tuple[list[Any], set[int], list[Any]]:
    """The nodes entered going forward from ``ids``, the ids reached, and the cutting nodes met.

    ``floating_only`` enters a node only through a floating input, as gradients do.
    """
    reach = set(ids)
    entered: list[Any] = []
    cut: list[Any] = []
    for n in nodes:
        if floating_only:
            hit = any(i in reach and d.kind == "f" for i, d in zip(n.input_ids, n.input_dtypes))
        else:
            hit = not reach.isdisjoint(n.input_ids)
        if hit:
            if cuts(n):
                cut.append(n)
                if not through_cuts:
                    continue
            entered.append(n)
            reach.update(n.output_ids)
    return entered, reach, cut
