"""The graph protocol every symbolic value implements: static shape and dtype, inputs, compute.

:class:`Node` is what the interpreter and shape inference see; the array-like surface users
see (operators, indexing, conversion) is added by :class:`jaxkeras._engine.graph.nodes.Symbolic`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from jaxlib import xla_client

ARRAY_TYPE = xla_client.ArrayImpl
"""``jax.Array``'s concrete type, named without starting a JAX backend."""

ARRAY_TYPES = frozenset({ARRAY_TYPE, np.ndarray})
"""Array types whose ``shape`` is already a tuple of ints, for type tests on hot paths."""


class Node:
    """A value of a symbolic graph: static shape and dtype, and how to compute it.

    ``==`` and ``!=`` compare identity, as Keras-2 graph tensors did (so nodes can be kept in
    lists, sets and dicts).

    Class attributes, overridden by node kinds or set once by their constructors:
        _sparse: whether its values are sparse (``jax.experimental.sparse.BCOO``).
        _has_placeholder: whether evaluating it needs a feed.
        _is_input: whether it is a graph input that must be fed (a placeholder).
        _shape_of: for ``K.shape(x)``, the node ``x`` whose static shape it is (shape
            inference folds ``K.shape(x)[0] * 2`` and the like).
        _folds: whether it is a deterministic op whose value shape inference may compute
            when all its inputs are static.
        _nse: for sparse values, the number of stored entries shape inference assumes.
    """

    _shape: tuple | None = None
    _dtype: str = "float32"
    _sparse = False
    _has_placeholder = False
    _is_input = False
    _shape_of: Node | None = None
    _folds = False
    _nse = 1

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

    # the graph protocol, overridden by node kinds

    def _inputs(self) -> Sequence[Node]:
        """All symbolic values this one depends on directly (for graph walks)."""
        return ()

    def _deps(self, ctx: Any) -> Sequence[Node]:
        """The dependencies actually needed to evaluate in ``ctx`` (default: all inputs)."""
        return self._inputs()

    def _compute(self, ctx: Any, memo: dict) -> Any:
        """Computes this value; every dependency of ``_deps(ctx)`` is in ``memo``."""
        raise NotImplementedError


class Subgraph:
    """A graph traced once and run inside an op's body (a loop's step), passed to the op as an
    argument; graph walks that collect random nodes look inside it.

    Attributes:
        outputs: the graph's output nodes.
    """

    outputs: Sequence[Node] = ()


def is_int(value: Any) -> bool:
    """Returns whether ``value`` is a Python or NumPy integer (bools excluded)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def static_shape(x: Any) -> tuple | None:
    """Returns the static shape of a symbolic value or array (``None`` for unknown dimensions).

    Args:
        x: a symbolic value, an array or a Python scalar.

    Returns:
        A tuple (``None`` when even the rank is unknown).
    """
    if type(x) in ARRAY_TYPES:  # the common eager case, without NumPy's dispatch
        return x.shape
    if isinstance(x, Node):
        return x._shape
    return tuple(np.shape(x))


def is_node(x: Any) -> bool:
    """Returns whether ``x`` is a symbolic value (a tensor or a variable)."""
    return isinstance(x, Node)
