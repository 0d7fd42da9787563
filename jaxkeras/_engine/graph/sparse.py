"""Applying an op body to values: sparse (BCOO) inputs and folding of trace-time constants."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.experimental import sparse


def is_bcoo(x: Any) -> bool:
    """Returns whether ``x`` is a sparse (BCOO) array."""
    return isinstance(x, sparse.BCOO)


def _sparse_aware(fn: Callable) -> Callable:
    """``fn`` for sparse inputs: JAX's sparse rules where they exist, else dense inputs.

    Only array arguments go through ``sparsify``; static ones (axes, shapes) stay Python values.
    """

    def run(*args, **kwargs):
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs), is_leaf=is_bcoo)
        positions = [
            i for i, v in enumerate(leaves) if is_bcoo(v) or isinstance(v, (jax.Array, np.ndarray))
        ]

        on_arrays = on_leaves(fn, treedef, leaves, positions)
        arrays = [leaves[i] for i in positions]
        try:
            return sparse.sparsify(on_arrays)(*arrays)
        except NotImplementedError:
            return on_arrays(*[v.todense() if is_bcoo(v) else v for v in arrays])

    return run


def on_leaves(fn: Callable, treedef: Any, leaves: list, positions: list[int]) -> Callable:
    """``fn`` as a function of some of its arguments' leaves, the others fixed.

    Args:
        fn: a function of ``(args, kwargs)``'s structure.
        treedef: the structure of ``(args, kwargs)``.
        leaves: its leaves.
        positions: the indices of the leaves the result takes, in order.

    Returns:
        A function of those leaves that calls ``fn`` with the other ``leaves`` in place.
    """

    def call(*values: Any) -> Any:
        filled = list(leaves)
        for i, value in zip(positions, values):
            filled[i] = value
        args, kwargs = jax.tree_util.tree_unflatten(treedef, filled)
        return fn(*args, **kwargs)

    return call


def _has_tracer(values: list) -> bool:
    return any(isinstance(v, jax.core.Tracer) for v in jax.tree_util.tree_leaves(values))


def apply_op(fn: Callable, treedef: Any, values: list, key: Any = None) -> Any:
    """Runs an op body on the flat argument ``values`` (the leaves of ``(args, kwargs)``).

    Args:
        fn: the body.
        treedef: the structure of ``(args, kwargs)``.
        values: the leaves, all concrete (arrays, tracers, Python values); sparse arrays are
            whole leaves.
        key: for random ops, their key (passed as ``key=``); else ``None``.

    Returns:
        What ``fn`` returns. Ops whose inputs are all known at trace time (shapes, constants)
        are folded then, so that shape arithmetic such as ``K.shape(x)[0] * 2`` stays a
        concrete number inside ``jax.jit``.
    """
    args, kwargs = jax.tree_util.tree_unflatten(treedef, values)
    if key is not None:
        kwargs = dict(kwargs, key=key)
    if not getattr(fn, "handles_sparse", False) and any(is_bcoo(v) for v in values):
        fn = _sparse_aware(fn)
    if _has_tracer(values) or key is not None:
        return fn(*args, **kwargs)
    with jax.ensure_compile_time_eval():
        return fn(*args, **kwargs)
