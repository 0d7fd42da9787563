"""Shape inference: static shapes and dtypes of an op's outputs, ``None`` where unknown.

An op whose arguments hold sizes computed from unknown dimensions (``K.shape(x)[0]``) is first
run with a symbolic dimension of its own for each unknown dimension (``jax.export``), the same
one for a dimension of ``x`` and for ``K.shape(x)``'s entry, so that only what is provably
determined comes out known (``reshape(x, (K.shape(x)[0], -1))`` of an ``(None, 5, 2)`` ``x`` is
``(None, 10)``). An op may declare its own shape rule; it is the authority where that first
run does not apply or fails, unless it declines. Element-wise ops, random draws of a known
shape and indexing by constants have such rules, which run nothing: tracing an op costs a
millisecond or more, and building a Keras model records hundreds. Otherwise every unknown
dimension gets one shared symbolic dimension (ops that need unknown dimensions to be equal,
such as ``x + y``, reason with it); where an op cannot reason about symbolic dimensions, two
unlikely concrete sizes, reporting the dimensions that differ between the two runs as unknown;
where neither works (an unknown dimension broadcast against a known one), size 1. Results are
cached by op, static arguments and input shapes.
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

from jaxkeras._engine.graph.base import Node
from jaxkeras._engine.graph.context import Context
from jaxkeras._engine.graph.interpret import evaluate
from jaxkeras._engine.graph.sparse import apply_op, is_bcoo, on_leaves

# Sizes for unknown dimensions when symbolic shapes fail: highly composite, so that reshapes
# which split an unknown dimension still divide; dimensions that differ between them are unknown.
_SENTINELS = (2520, 27720)
_STATIC_WALK_LIMIT = 64
# Symbolic dimensions are made once: fresh ones per inference would make every trace new to
# JAX's caches, which would then grow with every op recorded. One shared by every unknown
# dimension, and a pool for the per-dimension run (an op with more distinct unknown dimensions
# than the pool holds skips that run).
(_SYMBOLIC,) = export.symbolic_shape("b")
_POOL = export.symbolic_shape(", ".join(f"d{i}" for i in range(16)))
# Two sets of distinct concrete sizes, one per unknown dimension, for telling which entries of a
# size computation (``K.concatenate([[-1], K.shape(x)[1:2]])``) the unknown dimensions leave
# alone; any sum, difference, product or ratio of two of them differs between the sets.
_DISTINCT = (
    tuple(2520 * (k + 1) for k in range(len(_POOL))),
    tuple(27720 + 2520 * k for k in range(len(_POOL))),
)
# A rule's result: the output shape (``None`` for unknown dimensions) and dtype name, or
# ``None`` where the rule does not apply (inference then runs the op as for any other).
ShapeRule = Callable[..., tuple[tuple | None, str] | None]


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


Fill = Callable[[Node, int], Any]
"""The stand-in for dimension ``i`` of a node where its static shape has ``None``."""


class _PerDimension:
    """A fill giving each unknown dimension (node, index) its own stand-in from ``pool``
    (default: the symbols of :data:`_POOL`)."""

    def __init__(self, pool: tuple = _POOL) -> None:
        self.pool = pool
        self.assigned: dict = {}

    def __call__(self, node: Node, i: int) -> Any:
        key = (node, i)
        if key not in self.assigned:
            if len(self.assigned) == len(self.pool):
                raise ValueError("more unknown dimensions than per-dimension stand-ins")
            self.assigned[key] = self.pool[len(self.assigned)]
        return self.assigned[key]


def _spec_shape(leaf: Node, dims: Fill) -> tuple:
    return tuple(dims(leaf, i) if d is None else d for i, d in enumerate(leaf._shape))


def _spec_for(leaf: Node, dims: Fill) -> Any:
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


def _static_value(leaf: Node, fill: Fill | None) -> Any:
    """The value of a small integer tensor computed from shapes alone (``K.shape(x)[0] * 2``),
    with unknown dimensions set by ``fill``; ``None`` when it depends on data, or on unknown
    dimensions and ``fill`` is ``None``. Symbolic stand-ins make ``K.shape(x)`` an object
    array, which indexing keeps (arithmetic on it fails: the caller then falls back)."""
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
            dims = [fill(source, i) if d is None else d for i, d in enumerate(source._shape)]
            symbolic = any(export.is_symbolic_dim(d) for d in dims)
            memo[node] = np.asarray(dims, object if symbolic else np.int32)
        elif node._folds and len(seen) < _STATIC_WALK_LIMIT:
            stack.extend(node._inputs())
        else:
            return None
    return evaluate([leaf], Context(learning_phase=0), memo)[0]


def known_entries(x: Node) -> tuple | None:
    """Returns the entries of a small integer tensor that shapes alone determine.

    Args:
        x: a symbolic scalar or 1-D integer tensor, such as ``K.shape(y)[1] * 2`` or
            ``K.concatenate([[-1], K.shape(y)[1:]])``.

    Returns:
        Its entries, flattened: ints where they depend neither on data nor on an unknown
        dimension (an entry computed from unknown dimensions counts as known only if it comes
        out the same for two sets of distinct stand-in sizes), ``None`` for the others;
        ``None`` instead of a tuple when ``x`` depends on data.
    """
    value = _static_value(x, None)
    if value is not None:
        return tuple(int(v) for v in np.ravel(value))
    runs = []
    for sizes in _DISTINCT:
        try:
            value = _static_value(x, _PerDimension(sizes))
        except Exception:  # more unknown dimensions than stand-ins: nothing is told
            value = None
        if value is None:
            return None
        runs.append(np.ravel(np.asarray(value)))
    return tuple(int(a) if a == b else None for a, b in zip(*runs))


def _static_values(leaves: list, fill: Fill | None) -> dict:
    """The static values of the symbolic ``leaves`` (by position) that have one."""
    values = {}
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, Node):
            value = _static_value(leaf, fill)
            if value is not None:
                values[i] = value
    return values


def _eval_shape(fn, treedef, leaves, seed, dims: Fill, statics: dict) -> Any:
    """``jax.eval_shape`` of the op, with ``statics`` (by position) in place of those leaves
    and the other symbolic leaves as specs whose unknown dimensions ``dims`` sets."""
    values = list(leaves)
    sym_positions = []
    for i, leaf in enumerate(leaves):
        if i in statics:
            values[i] = statics[i]
        elif isinstance(leaf, Node):
            sym_positions.append(i)
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


def _run(fn, treedef, leaves, seed, fill: Fill, fill_statics: bool, statics: dict | None) -> Any:
    """:func:`_eval_shape` with every unknown dimension set by ``fill``, in the static values of
    the arguments too where ``fill_statics`` (else those that depend on one stay symbolic);
    ``statics``, if given, are static values that no unknown dimension enters."""
    if statics is None:
        statics = _static_values(leaves, fill if fill_statics else None)
    return _eval_shape(fn, treedef, leaves, seed, fill, statics)


def _guess(fn, treedef, leaves, seed) -> tuple[Any, Any]:
    """Shapes from the first size in :func:`_guesses` the op runs with; output dimensions equal
    to it come out unknown (the second result marks them). A conflict that only this guess
    resolves is checked again when the real shapes arrive."""
    error = None
    for size in _guesses(leaves):
        try:
            out = _run(fn, treedef, leaves, seed, lambda node, i, size=size: size, True, None)
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


def _per_dimension(fn, treedef, leaves, seed) -> tuple[Any, dict | None]:
    """Output specs from a symbol per unknown dimension, kept from a node's dimension to the
    entries of its ``K.shape``.

    Returns:
        ``(specs, None)``; or ``(None, static values)`` where no argument holds a size computed
        from an unknown dimension (nothing to tell apart; the values serve every stand-in);
        or ``(None, None)`` where the op fails on the symbols (unknown dimensions it needs
        equal, sizes it cannot prove divisible, arithmetic on the sizes).
    """
    fill = _PerDimension()
    try:
        statics = _static_values(leaves, fill)
        if not fill.assigned:
            return None, statics
        return _eval_shape(fn, treedef, leaves, seed, fill, statics), None
    except Exception:
        return None, None


def _shared(fn, treedef, leaves, seed, statics: dict | None) -> tuple[Any, list]:
    """Structure and shapes from one stand-in for every unknown dimension (see the module);
    ``statics`` as for :func:`_run`."""
    try:
        out = _run(fn, treedef, leaves, seed, lambda node, i: _SYMBOLIC, False, statics)
        return jax.tree_util.tree_structure(out, is_leaf=is_bcoo), _dims_from(out)
    except Exception:
        # Unknown dimensions that the op cannot reason about symbolically: run it twice with
        # two unlikely sizes; dimensions that differ between the runs are unknown.
        a, b = _SENTINELS
        try:
            out_a = _run(fn, treedef, leaves, seed, lambda node, i: a, True, statics)
            out_b = _run(fn, treedef, leaves, seed, lambda node, i: b, True, statics)
        except Exception:
            out_a, out_b = _guess(fn, treedef, leaves, seed)
        return jax.tree_util.tree_structure(out_a, is_leaf=is_bcoo), _dims_from(out_a, out_b)


def _from_rule(rule: ShapeRule, treedef, leaves) -> tuple[Any, list] | None:
    args, kwargs = jax.tree_util.tree_unflatten(treedef, leaves)
    found = rule(*args, **kwargs)
    if found is None:
        return None
    shape, dtype = found
    shape = None if shape is None else tuple(None if d is None else int(d) for d in shape)
    return jax.tree_util.tree_structure(0), [(shape, jnp.dtype(dtype).name, False)]


def _known_from_rule(rule: ShapeRule, treedef, leaves) -> tuple[Any, list] | None:
    """:func:`_from_rule`'s result where it knows every dimension: no run of the op can tell
    more, so the runs (each a trace, and where symbolic dimensions fail, an exception that JAX
    spends milliseconds filtering) are skipped; else ``None`` (the rule is asked again in its
    place, where it may raise)."""
    try:
        result = _from_rule(rule, treedef, leaves)
    except Exception:
        return None
    if result is None or result[1][0][0] is None or None in result[1][0][0]:
        return None
    return result


def broadcast_shapes(*shapes: tuple | None) -> tuple | None:
    """NumPy broadcasting of static shapes with unknown (``None``) dimensions, as TensorFlow
    infers it: an unknown dimension against a known size above 1 is that size (it can only be
    1 or equal), against 1 or another unknown one it stays unknown.

    Args:
        *shapes: tuples of ints and ``None``, or ``None`` for an unknown rank.

    Returns:
        The broadcast shape; ``None`` where a rank is unknown.

    Raises:
        ValueError: naming the shapes where two known sizes above 1 differ.
    """
    if any(shape is None for shape in shapes):
        return None
    rank = max((len(shape) for shape in shapes), default=0)
    result = []
    for i in range(rank):
        dims = [shape[i - rank + len(shape)] for shape in shapes if i - rank + len(shape) >= 0]
        sizes = {d for d in dims if d is not None and d != 1}
        if len(sizes) > 1:
            raise ValueError(f"incompatible shapes for broadcasting: {', '.join(map(str, shapes))}")
        if sizes:
            result.append(sizes.pop())
        else:
            result.append(None if None in dims else 1)
    return tuple(result)


_SCALAR_TYPES = (int, float, bool, complex, str, type(None), np.dtype, type)


def elementwise_rule(fn: Callable) -> ShapeRule:
    """The shape rule of an element-wise op ``fn``: its arguments' shapes broadcast (see
    :func:`broadcast_shapes`), and the dtype of ``fn`` applied to 0-d stand-ins of the same
    dtypes, worked out once per combination of dtypes and other arguments.

    Args:
        fn: the op body: element-wise in its array arguments, whose other arguments (Python
            scalars, dtypes, strings) shape nothing.

    Returns:
        The rule. It does not apply (returns ``None``) to arguments other than dense
        symbolic tensors, NumPy arrays and scalars, and the types above (lists among them).
    """

    def rule(*args: Any, **kwargs: Any) -> tuple[tuple | None, str] | None:
        if any(isinstance(v, (list, tuple, dict)) for v in (*args, *kwargs.values())):
            return None  # a nested argument is one array to the op, not several
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        shapes, stand_ins, key = [], [], []
        for leaf in leaves:
            if isinstance(leaf, Node):
                if leaf._sparse:
                    return None
                shapes.append(leaf._shape)
                stand_ins.append(jax.ShapeDtypeStruct((), jnp.dtype(leaf._dtype)))
                key.append(("S", leaf._dtype))
            elif isinstance(leaf, (np.ndarray, np.generic)):
                shapes.append(leaf.shape)
                stand_ins.append(np.zeros((), leaf.dtype))
                key.append(("A", leaf.dtype))
            elif isinstance(leaf, _SCALAR_TYPES):
                stand_ins.append(leaf)
                key.append((type(leaf), leaf))
            else:
                return None
        cache_key = ("elementwise", fn, treedef, tuple(key))
        dtype = SHAPE_CACHE.get(cache_key)
        if dtype is None:
            specs = [i for i, v in enumerate(stand_ins) if isinstance(v, jax.ShapeDtypeStruct)]
            run = on_leaves(fn, treedef, stand_ins, specs)
            dtype = jnp.dtype(jax.eval_shape(run, *(stand_ins[i] for i in specs)).dtype).name
            SHAPE_CACHE.put(cache_key, dtype)
        return broadcast_shapes(*shapes), dtype

    return rule


def infer_shapes(fn, treedef, leaves, seed, rule: ShapeRule | None = None) -> tuple[Any, list]:
    """Infers output structure, shapes (``None`` kept) and dtypes of an op on symbolic leaves.

    Args:
        fn: the op body.
        treedef: the structure of ``(args, kwargs)``.
        leaves: its leaves, symbolic or concrete.
        seed: the seed of a random op, else ``None``.
        rule: the op's own shape rule, if it declares one: called with the op's arguments
            (symbolic ones as they are), it returns the shape and dtype of its one dense
            output, or ``None`` where it does not apply; used for dense arguments unless the
            per-dimension run applies and succeeds.

    Returns:
        ``(out_treedef, [(shape, dtype, is_sparse), ...])`` with one entry per output array.

    Raises:
        Whatever the op (or its rule) raises for incompatible static shapes or arguments.
    """
    key = _cache_key(fn, treedef, leaves)
    if key is not None:
        cached = SHAPE_CACHE.get(key)
        if cached is not None:
            return cached
    dense = rule is not None and not any(isinstance(leaf, Node) and leaf._sparse for leaf in leaves)
    result = _known_from_rule(rule, treedef, leaves) if dense else None
    if result is None:
        out, statics = _per_dimension(fn, treedef, leaves, seed)
        if out is not None:
            result = (jax.tree_util.tree_structure(out, is_leaf=is_bcoo), _dims_from(out))
        else:
            if dense:
                result = _from_rule(rule, treedef, leaves)
            if result is None:
                result = _shared(fn, treedef, leaves, seed, statics)
    if key is not None:
        SHAPE_CACHE.put(key, result)
    return result
