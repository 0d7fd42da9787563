"""Sibling ops run as one: one op applied to one input with several kernels.

Keras's recurrent cells slice each kernel variable into one part per gate and convolve (or
multiply) the same input by every part: a ``ConvLSTM2D`` step makes four input and four
recurrent convolutions where two would do. Ops that declare how they split (``op(splits=)``:
their output along one axis is made from the kernel's entries along another alone, as for a
convolution's filters or a matrix product's columns) are grouped when a graph walk computes
several of them on the same input and other arguments, with kernels of one dtype and shape but
along that axis: the op runs once on the kernels concatenated, and each node takes its part of
the output. The values and gradients are those of the separate ops; XLA does not merge such
siblings itself. On CPU the ``conv_lstm`` example's recurrent layer trains faster (measured by
hand: ``benchmarks/RESULTS.md``, "Design measurements (by hand)", "sibling ops").

No upstream issue found for XLA:CPU (checked 2026-11-27); merging ops that share an operand by
concatenating the others was proposed for XLA:GPU's horizontal fusion in openxla/xla#20994 (a
pull request, closed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jaxkeras._engine.graph.base import Node
from jaxkeras._engine.graph.sparse import apply_op

SplitRule = Callable[..., tuple[int, int, int] | None]
"""Called with an op's arguments: ``(position of the kernel among the positional arguments,
kernel axis, output axis)`` where slicing the kernel along that axis slices the output along
the other alike, else ``None``."""

SPLITS: dict[Callable, SplitRule] = {}
"""Op bodies that declared a split rule (``op(splits=)``)."""


class _Group:
    """Sibling nodes and, once computed, each one's part of the op's output on their kernels
    concatenated."""

    def __init__(self, node: Node, position: int, axis: int, out_axis: int, index: int) -> None:
        self.fn, self.treedef, self.leaves = node._fn, node._treedef, node._leaves
        self.index = index  # the first member's place in the walk
        self.position, self.axis, self.out_axis = position, axis, out_axis
        self.members: list[Node] = []
        self.parts: dict[Node, Any] = {}

    def part(self, node: Node, memo: dict) -> Any:
        """The output of member ``node``; the first call computes the merged op and splits it.

        One ``lax.split`` makes every member's part: its transpose is one concatenate of the
        parts' cotangents, where a slice per part would transpose to a zero-padded copy of the
        whole output per part, summed (a ConvLSTM's gate gradients: four 160-channel arrays
        written and added per step where one is needed).
        """
        if not self.parts:
            kernels = [member._leaves[self.position] for member in self.members]
            values = [memo[leaf] if isinstance(leaf, Node) else leaf for leaf in self.leaves]
            values[self.position] = jnp.concatenate([memo[k] for k in kernels], self.axis)
            value = apply_op(self.fn, self.treedef, values)
            sizes = [kernel._shape[self.axis] for kernel in kernels]
            pieces = lax.split(value, sizes, axis=self.out_axis)
            self.parts = dict(zip(self.members, pieces))
        return self.parts[node]


def plan(order: Sequence[Node]) -> dict[Node, _Group]:
    """Groups the sibling nodes of a walk (see the module).

    Args:
        order: the nodes the walk computes, in order.

    Returns:
        node -> its group, for the nodes of groups of two or more. A node joins a group only
        if its kernel is known before the group's first member is computed (in the walk's
        memo already, as a loop body's captured kernels are, or earlier in ``order``).
    """
    place: dict | None = None  # node -> its index in order, built once a group has a second
    groups: dict = {}
    for index, node in enumerate(order):
        rule = SPLITS.get(getattr(node, "_fn", None))
        if rule is None or node._seed is not None:
            continue
        args, kwargs = jax.tree_util.tree_unflatten(node._treedef, node._leaves)
        found = rule(*args, **kwargs)
        if found is None:
            continue
        position, axis, out_axis = found
        kernel = args[position]
        shape = getattr(kernel, "_shape", None)
        if not isinstance(kernel, Node) or kernel._sparse or shape is None or None in shape:
            continue
        axis %= len(shape)
        leaf = next(i for i, v in enumerate(node._leaves) if v is kernel)
        others = tuple(v for i, v in enumerate(node._leaves) if i != leaf)
        across = (kernel._dtype, shape[:axis], shape[axis + 1 :])
        try:
            key = (node._fn, node._treedef, leaf, others, across, axis, out_axis)
            group = groups.get(key)
        except TypeError:  # an unhashable argument (an array): not grouped
            continue
        if group is None:
            group = groups[key] = _Group(node, leaf, axis, out_axis, index)
        else:
            if place is None:
                place = {n: i for i, n in enumerate(order)}
            if place.get(kernel, -1) > group.index:
                continue  # computed after the first member: this one runs on its own
        group.members.append(node)
    return {m: g for g in groups.values() if len(g.members) > 1 for m in g.members}
