"""Placeholders and what can be asked of any value: shape, rank, dtype, kind, sparsity."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse

from jaxkeras import state
from jaxkeras._engine import graph
from jaxkeras._engine.graph import Placeholder, Symbolic, dtype_of, op
from jaxkeras.checks import check_dtype
from jaxkeras.state import Variable


def backend() -> str:
    """Returns the name of this backend.

    Returns:
        ``'jax'``.
    """
    return "jax"


def placeholder(
    shape: tuple | None = None,
    ndim: int | None = None,
    dtype: Any = None,
    sparse: bool = False,
    name: str | None = None,
) -> Placeholder:
    """Creates a graph input, fed when a :func:`function` is called.

    Args:
        shape: a tuple with ``None`` for dimensions of unknown size (e.g. the batch).
        ndim: the rank, when ``shape`` is not given (all dimensions unknown).
        dtype: its dtype; default :func:`floatx`.
        sparse: whether it is fed sparse values (SciPy sparse or BCOO).
        name: its name (prefixed by active name scopes).

    Returns:
        A placeholder tensor.

    Example:
        >>> x = K.placeholder(shape=(None, 4, 5))
        >>> K.int_shape(x)
        (None, 4, 5)
    """
    if shape is None:
        if ndim is None:
            raise ValueError("placeholder: give shape (e.g. (None, 3)) or ndim")
        if not isinstance(ndim, int) or ndim < 0:
            raise ValueError(f"placeholder: ndim must be a non-negative int, got {ndim!r}")
        shape = (None,) * ndim
    if isinstance(shape, int):
        shape = (shape,)
    try:
        shape = tuple(None if d is None else int(d) for d in shape)
    except (TypeError, ValueError):
        raise ValueError(f"placeholder: shape must hold ints or None, got {shape!r}") from None
    if any(d is not None and d < 0 for d in shape):
        raise ValueError(f"placeholder: shape dimensions must be >= 0, got {shape!r}")
    if ndim is not None and ndim != len(shape):
        raise ValueError(f"placeholder: ndim={ndim} disagrees with shape {shape}")
    dtype = check_dtype("placeholder", dtype)
    label = state.scoped_name(name) if name else None
    return Placeholder(shape, dtype, label, sparse=bool(sparse))


def _shape_body(x: Any) -> np.ndarray:
    return np.asarray(x.shape, dtype=np.int32)


def _shape_rule(x: Any) -> tuple | None:
    """``K.shape``'s output: one int32 entry per dimension, known from the rank alone (shape
    inference would otherwise run the body on a symbolic dimension, which NumPy refuses)."""
    shape = graph.static_shape(x)
    return None if shape is None else ((len(shape),), "int32")


def shape(x: Any) -> Any:
    """Returns the shape of a tensor as an int32 tensor; its elements index: ``shape(x)[0]``.

    Inside compiled functions the values are known when tracing, so they may be used in
    ``reshape`` and friends.

    Args:
        x: a tensor, variable or array.

    Returns:
        A 1-D int32 tensor (an array for concrete ``x``).
    """
    # shape_of lets shape inference compute K.shape(x)[0] * 2 and the like
    return graph.record(_shape_body, (x,), {}, name="shape", shape_of=x, shape_rule=_shape_rule)


def int_shape(x: Any) -> tuple | None:
    """Returns the static shape as a tuple of ints, ``None`` for unknown dimensions.

    Args:
        x: a tensor, variable or array.

    Returns:
        A tuple.
    """
    return graph.static_shape(x)


def ndim(x: Any) -> int:
    """Returns the rank of a tensor, variable or array.

    Args:
        x: a tensor, variable or array.

    Returns:
        An int.
    """
    return len(int_shape(x))


def dtype(x: Any) -> str:
    """Returns the dtype of a tensor, variable or array, as a string.

    Args:
        x: a tensor, variable or array.

    Returns:
        E.g. ``'float32'``.
    """
    return dtype_of(x)


def is_tensor(x: Any) -> bool:
    """Returns whether ``x`` is a jaxkeras tensor or variable (not a plain array).

    Args:
        x: anything.

    Returns:
        A bool.
    """
    return isinstance(x, Symbolic)


def is_variable(x: Any) -> bool:
    """Returns whether ``x`` is a variable (tensors derived from one are not).

    Args:
        x: anything.

    Returns:
        A bool.
    """
    return isinstance(x, Variable)


def is_placeholder(x: Any) -> bool:
    """Returns whether ``x`` is a placeholder.

    Args:
        x: anything.

    Returns:
        A bool.
    """
    return isinstance(x, Placeholder)


def is_keras_tensor(x: Any) -> bool:
    """Returns whether ``x`` is a Keras tensor: a symbolic value made by a Keras layer.

    Args:
        x: a tensor or variable.

    Returns:
        A bool: whether it carries ``_keras_history``.

    Raises:
        ValueError: if ``x`` is not a tensor or variable (arrays are not Keras tensors).
    """
    if not isinstance(x, Symbolic):
        raise ValueError(
            f"is_keras_tensor: expected a symbolic tensor or variable, got {type(x).__name__} {x!r}"
        )
    return hasattr(x, "_keras_history")


def is_sparse(x: Any) -> bool:
    """Returns whether ``x`` is sparse (a sparse placeholder or a BCOO array).

    Args:
        x: anything.

    Returns:
        A bool.
    """
    return bool(getattr(x, "_sparse", False)) or isinstance(x, sparse.BCOO)


def _densify_body(x: Any) -> Any:
    return x.todense() if hasattr(x, "todense") else jnp.asarray(x)


_densify_body.handles_sparse = True
_densify = op(_densify_body, name="to_dense")


def to_dense(x: Any) -> Any:
    """Converts a sparse value to a dense one (dense values pass through).

    Args:
        x: a sparse or dense tensor.

    Returns:
        A dense tensor.
    """
    return _densify(x) if is_sparse(x) else x


def constant(
    value: Any, dtype: Any = None, shape: tuple | None = None, name: str | None = None
) -> jax.Array:
    """Creates a constant array.

    Args:
        value: a scalar, list or array.
        dtype: its dtype; default :func:`floatx`.
        shape: when given, a scalar ``value`` is broadcast to it (an array must have that many
            elements and is reshaped).
        name: ignored (constants are plain arrays).

    Returns:
        A ``jax.Array``.
    """
    dtype = check_dtype("constant", dtype)
    # what jnp.asarray does with a NumPy value, less its eager no-op conversion (a compile)
    array = jax.device_put(
        np.asarray(np.asarray(value), dtype=jax.dtypes.canonicalize_dtype(dtype))
    )
    if shape is None:
        return array
    shape = tuple(int(d) for d in shape)
    if array.size == 1:  # filled by NumPy: jnp.full would compile once per shape
        return jax.device_put(np.full(shape, np.asarray(array).reshape(()), dtype=array.dtype))
    if array.size != int(np.prod(shape)):
        raise ValueError(f"constant: value of shape {array.shape} does not fit shape {shape}")
    return array.reshape(shape)
