"""Shape inference: static shapes and dtypes of an op's outputs, ``None`` where unknown.

First with a symbolic dimension for every unknown one (``jax.export.symbolic_shape``); where an
op cannot reason about symbolic dimensions, with two unlikely concrete sizes, reporting the
dimensions that differ between the two runs as unknown; where neither works (an unknown
dimension broadcast against a known one), with size 1. Results are cached by op, static
arguments and input shapes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import export
from jax.experimental import sparse

from jaxkeras.graph.base import Node
from jaxkeras.graph.context import Context
from jaxkeras.graph.interpret import evaluate
from jaxkeras.graph.sparse import apply_op, is_bcoo

# Sizes for unknown dimensions when symbolic shapes fail: highly composite, so that reshapes
# which split an unknown dimension still divide; dimensions that differ between them are unknown.
_SENTINELS = (2520, 27720)
_STATIC_WALK_LIMIT = 64
# One symbolic dimension for every unknown one, made once: a fresh one per inference would make
# every trace new to JAX's caches, which would then grow with every op recorded.
(_SYMBOLIC,) = export.symbolic_shape("b")


class _ShapeCache:
    """A bounded, thread-safe LRU map from (op, static arguments, input shapes) to results."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        """Returns the cached result for ``key``, or ``None``."""
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: Any, value: Any) -> None:
        """Caches ``value``, dropping the least recently used entry when full."""
        with self._lock:
            self._items[key] = value
            if len(self._items) > self._size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        """Empties the cache."""
        with self._lock:
            self._items.clear()


SHAPE_CACHE = _ShapeCache(4096)


def _cache_key(fn, treedef, leaves) -> Any:
    parts = []
    for leaf in leaves:
        if isinstance(leaf, Node):
            if _maybe_static(leaf):
                return None  # its value may shape the output: no caching by shape alone
            parts.append(("S", leaf._shape, leaf._dtype, leaf._sparse))
        elif isinstance(leaf, (int, float, bool, str, type(None), type(Ellipsis), np.dtype)):
            parts.append((type(leaf), leaf))
        elif isinstance(leaf, type):
            parts.append(("T", leaf))
        else:
            return None
    return (fn, treedef, tuple(parts))


def _spec_shape(leaf: Node, dims: Callable[[], Any]) -> tuple:
    return tuple(dims() if d is None else d for d in leaf._shape)


def _spec_for(leaf: Node, dims: Callable[[], Any]) -> Any:
    """An abstract value for ``leaf``: an array spec, or (data, indices) specs when sparse."""
    shape = _spec_shape(leaf, dims)
    if not leaf._sparse:
        return jax.ShapeDtypeStruct(shape, jnp.dtype(leaf._dtype))
    nse = leaf._nse
    return (
        jax.ShapeDtypeStruct((nse,), jnp.dtype(leaf._dtype)),
        jax.ShapeDtypeStruct((nse, len(shape)), jnp.int32),
    )


def _maybe_static(leaf: Node) -> bool:
    """Whether ``leaf`` is a small integer tensor, which shape arithmetic may produce."""
    shape = leaf._shape
    return (
        shape is not None
        and len(shape) <= 1
        and None not in shape
        and np.issubdtype(np.dtype(leaf._dtype), np.integer)
    )


def _static_value(leaf: Node, fill: int | None) -> Any:
    """The value of a small integer tensor computed from shapes alone (``K.shape(x)[0] * 2``),
    with unknown dimensions set to ``fill``; ``None`` when it depends on data."""
    if not _maybe_static(leaf):
        return None
    memo: dict = {}
    stack, seen = [leaf], set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        source = node._shape_of
        if source is not None:
            if None in source._shape and fill is None:
                return None
            memo[node] = np.asarray([fill if d is None else d for d in source._shape], np.int32)
        elif node._folds and len(seen) < _STATIC_WALK_LIMIT:
            stack.extend(node._inputs())
        else:
            return None
    return evaluate([leaf], Context(learning_phase=0), memo)[0]


def _eval_shape(fn, treedef, leaves, seed, dims: Callable[[], Any], fill: int | None) -> Any:
    values = list(leaves)
    sym_positions = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, Node):
            static = _static_value(leaf, fill)
            if static is None:
                sym_positions.append(i)
            else:
                values[i] = static
    specs = [_spec_for(leaves[i], dims) for i in sym_positions]
    sparse_shapes = {i: _spec_shape(leaves[i], dims) for i in sym_positions if leaves[i]._sparse}

    def run(*sym_values):
        for i, v in zip(sym_positions, sym_values):
            values[i] = sparse.BCOO(v, shape=sparse_shapes[i]) if i in sparse_shapes else v
        with Context(rng=jax.random.PRNGKey(0), learning_phase=0) as ctx:
            return apply_op(fn, treedef, values, None if seed is None else ctx.key(seed))

    return jax.eval_shape(run, *specs)


def _dims_from(out_specs_a, out_specs_b=None) -> list:
    leaves_a = jax.tree_util.tree_leaves(out_specs_a, is_leaf=is_bcoo)
    leaves_b = (
        jax.tree_util.tree_leaves(out_specs_b, is_leaf=is_bcoo) if out_specs_b is not None else None
    )
    result = []
    for i, spec in enumerate(leaves_a):
        dims = []
        for j, d in enumerate(spec.shape):
            differs = leaves_b is not None and leaves_b[i].shape[j] != d
            if not isinstance(d, (int, np.integer)) or differs:
                dims.append(None)
            else:
                dims.append(int(d))
        result.append((tuple(dims), jnp.dtype(spec.dtype).name, is_bcoo(spec)))
    return result


def _guesses(leaves: list) -> list[int]:
    """Sizes an unknown dimension may have for the op to run: 1 (broadcasting), then the known
    sizes among its arguments (a fixed ``noise_shape`` against a ``None`` batch)."""
    sizes = [1]
    for leaf in leaves:
        if isinstance(leaf, Node):
            dims = leaf._shape or ()
        elif isinstance(leaf, (int, np.integer)) and not isinstance(leaf, bool):
            dims = (leaf,)
        else:
            dims = np.shape(leaf)
        sizes.extend(int(d) for d in dims if d is not None and int(d) > 1)
    return list(dict.fromkeys(sizes))


def _guess(fn, treedef, leaves, seed) -> tuple[Any, Any]:
    """Shapes from the first size in :func:`_guesses` the op runs with; output dimensions equal
    to it come out unknown (the second result marks them). A conflict that only this guess
    resolves is checked again when the real shapes arrive."""
    error = None
    for size in _guesses(leaves):
        try:
            out = _eval_shape(fn, treedef, leaves, seed, lambda size=size: size, size)
        except Exception as err:
            error = error or err
            continue
        marked = jax.tree_util.tree_map(
            lambda s, size=size: jax.ShapeDtypeStruct(
                tuple(-1 if d == size else d for d in s.shape), s.dtype
            ),
            out,
        )
        return out, marked
    raise error


def infer_shapes(fn, treedef, leaves, seed) -> tuple[Any, list]:
    """Infers output structure, shapes (``None`` kept) and dtypes of an op on symbolic leaves.

    Args:
        fn: the op body.
        treedef: the structure of ``(args, kwargs)``.
        leaves: its leaves, symbolic or concrete.
        seed: the seed of a random op, else ``None``.

    Returns:
        ``(out_treedef, [(shape, dtype, is_sparse), ...])`` with one entry per output array.

    Raises:
        Whatever the op raises for incompatible static shapes or arguments.
    """
    key = _cache_key(fn, treedef, leaves)
    if key is not None:
        cached = SHAPE_CACHE.get(key)
        if cached is not None:
            return cached
    try:
        out = _eval_shape(fn, treedef, leaves, seed, lambda: _SYMBOLIC, None)
        result = (jax.tree_util.tree_structure(out, is_leaf=is_bcoo), _dims_from(out))
    except Exception:
        # Unknown dimensions that the op cannot reason about symbolically: run it twice with
        # two unlikely sizes; dimensions that differ between the runs are unknown.
        a, b = _SENTINELS
        try:
            out_a = _eval_shape(fn, treedef, leaves, seed, lambda: a, a)
            out_b = _eval_shape(fn, treedef, leaves, seed, lambda: b, b)
        except Exception:
            out_a, out_b = _guess(fn, treedef, leaves, seed)
        result = (jax.tree_util.tree_structure(out_a, is_leaf=is_bcoo), _dims_from(out_a, out_b))
    if key is not None:
        SHAPE_CACHE.put(key, result)
    return result
