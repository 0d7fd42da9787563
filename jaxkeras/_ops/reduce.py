"""Reductions and scans along axes: sum, mean, std, logsumexp, arg-max, cumulative sums, ..."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxkeras._engine.graph import ARRAY_TYPE, ARRAY_TYPES, Node, dtype_of, op
from jaxkeras._engine.graph.context import TOP_LEVEL, TRACE
from jaxkeras._ops.common import (
    Axes,
    TensorLike,
    widened,
)
from jaxkeras._ops.math import cast
from jaxkeras._xla.summation import (
    correctly_rounded_variance,
    exact_mean,
    exact_sum,
    exact_sums,
    layout_free_mean,
    layout_free_sum,
)
from jaxkeras.checks import (
    check_axes_of,
    check_axis_of,
    check_int,
    is_int,
)
from jaxkeras.config import floatx
from jaxkeras.tensors import int_shape, ndim

__all__ = [
    "all",
    "any",
    "argmax",
    "argmin",
    "cumprod",
    "cumsum",
    "in_top_k",
    "l2_normalize",
    "logsumexp",
    "max",
    "mean",
    "min",
    "prod",
    "std",
    "sum",
    "var",
]

_L2_EPSILON = 1e-12


def _logical(reducer: Callable) -> Callable:
    def body(x: Any, axis: int | tuple | None = None, keepdims: bool = False) -> Any:
        return reducer(jnp.asarray(x).astype(bool), axis, keepdims=keepdims)

    return body


def _standard_deviation(x: Any, axis: int | tuple | None = None, keepdims: bool = False) -> Any:
    return jnp.sqrt(correctly_rounded_variance(x, axis, keepdims))


# A reduction's body is the jax.numpy function itself (sum and mean: compensated for a small
# full reduction of a multi-axis array; mean, var and std: the sum divided by the count, as TF
# divides, where jnp's would multiply by its reciprocal; see summation.py), called as ``(x)`` or
# ``(x, axis)``, with ``keepdims=True`` when asked: no keywords packed in the common case. On
# arrays it runs compiled (one dispatch, without jax.numpy's Python checks), compiled per shape,
# axes and keepdims. The opt-in exact sum and mean are ops of their own, chosen when K.sum or
# K.mean is called, so that no op's compiled bodies depend on the switch.
_sum = op(layout_free_sum, name="sum", jit=("axis", "keepdims"))
_exact_sum = op(exact_sum, name="sum", jit=("axis", "keepdims"))
_prod = op(jnp.prod, name="prod", jit=("axis", "keepdims"))
_mean = op(layout_free_mean, name="mean", jit=("axis", "keepdims"))
_exact_mean = op(exact_mean, name="mean", jit=("axis", "keepdims"))
_max = op(jnp.max, name="max", jit=("axis", "keepdims"))
_min = op(jnp.min, name="min", jit=("axis", "keepdims"))
_var = op(correctly_rounded_variance, name="var", jit=("axis", "keepdims"))
_std = op(_standard_deviation, name="std", jit=("axis", "keepdims"))
_all = op(_logical(jnp.all), name="all", jit=("axis", "keepdims"))
_any = op(_logical(jnp.any), name="any", jit=("axis", "keepdims"))
_logsumexp = op(jax.nn.logsumexp, name="logsumexp", jit=("axis", "keepdims"))


def _pack_rule(values: list) -> tuple | None:
    """The shape and dtype of a list of scalars packed into a vector (``K.prod([K.shape(x)[0],
    K.shape(x)[1]])``), as ``jnp.asarray`` makes it; ``None`` for anything else."""
    kinds = []
    for value in values:
        if isinstance(value, Node):
            if value._shape != () or value._sparse:
                return None
            kinds.append(np.dtype(value._dtype))
        elif isinstance(value, (bool, int, float, np.number, np.bool_)):
            kinds.append(value)
        else:
            return None
    return (len(values),), jnp.result_type(*kinds)


_pack = op(lambda values: jnp.asarray(values), name="pack", shape_rule=_pack_rule)


def _reduce(reduction: Callable, x: TensorLike, axis: Axes, keepdims: bool) -> TensorLike:
    if type(x) is ARRAY_TYPE and type(axis) is int and TRACE.value is TOP_LEVEL:
        rank = x.ndim  # the common eager case, checked and run with the fewest Python calls
        if -rank <= axis < rank:
            run = reduction.concrete
            return run(x, axis % rank, keepdims=True) if keepdims else run(x, axis % rank)
    if isinstance(x, (list, tuple)):  # e.g. K.prod([K.shape(x)[0], K.shape(x)[1]])
        x = _pack(list(x))
    if axis is None:
        return reduction(x, keepdims=True) if keepdims else reduction(x)
    if type(axis) is int:  # as an int, which jax.numpy takes faster than a tuple
        axes = check_axis_of(reduction.op_name, "axis", x, axis)
    else:
        axes = check_axes_of(reduction.op_name, "axis", x, axis)
    return reduction(x, axes, keepdims=True) if keepdims else reduction(x, axes)


def _as_float_if_bool(x: TensorLike) -> TensorLike:
    if type(x) in ARRAY_TYPES:  # an array's dtype kind, read without dtype_of's call
        return cast(x, floatx()) if x.dtype.kind == "b" else x
    return cast(x, floatx()) if dtype_of(x) == "bool" else x


def sum(x: TensorLike, axis: Axes = None, keepdims: bool = False) -> TensorLike:
    """Sum of the values of a tensor along axes.

    A full sum of 2 to 4,096 float32/float64 values is the same for every layout of them
    (channels first or last) in all but rare cases; with
    ``jaxkeras._xla.summation.set_exact_sums(True)`` it is correctly rounded.

    Args:
        x: a tensor or variable.
        axis: ``None`` (all axes), an axis, or a list/tuple of axes; negative axes count from
            the end.
        keepdims: keep the reduced axes with size 1.

    Returns:
        A tensor.

    Raises:
        ValueError: naming the axis when it is out of range.
    """
    return _reduce(_exact_sum if exact_sums() else _sum, x, axis, keepdims)


def prod(x: TensorLike, axis: Axes = None, keepdims: bool = False) -> TensorLike:
    """Product of the values of a tensor along axes.

    Args:
        x: a tensor or variable.
        axis: ``None`` (all axes), an axis, or a list/tuple of axes.
        keepdims: keep the reduced axes with size 1.

    Returns:
        A tensor.
    """
    return _reduce(_prod, x, axis, keepdims)


def max(x: TensorLike, axis: Axes = None, keepdims: bool = False) -> TensorLike:
    """Maximum of the values of a tensor along axes.

    Args:
        x: a tensor or variable.
        axis: ``None`` (all axes), an axis, or a list/tuple of axes.
        keepdims: keep the reduced axes with size 1.

    Returns:
        A tensor.
    """
    return _reduce(_max, x, axis, keepdims)


def min(x: TensorLike, axis: Axes = None, keepdims: bool = False) -> TensorLike:
    """Minimum of the values of a tensor along axes.

    Args:
        x: a tensor or variable.
        axis: ``None`` (all axes), an axis, or a list/tuple of axes.
        keepdims: keep the reduced axes with size 1.

    Returns:
        A tensor.
    """
    return _reduce(_min, x, axis, keepdims)


def mean(x: TensorLike, axis: Axes = None, keepdims: bool = False) -> TensorLike:
    """Mean of the values of a tensor along axes (booleans count as 0/1 floats).

    The sum is divided by the count, as TF and NumPy divide, eagerly and compiled: the mean of
    ``[0.2, 0.1, 0.3]`` is ``0.2`` in float32 (XLA alone would multiply by ``1/3``, giving
    ``0.20000002``).

    A full mean of 2 to 4,096 float32/float64 values is the same for every layout of them
    (channels first or last) in all but rare cases; with
    ``jaxkeras._xla.summation.set_exact_sums(True)`` it is correctly rounded.

    Args:
        x: a tensor or variable.
        axis: ``None`` (all axes), an axis, or a list/tuple of axes.
        keepdims: keep the reduced axes with size 1.

    Returns:
        A float tensor.
    """
    return _reduce(_exact_mean if exact_sums() else _mean, _as_float_if_bool(x), axis, keepdims)


def var(x: TensorLike, axis: Axes = None, keepdims: bool = False) -> TensorLike:
    """Variance (the biased estimator, dividing by N) along axes.

    Computed as TF computes it: the mean of the squared deviations from the mean, each mean a
    sum divided by the count (see :func:`mean`).

    Args:
        x: a tensor or variable (booleans count as 0/1 floats).
        axis: ``None`` (all axes), an axis, or a list/tuple of axes.
        keepdims: keep the reduced axes with size 1.

    Returns:
        A float tensor.
    """
    return _reduce(_var, _as_float_if_bool(x), axis, keepdims)


def std(x: TensorLike, axis: Axes = None, keepdims: bool = False) -> TensorLike:
    """Standard deviation (the square root of the biased variance, see :func:`var`) along axes.

    Args:
        x: a tensor or variable (booleans count as 0/1 floats).
        axis: ``None`` (all axes), an axis, or a list/tuple of axes.
        keepdims: keep the reduced axes with size 1.

    Returns:
        A float tensor.
    """
    return _reduce(_std, _as_float_if_bool(x), axis, keepdims)


def all(x: TensorLike, axis: Axes = None, keepdims: bool = False) -> TensorLike:
    """Logical AND of the values (non-zero counts as True) along axes.

    Args:
        x: a tensor or variable.
        axis: ``None`` (all axes), an axis, or a list/tuple of axes.
        keepdims: keep the reduced axes with size 1.

    Returns:
        A bool tensor.
    """
    return _reduce(_all, x, axis, keepdims)


def any(x: TensorLike, axis: Axes = None, keepdims: bool = False) -> TensorLike:
    """Logical OR of the values (non-zero counts as True) along axes.

    Args:
        x: a tensor or variable.
        axis: ``None`` (all axes), an axis, or a list/tuple of axes.
        keepdims: keep the reduced axes with size 1.

    Returns:
        A bool tensor.
    """
    return _reduce(_any, x, axis, keepdims)


def logsumexp(x: TensorLike, axis: Axes = None, keepdims: bool = False) -> TensorLike:
    """``log(sum(exp(x)))`` along axes, computed stably.

    The maximum is subtracted before exponentiating, so large inputs do not overflow, and
    slices that are all ``-inf`` give ``-inf`` (not NaN).

    Args:
        x: a float tensor or variable.
        axis: ``None`` (all axes), an axis, or a list/tuple of axes.
        keepdims: keep the reduced axes with size 1.

    Returns:
        A tensor.
    """
    return _reduce(_logsumexp, x, axis, keepdims)


@op(name="argmax")
def _argmax(x: Any, axis: int) -> Any:
    return jnp.argmax(x, axis=axis)


@op(name="argmin")
def _argmin(x: Any, axis: int) -> Any:
    return jnp.argmin(x, axis=axis)


def argmax(x: TensorLike, axis: int = -1) -> TensorLike:
    """Index of the maximum along an axis (the first one on ties).

    Args:
        x: a tensor or variable.
        axis: the axis to reduce.

    Returns:
        An integer tensor.
    """
    return _argmax(x, check_axis_of("argmax", "axis", x, axis))


def argmin(x: TensorLike, axis: int = -1) -> TensorLike:
    """Index of the minimum along an axis (the first one on ties).

    Args:
        x: a tensor or variable.
        axis: the axis to reduce.

    Returns:
        An integer tensor.
    """
    return _argmin(x, check_axis_of("argmin", "axis", x, axis))


@op(name="cumsum")
def _cumsum(x: Any, axis: int) -> Any:
    return jnp.cumsum(x, axis=axis)


@op(name="cumprod")
def _cumprod(x: Any, axis: int) -> Any:
    return jnp.cumprod(x, axis=axis)


def cumsum(x: TensorLike, axis: int = 0) -> TensorLike:
    """Cumulative sum along an axis.

    Args:
        x: a tensor or variable.
        axis: the axis.

    Returns:
        A tensor of the shape of ``x``.
    """
    return _cumsum(x, check_axis_of("cumsum", "axis", x, axis))


def cumprod(x: TensorLike, axis: int = 0) -> TensorLike:
    """Cumulative product along an axis.

    Args:
        x: a tensor or variable.
        axis: the axis.

    Returns:
        A tensor of the shape of ``x``.
    """
    return _cumprod(x, check_axis_of("cumprod", "axis", x, axis))


@op(name="l2_normalize", jit=("axis",))
def _l2_normalize(x: Any, axis: tuple | None) -> Any:
    x = jnp.asarray(x)
    wide = widened(x)  # in 16 bits, 1e4**2 overflows and 1e-12 flushes to zero
    squares = jnp.sum(jnp.square(wide), axis=axis, keepdims=True)
    return (wide * lax.rsqrt(jnp.maximum(squares, _L2_EPSILON))).astype(x.dtype)


def l2_normalize(x: TensorLike, axis: Axes = None) -> TensorLike:
    """Divides ``x`` by its L2 norm along axes: ``x / sqrt(max(sum(x**2), 1e-12))``.

    The floor of ``1e-12`` on the squared norm keeps zero vectors at zero (no NaN). Integers and
    booleans are normalized as floatx values (TF-Keras raises a ``TypeError`` for them), as
    ``K.sqrt`` and ``K.softmax`` of integers give floats.

    Args:
        x: a tensor or variable.
        axis: ``None`` (all axes), an axis, or a list/tuple of axes.

    Returns:
        A tensor of the shape of ``x``: of its dtype for a floating-point ``x``, else floatx.
    """
    if not jnp.issubdtype(dtype_of(x), jnp.inexact):
        x = cast(x, floatx())
    return _l2_normalize(x, check_axes_of("l2_normalize", "axis", x, axis))


@op(name="in_top_k", jit=())
def _in_top_k(predictions: Any, targets: Any, k: Any) -> Any:
    num_classes = predictions.shape[-1]
    valid = (targets >= 0) & (targets < num_classes)
    picked = jnp.clip(targets, 0, num_classes - 1).astype(jnp.int32)
    target_scores = jnp.take_along_axis(predictions, picked[:, None], axis=-1)
    higher = jnp.sum(predictions > target_scores, axis=-1)
    finite = jnp.all(jnp.isfinite(predictions), axis=-1)
    return valid & finite & (higher < jnp.asarray(k).astype(higher.dtype))


def in_top_k(predictions: TensorLike, targets: TensorLike, k: int) -> TensorLike:
    """Whether each target's prediction is among the ``k`` largest of its row.

    As in TF, ties count in the target's favour: a target is in the top ``k`` when fewer than
    ``k`` classes have a strictly larger prediction. Rows holding a non-finite prediction and
    targets out of range give False.

    Args:
        predictions: a float tensor of shape ``(batch_size, classes)``.
        targets: an integer tensor of shape ``(batch_size,)``.
        k: the number of top predictions to consider: an int, or (as TF takes it) an
            integer scalar tensor.

    Returns:
        A bool tensor of shape ``(batch_size,)``.

    Raises:
        ValueError: for inputs of the wrong rank or a negative ``k``.
        TypeError: for a ``k`` that is neither an int nor an integer scalar tensor.
    """
    if ndim(predictions) != 2 or ndim(targets) != 1:
        raise ValueError(
            "in_top_k: expected predictions of rank 2 and targets of rank 1, got shapes "
            f"{int_shape(predictions)} and {int_shape(targets)}"
        )
    if isinstance(k, (Node, jax.Array, np.ndarray)) and not is_int(k):
        if ndim(k) != 0 or not jnp.issubdtype(dtype_of(k), jnp.integer):
            raise TypeError(f"in_top_k: k must be an int or an integer scalar tensor, got {k!r}")
        return _in_top_k(predictions, targets, k)
    return _in_top_k(predictions, targets, check_int("in_top_k", "k", k))
