"""Symbolic values and the one op decorator that records them.

:class:`Symbolic` is the array-like surface of every symbolic value (operators, indexing,
``__array__``); its operator methods are generated from one table. The node kinds ops make
are here too (:class:`OpTensor`, :class:`ItemTensor`), with the graph inputs
(:class:`Placeholder`, :class:`VariableNode`). :func:`op` turns a pure ``jax.numpy`` function
into an op: called on concrete values it runs at once; with a symbolic argument it records a
node, built whole by :func:`record` (shape, dtype and flags are constructor arguments).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxkeras._engine.graph.base import ARRAY_TYPES, Node, Subgraph, is_int
from jaxkeras._engine.graph.context import (
    TOP_LEVEL,
    TRACE,
    Context,
    active_context,
    active_scope,
    at_top_level,
)
from jaxkeras._engine.graph.infer import ShapeRule, elementwise_rule, infer_shapes
from jaxkeras._engine.graph.interpret import evaluate, evaluate_now, topological_order
from jaxkeras._engine.graph.runtime import NODE_IDS, THREAD
from jaxkeras._engine.graph.sparse import apply_op, is_bcoo
from jaxkeras._xla import siblings
from jaxkeras._xla.siblings import SplitRule

# ---------------------------------------------------------------------------------------------
# indexing with symbolic bounds


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


def _getitem_body(x: Any, index: tuple) -> Any:
    return x[tuple(_from_index_spec(i) for i in index)]


def _getitem_rule(x: Any, index: tuple) -> tuple[tuple, str] | None:
    """The shape rule of indexing: a known shape indexed by ints, int slices, ``None`` and
    ``...`` has NumPy's result shape (Keras slices its gate kernels so, one trace each
    otherwise). ``None`` (the op is run) for anything else, and where NumPy would reject an
    out-of-range int that JAX clamps."""
    if not isinstance(x, Node) or x._shape is None or None in x._shape:
        return None
    items = []
    for item in index:
        if isinstance(item, SliceSpec):
            if not all(b is None or is_int(b) for b in item):
                return None
            items.append(slice(*item))
        elif item is None or item is Ellipsis or is_int(item):
            items.append(item)
        else:
            return None
    try:
        return np.broadcast_to(np.zeros((), np.int8), x._shape)[tuple(items)].shape, x._dtype
    except (IndexError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------
# symbolic values


class Symbolic(Node):
    """Base of every symbolic value (tensors and variables): operators, indexing, conversion.

    Arithmetic, bitwise-logical and ordering operators record ops (generated from
    ``_OPERATORS`` below); ``==`` and ``!=`` compare identity (see :class:`Node`); use
    ``K.equal`` / ``K.not_equal`` for element-wise comparison.
    """

    __array_priority__ = 100  # so that numpy scalars defer to our operators

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

    def __pos__(self) -> Symbolic:
        return self


class Tensor(Symbolic):
    """A node of a symbolic graph: it knows its inputs, static shape and dtype, not its value.

    Attributes may be set freely (Keras stores ``_keras_shape``, ``_keras_history``,
    ``_uses_learning_phase``, ...). As in the TensorFlow backend, placeholders and variables
    carry ``_keras_shape`` and ``_uses_learning_phase = False`` from the start, results of
    ``in_train_phase``/``rnn`` that depend on the phase carry ``_uses_learning_phase = True``,
    and other tensors have neither attribute until someone sets it (Keras tests ``hasattr``).

    Args:
        shape: the static shape, ``None`` for unknown dimensions.
        dtype: the dtype name.
        name: a name (default: the node kind and a uid).
        sparse: whether its values are sparse.
        uses_learning_phase: sets the Keras attribute ``_uses_learning_phase``.
    """

    _kind = "tensor"

    def __init__(
        self,
        shape: tuple | None,
        dtype: str,
        name: str | None = None,
        sparse: bool = False,
        uses_learning_phase: bool = False,
    ) -> None:
        self._shape = None if shape is None else tuple(shape)
        self._dtype = dtype
        self._uid = NODE_IDS.next()
        self._name = name
        if sparse:
            self._sparse = True
        if uses_learning_phase:
            self._uses_learning_phase = True

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
    _is_input = True

    def __init__(
        self, shape: tuple | None, dtype: str, name: str | None = None, sparse: bool = False
    ) -> None:
        super().__init__(shape, dtype, name, sparse=sparse)
        self._keras_shape = self._shape
        self._uses_learning_phase = False


class VariableNode(Symbolic):
    """The graph side of a variable: a leaf whose value the context reads by name.

    Args:
        name: its unique name (the key of its value in the store and in state dicts).
        shape: its shape.
        dtype: its dtype name.
        sparse: whether its value is sparse.
        nse: for a sparse value, its number of stored entries.
    """

    _kind = "variable"

    def __init__(
        self, name: str, shape: tuple, dtype: str, sparse: bool = False, nse: int = 1
    ) -> None:
        self.name = name
        self._shape = tuple(shape)
        self._dtype = dtype
        self._keras_shape = self._shape  # as the TensorFlow backend's variables
        self._uses_learning_phase = False
        if sparse:
            self._sparse = True
            self._nse = nse

    def _compute(self, ctx: Context, memo: dict) -> Any:
        return ctx.read(self)


class _NameScopes:
    """Where a recorded op reads the ``K.name_scope`` active when it is made (the scope stack
    lives with the variables' names, above the graph layer, which installs its reader with
    :func:`install_name_scopes`).

    Attributes:
        prefix: returns the active scopes as a name prefix, ``"block/dense_1/"`` (``""``
            outside any scope).
    """

    def __init__(self) -> None:
        self.prefix: Callable[[], str] = str  # str() is "": no scopes until one is installed


NAME_SCOPES = _NameScopes()


def install_name_scopes(prefix: Callable[[], str]) -> None:
    """Makes ``prefix`` what recorded ops call for the name scope they are made in.

    Args:
        prefix: returns the active scopes as a name prefix ending in ``/`` (``""`` outside
            any scope).
    """
    NAME_SCOPES.prefix = prefix


class OpTensor(Tensor):
    """The result of an op on symbolic arguments: ``fn(*args, **kwargs)`` replayed on values.

    Its ops run in a ``jax.named_scope`` of its label, the active ``K.name_scope`` and its op
    name (``dense_1/dot``), so compiled code (HLO ``op_name`` metadata, profiles) names them.

    Args:
        fn: the op body.
        treedef: the structure of ``(args, kwargs)``.
        leaves: its leaves, symbolic or concrete.
        seed: for random ops, their seed; else ``None``.
        shape: the inferred static shape.
        dtype: the inferred dtype name.
        name: the op name.
        sparse: whether the result is sparse.
        shape_of: for ``K.shape(x)``, the node ``x``.
        uses_learning_phase: sets the Keras attribute ``_uses_learning_phase``.
    """

    _kind = "op"

    def __init__(
        self,
        fn: Callable,
        treedef: Any,
        leaves: list,
        seed: int | None,
        shape: tuple | None,
        dtype: str,
        name: str | None,
        sparse: bool = False,
        shape_of: Node | None = None,
        uses_learning_phase: bool = False,
    ) -> None:
        super().__init__(shape, dtype, name, sparse, uses_learning_phase)
        self._fn = fn
        self._treedef = treedef
        self._leaves = leaves
        self._seed = seed
        self._parents = tuple(leaf for leaf in leaves if isinstance(leaf, Node))
        self._has_placeholder = any(p._has_placeholder for p in self._parents)
        self._folds = seed is None
        self._label = f"{NAME_SCOPES.prefix()}{name or 'op'}"
        if shape_of is not None:
            self._shape_of = shape_of

    @property
    def name(self) -> str:
        """A readable unique name: the op's name and the node's uid."""
        return f"{self._name or 'op'}_{self._uid}"

    def _inputs(self) -> Sequence[Node]:
        return self._parents

    def _compute(self, ctx: Context, memo: dict) -> Any:
        values = [memo[leaf] if isinstance(leaf, Node) else leaf for leaf in self._leaves]
        key = None if self._seed is None else ctx.key(self._seed, self)
        return apply_op(self._fn, self._treedef, values, key)


class MultiOpTensor(OpTensor):
    """An op returning a pytree of arrays; users see its :class:`ItemTensor` outputs."""

    _kind = "multi"

    def __init__(self, fn, treedef, leaves, seed, name) -> None:
        super().__init__(fn, treedef, leaves, seed, None, "multi", name)
        self._folds = False


class ItemTensor(Tensor):
    """One output of a node whose value is a pytree of arrays.

    Args:
        parent: the node.
        index: the position of this output among the parent's flattened outputs.
        shape: its static shape.
        dtype: its dtype name.
        sparse: whether it is sparse.
        uses_learning_phase: sets the Keras attribute ``_uses_learning_phase``.
    """

    _kind = "item"

    def __init__(
        self,
        parent: Node,
        index: int,
        shape: tuple | None,
        dtype: str,
        sparse: bool = False,
        uses_learning_phase: bool = False,
    ) -> None:
        super().__init__(shape, dtype, f"{parent.name}/{index}", sparse, uses_learning_phase)
        self._parent = parent
        self._index = index
        self._has_placeholder = parent._has_placeholder

    def _inputs(self) -> Sequence[Node]:
        return (self._parent,)

    def _compute(self, ctx: Context, memo: dict) -> Any:
        return jax.tree_util.tree_leaves(memo[self._parent], is_leaf=is_bcoo)[self._index]


def random_nodes(outputs: Sequence[Any]) -> list[OpTensor]:
    """Returns the random nodes that evaluating ``outputs`` may run, loop bodies included.

    Args:
        outputs: symbolic values (others are ignored).

    Returns:
        The nodes with a seed, each once, in a stable order.
    """
    found: dict = {}
    pending = [list(outputs)]
    while pending:
        for node in topological_order(pending.pop(), None, {}):
            if isinstance(node, OpTensor):
                if node._seed is not None:
                    found[node] = None
                pending.extend(
                    list(leaf.outputs) for leaf in node._leaves if isinstance(leaf, Subgraph)
                )
    return list(found)


# ---------------------------------------------------------------------------------------------
# recording


def _resolve_in_scope(leaves: list, scope: Context) -> list | None:
    """Replaces symbolic leaves that can be evaluated in ``scope``; None if some cannot."""
    if any(isinstance(leaf, Node) and leaf._has_placeholder for leaf in leaves):
        return None
    pending = [leaf for leaf in leaves if isinstance(leaf, Node)]
    values = dict(zip(pending, evaluate(pending, scope)))
    return [values[leaf] if isinstance(leaf, Node) else leaf for leaf in leaves]


@contextlib.contextmanager
def substituting(mapping: dict) -> Iterator[None]:
    """A context in which ops recorded in this thread read ``mapping[leaf]`` for ``leaf``.

    Args:
        mapping: node -> the value to read instead (``K.control_dependencies``).
    """
    THREAD.substitutions.append(mapping)
    try:
        yield
    finally:
        THREAD.substitutions.pop()


def _is_leaf(value: Any) -> bool:
    return isinstance(value, Node) or is_bcoo(value)


def record(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    *,
    seed: int | None = None,
    name: str | None = None,
    shape_of: Node | None = None,
    uses_learning_phase: bool = False,
    shape_rule: ShapeRule | None = None,
) -> Any:
    """Applies ``fn`` now if no argument is symbolic, else records it as a graph node.

    Inside a state scope, variables and placeholder-free tensors resolve to their values first,
    so the op runs at once. Ops recorded inside ``K.control_dependencies`` read the updated
    values of the variables it names.

    Args:
        fn: the pure body.
        args: positional arguments (pytrees whose leaves may be symbolic).
        kwargs: keyword arguments (likewise).
        seed: for random ops, their seed (the op takes a ``key=``); else ``None``.
        name: a name for the node.
        shape_of: for ``K.shape(x)``, the tensor ``x`` (lets shape inference fold it).
        uses_learning_phase: mark the outputs with Keras's ``_uses_learning_phase``.
        shape_rule: the op's own output shape rule (see :func:`op`).

    Returns:
        The value, or a :class:`Tensor` (or a pytree of them for ops with several outputs).

    Raises:
        ValueError: for a random op called inside ``jax.jit``/``vmap``/``grad`` outside a state
            scope (it would have no key).
    """
    # Sparse arrays stay whole leaves, so that apply_op sees them without walking the tree.
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs), is_leaf=_is_leaf)
    for mapping in reversed(THREAD.substitutions):
        leaves = [mapping.get(leaf, leaf) if isinstance(leaf, Node) else leaf for leaf in leaves]
    ctx = active_context()
    if any(isinstance(leaf, Node) for leaf in leaves):
        scope = active_scope()
        resolved = _resolve_in_scope(leaves, scope) if scope is not None else None
        if resolved is None:
            return _make_node(
                fn, treedef, leaves, seed, name, shape_of, uses_learning_phase, shape_rule
            )
        leaves = resolved
    elif seed is not None and ctx is None:
        # A random op outside any context is a graph node, as in Keras 2: it draws fresh
        # numbers each time it runs (each K.eval, each call of a compiled function).
        if not at_top_level():
            raise ValueError(
                f"random op {name!r} called inside jax.jit/vmap/grad without a key: wrap the "
                "code in `with K.state_scope(values, rng=key):` and pass a fresh key per call"
            )
        return _make_node(
            fn, treedef, leaves, seed, name, shape_of, uses_learning_phase, shape_rule
        )
    return apply_op(fn, treedef, leaves, None if seed is None else ctx.key(seed))


def _make_node(fn, treedef, leaves, seed, name, shape_of, uses_learning_phase, shape_rule) -> Any:
    out_tree, outs = infer_shapes(fn, treedef, leaves, seed, shape_rule)
    if out_tree.num_leaves == 1 and jax.tree_util.treedef_is_leaf(out_tree):
        shape, dtype, sparse = outs[0]
        return OpTensor(
            fn, treedef, leaves, seed, shape, dtype, name, sparse, shape_of, uses_learning_phase
        )
    node = MultiOpTensor(fn, treedef, leaves, seed, name)
    items = [
        ItemTensor(node, i, shape, dtype, sparse, uses_learning_phase)
        for i, (shape, dtype, sparse) in enumerate(outs)
    ]
    return jax.tree_util.tree_unflatten(out_tree, items)


_CONCRETE_TYPES = ARRAY_TYPES | {
    int,
    float,
    bool,
    complex,
    str,
    type(None),
    np.float16,
    np.float32,
    np.float64,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint32,
    np.bool_,
}


_SEQUENCE_TYPES = frozenset({tuple, list})


def _concrete(values: Any) -> bool:
    """Whether ``values`` are plainly concrete: arrays (not tracers), scalars, and tuples or
    lists of them. A quick, shallow test for the op decorator's fast path."""
    for value in values:
        kind = type(value)
        if kind not in _CONCRETE_TYPES and not (kind in _SEQUENCE_TYPES and _concrete(value)):
            return False
    return True


