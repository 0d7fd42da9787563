"""Shape manipulation and indexing: reshape, permute, concatenate, tile, slice, gather, ..."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxkeras import tensors
from jaxkeras._engine.graph import Node, Symbolic, dtype_of, known_entries, op, static_shape
from jaxkeras._ops.common import (
    Axes,
    TensorLike,
    TracedSizeError,
    concrete_dims,
    static_shape_of,
)
from jaxkeras.checks import (
    check_axes_of,
    check_axis_of,
    check_int,
    check_integer_tensor,
    check_shape_arg,
)
from jaxkeras.config import floatx
from jaxkeras.tensors import int_shape, ndim

__all__ = [
    "batch_flatten",
    "concatenate",
    "expand_dims",
    "flatten",
    "gather",
    "get_variable_shape",
    "one_hot",
    "permute_dimensions",
    "repeat",
    "repeat_elements",
    "reshape",
    "reverse",
    "size",
    "slice",
    "squeeze",
    "stack",
    "tile",
    "transpose",
]


def get_variable_shape(x: TensorLike) -> tuple:
    """Returns the static shape of a variable (or tensor) as a tuple, like ``int_shape``.

    Args:
        x: a variable, tensor or array.

    Returns:
        A tuple of ints, ``None`` for unknown dimensions.
    """
    return int_shape(x)


def _known_entries(shape: Any) -> tuple | None:
    """The entries of a checked shape argument that are known, ``None`` for the others (sizes
    computed from unknown dimensions or from data); ``None`` when even their number is."""
    if isinstance(shape, Node):
        entries = known_entries(shape)
        length = int_shape(shape)[0]
        return entries if entries is not None or length is None else (None,) * length
    entries = []
    for d in shape:
        known = known_entries(d) if isinstance(d, Node) else (d,)
        entries.append(None if known is None else known[0])
    return tuple(entries)


def _reshape_rule(x: Any, shape: Any) -> tuple[tuple | None, str]:
    """reshape's shape rule, where inference cannot prove more: each entry as the target gives
    it where it is known, and a ``-1`` where the size of ``x`` and every other entry are known;
    the rest unknown (as TensorFlow infers them)."""
    entries = _known_entries(shape)
    if entries is None or -1 not in entries:
        return entries, dtype_of(x)
    others = [d for d in entries if d != -1]
    sizes = int_shape(x)
    fits = None not in others and None not in sizes and math.prod(others) > 0
    rest = math.prod(sizes) // math.prod(others) if fits else None
    return tuple(rest if d == -1 else d for d in entries), dtype_of(x)


@op(name="reshape", shape_rule=_reshape_rule)
def _reshape(x: Any, shape: Any) -> Any:
    return jnp.reshape(x, concrete_dims(shape))


def _check_reshape_size(x: TensorLike, shape: Any) -> None:
    target = static_shape_of(shape)
    if target is None or None in target or None in int_shape(x):
        return
    have = math.prod(int_shape(x))
    known = math.prod(d for d in target if d != -1)
    inferred = -1 in target and known > 0
    if (have % known != 0) if inferred else (have != known):
        raise ValueError(
            f"reshape: cannot reshape a tensor of shape {int_shape(x)} ({have} elements) "
            f"into shape {tuple(target)}"
        )


def reshape(x: TensorLike, shape: Any) -> TensorLike:
    """Reshapes a tensor.

    Args:
        x: a tensor or variable.
        shape: the new shape: a tuple of ints (one may be -1, inferred) and scalar tensors
            known when the graph is traced, such as ``K.shape(x)[0]``; or a 1-D integer tensor.

    Returns:
        A tensor.

    Raises:
        ValueError: when the number of elements cannot match.
    """
    shape = check_shape_arg("reshape", "shape", shape, allow_unknown=1)
    _check_reshape_size(x, shape)
    return _reshape(x, shape)


@op(name="permute_dimensions", jit=("pattern",))
def _transpose(x: Any, pattern: tuple | None) -> Any:
    return jnp.transpose(x, pattern)


def permute_dimensions(x: TensorLike, pattern: Sequence[int]) -> TensorLike:
    """Permutes the axes of a tensor: output axis ``i`` is input axis ``pattern[i]``.

    Args:
        x: a tensor or variable.
        pattern: a permutation of the axes, e.g. ``(0, 2, 1)``.

    Returns:
        A tensor.

    Raises:
        ValueError: when ``pattern`` is not a permutation of ``range(ndim(x))``.
    """
    if not isinstance(pattern, Sequence) or len(pattern) != ndim(x):
        raise ValueError(
            f"permute_dimensions: pattern must list each of the {ndim(x)} axes of a tensor "
            f"of shape {int_shape(x)} once, got {pattern!r}"
        )
    axes = check_axes_of("permute_dimensions", "pattern", x, tuple(pattern))
    return _transpose(x, axes)


def transpose(x: TensorLike) -> TensorLike:
    """Reverses the order of the axes (a matrix transpose for rank 2).

    Args:
        x: a tensor or variable.

    Returns:
        A tensor.
    """
    return _transpose(x, None)


@op(name="expand_dims", jit=("axis",))
def _expand_dims(x: Any, axis: int) -> Any:
    return jnp.expand_dims(x, axis)


def expand_dims(x: TensorLike, axis: int = -1) -> TensorLike:
    """Inserts an axis of size 1 at position ``axis``.

    Args:
        x: a tensor or variable.
        axis: the position of the new axis in the result, in ``[-ndim-1, ndim]``.

    Returns:
        A tensor of rank ``ndim(x) + 1``.
    """
    return _expand_dims(x, check_axis_of("expand_dims", "axis", x, axis, extra=1))


@op(name="squeeze", jit=("axis",))
def _squeeze(x: Any, axis: int) -> Any:
    return jnp.squeeze(x, axis)


def squeeze(x: TensorLike, axis: int) -> TensorLike:
    """Removes an axis of size 1.

    Args:
        x: a tensor or variable.
        axis: the axis to remove.

    Returns:
        A tensor of rank ``ndim(x) - 1``.

    Raises:
        ValueError: when the axis is out of range or its size is known and not 1.
    """
    axis = check_axis_of("squeeze", "axis", x, axis)
    if int_shape(x)[axis] not in (None, 1):
        raise ValueError(
            f"squeeze: axis {axis} of a tensor of shape {int_shape(x)} has size "
            f"{int_shape(x)[axis]}, not 1"
        )
    return _squeeze(x, axis)


def _check_list(tensors: Any, fn: str) -> list:
    if not isinstance(tensors, (list, tuple)) or not tensors:
        raise ValueError(f"{fn}: expected a non-empty list of tensors, got {tensors!r}")
    return list(tensors)


def _check_alike(tensors: list, fn: str, free_axis: int | None = None) -> None:
    """Checks the tensors have one rank and equal known sizes, except along ``free_axis``."""
    shapes = [static_shape(t) for t in tensors]
    first = shapes[0]
    for shape in shapes[1:]:
        if shape == first:  # the common case, without a walk over the dimensions
            continue
        if len(shape) != len(first) or any(
            a is not None and b is not None and a != b and i != free_axis
            for i, (a, b) in enumerate(zip(first, shape))
        ):
            raise ValueError(f"{fn}: incompatible shapes {shapes}")


_concatenate = op(jnp.concatenate, name="concatenate", jit=("axis",))  # as (tensors, axis)


def concatenate(tensors: Sequence[TensorLike], axis: int = -1) -> TensorLike:
    """Joins tensors along an existing axis.

    Args:
        tensors: a non-empty list of tensors of one rank, equal in size except along ``axis``.
        axis: the axis to join along.

    Returns:
        A tensor.

    Raises:
        ValueError: for an out-of-range axis or incompatible shapes.
    """
    tensors = _check_list(tensors, "concatenate")
    axis = check_axis_of("concatenate", "axis", tensors[0], axis)
    _check_alike(tensors, "concatenate", free_axis=axis)
    return _concatenate(tensors, axis)


@op(name="stack", jit=("axis",))
def _stack(tensors: list, axis: int) -> Any:
    return jnp.stack(tensors, axis=axis)


def stack(x: Sequence[TensorLike], axis: int = 0) -> TensorLike:
    """Stacks tensors of one shape along a new axis.

    Args:
        x: a non-empty list of tensors of one shape.
        axis: the position of the new axis in the result.

    Returns:
        A tensor of rank one more than the inputs'.

    Raises:
        ValueError: for an out-of-range axis or shapes that differ.
    """
    tensors = _check_list(x, "stack")
    _check_alike(tensors, "stack")
    return _stack(tensors, check_axis_of("stack", "axis", tensors[0], axis, extra=1))


@op(name="tile")
def _tile(x: Any, n: Any) -> Any:
    return jnp.tile(x, concrete_dims(n, "tile: n"))


def tile(x: TensorLike, n: Any) -> TensorLike:
    """Repeats a whole tensor ``n[i]`` times along each axis ``i`` (``numpy.tile`` rules).

    Args:
        x: a tensor or variable.
        n: counts (ints or scalar tensors known when the graph is traced, or a 1-D integer
            tensor). With fewer entries than ``x`` has axes they apply to the last axes (an int
            tiles the last axis); with more, ``x`` gains leading axes of size 1.

    Returns:
        A tensor.

    Raises:
        ValueError: when ``n`` is not a count or list of counts.
    """
    return _tile(x, check_shape_arg("tile", "n", n))


@op(name="repeat", jit=("n",))
def _repeat(x: Any, n: int) -> Any:
    return jnp.repeat(x[:, None, :], n, axis=1)


def repeat(x: TensorLike, n: int) -> TensorLike:
    """Repeats a 2-D tensor: ``(samples, dim)`` becomes ``(samples, n, dim)``.

    Args:
        x: a tensor of rank 2.
        n: the number of repetitions.

    Returns:
        A tensor of rank 3.

    Raises:
        ValueError: when ``x`` is not 2-D or ``n`` is not a non-negative int.
    """
    if ndim(x) != 2:
        raise ValueError(f"repeat: x must have rank 2, got shape {int_shape(x)}")
    return _repeat(x, check_int("repeat", "n", n))


@op(name="repeat_elements", jit=("rep", "axis"))
def _repeat_elements(x: Any, rep: int, axis: int) -> Any:
    return jnp.repeat(x, rep, axis=axis)


def repeat_elements(x: TensorLike, rep: int, axis: int) -> TensorLike:
    """Repeats each element ``rep`` times along an axis, like ``numpy.repeat``.

    Args:
        x: a tensor or variable; shape ``(s1, s2, s3)`` with ``axis=1`` gives
            ``(s1, s2 * rep, s3)``.
        rep: the number of repetitions.
        axis: the axis.

    Returns:
        A tensor; a symbolic one carries Keras's ``_keras_shape``, as in the TF backend.
    """
    rep = check_int("repeat_elements", "rep", rep)
    result = _repeat_elements(x, rep, check_axis_of("repeat_elements", "axis", x, axis))
    if isinstance(result, Symbolic):
        result._keras_shape = int_shape(result)
    return result


@op
def flatten(x: TensorLike) -> TensorLike:
    """Flattens a tensor to 1-D.

    Args:
        x: a tensor or variable.

    Returns:
        A 1-D tensor.
    """
    return jnp.reshape(x, (-1,))


@op(name="batch_flatten")
def _batch_flatten(x: Any) -> Any:
    return jnp.reshape(x, (x.shape[0], math.prod(x.shape[1:])))


def batch_flatten(x: TensorLike) -> TensorLike:
    """Flattens each sample: shape ``(batch, d1, d2, ...)`` becomes ``(batch, d1 * d2 * ...)``.

    Args:
        x: a tensor or variable of rank >= 1.

    Returns:
        A 2-D tensor.
    """
    if ndim(x) < 1:
        raise ValueError(f"batch_flatten: x must have rank >= 1, got shape {int_shape(x)}")
    return _batch_flatten(x)


@op(name="reverse")
def _reverse(x: Any, axes: tuple | None) -> Any:
    return jnp.flip(x, axes)


def reverse(x: TensorLike, axes: Axes) -> TensorLike:
    """Reverses a tensor along axes.

    Args:
        x: a tensor or variable.
        axes: an axis or a list of axes (``None``: all axes).

    Returns:
        A tensor.
    """
    return _reverse(x, check_axes_of("reverse", "axes", x, axes))


_TRACED = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError)
"""What reading a traced value as a number raises (``TracerIntegerConversionError`` is a
``ConcretizationTypeError``)."""


def _dynamic_slice(x: Any, start: Any, lengths: tuple) -> Any:
    """``lax.dynamic_slice`` for starts computed in the graph (as ``tf.slice`` takes them):
    each start is clamped so that the block fits, where TF raises at run time."""
    starts, sizes = [], []
    for axis, length in enumerate(lengths):
        begin = start[axis]
        if length == -1:
            try:
                length = x.shape[axis] - int(begin)
            except _TRACED:
                raise ValueError(
                    f"slice: size={lengths} takes the rest of axis {axis} (-1) from a start "
                    f"computed in the graph ({begin}); give the block's length there"
                ) from None
        starts.append(jnp.asarray(begin).astype(jnp.int32))
        sizes.append(length)
    return lax.dynamic_slice(x, starts, sizes)


@op(name="slice")
def _slice(x: Any, start: Any, size: Any) -> Any:
    try:
        lengths = concrete_dims(size)
    except TracedSizeError:
        raise ValueError(
            "slice: size must be known when the graph is traced (ints, or scalars computed "
            f"from static shapes such as K.shape(x)[0]), got {size!r}"
        ) from None
    try:
        begin = concrete_dims(start)
    except TracedSizeError:
        return _dynamic_slice(x, start, lengths)
    lengths = [d - b if n == -1 else n for d, b, n in zip(x.shape, begin, lengths)]
    return lax.slice(x, begin, [b + n for b, n in zip(begin, lengths)])


def _checked_start(start: Any) -> Any:
    """``start`` checked as a shape argument, where entries may also be integer scalar arrays
    (taken as ints) or tracers of a user's ``jax.jit`` (kept), and the whole of it a 1-D
    integer tracer."""
    if isinstance(start, jax.core.Tracer):
        if start.ndim != 1 or not jnp.issubdtype(start.dtype, jnp.integer):
            raise ValueError(f"slice: start must be a 1-D integer tensor, got {start!r}")
        return start
    if not isinstance(start, (list, tuple)):
        return check_shape_arg("slice", "start", start)
    arrays = {i: d for i, d in enumerate(start) if isinstance(d, (jax.Array, np.ndarray))}
    for d in arrays.values():
        if np.ndim(d) != 0 or not jnp.issubdtype(d.dtype, jnp.integer):
            raise ValueError(f"slice: start must hold ints or integer scalars, got {start!r}")
    traced = {i: d for i, d in arrays.items() if isinstance(d, jax.core.Tracer)}
    entries = list(start)
    for i, d in arrays.items():
        entries[i] = 0 if i in traced else int(d)  # a traced start is checked when it runs
    checked = check_shape_arg("slice", "start", entries)
    return tuple(traced.get(i, d) for i, d in enumerate(checked))


def _check_slice(x: TensorLike, start: Any, size: Any) -> None:
    for arg, value in (("start", start), ("size", size)):
        length = int_shape(value)[0] if isinstance(value, Symbolic) else len(value)
        if length != ndim(x):
            raise ValueError(
                f"slice: {arg} must have one entry per axis of x (shape {int_shape(x)}), "
                f"got {value!r}"
            )
    begin, lengths = static_shape_of(start), static_shape_of(size)
    if begin is None or lengths is None:
        return
    for dim, b, n in zip(int_shape(x), begin, lengths):
        if None not in (dim, b, n) and not isinstance(b, jax.core.Tracer) and b + max(n, 0) > dim:
            raise ValueError(
                f"slice: start={start!r} with size={size!r} goes past the end of a tensor of "
                f"shape {int_shape(x)}"
            )


def slice(x: TensorLike, start: Any, size: Any) -> TensorLike:
    """Extracts a block, like ``tf.slice``: ``size[i]`` elements from ``start[i]`` on axis ``i``.

    Starts may be computed in the graph (from a placeholder, a variable, a step of ``K.rnn``,
    a tracer of ``jax.jit``): the block is then taken with ``lax.dynamic_slice``, which needs
    its sizes when the graph is traced, and clamps each start so that the block fits (where TF
    raises at run time).

    Args:
        x: a tensor or variable.
        start: one start index per axis: ints or integer scalar tensors, or a 1-D integer
            tensor.
        size: one length per axis: ints or scalar tensors known when the graph is traced
            (e.g. derived from ``K.shape``); -1 takes everything to the end of the axis
            (for a start computed in the graph, only where that start is known when tracing).

    Returns:
        A tensor of shape ``size`` (with -1 entries resolved).

    Raises:
        ValueError: for entries that do not match the rank or go past the end, and, naming
            ``size``, for sizes that are computed in the graph or a -1 after a computed start.

    Example:
        >>> t = K.placeholder((), dtype="int32")
        >>> block = K.slice(K.placeholder((None, 12)), [0, t], [-1, 2])  # 2 columns from t
    """
    start = _checked_start(start)
    size = check_shape_arg("slice", "size", size, allow_unknown=ndim(x))
    _check_slice(x, start, size)
    return _slice(x, start, size)


@op(name="gather")
def _gather(reference: Any, indices: Any) -> Any:
    return jnp.take(reference, jnp.asarray(indices), axis=0)


def gather(reference: TensorLike, indices: TensorLike) -> TensorLike:
    """Picks slices of ``reference`` along axis 0: ``reference[indices]``.

    Args:
        reference: a tensor or variable of rank >= 1.
        indices: an integer tensor, array or list (any shape) of indices into axis 0.

    Returns:
        A tensor of shape ``indices.shape + reference.shape[1:]``.

    Raises:
        ValueError: when ``reference`` is a scalar.
        TypeError: when ``indices`` are not integers.
    """
    if ndim(reference) < 1:
        raise ValueError(f"gather: reference must have rank >= 1, got {reference!r}")
    return _gather(reference, check_integer_tensor("gather", "indices", indices))


@op(name="one_hot")
def _one_hot(indices: Any, num_classes: int, dtype: str) -> Any:
    return jax.nn.one_hot(indices, num_classes, dtype=dtype)


def one_hot(indices: TensorLike, num_classes: int) -> TensorLike:
    """One-hot encodes integer indices; indices out of ``[0, num_classes)`` give all zeros.

    Args:
        indices: an integer tensor of shape ``(batch_size, d1, ..., dn)``.
        num_classes: the number of classes.

    Returns:
        A floatx tensor of shape ``(batch_size, d1, ..., dn, num_classes)``.
    """
    return _one_hot(indices, check_int("one_hot", "num_classes", num_classes), floatx())


@op(name="size", shape_rule=lambda shape_vector: ((), "int32"))
def _size(shape_vector: Any) -> Any:
    if not isinstance(shape_vector, jax.core.Tracer):  # a known shape: no eager compile
        return jax.device_put(np.prod(np.asarray(shape_vector), dtype=np.int32))
    return jnp.prod(jnp.asarray(shape_vector, jnp.int32)).astype(jnp.int32)


def size(x: TensorLike, name: str | None = None) -> TensorLike:
    """The number of elements of a tensor, as a scalar int32 tensor.

    Args:
        x: a tensor or variable.
        name: ignored (kept for Keras code).

    Returns:
        A scalar int32 tensor (computed when the graph runs for unknown dimensions). It is
        computed from ``shape(x)``, so shape inference knows ``K.tile(t, K.stack([1,
        K.size(x)]))`` and the like.
    """
    return _size(tensors.shape(x))
