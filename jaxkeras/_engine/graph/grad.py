"""Gradient nodes: ``jax.value_and_grad`` over a replay of the graph from ``xs`` to a loss."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jaxkeras._engine.graph.base import Node
from jaxkeras._engine.graph.context import Context
from jaxkeras._engine.graph.interpret import evaluate, topological_order, watch_finite
from jaxkeras._engine.graph.nodes import ItemTensor, Tensor


class GradNode(Tensor):
    """The gradients of ``sum(loss)`` with respect to ``xs``: ``jax.grad`` of a graph replay.

    The replay adds a zero delta to each of ``xs`` and differentiates with respect to the
    deltas, so each gradient is the total derivative (through the other ``xs`` too, as in TF).
    Nodes that do not depend on ``xs`` are taken from the enclosing evaluation, and the
    replay's forward values are handed back to it, so outputs that share the forward pass do
    not compute it again.

    Args:
        loss: the loss node.
        xs: the nodes to differentiate with respect to (each an ancestor of ``loss``).
    """

    _kind = "gradients"

    def __init__(self, loss: Node, xs: list[Node]) -> None:
        super().__init__(None, "multi")
        self._loss = loss
        self._xs = xs
        order = topological_order([loss], None, {})
        targets = set(xs)
        dependent = set()
        for node in order:
            if node in targets or any(p in dependent for p in node._inputs()):
                dependent.add(node)
        self._dependent = dependent
        self._downstream = {x for x in xs if any(p in dependent for p in x._inputs())}
        needs = dict.fromkeys(xs)
        for node in order:
            if node in dependent:
                needs.update((p, None) for p in node._inputs() if p not in dependent)
        self._needs = tuple(needs)
        self._has_placeholder = loss._has_placeholder or any(x._has_placeholder for x in xs)

    def _inputs(self) -> Sequence[Node]:
        return (self._loss, *self._xs)

    def _deps(self, ctx: Context) -> Sequence[Node]:
        # What the replay reads; the loss itself is computed by the replay (see _compute).
        return self._needs

    def _compute(self, ctx: Context, memo: dict) -> Any:
        base = {k: v for k, v in memo.items() if k not in self._dependent}
        xs = self._xs
        replayed: list = []

        def total(*deltas):
            replay, perturb = dict(base), {}
            for x, delta in zip(xs, deltas):
                if x in self._downstream:
                    perturb[x] = delta
                else:
                    replay[x] = memo[x] + delta
            (loss,) = evaluate([self._loss], ctx, replay, perturb)
            replayed[:] = [n for n in replay if n in self._dependent and _is_array_tree(replay[n])]
            total = jnp.sum(loss)
            return total if scaling is None else scaling.scale(total), [replay[n] for n in replayed]

        scaling = ctx.loss_scale  # a train step under mixed_float16 (jaxkeras.mixed_precision)
        zeros = [jnp.zeros_like(memo[x]) for x in xs]
        watched, ctx.numerics = ctx.numerics, None  # the replay's values are checked outside
        try:
            (_, values), grads = jax.value_and_grad(
                total, argnums=tuple(range(len(xs))), has_aux=True
            )(*zeros)
        finally:
            ctx.numerics = watched
        for node, value in zip(replayed, values):
            memo.setdefault(node, value)
            if watched is not None:  # the forward values the replay hands back
                watch_finite(watched, node, value)
        return grads if scaling is None else scaling.unscale(grads)


def _is_array_tree(value: Any) -> bool:
    return all(isinstance(leaf, jax.Array) for leaf in jax.tree_util.tree_leaves(value))


def gradient_nodes(loss: Node, xs: Sequence[Node]) -> list[Node | None]:
    """Builds the gradients of ``loss`` with respect to each of ``xs``.

    Args:
        loss: a symbolic loss (summed when not scalar).
        xs: symbolic values.

    Returns:
        One gradient tensor per entry of ``xs`` (the same tensor for repeated entries), or
        ``None`` where ``loss`` does not depend on the entry.
    """
    ancestors = set(topological_order([loss], None, {}))
    connected = [x for x in dict.fromkeys(xs) if x in ancestors]
    if not connected:
        return [None] * len(xs)
    node = GradNode(loss, connected)
    items = {x: ItemTensor(node, i, x.shape, x.dtype) for i, x in enumerate(connected)}
    return [items.get(x) for x in xs]
