"""Symbolic tensors, the one op decorator, shape inference and the graph interpreter.

Every op of jaxkeras is a pure ``jax.numpy``/``lax`` function wrapped by :func:`op`. Called on
concrete values it runs at once; called with a symbolic argument (a :class:`Tensor` or a
``Variable``) it records a node. :func:`evaluate` replays recorded nodes in a :class:`Context`
that supplies variable values, random keys and the learning phase; the same replay runs eagerly,
inside ``jax.jit`` (``K.function``) and inside ``jax.grad`` (``K.gradients``).
"""

from __future__ import annotations

import functools
import inspect
import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import export
from jax.experimental import sparse
from jax.extend.core import get_opaque_trace_state

# ---------------------------------------------------------------------------------------------
# dtypes

_DTYPE_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "bool_": "bool"}


def standardize_dtype(dtype: Any, arg: str = "dtype") -> str:
    """Returns the canonical name of a dtype, as JAX will store it.

    Args:
        dtype: a dtype name (``'float32'``), a NumPy dtype or type, or a JAX dtype.
        arg: the argument name to use in error messages.

    Returns:
        The dtype's name, e.g. ``'float32'``; 64-bit types become 32-bit unless x64 is enabled.

    Raises:
        TypeError: naming ``arg`` and the value when it is not a dtype.
    """
    if isinstance(dtype, str):
        dtype = _DTYPE_ALIASES.get(dtype, dtype)
    try:
        np_dtype = jnp.dtype(dtype)
    except TypeError:
        raise TypeError(f"{arg}: unknown dtype {dtype!r}") from None
    return jax.dtypes.canonicalize_dtype(np_dtype).name


def dtype_of(x: Any) -> str:
    """Returns the dtype name of a symbolic value or array (Python scalars take JAX's default)."""
    if isinstance(x, Symbolic):
        return x.dtype
    if hasattr(x, "dtype"):
        return standardize_dtype(x.dtype)
    return jnp.asarray(x).dtype.name


# ---------------------------------------------------------------------------------------------
# uids

_uid_counter = itertools.count(1)


def next_uid() -> int:
    """Returns a fresh process-wide integer id (used for node names)."""
    return next(_uid_counter)


# Salts of random nodes without a seed: a counter that set_random_seed resets, so that a
# program that builds the same graphs after the same seed draws the same numbers.
_salts = {"next": 0}


def next_salt() -> int:
    """Returns the salt for the next random node that has no seed."""
    _salts["next"] += 1
    return 1_000_003 + _salts["next"]


def reset_salts() -> None:
    """Restarts :func:`next_salt`."""
    _salts["next"] = 0


# ---------------------------------------------------------------------------------------------
# evaluation context


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.contexts: list[Context] = []
        self.substitutions: list[dict] = []


def push_substitutions(mapping: dict) -> None:
    """Makes ops recorded from now on read ``mapping[leaf]`` wherever they get ``leaf``."""
    _thread.substitutions.append(mapping)


def pop_substitutions() -> None:
    """Undoes the last :func:`push_substitutions`."""
    _thread.substitutions.pop()


_thread = _ThreadState()
_TOP_LEVEL_TRACE = get_opaque_trace_state()

# Filled in by jaxkeras.state at import: where keys and the default learning phase come from
# when no context says otherwise.
_providers: dict[str, Callable[[], Any]] = {}


def set_provider(name: str, fn: Callable[[], Any]) -> None:
    """Registers the default source of ``'rng'`` keys or the ``'learning_phase'`` (state.py)."""
    _providers[name] = fn


