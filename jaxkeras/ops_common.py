"""Argument checks shared by the ops modules: axes, dtypes, integers and shape arguments.

Every check runs in an op's thin public function, before the op body is called, and raises a
``ValueError`` (``TypeError`` for dtypes) whose message names the function, the argument and
the bad value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxkeras.config import floatx
from jaxkeras.graph import Symbolic, standardize_dtype
from jaxkeras.tensors import int_shape, ndim

TensorLike = Any
"""A symbolic tensor, a variable, a NumPy/JAX array or a Python scalar."""

Axes = int | Sequence[int] | None


def is_symbolic(x: Any) -> bool:
    """Returns whether ``x`` is a symbolic tensor or a variable."""
    return isinstance(x, Symbolic)


def is_int(value: Any) -> bool:
    """Returns whether ``value`` is a Python or NumPy integer (bools excluded)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_variable_shape(shape: Any, fn: str) -> tuple[int, ...]:
    """Checks the shape of a new variable: an int or a tuple of ints >= 0 (nothing symbolic).

    Raises:
        ValueError: naming ``fn`` and the shape otherwise.
    """
    if is_int(shape):
        shape = (shape,)
    if not isinstance(shape, (list, tuple)) or not all(is_int(d) and d >= 0 for d in shape):
        raise ValueError(f"{fn}: a variable's shape must be a tuple of ints >= 0, got {shape!r}")
    return tuple(int(d) for d in shape)


def check_int(value: Any, fn: str, arg: str, minimum: int = 0) -> int:
    """Returns ``value`` as an int, checking it is an integer ``>= minimum``.

    Raises:
        ValueError: naming ``fn``, ``arg`` and the value otherwise.
    """
    if not is_int(value) or value < minimum:
        raise ValueError(f"{fn}: {arg} must be an int >= {minimum}, got {value!r}")
    return int(value)


def normalize_axis(x: TensorLike, axis: Any, fn: str, arg: str = "axis", extra: int = 0) -> int:
    """Checks an axis of ``x`` and returns it as a non-negative int.

    Args:
        x: the tensor the axis refers to.
        axis: an int in ``[-rank, rank)``, where ``rank = ndim(x) + extra``.
        fn: the op name, for error messages.
        arg: the argument name, for error messages.
        extra: 1 for ops that insert an axis (``expand_dims``, ``stack``).

    Raises:
        ValueError: when ``axis`` is not an int or is out of range.
    """
    return check_axis(axis, ndim(x) + extra, fn, arg, f"shape {int_shape(x)}")


def check_axis(axis: Any, rank: int, fn: str, arg: str = "axis", what: str = "") -> int:
    """Checks an axis for ``rank`` dimensions and returns it as a non-negative int.

    Args:
        axis: an int in ``[-rank, rank)``.
        rank: the number of axes it may index.
        fn: the op name, for error messages.
        arg: the argument name, for error messages.
        what: a description of the tensor, for error messages (e.g. its shape).

    Raises:
        ValueError: when ``axis`` is not an int or is out of range.
    """
    if not is_int(axis):
        raise ValueError(f"{fn}: {arg} must be an int, got {axis!r}")
    if not -rank <= axis < rank:
        detail = f" ({what})" if what else ""
        raise ValueError(
            f"{fn}: {arg}={axis} is out of range for {rank} axes{detail}; "
            f"expected an int in [{-rank}, {rank})"
        )
    return int(axis) % rank


def normalize_axes(x: TensorLike, axis: Axes, fn: str, arg: str = "axis") -> tuple | None:
    """Checks ``None``, an axis or a list/tuple of distinct axes; returns a tuple or ``None``.

    Raises:
        ValueError: for an out-of-range axis or one listed twice.
    """
    if axis is None:
        return None
    listed = axis if isinstance(axis, (list, tuple)) else [axis]
    axes = tuple(normalize_axis(x, a, fn, arg) for a in listed)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{fn}: {arg}={axis!r} names an axis twice")
    return axes


def check_dtype(dtype: Any, default: str | None = None) -> str:
    """Returns the canonical name of ``dtype`` (``None``: ``default``, else floatx).

    Raises:
        TypeError: naming the argument and value for an unknown dtype.
    """
    if dtype is None:
        dtype = default or floatx()
    return standardize_dtype(dtype, arg="dtype")


def check_float_dtype(dtype: Any, fn: str) -> str:
    """Like :func:`check_dtype`, also requiring a floating-point dtype.

    Raises:
        ValueError: for an integer or boolean dtype.
    """
    name = check_dtype(dtype)
    if not jnp.issubdtype(name, jnp.floating):
        raise ValueError(f"{fn}: dtype must be a floating-point type, got {dtype!r}")
    return name


def check_shape_arg(shape: Any, fn: str, arg: str = "shape", allow_unknown: int = 0) -> Any:
    """Checks a shape argument whose entries may be symbolic scalars (e.g. ``K.shape(x)[0]``).

    Args:
        shape: an int, a sequence of ints and symbolic integer scalars, a 1-D integer array,
            or a symbolic 1-D integer tensor (e.g. ``K.shape(x)``).
        fn: the op name, for error messages.
        arg: the argument name, for error messages.
        allow_unknown: how many ``-1`` entries are allowed (1 for ``reshape``).

    Returns:
        A tuple of ints and symbolic scalars, or the symbolic 1-D tensor.

    Raises:
        ValueError: naming the argument and value for anything else.
    """
    if is_symbolic(shape):
        if ndim(shape) != 1:
            raise ValueError(f"{fn}: a symbolic {arg} must be a 1-D tensor, got {shape!r}")
        return shape
    if is_int(shape):
        shape = (shape,)
    if isinstance(shape, (np.ndarray, jnp.ndarray)) and shape.ndim == 1:
        shape = tuple(shape.tolist())
    if not isinstance(shape, (list, tuple)):
        raise ValueError(f"{fn}: {arg} must be a tuple of ints, got {shape!r}")
    entries = []
    for d in shape:
        if is_symbolic(d) and ndim(d) == 0:
            entries.append(d)
        elif is_int(d) and d >= -1:
            entries.append(int(d))
        else:
            raise ValueError(f"{fn}: {arg} must hold ints >= 0 or scalar tensors, got {shape!r}")
    if entries.count(-1) > allow_unknown:
        raise ValueError(
            f"{fn}: {arg}={shape!r} may hold at most {allow_unknown} entries equal to -1"
        )
    return tuple(entries)


def static_shape_of(shape: Any) -> tuple | None:
    """Returns the statically known entries of a checked shape argument (``None`` = unknown).

    Returns ``None`` when the whole shape is a symbolic tensor.
    """
    if is_symbolic(shape):
        return None
    return tuple(None if is_symbolic(d) else d for d in shape)


def concrete_dims(shape: Any) -> tuple[int, ...]:
    """Inside an op body: the shape argument as a tuple of Python ints.

    Symbolic entries arrive as numbers known at trace time (such as ``K.shape(x)[0]``).
    """
    return tuple(int(d) for d in shape)
