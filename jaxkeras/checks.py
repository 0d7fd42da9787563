"""Argument checks for the whole API: one function per kind of check, one argument order.

Every check takes ``(fn, arg, value, ...)`` (the public function's name, the argument's name,
the value, then what it is checked against) and raises with a message naming all three.
One rule picks the exception type: ``TypeError`` when the value is of the wrong kind (not an
integer, not a number, not a dtype, not a variable, a tensor where a static value is needed),
``ValueError`` when it is of the right kind but not allowed (out of range, an unknown choice,
a shape that does not fit). Checks run in the public functions, before any op body runs, so a
failing call changes nothing.
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxkeras._engine.graph import ARRAY_TYPES, Node, VariableNode, standardize_dtype, static_shape
from jaxkeras._engine.graph.base import is_int
from jaxkeras._engine.graph.dtypes import ALIASES as _ALIASES
from jaxkeras.config import floatx, normalize_data_format

PADDINGS = ("same", "valid")


# ---------------------------------------------------------------------------------------------
# numbers and flags


def described(value: Any) -> str:
    """A short description of ``value`` for an error message: an array's dtype and shape, a
    list's or tuple's items so described, else the value's ``repr`` (cut to 80 characters).

    Args:
        value: anything.

    Returns:
        The description.
    """
    if isinstance(value, (list, tuple)):
        items = ", ".join(map(described, value[:8])) + (", ..." if len(value) > 8 else "")
        return f"[{items}]" if isinstance(value, list) else f"({items})"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"{type(value).__name__} of dtype {value.dtype} and shape {tuple(value.shape)}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_int(fn: str, arg: str, value: Any, minimum: int | None = 0) -> int:
    """Returns ``value`` as an int after checking it is an integer ``>= minimum``.

    Raises:
        TypeError: when it is not an integer.
        ValueError: when it is below ``minimum``.
    """
    if not is_int(value):
        raise TypeError(f"{fn}: {arg} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        wanted = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise ValueError(f"{fn}: {arg} must be {wanted}, got {value!r}")
    return int(value)


def check_float(fn: str, arg: str, value: Any, minimum: float | None = None) -> float:
    """Returns ``value`` as a Python float after checking it is a concrete real number.

    Raises:
        TypeError: when it is not a number (a tensor, a bool, a string, an array).
        ValueError: when it is below ``minimum``.
    """
    kind = type(value)
    if kind is float or kind is int:  # the common case, known good without NumPy's help
        number = float(value)
    elif isinstance(value, (Node, bool, str)) or np.ndim(value) != 0:
        raise TypeError(f"{fn}: {arg} must be a Python number, got {value!r}")
    else:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"{fn}: {arg} must be a Python number, got {value!r}") from None
    if minimum is not None and not number >= minimum:
        raise ValueError(f"{fn}: {arg} must be >= {minimum}, got {value!r}")
    return number


def check_numeric(fn: str, arg: str, value: Any) -> Any:
    """Checks that a tensor argument is a tensor, a number or an array of numbers.

    Returns:
        ``value`` unchanged.

    Raises:
        TypeError: for a string or bytes (also inside a list), or a NumPy array of them.
    """
    if _holds_text(value):
        raise TypeError(f"{fn}: {arg} must be a tensor or a number, got {value!r}")
    return value


def _holds_text(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(map(_holds_text, value))
    return isinstance(value, (str, bytes)) or (
        isinstance(value, np.ndarray) and value.dtype.kind in "USO"
    )


def check_bool(fn: str, arg: str, value: Any) -> bool:
    """Returns ``value`` as a bool after checking it is a bool (or 0/1).

    Raises:
        TypeError: for anything else.
    """
    if not isinstance(value, (bool, np.bool_)) and not (is_int(value) and value in (0, 1)):
        raise TypeError(f"{fn}: {arg} must be a bool, got {value!r}")
    return bool(value)


def check_callable(fn: str, arg: str, value: Any) -> Any:
    """Checks that ``value`` is callable (a step function, a constraint).

    Raises:
        TypeError: otherwise.
    """
    if not callable(value):
        raise TypeError(f"{fn}: {arg} must be callable, got {value!r}")
    return value


def check_seed(fn: str, value: Any, arg: str = "seed") -> int | None:
    """Checks a random seed: ``None`` or an integer ``>= 0``.

    Raises:
        TypeError: when it is not an integer.
        ValueError: when it is negative.
    """
    if value is None:
        return None
    return check_int(fn, arg, value, minimum=0)


def check_choice(fn: str, arg: str, value: Any, allowed: Sequence[str]) -> str:
    """Checks that ``value`` is one of ``allowed`` (strings compare lower-cased).

    Returns:
        The value, lower-cased when a string.

    Raises:
        ValueError: naming the allowed values otherwise.
    """
    lowered = value.lower() if isinstance(value, str) else value
    if lowered not in allowed:
        raise ValueError(f"{fn}: {arg} must be one of {tuple(allowed)}, got {value!r}")
    return lowered


def check_padding(fn: str, value: Any, allowed: Sequence[str] = PADDINGS) -> str:
    """Checks a ``padding`` argument (``'same'``/``'valid'``, any case); returns it lower-cased.

    Raises:
        ValueError: for any other value.
    """
    return check_choice(fn, "padding", value, allowed)


def check_data_format(fn: str, value: Any) -> str:
    """Resolves a ``data_format`` argument (``None`` means the configured default).

    Raises:
        ValueError: when it is not ``'channels_last'`` or ``'channels_first'``.
    """
    try:
        return normalize_data_format(value)
    except ValueError as err:
        raise ValueError(f"{fn}: {err}") from None


def check_int_tuple(fn: str, arg: str, value: Any, n: int) -> tuple[int, ...]:
    """Returns ``value`` as ``n`` positive ints (an int is repeated ``n`` times).

    Raises:
        ValueError: otherwise (naming the expected form).
    """
    items = (value,) * n if is_int(value) else value
    try:
        result = tuple(int(v) for v in items)
        ok = len(result) == n and all(v == w and v >= 1 for v, w in zip(result, items))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(
            f"{fn}: {arg} must be a positive int or a tuple of {n} positive ints, got {value!r}"
        )
    return result


# ---------------------------------------------------------------------------------------------
# axes


def check_axis(fn: str, arg: str, axis: Any, rank: int, what: str = "") -> int:
    """Checks an axis for ``rank`` dimensions and returns it as a non-negative int.

    Args:
        fn: the public function's name.
        arg: the argument's name.
        axis: an int in ``[-rank, rank)``.
        rank: the number of axes it may index.
        what: a description of the tensor, for the message (e.g. its shape).

    Raises:
        TypeError: when ``axis`` is not an int.
        ValueError: when it is out of range.
    """
    if not is_int(axis):
        raise TypeError(f"{fn}: {arg} must be an int, got {axis!r}")
    if not -rank <= axis < rank:
        detail = f" ({what})" if what else ""
        raise ValueError(
            f"{fn}: {arg}={axis} is out of range for {rank} axes{detail}; "
            f"expected an int in [{-rank}, {rank})"
        )
    return int(axis) % rank


def check_axis_of(fn: str, arg: str, x: Any, axis: Any, extra: int = 0) -> int:
    """Checks an axis of ``x`` (see :func:`check_axis`); ``extra=1`` for ops that insert one.

    Returns:
        The axis as an int in ``[0, ndim(x) + extra)``.
    """
    shape = x.shape if type(x) in ARRAY_TYPES else static_shape(x)
    rank = len(shape) + extra
    if type(axis) is int and -rank <= axis < rank:  # valid: skip formatting the message
        return axis % rank
    return check_axis(fn, arg, axis, rank, f"shape {shape}")


def check_axes_of(fn: str, arg: str, x: Any, axis: Any) -> tuple | None:
    """Checks ``None``, an axis or a list/tuple of distinct axes of ``x``.

    Returns:
        A tuple of non-negative ints, or ``None``.

    Raises:
        ValueError: for an out-of-range axis or one listed twice.
    """
    if axis is None:
        return None
    listed = axis if isinstance(axis, (list, tuple)) else [axis]
    axes = tuple(check_axis_of(fn, arg, x, a) for a in listed)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{fn}: {arg}={axis!r} names an axis twice")
    return axes


# ---------------------------------------------------------------------------------------------
# dtypes


class NarrowedDtypeWarning(UserWarning):
    """A 64-bit dtype was asked for while JAX's 64-bit mode is off, and its 32-bit
    counterpart is used (warned once per process)."""


_NARROWING = {"warned": False}
_UNANNOUNCED = contextvars.ContextVar("jaxkeras_unannounced_narrowing", default=False)


@contextlib.contextmanager
def unannounced_narrowing() -> Iterator[None]:
    """Narrows the 64-bit requests made in the block (in this thread) without the
    :class:`NarrowedDtypeWarning`, which stays due for the next request made outside one.

    For what a library asks for on its own behalf, which its user cannot change: Keras 2's
    optimizers make their step counter ``iterations`` an int64 variable (``jaxkeras.keras2``
    creates it in such a block). In int32 it counts exactly to ``2**31 - 1`` steps.

    Returns:
        A context manager.
    """
    token = _UNANNOUNCED.set(True)
    try:
        yield
    finally:
        _UNANNOUNCED.reset(token)


def check_dtype(fn: str, dtype: Any, default: str | None = None, arg: str = "dtype") -> str:
    """Returns the canonical name of a requested ``dtype`` (``None``: ``default``, else floatx).

    With JAX's 64-bit mode off (its default), a 64-bit request (``int64``, ``uint64``,
    ``float64``, ``complex128``) is narrowed to its 32-bit counterpart, as JAX itself and
    Keras 3 on JAX do, with one :class:`NarrowedDtypeWarning` per process saying how to get
    64-bit types: jaxkeras never turns on 64-bit mode for the whole process behind the
    user's back. Keras 2's optimizers ask for an ``int64`` step counter, which counts in int32
    (exactly to ``2**31 - 1`` steps) without the warning (:func:`unannounced_narrowing`).
    A floatx of ``'float64'`` (``K.set_floatx``, or Keras's own when Keras loads jaxkeras)
    turns the mode on, and the request is kept.

    Raises:
        TypeError: for an unknown dtype.
    """
    dtype = default or floatx() if dtype is None else dtype
    try:
        name = standardize_dtype(dtype, arg=arg)
    except TypeError as err:
        raise TypeError(f"{fn}: {err}") from None
    if name not in _NARROWED_FROM or dtype == name or jax.config.jax_enable_x64:
        return name
    asked = np.dtype(_ALIASES.get(dtype, dtype) if isinstance(dtype, str) else dtype).name
    if asked == name:
        return name
    if floatx() == "float64":  # Keras's set_floatx asked for 64 bits: floatx turned x64 on
        return standardize_dtype(dtype, arg=arg)
    if not _NARROWING["warned"] and not _UNANNOUNCED.get():
        _NARROWING["warned"] = True
        warnings.warn(
            f"{fn}: {arg}={asked} is computed as {name}, because JAX's 64-bit mode is off "
            "(jaxkeras narrows 64-bit requests rather than turning it on for the whole "
            "process). For 64-bit types, call jax.config.update('jax_enable_x64', True) "
            "before building, or K.set_floatx('float64'). This warning is shown once.",
            NarrowedDtypeWarning,
            stacklevel=3,
        )
    return name


_NARROWED_FROM = frozenset({"int32", "uint32", "float32", "complex64"})


def check_integer_tensor(fn: str, arg: str, x: Any) -> Any:
    """Checks that a tensor argument (or array, list) holds integers.

    Returns:
        ``x`` unchanged.

    Raises:
        TypeError: naming its dtype otherwise.
    """
    dtype = getattr(x, "dtype", None)  # tensors, arrays, tracers
    if dtype is None:
        if any(isinstance(leaf, Node) for leaf in jax.tree_util.tree_leaves(x)):
            return x  # a list of scalar tensors: checked by the op
        dtype = np.asarray(x).dtype
    if not jnp.issubdtype(dtype, jnp.integer):
        raise TypeError(f"{fn}: {arg} must hold integers, got dtype {dtype}: {x!r}")
    return x


def check_float_dtype(fn: str, dtype: Any) -> str:
    """Like :func:`check_dtype`, also requiring a floating-point dtype.

    Raises:
        ValueError: for an integer or boolean dtype.
    """
    name = check_dtype(fn, dtype)
    if not jnp.issubdtype(name, jnp.floating):
        raise ValueError(f"{fn}: dtype must be a floating-point type, got {dtype!r}")
    return name


# ---------------------------------------------------------------------------------------------
# shapes


def compatible(shape: Sequence | None, expected: Sequence | None) -> bool:
    """Whether two static shapes can be equal (``None`` matches any dimension, or any shape)."""
    if shape is None or expected is None:
        return True
    return len(shape) == len(expected) and all(
        a is None or b is None or a == b for a, b in zip(shape, expected)
    )


def broadcastable(shape: Sequence, target: Sequence) -> bool:
    """Whether a static ``shape`` of the same rank can broadcast to ``target``."""
    return len(shape) == len(target) and all(
        a is None or b is None or a in (1, b) for a, b in zip(shape, target)
    )


def check_broadcastable(fn: str, args: tuple[str, str], a: Any, b: Any) -> None:
    """Checks that tensors ``a`` and ``b`` broadcast together where their sizes are known.

    Args:
        args: the two arguments' names, for the message.

    Raises:
        ValueError: naming both arguments and shapes otherwise.
    """
    shape_a, shape_b = static_shape(a), static_shape(b)
    if shape_a is None or shape_b is None:
        return
    for d, e in zip(reversed(shape_a), reversed(shape_b)):
        if d is not None and e is not None and 1 not in (d, e) and d != e:
            raise ValueError(
                f"{fn}: {args[0]} of shape {shape_a} and {args[1]} of shape {shape_b} "
                "do not broadcast together"
            )


def check_rank(fn: str, arg: str, x: Any, rank: int, layout: str = "") -> tuple:
    """Returns the static shape of ``x`` after checking that it has rank ``rank``.

    Args:
        layout: what the dimensions mean, for the message.

    Raises:
        ValueError: naming the shape when the rank differs.
    """
    shape = static_shape(x)
    if shape is None or len(shape) != rank:
        detail = f" {layout}" if layout else ""
        raise ValueError(f"{fn}: {arg} must have rank {rank}{detail}, got shape {shape}")
    return shape


def check_same_size(fn: str, what: str, a: int | None, b: int | None) -> None:
    """Checks that two sizes agree where both are known.

    Raises:
        ValueError: naming ``what`` and both sizes.
    """
    if a is not None and b is not None and a != b:
        raise ValueError(f"{fn}: {what} differ: {a} vs {b}")


def check_fits(fn: str, what: str, shape: Sequence | None, variable: Any) -> None:
    """Checks that a value of static ``shape`` can be a new value of ``variable``.

    Raises:
        ValueError: naming the variable and both shapes.
    """
    if not compatible(shape, variable.shape):
        shown = None if shape is None else tuple(shape)
        raise ValueError(
            f"{fn}: {what} of shape {shown} does not fit variable {variable.name!r} "
            f"of shape {variable.shape}"
        )


def check_variable(fn: str, arg: str, x: Any) -> Any:
    """Checks that ``x`` is a variable (made by ``K.variable``).

    Raises:
        TypeError: otherwise.
    """
    if not isinstance(x, VariableNode):
        raise TypeError(f"{fn}: {arg} must be a variable (from K.variable), got {x!r}")
    return x


def check_variable_shape(fn: str, shape: Any) -> tuple[int, ...]:
    """Checks the shape of a new variable: an int or a tuple of ints >= 0 (nothing symbolic).

    Raises:
        ValueError: naming the shape otherwise.
    """
    if is_int(shape):
        shape = (shape,)
    if not isinstance(shape, (list, tuple)) or not all(is_int(d) and d >= 0 for d in shape):
        raise ValueError(f"{fn}: a variable's shape must be a tuple of ints >= 0, got {shape!r}")
    return tuple(int(d) for d in shape)


def check_shape_arg(fn: str, arg: str, shape: Any, allow_unknown: int = 0) -> Any:
    """Checks a shape argument whose entries may be symbolic scalars (e.g. ``K.shape(x)[0]``).

    Args:
        fn: the public function's name.
        arg: the argument's name.
        shape: an int, a sequence of ints and symbolic integer scalars, a 1-D integer array,
            or a symbolic 1-D integer tensor (e.g. ``K.shape(x)``).
        allow_unknown: how many ``-1`` entries are allowed (1 for ``reshape``).

    Returns:
        A tuple of ints and symbolic scalars, or the symbolic 1-D tensor.

    Raises:
        ValueError: naming the argument and value for anything else.
    """
    if isinstance(shape, Node):
        if len(shape.shape) != 1:
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
        if isinstance(d, Node) and len(d.shape) == 0:
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