class Context:
    """Where a graph is evaluated: variable values, a random key and the learning phase.

    Args:
        state: variable name -> value; variables missing from it read the store.
        rng: the key random nodes derive theirs from; ``None`` draws one from the store on use.
        learning_phase: 0 or 1 (static); ``None`` means the global default.
        scope: True for a user-facing state scope, in which ops on variables run at once and
            updates are applied at once.
    """

    def __init__(
        self,
        state: dict[str, Any] | None = None,
        rng: Any = None,
        learning_phase: int | None = None,
        scope: bool = False,
    ) -> None:
        self.state: dict[str, Any] = {} if state is None else state
        self._rng = rng
        self._learning_phase = learning_phase
        self.scope = scope
        self.frozen_reason: str | None = None
        self.trace_state = get_opaque_trace_state()

    def read(self, variable: Any) -> Any:
        """Returns the value of ``variable`` in this context."""
        name = variable.name
        if name in self.state:
            return self.state[name]
        return variable._store_read()

    def write(self, variable: Any, value: Any) -> None:
        """Sets the value of ``variable`` in this context (updates inside a scope)."""
        if self.frozen_reason:
            raise ValueError(self.frozen_reason)
        if isinstance(value, jax.core.Tracer) and get_opaque_trace_state() != self.trace_state:
            raise ValueError(
                f"Updating variable {variable.name!r} here would leak a JAX tracer out of the "
                "jax.jit/vmap/grad trace it belongs to, because the state scope was opened "
                "outside that trace. Open the scope inside the traced function instead: "
                "`def step(values): with K.state_scope(values) as s: ...; return s.values`."
            )
        self.state[variable.name] = value

    @property
    def learning_phase(self) -> int:
        """The learning phase (0 = test, 1 = train) graphs see in this context."""
        if self._learning_phase is not None:
            return self._learning_phase
        return _providers["learning_phase"]()

    def key(self, salt: int) -> jax.Array:
        """Returns the random key of the node with this salt, for this call."""
        if self._rng is None:
            self._rng = _providers["rng"]()
        return jax.random.fold_in(self._rng, salt)

    def __enter__(self) -> Context:
        _thread.contexts.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _thread.contexts.pop()


def active_context() -> Context | None:
    """Returns the innermost active context, or ``None``."""
    return _thread.contexts[-1] if _thread.contexts else None


def active_scope() -> Context | None:
    """Returns the innermost active user-facing state scope, or ``None``."""
    ctx = active_context()
    return ctx if ctx is not None and ctx.scope else None


# ---------------------------------------------------------------------------------------------
# symbolic values


def _getitem_body(x: Any, index: tuple) -> Any:
    return x[tuple(_from_index_spec(i) for i in index)]


class SliceSpec(NamedTuple):
    """A slice whose bounds may be symbolic (a pytree, unlike ``slice``)."""

    start: Any
    stop: Any
    step: Any


def _static_int(v: Any) -> Any:
    return None if v is None else int(np.asarray(v))


def _to_index_spec(item: Any) -> Any:
    if isinstance(item, slice):
        return SliceSpec(item.start, item.stop, item.step)
    return item


def _from_index_spec(item: Any) -> Any:
    if isinstance(item, SliceSpec):
        return slice(_static_int(item.start), _static_int(item.stop), _static_int(item.step))
    return item


