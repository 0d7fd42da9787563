"""Constant-filled variables and tensors: zeros, ones, eye, zeros_like, ones_like, arange."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxkeras import state
from jaxkeras._engine.graph import op
from jaxkeras._ops.common import (
    TensorLike,
)
from jaxkeras.checks import (
    check_dtype,
    check_variable_shape,
    is_int,
)

__all__ = ["arange", "eye", "ones", "ones_like", "zeros", "zeros_like"]


def zeros(shape: Any, dtype: Any = None, name: str | None = None) -> state.Variable:
    """Creates a variable filled with zeros.

    Args:
        shape: a tuple of ints.
        dtype: its dtype; default floatx.
        name: its name.

    Returns:
        A :class:`Variable`.
    """
    dtype = check_dtype("zeros", dtype)
    shape = check_variable_shape("zeros", shape)
    return state.variable(np.zeros(shape, jnp.dtype(dtype)), dtype, name)  # compiles nothing


def ones(shape: Any, dtype: Any = None, name: str | None = None) -> state.Variable:
    """Creates a variable filled with ones.

    Args:
        shape: a tuple of ints.
        dtype: its dtype; default floatx.
        name: its name.

    Returns:
        A :class:`Variable`.
    """
    dtype = check_dtype("ones", dtype)
    shape = check_variable_shape("ones", shape)
    return state.variable(np.ones(shape, jnp.dtype(dtype)), dtype, name)  # compiles nothing


def eye(size: Any, dtype: Any = None, name: str | None = None) -> state.Variable:
    """Creates a variable holding an identity matrix.

    Args:
        size: the number of rows and columns, or a pair ``(rows, columns)``.
        dtype: its dtype; default floatx.
        name: its name.

    Returns:
        A :class:`Variable`.
    """
    dtype = check_dtype("eye", dtype)
    rows, columns = check_variable_shape("eye", (size, size) if is_int(size) else size)
    return state.variable(jnp.eye(rows, columns, dtype=dtype), dtype, name)


@op(name="zeros_like", elementwise=True)
def _zeros_like(x: Any, dtype: str | None) -> Any:
    return jnp.zeros_like(np.asarray(x) if isinstance(x, (list, tuple)) else x, dtype=dtype)


@op(name="ones_like", elementwise=True)
def _ones_like(x: Any, dtype: str | None) -> Any:
    return jnp.ones_like(np.asarray(x) if isinstance(x, (list, tuple)) else x, dtype=dtype)


def zeros_like(x: TensorLike, dtype: Any = None, name: str | None = None) -> TensorLike:
    """A tensor of zeros with the shape of ``x``.

    Args:
        x: a tensor or variable.
        dtype: the dtype; default that of ``x``.
        name: ignored (kept for Keras code).

    Returns:
        A tensor.
    """
    return _zeros_like(x, None if dtype is None else check_dtype("zeros_like", dtype))


def ones_like(x: TensorLike, dtype: Any = None, name: str | None = None) -> TensorLike:
    """A tensor of ones with the shape of ``x``.

    Args:
        x: a tensor or variable.
        dtype: the dtype; default that of ``x``.
        name: ignored (kept for Keras code).

    Returns:
        A tensor.
    """
    return _ones_like(x, None if dtype is None else check_dtype("ones_like", dtype))


@op(name="arange")
def _arange(start: Any, stop: Any, step: Any, dtype: str) -> Any:
    bounds = (np.asarray(v).item() for v in (start, stop, step))
    return jnp.arange(*bounds).astype(dtype)


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = "int32") -> TensorLike:
    """A 1-D tensor of evenly spaced values ``start, start + step, ...`` below ``stop``.

    With one argument it is the stop and the start is 0 (Theano's convention), so a negative
    single argument gives an empty tensor.

    Args:
        start: the first value (or the stop, when ``stop`` is ``None``): a number or a scalar
            tensor known when the graph is traced, such as ``K.shape(x)[1]``.
        stop: the end (excluded).
        step: the spacing (not 0).
        dtype: the dtype of the result (float bounds are cast to it); default int32.

    Returns:
        A 1-D tensor.
    """
    if stop is None:
        start, stop = 0, start
    if isinstance(step, (int, float)) and step == 0:
        raise ValueError("arange: step must not be 0")
    return _arange(start, stop, step, check_dtype("arange", dtype))