def draw_seed() -> int:
    """Returns a seed for a random op built without one, from NumPy's global random state."""
    return int(np.random.randint(10_000_000))


def op(
    fn: Callable | None = None,
    *,
    name: str | None = None,
    random: bool = False,
    shape_rule: ShapeRule | None = None,
    elementwise: bool = False,
    eager: Callable | None = None,
    jit: tuple[str, ...] | None = None,
    splits: SplitRule | None = None,
) -> Callable:
    """Makes a pure ``jax.numpy`` function a jaxkeras op (the one op decorator).

    The op runs at once on concrete arrays (and on tracers, inside a user's ``jax.jit``); with a
    symbolic argument anywhere in its arguments (also inside lists) it records a graph node
    whose shape and dtype are inferred with ``jax.eval_shape``.

    Args:
        fn: the pure body.
        name: the node name prefix (default: the function's name).
        random: the body takes a ``key=`` keyword argument, derived from the op's ``seed``
            argument; without one, the seed is drawn from NumPy's global random state when the
            op is called (as both Keras 2 backends did, so ``np.random.seed`` makes a program
            reproducible).
        shape_rule: for an op with one dense output whose shape the stand-in sizes of shape
            inference cannot tell (one stand-in for all unknown dimensions cancels out, or
            fails), its own rule: called with the op's arguments (symbolic ones as they are),
            it returns ``(shape, dtype)``, ``None`` for unknown dimensions. It is the authority
            for dense arguments unless they hold sizes computed from unknown dimensions and a
            run with one symbol per unknown dimension proves the shape.
        elementwise: the body is element-wise (NumPy broadcasting of its array arguments;
            its other arguments are scalars, dtypes or strings): its shapes are then inferred
            by broadcasting, without running it (:func:`elementwise_rule`).
        splits: how the op splits along a kernel's axis (see :mod:`jaxkeras._xla.siblings`):
            called with the op's arguments, ``(the kernel's position, kernel axis, output
            axis)`` or ``None``; graph walks then run sibling nodes that apply several
            kernels to the same input as one, on the kernels concatenated.
        eager: what to call instead of ``fn`` on plainly concrete arguments, where it computes
            the same with fewer Python frames (the ``jax.numpy`` function ``fn`` only calls);
            not for random ops.
        jit: for a body of several ``jax.numpy`` calls, the names of its static arguments
            (axes, flags, settings; hashable): on plainly concrete arguments the body then runs
            as one compiled computation (``jax.jit``) instead of dispatching one per call it
            makes. Its other arguments are traced, so new values of them (a clipping bound,
            a number) reuse the compiled body. Not with ``eager``, nor for random ops.

    Returns:
        The wrapped op; ``op.pure`` is the body, ``op.concrete`` what runs on plainly
        concrete arguments (``None`` for a random op).

    Raises:
        ValueError: for ``eager`` with ``random=True`` (a random op always records its key),
            ``jit`` with ``eager`` or ``random=True``, or ``shape_rule`` with
            ``elementwise=True``.

    Example:
        >>> double = K.op(lambda x: x * 2, name="double")
        >>> double(np.arange(3.0))  # concrete: runs at once
        array([0., 2., 4.])
        >>> K.eval(double(K.variable([1.0, 2.0])))  # symbolic: records a node
        array([2., 4.], dtype=float32)
    """
    if random and eager is not None:
        raise ValueError(f"op: eager={eager!r} cannot be given for a random op (random=True)")
    if jit is not None and (random or eager is not None):
        raise ValueError(f"op: jit={jit!r} cannot be given with eager= or for a random op")
    if elementwise and shape_rule is not None:
        raise ValueError(f"op: shape_rule={shape_rule!r} cannot be given with elementwise=True")
    if fn is None:
        return functools.partial(
            op,
            name=name,
            random=random,
            shape_rule=shape_rule,
            elementwise=elementwise,
            eager=eager,
            jit=jit,
            splits=splits,
        )
    if splits is not None:
        siblings.SPLITS[fn] = splits
    if elementwise:
        shape_rule = elementwise_rule(fn)
    label = name or getattr(fn, "__name__", "op")
    run = None
    if random:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            seed = signature.bind(*args, **kwargs).arguments.get("seed")
            seed = draw_seed() if seed is None else int(seed)
            return record(fn, args, kwargs, seed=seed, name=label, shape_rule=shape_rule)

    else:
        run = fn if eager is None else eager
        if jit is not None:
            run = jax.jit(fn, static_argnames=jit)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            # The fast path, as record would run it: plainly concrete arguments outside any
            # trace run the body at once. One type test per argument (_concrete, inlined: a
            # call costs as much as the test), nothing flattened.
            for value in args:
                kind = type(value)
                if kind not in _CONCRETE_TYPES and not (
                    kind in _SEQUENCE_TYPES and _concrete(value)
                ):
                    break
            else:
                if TRACE.value is TOP_LEVEL:  # at_top_level(), inlined
                    if not kwargs:
                        return run(*args)
                    for value in kwargs.values():
                        kind = type(value)
                        if kind not in _CONCRETE_TYPES and not (
                            kind in _SEQUENCE_TYPES and _concrete(value)
                        ):
                            break
                    else:
                        return run(*args, **kwargs)
            return record(fn, args, kwargs, name=label, shape_rule=shape_rule)

    wrapper.pure = fn
    wrapper.concrete = run
    wrapper.op_name = label
    return wrapper