class Symbolic:
    """Base of every symbolic value (tensors and variables): shape, dtype and operators.

    ``==`` and ``!=`` compare identity, as Keras-2 graph tensors did (so tensors can be kept in
    lists, sets and dicts); use ``K.equal`` / ``K.not_equal`` for element-wise comparison.
    """

    _uses_learning_phase = False
    _sparse = False  # whether its values are sparse (jax.experimental.sparse.BCOO)
    __array_priority__ = 100  # so that numpy scalars defer to our operators

    @property
    def shape(self) -> tuple | None:
        """The static shape, ``None`` for unknown dimensions."""
        return self._shape

    @property
    def dtype(self) -> str:
        """The dtype name, e.g. ``'float32'``."""
        return self._dtype

    @property
    def ndim(self) -> int:
        """The rank."""
        return len(self._shape)

    def get_shape(self) -> tuple:
        """Returns the static shape (TF-style spelling of ``.shape``)."""
        return self._shape

    @property
    def _keras_shape(self) -> tuple | None:
        """The shape Keras-2 layers record (the static shape unless a layer set another)."""
        return self.__dict__.get("_keras_shape_set", self._shape)

    @_keras_shape.setter
    def _keras_shape(self, value: tuple | None) -> None:
        self.__dict__["_keras_shape_set"] = value

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def __bool__(self) -> bool:
        raise TypeError(
            f"The truth value of symbolic {self!r} is unknown while the graph is built; "
            "use K.switch or K.in_train_phase for data-dependent choices."
        )

    def __len__(self) -> int:
        if not self._shape or self._shape[0] is None:
            raise TypeError(f"len() of {self!r}: its first dimension is not known statically")
        return self._shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __getitem__(self, index: Any) -> Tensor:
        if not isinstance(index, tuple):
            index = (index,)
        return _getitem(self, tuple(_to_index_spec(i) for i in index))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        value = np.asarray(evaluate_now(self))
        return value.astype(dtype) if dtype is not None else value

    # arithmetic
    def __add__(self, o):
        return _add(self, o)

    def __radd__(self, o):
        return _add(o, self)

    def __sub__(self, o):
        return _sub(self, o)

    def __rsub__(self, o):
        return _sub(o, self)

    def __mul__(self, o):
        return _mul(self, o)

    def __rmul__(self, o):
        return _mul(o, self)

    def __truediv__(self, o):
        return _div(self, o)

    def __rtruediv__(self, o):
        return _div(o, self)

    def __floordiv__(self, o):
        return _floordiv(self, o)

    def __rfloordiv__(self, o):
        return _floordiv(o, self)

    def __mod__(self, o):
        return _mod(self, o)

    def __rmod__(self, o):
        return _mod(o, self)

    def __pow__(self, o):
        return _pow(self, o)

    def __rpow__(self, o):
        return _pow(o, self)

    def __matmul__(self, o):
        return _matmul(self, o)

    def __rmatmul__(self, o):
        return _matmul(o, self)

    def __neg__(self):
        return _neg(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _abs(self)

    def __invert__(self):
        return _invert(self)

    def __and__(self, o):
        return _and(self, o)

    def __rand__(self, o):
        return _and(o, self)

    def __or__(self, o):
        return _or(self, o)

    def __ror__(self, o):
        return _or(o, self)

    def __xor__(self, o):
        return _xor(self, o)

    def __lt__(self, o):
        return _lt(self, o)

    def __le__(self, o):
        return _le(self, o)

    def __gt__(self, o):
        return _gt(self, o)

    def __ge__(self, o):
        return _ge(self, o)

    # graph protocol, overridden by node kinds
    def _inputs(self) -> Sequence[Symbolic]:
        """All symbolic values this one depends on directly (for graph walks)."""
        return ()

    def _deps(self, ctx: Context) -> Sequence[Symbolic]:
        """The dependencies actually needed to evaluate in ``ctx`` (default: all inputs)."""
        return self._inputs()

    def _compute(self, ctx: Context, memo: dict) -> Any:
        """Computes this value; every dependency of ``_deps(ctx)`` is in ``memo``."""
        raise NotImplementedError

    _has_placeholder = False


class Tensor(Symbolic):
    """A node of a symbolic graph: it knows its inputs, static shape and dtype, not its value.

    Attributes may be set freely (Keras stores ``_keras_shape``, ``_keras_history``, ...).
    """

    _kind = "tensor"

    def __init__(self, shape: tuple | None, dtype: str, name: str | None = None) -> None:
        self._shape = None if shape is None else tuple(shape)
        self._dtype = dtype
        self._uid = next_uid()
        self._name = name

    @property
    def name(self) -> str:
        """A readable unique name."""
        return self._name or f"{self._kind}_{self._uid}"

    def __repr__(self) -> str:
        head = f"<jaxkeras.Tensor {self.name!r} shape={self._shape} dtype={self._dtype}"
        if self._has_placeholder:
            return head + ">"
        try:
            value = np.asarray(evaluate_now(self))
        except Exception:  # a repr never raises
            return head + ">"
        body = np.array2string(value, threshold=20, edgeitems=2)
        return f"{head} value=\n{body}>" if "\n" in body else f"{head} value={body}>"


class Placeholder(Tensor):
    """A graph input, fed when a function is called.

    Args:
        shape: the static shape, ``None`` for unknown dimensions.
        dtype: its dtype name.
        name: its name.
        sparse: whether it is fed sparse values.
    """

    _kind = "placeholder"
    _has_placeholder = True

    def __init__(self, shape, dtype, name=None, sparse=False) -> None:
        super().__init__(shape, dtype, name)
        self._sparse = sparse


class LearningPhase(Tensor):
    """The learning-phase placeholder: fed with 0 or 1, else the context's default."""

    _kind = "keras_learning_phase"

    def __init__(self) -> None:
        super().__init__((), "bool", "keras_learning_phase")

    def _compute(self, ctx: Context, memo: dict) -> Any:
        return ctx.learning_phase


def _is_symbolic(x: Any) -> bool:
    return isinstance(x, Symbolic)


class OpTensor(Tensor):
    """The result of an op on symbolic arguments: ``fn(*args, **kwargs)`` replayed on values."""

    _kind = "op"

    def __init__(self, fn, treedef, leaves, salt, shape, dtype, name) -> None:
        super().__init__(shape, dtype, name)
        self._fn = fn
        self._treedef = treedef
        self._leaves = leaves
        self._salt = salt
        self._parents = tuple(leaf for leaf in leaves if _is_symbolic(leaf))
        self._has_placeholder = any(p._has_placeholder for p in self._parents)
        self._uses_learning_phase = any(p._uses_learning_phase for p in self._parents)

    @property
    def name(self) -> str:
        """A readable unique name: the op's name and the node's uid."""
        return f"{self._name or 'op'}_{self._uid}"

    def _inputs(self) -> Sequence[Symbolic]:
        return self._parents

    def _compute(self, ctx: Context, memo: dict) -> Any:
        values = [memo[leaf] if _is_symbolic(leaf) else leaf for leaf in self._leaves]
        return _call(self._fn, self._treedef, values, self._salt, ctx)


class ItemTensor(Tensor):
    """One output of an op that returns several arrays."""

    _kind = "item"

    def __init__(self, parent: Symbolic, index: int, shape, dtype) -> None:
        super().__init__(shape, dtype, f"{parent.name}/{index}")
        self._parent = parent
        self._index = index
        self._has_placeholder = parent._has_placeholder
        self._uses_learning_phase = parent._uses_learning_phase

    def _inputs(self) -> Sequence[Symbolic]:
        return (self._parent,)

    def _compute(self, ctx: Context, memo: dict) -> Any:
        return jax.tree_util.tree_leaves(memo[self._parent], is_leaf=is_bcoo)[self._index]


class MultiOutput(Tensor):
    """A node whose value is a pytree of arrays; users see its :class:`ItemTensor` outputs."""

    _kind = "multi"


class MultiOpTensor(OpTensor, MultiOutput):
    """An op returning a pytree of arrays."""


# ---------------------------------------------------------------------------------------------
# the interpreter


def topological_order(outputs: Sequence[Any], ctx: Context | None, memo: dict) -> list:
    """Returns the nodes to compute, dependencies first, skipping those already in ``memo``.

    Args:
        outputs: values to evaluate (non-symbolic entries are ignored).
        ctx: the context; ``None`` walks all inputs (static collection).
        memo: values already known.

    Returns:
        A list of symbolic values in evaluation order.
    """
    order: list = []
    visited: set = set()
    stack = [(o, False) for o in reversed(outputs) if _is_symbolic(o)]
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
    """
    memo = {} if memo is None else memo
    order = topological_order(outputs, ctx, memo)
    unfed = [n for n in order if isinstance(n, Placeholder)]
    if unfed:
        listing = ", ".join(f"{p.name!r} (shape {p.shape}, dtype {p.dtype})" for p in unfed)
        raise ValueError(
            f"placeholders not fed: {listing}; list them in the inputs of K.function "
            "and pass values for them"
        )
    with ctx:
        for node in order:
            if node in memo:  # filled in meanwhile by a gradient node's replay
                continue
            value = node._compute(ctx, memo)
            if perturb and node in perturb:
                value = value + perturb[node]
            memo[node] = value
    return [memo[o] if _is_symbolic(o) else o for o in outputs]


def evaluate_now(x: Any) -> Any:
    """Evaluates ``x`` in the active scope, or else eagerly against the store."""
    ctx = active_context()
    if ctx is None:
        ctx = Context()
    return evaluate([x], ctx)[0]


def _has_tracer(values: Sequence[Any]) -> bool:
    return any(isinstance(v, jax.core.Tracer) for v in jax.tree_util.tree_leaves(values))


def is_bcoo(x: Any) -> bool:
    """Whether ``x`` is a sparse (BCOO) array."""
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

        def on_arrays(*arrays):
            values = list(leaves)
            for i, a in zip(positions, arrays):
                values[i] = a
            a, k = jax.tree_util.tree_unflatten(treedef, values)
            return fn(*a, **k)

        arrays = [leaves[i] for i in positions]
        try:
            return sparse.sparsify(on_arrays)(*arrays)
        except NotImplementedError:
            return on_arrays(*[v.todense() if is_bcoo(v) else v for v in arrays])

    return run


def _call(fn, treedef, values, salt, ctx: Context | None) -> Any:
    args, kwargs = jax.tree_util.tree_unflatten(treedef, values)
    if salt is not None:
        kwargs = dict(kwargs, key=(ctx or Context()).key(salt))
    if not getattr(fn, "handles_sparse", False) and any(is_bcoo(v) for v in values):
        fn = _sparse_aware(fn)
    if _has_tracer(values) or salt is not None:
        return fn(*args, **kwargs)
    # Inputs known at trace time (shapes, constants): fold them now, so that shape arithmetic
    # such as K.shape(x)[0] * 2 stays a concrete number inside jax.jit.
    with jax.ensure_compile_time_eval():
        return fn(*args, **kwargs)


# ---------------------------------------------------------------------------------------------
# shape inference

# Sizes for unknown dimensions when symbolic shapes fail: highly composite, so that reshapes
# which split an unknown dimension still divide; dimensions that differ between them are unknown.
_SENTINELS = (2520, 27720)
_shape_cache: OrderedDict = OrderedDict()
_SHAPE_CACHE_SIZE = 4096


def clear_caches() -> None:
    """Empties the shape-inference cache."""
    _shape_cache.clear()


def _cache_key(fn, treedef, leaves) -> Any:
    parts = []
    for leaf in leaves:
        if _is_symbolic(leaf):
            if _maybe_static(leaf):
                return None  # its value may shape the output: no caching by shape alone
            parts.append(("S", leaf._shape, leaf._dtype))
        elif isinstance(leaf, (int, float, bool, str, type(None), type(Ellipsis), np.dtype)):
            parts.append((type(leaf), leaf))
        elif isinstance(leaf, type):
            parts.append(("T", leaf))
        else:
            return None
    return (fn, treedef, tuple(parts))


def _spec_shape(leaf: Symbolic, dims: Callable[[], Any]) -> tuple:
    return tuple(dims() if d is None else d for d in leaf._shape)


def _spec_for(leaf: Symbolic, dims: Callable[[], Any]) -> Any:
    """An abstract value for ``leaf``: an array spec, or (data, indices) specs when sparse."""
    shape = _spec_shape(leaf, dims)
    if not leaf._sparse:
        return jax.ShapeDtypeStruct(shape, jnp.dtype(leaf._dtype))
    nse = getattr(leaf, "_nse", 1)
    return (
        jax.ShapeDtypeStruct((nse,), jnp.dtype(leaf._dtype)),
        jax.ShapeDtypeStruct((nse, len(shape)), jnp.int32),
    )


_STATIC_WALK_LIMIT = 64


def _maybe_static(leaf: Symbolic) -> bool:
    """Whether ``leaf`` is a small integer tensor, which shape arithmetic may produce."""
    shape = leaf._shape
    return (
        shape is not None
        and len(shape) <= 1
        and None not in shape
        and np.issubdtype(np.dtype(leaf._dtype), np.integer)
    )


def _static_value(leaf: Symbolic, fill: int | None) -> Any:
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
        source = getattr(node, "_shape_of", None)
        if source is not None:
            if None in source._shape and fill is None:
                return None
            memo[node] = np.asarray([fill if d is None else d for d in source._shape], np.int32)
        elif type(node) is OpTensor and node._salt is None and len(seen) < _STATIC_WALK_LIMIT:
            stack.extend(node._inputs())
        else:
            return None
    return evaluate([leaf], Context(learning_phase=0), memo)[0]


def _eval_shape(fn, treedef, leaves, salt, dims: Callable[[], Any], fill: int | None) -> Any:
    values = list(leaves)
    sym_positions = []
    for i, leaf in enumerate(leaves):
        if _is_symbolic(leaf):
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
            return _call(fn, treedef, values, salt, ctx)

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


def infer_shapes(fn, treedef, leaves, salt) -> tuple[Any, list]:
    """Infers output structure, shapes (``None`` kept) and dtypes of an op on symbolic leaves.

    Returns:
        ``(out_treedef, [(shape, dtype), ...])`` with one entry per output array.

    Raises:
        Whatever the op raises for incompatible static shapes or arguments.
    """
    key = _cache_key(fn, treedef, leaves)
    if key is not None and key in _shape_cache:
        _shape_cache.move_to_end(key)
        return _shape_cache[key]
    try:
        (sym,) = export.symbolic_shape("b")
        out = _eval_shape(fn, treedef, leaves, salt, lambda: sym, None)
        result = (jax.tree_util.tree_structure(out, is_leaf=is_bcoo), _dims_from(out))
    except Exception:
        # Unknown dimensions that the op cannot reason about symbolically: run it twice with
        # two unlikely sizes; dimensions that differ between the runs are unknown.
        a, b = _SENTINELS
        try:
            out_a = _eval_shape(fn, treedef, leaves, salt, lambda: a, a)
            out_b = _eval_shape(fn, treedef, leaves, salt, lambda: b, b)
        except Exception:
            # Broadcasting against a known dimension: unknown sizes of 1 are the only guess
            # that fits; dimensions that come out as 1 stay unknown.
            out_a = _eval_shape(fn, treedef, leaves, salt, lambda: 1, 1)
            out_b = jax.tree_util.tree_map(
                lambda s: jax.ShapeDtypeStruct(
                    tuple(-1 if d == 1 else d for d in s.shape), s.dtype
                ),
                out_a,
            )
        result = (jax.tree_util.tree_structure(out_a, is_leaf=is_bcoo), _dims_from(out_a, out_b))
    if key is not None:
        _shape_cache[key] = result
        if len(_shape_cache) > _SHAPE_CACHE_SIZE:
            _shape_cache.popitem(last=False)
    return result


# ---------------------------------------------------------------------------------------------
# the op decorator


def _resolve_in_scope(leaves: list, scope: Context) -> list | None:
    """Replaces symbolic leaves that can be evaluated in ``scope``; None if some cannot."""
    if any(_is_symbolic(leaf) and leaf._has_placeholder for leaf in leaves):
        return None
    pending = [leaf for leaf in leaves if _is_symbolic(leaf)]
    values = dict(zip(pending, evaluate(pending, scope)))
    return [values[leaf] if _is_symbolic(leaf) else leaf for leaf in leaves]


def record(
    fn: Callable, args: tuple, kwargs: dict, salt: int | None = None, name: str | None = None
) -> Any:
    """Applies ``fn`` now if no argument is symbolic, else records it as a graph node.

    Inside a state scope, variables and placeholder-free tensors resolve to their values first,
    so the op runs at once.

    Args:
        fn: the pure body.
        args: positional arguments (pytrees whose leaves may be symbolic).
        kwargs: keyword arguments (likewise).
        salt: for random ops, the salt of their key (the seed, or a fresh uid).
        name: a name for the node.

    Returns:
        The value, or a :class:`Tensor` (or a pytree of them for ops with several outputs).
    """
    # Sparse arrays stay whole leaves, so that _call sees them without walking the tree again.
    leaves, treedef = jax.tree_util.tree_flatten(
        (args, kwargs), is_leaf=lambda v: _is_symbolic(v) or is_bcoo(v)
    )
    for mapping in reversed(_thread.substitutions):
        leaves = [mapping.get(leaf, leaf) if _is_symbolic(leaf) else leaf for leaf in leaves]
    ctx = active_context()
    if any(_is_symbolic(leaf) for leaf in leaves):
        scope = active_scope()
        resolved = _resolve_in_scope(leaves, scope) if scope is not None else None
        if resolved is None:
            return _record_node(fn, treedef, leaves, salt, name)
        leaves = resolved
    elif salt is not None and ctx is None:
        # A random op outside any context is a graph node, as in Keras 2: it draws fresh
        # numbers each time it runs (each K.eval, each call of a compiled function).
        if get_opaque_trace_state() != _TOP_LEVEL_TRACE:
            raise ValueError(
                f"random op {name!r} called inside jax.jit/vmap/grad without a key: wrap the "
                "code in `with K.state_scope(values, rng=key):` and pass a fresh key per call"
            )
        return _record_node(fn, treedef, leaves, salt, name)
    return _call(fn, treedef, leaves, salt, ctx)


def _record_node(fn, treedef, leaves, salt, name) -> Any:
    out_tree, outs = infer_shapes(fn, treedef, leaves, salt)
    if out_tree.num_leaves == 1 and jax.tree_util.treedef_is_leaf(out_tree):
        shape, dtype, is_sparse = outs[0]
        node = OpTensor(fn, treedef, leaves, salt, shape, dtype, name)
        node._sparse = is_sparse
        return node
    node = MultiOpTensor(fn, treedef, leaves, salt, None, "multi", name)
    items = []
    for i, (shape, dtype, is_sparse) in enumerate(outs):
        items.append(ItemTensor(node, i, shape, dtype))
        items[-1]._sparse = is_sparse
    return jax.tree_util.tree_unflatten(out_tree, items)


def op(fn: Callable | None = None, *, name: str | None = None, random: bool = False):
    """Makes a pure ``jax.numpy`` function a jaxkeras op (the one op decorator).

    The op runs at once on concrete arrays (and on tracers, inside a user's ``jax.jit``); with a
    symbolic argument anywhere in its arguments (also inside lists) it records a graph node
    whose shape and dtype are inferred with ``jax.eval_shape``.

    Args:
        fn: the pure body.
        name: the node name prefix (default: the function's name).
        random: the body takes a ``key=`` keyword argument; its salt is the op's ``seed``
            argument when given, else a fresh uid per node.

    Returns:
        The wrapped op; ``op.pure`` is the body.
    """
    if fn is None:
        return functools.partial(op, name=name, random=random)
    label = name or getattr(fn, "__name__", "op")
    signature = inspect.signature(fn) if random else None

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        salt = None
        if random:
            seed = signature.bind(*args, **kwargs).arguments.get("seed")
            salt = next_salt() if seed is None else int(seed)
        return record(fn, args, kwargs, salt, label)

    wrapper.pure = fn
    wrapper.op_name = label
    return wrapper


# operators of Symbolic -------------------------------------------------------------------------

_add = op(lambda a, b: jnp.add(a, b), name="add")
_sub = op(lambda a, b: jnp.subtract(a, b), name="sub")
_mul = op(lambda a, b: jnp.multiply(a, b), name="mul")
_div = op(lambda a, b: jnp.true_divide(a, b), name="truediv")
_floordiv = op(lambda a, b: jnp.floor_divide(a, b), name="floordiv")
_mod = op(lambda a, b: jnp.mod(a, b), name="mod")
_pow = op(lambda a, b: jnp.power(a, b), name="pow")
_matmul = op(lambda a, b: jnp.matmul(a, b), name="matmul")
_neg = op(lambda a: jnp.negative(a), name="neg")
_abs = op(lambda a: jnp.abs(a), name="abs")
_invert = op(lambda a: jnp.invert(a), name="invert")
_and = op(lambda a, b: jnp.logical_and(a, b), name="and")
_or = op(lambda a, b: jnp.logical_or(a, b), name="or")
_xor = op(lambda a, b: jnp.logical_xor(a, b), name="xor")
_lt = op(lambda a, b: jnp.less(a, b), name="less")
_le = op(lambda a, b: jnp.less_equal(a, b), name="less_equal")
_gt = op(lambda a, b: jnp.greater(a, b), name="greater")
_ge = op(lambda a, b: jnp.greater_equal(a, b), name="greater_equal")
_getitem = op(_getitem_body, name="getitem")
