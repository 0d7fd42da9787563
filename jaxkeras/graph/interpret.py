"""The interpreter: the one graph walk, and evaluation of nodes in a context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jaxkeras.graph import siblings
from jaxkeras.graph.base import Node
from jaxkeras.graph.context import Context, active_context


def topological_order(outputs: Sequence[Any], ctx: Context | None, memo: dict) -> list:
    """Returns the nodes to compute, dependencies first, skipping those already in ``memo``.

    Args:
        outputs: values to evaluate (non-symbolic entries are ignored).
        ctx: the context; ``None`` walks all inputs (static collection).
        memo: values already known.

    Returns:
        A list of nodes in evaluation order.
    """
    order: list = []
    visited: set = set()
    stack = [(o, False) for o in reversed(outputs) if isinstance(o, Node)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if node in visited or node in memo:
            continue
        visited.add(node)
        stack.append((node, True))
        deps = node._inputs() if ctx is None else node._deps(ctx)
        for dep in reversed(deps):
            if dep not in visited and dep not in memo:
                stack.append((dep, False))
    return order


def evaluate(
    outputs: Sequence[Any], ctx: Context, memo: dict | None = None, perturb: dict | None = None
) -> list:
    """Evaluates symbolic values in a context.

    Args:
        outputs: symbolic values (others are returned as they are).
        ctx: supplies variable values, random keys and the learning phase.
        memo: node -> value, pre-filled with feeds; filled with what is computed.
        perturb: node -> delta added to the node's value once computed (gradient replays).

    Returns:
        The list of values, one per output.

    Raises:
        ValueError: naming the placeholders the values need that ``memo`` does not feed.
        TypeError, ValueError: from a node that fails on the values it gets (e.g. shapes
            that only meet at run time), with the node's name and its inputs' shapes added.
    """
    memo = {} if memo is None else memo
    order = topological_order(outputs, ctx, memo)
    unfed = [n for n in order if n._is_input]
    if unfed:
        listing = ", ".join(f"{p.name!r} (shape {p.shape}, dtype {p.dtype})" for p in unfed)
        raise ValueError(
            f"placeholders not fed: {listing}; list them in the inputs of K.function "
            "and pass values for them"
        )
    merged = siblings.plan(order) if siblings.SPLITS else {}
    with ctx:
        for node in order:
            if node in memo:  # filled in meanwhile by a gradient node's replay
                continue
            try:
                group = merged.get(node)
                value = node._compute(ctx, memo) if group is None else group.part(node, memo)
            except (TypeError, ValueError) as err:
                if type(err) not in (TypeError, ValueError):  # JAX's own kinds pass as they are
                    raise
                raise type(err)(f"{_describe(node, ctx, memo)}: {err}") from err
            if perturb and node in perturb:
                value = value + perturb[node]
            memo[node] = value
    return [memo[o] if isinstance(o, Node) else o for o in outputs]


def _describe(node: Node, ctx: Context, memo: dict) -> str:
    """Names a node that failed at run time, with the shapes of its inputs (message prefix)."""
    shapes = [tuple(memo[d].shape) for d in node._deps(ctx) if hasattr(memo.get(d), "shape")]
    listed = ", ".join(map(str, shapes))
    return f"{node.name} (inputs of shapes {listed})" if shapes else node.name


def evaluate_now(x: Any) -> Any:
    """Evaluates ``x`` in this thread's active context, or else eagerly against the store.

    Args:
        x: a symbolic value or anything else (returned as it is).

    Returns:
        Its value.
    """
    ctx = active_context()
    if ctx is None:
        ctx = Context()
    return evaluate([x], ctx)[0]
