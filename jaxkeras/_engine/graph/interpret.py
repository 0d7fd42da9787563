"""The interpreter: the one graph walk, and evaluation of nodes in a context (whole, or one
micro-batch of the feeds at a time)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxkeras._engine.graph.base import Node
from jaxkeras._engine.graph.context import Context, active_context, at_top_level
from jaxkeras._engine.graph.sparse import is_bcoo
from jaxkeras._xla import siblings


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

    Inside a trace (``jax.jit``, ``lax.scan``, ``jax.grad``), each op node runs in a
    ``jax.named_scope`` of its label (the ``K.name_scope`` it was made in and its op name,
    ``dense_1/dot``), which names its operations in the HLO metadata and in profiles.
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
    traced = not at_top_level()
    with ctx:
        for node in order:
            if node in memo:  # filled in meanwhile by a gradient node's replay
                continue
            label = getattr(node, "_label", None) if traced else None
            try:
                with _UNNAMED if label is None else jax.named_scope(label):
                    group = merged.get(node)
                    if group is None:
                        value = node._compute(ctx, memo)
                    else:
                        value = group.part(node, memo)
            except (TypeError, ValueError) as err:
                if type(err) not in (TypeError, ValueError):  # JAX's own kinds pass as they are
                    raise
                raise type(err)(f"{_describe(node, ctx, memo)}: {err}") from err
            if perturb and node in perturb:
                value = value + perturb[node]
            memo[node] = value
            if ctx.numerics is not None:
                watch_finite(ctx.numerics, node, value)
    return [memo[o] if isinstance(o, Node) else o for o in outputs]


def watch_finite(watched: list, node: Node, value: Any) -> None:
    """Records whether ``value``'s floating-point arrays are all finite (a function's
    ``check_numerics``).

    Args:
        watched: the list of ``(node, flag)`` to append to.
        node: the node that computed ``value``.
        value: its value (a pytree of arrays, inside a trace).
    """
    leaves = [
        leaf
        for leaf in jax.tree_util.tree_leaves(value)
        if isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jnp.inexact)
    ]
    if leaves:
        watched.append((node, jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in leaves]))))


_UNNAMED = contextlib.nullcontext()


def evaluate_in_slices(
    gradients: Sequence[tuple[Node, Sequence[Node]]],
    roots: Sequence[Any],
    ctx: Context,
    feeds: dict,
    slices: int,
    random: Sequence[Node],
) -> list:
    """Evaluates gradient nodes and ``roots`` on feeds split into ``slices`` micro-batches, one
    micro-batch at a time (a ``lax.scan``), so that the intermediate values of one micro-batch
    are alive at a time.

    Each feed is split along axis 0 into ``slices`` equal parts, strided: slice ``i`` holds
    rows ``i, i + slices, i + 2 * slices, ...``, so that a batch sharded along axis 0 (data
    parallelism) gives every device its share of every slice. A value is *batch-shaped* when
    its static first dimension is unknown or one of the feeds' batch sizes; the rows of a
    batch-shaped value are put back in the order of the feeds' rows (row ``j`` of slice ``i``
    is row ``j * slices + i``). What depends on the feeds is computed per slice and combined:

    - the gradient nodes: for each ``x`` they differentiate with respect to, the mean of the
      slices' gradients (for a mean loss, the whole batch's gradient), or where ``x`` is a
      batch-shaped value computed from the feeds (an input, an activation), the slices' rows
      (each example's gradient of its slice's loss);
    - the *frontier*: the feed-dependent ``roots``, and the feed-dependent values that other
      ``roots`` read other than through the gradient nodes (the loss an optimizer is given, a
      batch statistic a moving average reads): the slices' rows when batch-shaped, else the
      mean over the slices (a scalar loss or metric).

    The rest of ``roots`` (what reads the gradients: an optimizer's new values) is computed
    once, after the slices, from those values; what depends on neither is computed once,
    before them. In slice ``i``, each of ``random`` draws from ``fold_in(its key in ctx, i)``,
    so the slices draw different numbers (a random node that does not depend on the feeds is
    computed once, before the slices).

    Args:
        gradients: each gradient node, with the nodes it differentiates with respect to (its
            value holds one gradient per node); they are computed first in each slice, so
            their replays hand forward values to the frontier computed with them.
        roots: the other values to evaluate.
        ctx: the evaluation's context (state, keys, learning phase, policy).
        feeds: placeholder -> its value for the whole batch.
        slices: the number of micro-batches, at least 2.
        random: every random node the evaluation may run.

    Returns:
        The values of the gradient nodes, then those of ``roots``.

    Raises:
        ValueError: for a feed that is sparse, a scalar, or whose size along axis 0 is not a
            multiple of ``slices`` (naming it and its shape), or a frontier value that is not
            batch-shaped and not floating-point (it has no mean).
    """
    placeholders = list(feeds)
    split = [_split(p, v, slices) for p, v in feeds.items()]
    batch_sizes = {np.shape(v)[0] for v in feeds.values()}
    nodes = [node for node, _ in gradients]
    frontier = _frontier(nodes, roots, ctx)
    # what a slice computes, as entries: each gradient, then each frontier value; an entry
    # is summed over the slices, or stacked when its rows are to be joined
    joined = [
        x._has_placeholder and _batch_shaped(x, batch_sizes) for _, xs in gradients for x in xs
    ]
    joined += [_batch_shaped(node, batch_sizes) for node in frontier]
    sliced = [*nodes, *frontier]
    shared = topological_order(sliced, ctx, dict.fromkeys(placeholders))
    memo: dict = {}
    evaluate([n for n in shared if not n._has_placeholder], ctx, memo)
    keys = [ctx.key(node._seed, node) for node in random]

    def run_slice(index: Any) -> tuple[list, list]:
        slice_ctx = Context(
            state=ctx.state,
            learning_phase=ctx.learning_phase,
            keys={n: jax.random.fold_in(k, index) for n, k in zip(random, keys)},
            policy=ctx.policy,
        )
        slice_ctx.loss_scale = ctx.loss_scale
        slice_memo = dict(memo)
        slice_memo.update(
            (p, lax.dynamic_index_in_dim(v, index, 1, False)) for p, v in zip(placeholders, split)
        )
        values = evaluate(sliced, slice_ctx, slice_memo)
        entries = [g for value in values[: len(nodes)] for g in value] + values[len(nodes) :]
        summed = [e for e, j in zip(entries, joined) if not j]
        return summed, [e for e, j in zip(entries, joined) if j]

    summed_specs, _ = jax.eval_shape(run_slice, jax.ShapeDtypeStruct((), jnp.uint32))
    entry_nodes = [n for n, xs in gradients for _ in xs] + frontier
    for node, spec in zip([n for n, j in zip(entry_nodes, joined) if not j], summed_specs):
        if not all(jnp.issubdtype(s.dtype, jnp.inexact) for s in jax.tree_util.tree_leaves(spec)):
            raise ValueError(
                f"micro_batches={slices}: {node.name} (dtype {node.dtype}) is computed per "
                "micro-batch and combined by its mean over them, which a value that is not "
                "floating-point does not have; cast it to a float, or leave micro_batches at 1"
            )

    def step(total: list, index: Any) -> tuple[list, list]:
        summed, rows = run_slice(index)
        return jax.tree_util.tree_map(lambda t, v: t + v.astype(t.dtype), total, summed), rows

    # sums of 16-bit values accumulate in float32
    zeros = jax.tree_util.tree_map(
        lambda s: jnp.zeros(s.shape, jnp.float32 if jnp.finfo(s.dtype).bits < 32 else s.dtype),
        summed_specs,
    )
    indices = jnp.arange(slices, dtype=jnp.uint32)
    totals, stacked = lax.scan(step, zeros, indices)
    means = iter(
        jax.tree_util.tree_map(lambda t, s: (t / slices).astype(s.dtype), totals, summed_specs)
    )
    rows = iter(stacked)
    entries = [_joined(next(rows)) if j else next(means) for j in joined]
    values, start = [], 0
    for _, xs in gradients:
        values.append(tuple(entries[start : start + len(xs)]))
        start += len(xs)
    after = dict(memo)
    after.update(zip(nodes, values))
    after.update(zip(frontier, entries[start:]))
    return [*values, *evaluate(roots, ctx, after)]


def _frontier(gradients: Sequence[Node], roots: Sequence[Any], ctx: Context) -> list[Node]:
    """The values :func:`evaluate_in_slices` computes per slice besides the ``gradients``
    nodes: the feed-dependent nodes (not computed from ``gradients``) that are ``roots`` or
    that a node computed after the slices reads, in evaluation order."""
    cut = dict.fromkeys(gradients)
    order = topological_order(roots, ctx, cut)
    downstream: set = set()
    sliced: set = set()
    for node in order:
        if any(d in cut or d in downstream for d in node._deps(ctx)):
            downstream.add(node)
        elif node._has_placeholder:
            sliced.add(node)
    frontier = {r for r in roots if isinstance(r, Node) and r in sliced}
    for node in order:
        if node not in sliced:
            frontier.update(d for d in node._deps(ctx) if d in sliced)
    return [n for n in order if n in frontier]


def _batch_shaped(node: Node, batch_sizes: set) -> bool:
    """Whether ``node``'s values are batch-shaped: its static first dimension is unknown or
    one of the feeds' batch sizes."""
    shape = node.shape
    return bool(shape) and (shape[0] is None or shape[0] in batch_sizes)


def _joined(rows: Any) -> Any:
    """Per-slice batch-shaped values, stacked along a new axis 0, as one batch in the order of
    the feeds' rows (see :func:`_split`)."""
    return jnp.reshape(jnp.swapaxes(rows, 0, 1), (-1, *rows.shape[2:]))


def _split(placeholder: Node, value: Any, slices: int) -> Any:
    """``value`` (a feed for ``placeholder``) as ``slices`` micro-batches along axis 1: rows
    ``i, i + slices, ...`` are ``[:, i]``."""
    shape = tuple(np.shape(value)) if not is_bcoo(value) else None
    if not shape or shape[0] % slices:
        kind = "sparse" if shape is None else f"of shape {shape}"
        raise ValueError(
            f"micro_batches={slices}: the feed for {placeholder.name!r} is {kind}; every feed "
            f"is split along axis 0 into {slices} micro-batches, so it must be a dense array "
            f"whose size there is a multiple of {slices}"
        )
    return jnp.reshape(value, (shape[0] // slices, slices, *shape[1:]))


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