_getitem = op(_getitem_body, name="getitem", shape_rule=_getitem_rule)


# ---------------------------------------------------------------------------------------------
# operators of Symbolic

# (method name, jax.numpy function, op name, has a reflected form); all but matmul element-wise
_OPERATORS = [
    ("add", jnp.add, "add", True),
    ("sub", jnp.subtract, "sub", True),
    ("mul", jnp.multiply, "mul", True),
    ("truediv", jnp.true_divide, "truediv", True),
    ("floordiv", jnp.floor_divide, "floordiv", True),
    ("mod", jnp.mod, "mod", True),
    ("pow", jnp.power, "pow", True),
    ("matmul", jnp.matmul, "matmul", True),
    ("and", jnp.logical_and, "and", True),
    ("or", jnp.logical_or, "or", True),
    ("xor", jnp.logical_xor, "xor", True),
    ("lt", jnp.less, "less", False),
    ("le", jnp.less_equal, "less_equal", False),
    ("gt", jnp.greater, "greater", False),
    ("ge", jnp.greater_equal, "greater_equal", False),
    ("neg", jnp.negative, "neg", False),
    ("abs", jnp.abs, "abs", False),
    ("invert", jnp.invert, "invert", False),
]


def _operand(value: Any, like: Symbolic) -> Any:
    """A Python list or tuple operand as an array of ``like``'s dtype where that converts
    within its kind, as TF converts list operands (a Keras Lambda layer's arguments come back
    from JSON as lists); other operands unchanged."""
    if not isinstance(value, (list, tuple)):
        return value
    array = np.asarray(value)
    return (
        array.astype(like._dtype) if np.can_cast(array.dtype, like._dtype, "same_kind") else array
    )


def _operator_methods(fn: Callable, label: str) -> tuple[Callable, Callable]:
    recorded = op(fn, name=label, elementwise=fn is not jnp.matmul)

    def method(self, *other):
        return recorded(self, *(_operand(o, self) for o in other))

    def reflected(self, other):
        return recorded(_operand(other, self), self)

    return method, reflected


for _method, _fn, _label, _reflects in _OPERATORS:
    _forward, _backward = _operator_methods(_fn, _label)
    setattr(Symbolic, f"__{_method}__", _forward)
    if _reflects:
        setattr(Symbolic, f"__r{_method}__", _backward)
