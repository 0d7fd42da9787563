"""Element-wise ops: math functions, comparisons, clipping, rounding and casting."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxkeras._engine.graph import ARRAY_TYPE, Symbolic, Tensor, is_bcoo, op, plain_eager
from jaxkeras._ops.common import (
    TensorLike,
)
from jaxkeras.checks import (
    check_dtype,
    check_numeric,
)
from jaxkeras.config import floatx

__all__ = [
    "abs",
    "cast",
    "cast_to_floatx",
    "clip",
    "cos",
    "equal",
    "exp",
    "greater",
    "greater_equal",
    "less",
    "less_equal",
    "log",
    "maximum",
    "minimum",
    "not_equal",
    "pow",
    "round",
    "sign",
    "sin",
    "sqrt",
    "square",
]


@op(name="abs", elementwise=True, eager=jnp.abs)
def abs(x: TensorLike) -> TensorLike:
    """Element-wise absolute value.

    Args:
        x: a tensor or variable.

    Returns:
        A tensor.
    """
    return jnp.abs(x)


@op(elementwise=True, eager=jnp.square)
def square(x: TensorLike) -> TensorLike:
    """Element-wise square.

    Args:
        x: a tensor or variable.

    Returns:
        A tensor.
    """
    return jnp.square(x)


@op(elementwise=True)
def sqrt(x: TensorLike) -> TensorLike:
    """Element-wise square root; negative values are clipped to 0 first (as TF-Keras does).

    Args:
        x: a tensor or variable.

    Returns:
        A tensor.
    """
    return jnp.sqrt(jnp.maximum(x, 0))


@op(elementwise=True, eager=jnp.exp)
def exp(x: TensorLike) -> TensorLike:
    """Element-wise exponential.

    Args:
        x: a tensor or variable.

    Returns:
        A tensor.
    """
    return jnp.exp(x)


@op(elementwise=True, eager=jnp.log)
def log(x: TensorLike) -> TensorLike:
    """Element-wise natural logarithm.

    Args:
        x: a tensor or variable.

    Returns:
        A tensor.
    """
    return jnp.log(x)


@op(elementwise=True, eager=jnp.sin)
def sin(x: TensorLike) -> TensorLike:
    """Element-wise sine.

    Args:
        x: a tensor or variable.

    Returns:
        A tensor.
    """
    return jnp.sin(x)


@op(elementwise=True, eager=jnp.cos)
def cos(x: TensorLike) -> TensorLike:
    """Element-wise cosine.

    Args:
        x: a tensor or variable.

    Returns:
        A tensor.
    """
    return jnp.cos(x)


@op(elementwise=True, eager=jnp.sign)
def sign(x: TensorLike) -> TensorLike:
    """Element-wise sign: -1, 0 or 1.

    Args:
        x: a tensor or variable.

    Returns:
        A tensor.
    """
    return jnp.sign(x)


@op(name="round", elementwise=True, eager=jnp.round)
def round(x: TensorLike) -> TensorLike:
    """Element-wise rounding to the nearest integer; ties go to the even neighbour.

    Args:
        x: a tensor or variable.

    Returns:
        A tensor of the same dtype.
    """
    return jnp.round(x)


_pow = op(lambda x, a: jnp.power(x, a), name="pow", elementwise=True)


def pow(x: TensorLike, a: TensorLike) -> TensorLike:
    """Element-wise power ``x ** a``.

    Args:
        x: a tensor or variable.
        a: the exponent, a number or a tensor broadcastable to ``x``.

    Returns:
        A tensor.

    Raises:
        TypeError: when ``x`` or ``a`` is not a tensor or a number.
    """
    return _pow(check_numeric("pow", "x", x), check_numeric("pow", "a", a))


@op(elementwise=True)
def maximum(x: TensorLike, y: TensorLike) -> TensorLike:
    """Element-wise maximum of two tensors (broadcasting).

    Args:
        x: a tensor or variable.
        y: a tensor or variable.

    Returns:
        A tensor.
    """
    return jnp.maximum(x, y)


@op(elementwise=True)
def minimum(x: TensorLike, y: TensorLike) -> TensorLike:
    """Element-wise minimum of two tensors (broadcasting).

    Args:
        x: a tensor or variable.
        y: a tensor or variable.

    Returns:
        A tensor.
    """
    return jnp.minimum(x, y)


@op(elementwise=True)
def equal(x: TensorLike, y: TensorLike) -> TensorLike:
    """Element-wise ``x == y``.

    Args:
        x: a tensor or variable.
        y: a tensor or variable.

    Returns:
        A bool tensor.
    """
    return jnp.equal(x, y)


@op(elementwise=True)
def not_equal(x: TensorLike, y: TensorLike) -> TensorLike:
    """Element-wise ``x != y``.

    Args:
        x: a tensor or variable.
        y: a tensor or variable.

    Returns:
        A bool tensor.
    """
    return jnp.not_equal(x, y)


@op(elementwise=True)
def greater(x: TensorLike, y: TensorLike) -> TensorLike:
    """Element-wise ``x > y``.

    Args:
        x: a tensor or variable.
        y: a tensor or variable.

    Returns:
        A bool tensor.
    """
    return jnp.greater(x, y)


@op(elementwise=True)
def greater_equal(x: TensorLike, y: TensorLike) -> TensorLike:
    """Element-wise ``x >= y``.

    Args:
        x: a tensor or variable.
        y: a tensor or variable.

    Returns:
        A bool tensor.
    """
    return jnp.greater_equal(x, y)


@op(elementwise=True)
def less(x: TensorLike, y: TensorLike) -> TensorLike:
    """Element-wise ``x < y``.

    Args:
        x: a tensor or variable.
        y: a tensor or variable.

    Returns:
        A bool tensor.
    """
    return jnp.less(x, y)


@op(elementwise=True)
def less_equal(x: TensorLike, y: TensorLike) -> TensorLike:
    """Element-wise ``x <= y``.

    Args:
        x: a tensor or variable.
        y: a tensor or variable.

    Returns:
        A bool tensor.
    """
    return jnp.less_equal(x, y)


@op(name="clip", elementwise=True, jit=())
def _clip(x: Any, min_value: Any, max_value: Any) -> Any:
    x = jnp.asarray(x)
    if min_value is not None:
        x = jnp.maximum(x, jnp.asarray(min_value).astype(x.dtype))
    if max_value is not None:
        x = jnp.minimum(x, jnp.asarray(max_value).astype(x.dtype))
    return x


def clip(x: TensorLike, min_value: TensorLike, max_value: TensorLike) -> TensorLike:
    """Element-wise clipping to ``[min_value, max_value]``.

    Bounds are cast to the dtype of ``x``. When both bounds are numbers and
    ``max_value < min_value``, ``max_value`` is raised to ``min_value`` (everything becomes
    ``min_value``), as TF-Keras does. With tensor bounds, ``min_value`` is applied first.

    Args:
        x: a tensor or variable.
        min_value: a number, a tensor broadcastable to ``x``, or ``None`` (no lower bound).
        max_value: a number, a tensor broadcastable to ``x``, or ``None`` (no upper bound).

    Returns:
        A tensor of the dtype of ``x``.

    Raises:
        TypeError: when a bound is not a tensor, a number or ``None``.
    """
    numbers = type(min_value) in _BOUNDS and type(max_value) in _BOUNDS  # (no text to check)
    if not numbers:
        check_numeric("clip", "min_value", min_value)
        check_numeric("clip", "max_value", max_value)
        numbers = isinstance(min_value, _NUMBERS) and isinstance(max_value, _NUMBERS)
    if numbers:
        max_value = max(min_value, max_value)
        if plain_eager(x):
            return _clip.concrete(x, min_value, max_value)
    return _clip(x, min_value, max_value)


_BOUNDS = frozenset({int, float})  # the common bounds, told apart by one type test
_NUMBERS = (int, float, np.integer, np.floating)


def _cast_body(x: Any, dtype: str) -> Any:
    if _host_castable(x, dtype):
        return jax.device_put(np.asarray(x).astype(dtype))
    return jnp.asarray(x).astype(dtype)


@functools.partial(jax.jit, static_argnames="dtype")
def _converted(x: jax.Array, dtype: str) -> jax.Array:
    return x.astype(dtype)


def _cast_now(x: Any, dtype: str) -> Any:
    """:func:`_cast_body` on concrete values: an array's conversion as one compiled call (JAX's
    own dispatch of a primitive costs several times as much)."""
    return _converted(x, dtype) if type(x) is ARRAY_TYPE else _cast_body(x, dtype)


_cast = op(_cast_body, name="cast", elementwise=True, eager=_cast_now)


def _host_castable(x: Any, dtype: str) -> bool:
    """Whether ``x`` is a known number that NumPy casts to ``dtype`` exactly as XLA does (to a
    float type; both round to nearest even): such casts (``K.cast(K.size(x), 'float32')`` in a
    trace) would each compile a conversion in a fresh process."""
    if isinstance(x, jax.core.Tracer) or is_bcoo(x) or np.ndim(x) != 0:
        return False
    return jnp.dtype(dtype).kind == "f" and np.asarray(x).dtype.kind in "biuf"


def cast(x: TensorLike, dtype: Any) -> TensorLike:
    """Casts a tensor to ``dtype`` (a variable gives a tensor; floats to ints truncate).

    As ``tf.cast``, a symbolic tensor that already has ``dtype`` is returned itself, with the
    attributes Keras set on it (keras-contrib's CRF metrics find their layer through the
    ``_keras_history`` of a ``y_pred`` that Keras's metric wrapper cast to float32).

    Args:
        x: a tensor or variable.
        dtype: the new dtype, e.g. ``'float16'``, ``'int32'``, ``'bool'``.

    Returns:
        A tensor of dtype ``dtype``.

    Raises:
        TypeError: naming ``dtype`` when it is not a dtype.
    """
    dtype = check_dtype("cast", dtype)
    if isinstance(x, Tensor) and x.dtype == dtype:
        return x
    return _cast(x, dtype)


def cast_to_floatx(x: Any) -> Any:
    """Casts a NumPy array (or anything array-like) to floatx.

    Args:
        x: a NumPy array, a list or a number; a tensor or variable gives a cast tensor.

    Returns:
        A NumPy array of dtype floatx (a tensor for symbolic ``x``).
    """
    if isinstance(x, Symbolic):
        return cast(x, floatx())
    return np.asarray(x, dtype=jnp.dtype(floatx()))
