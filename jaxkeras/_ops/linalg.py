"""Tensor products: ``dot`` (N-D, as ``numpy.dot``) and ``batch_dot``."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
from jax import lax

from jaxkeras._engine.graph import op, plain_eager, static_shape
from jaxkeras._ops.common import (
    TensorLike,
)
from jaxkeras.checks import (
    check_axis_of,
    is_int,
)
from jaxkeras.mixed_precision import product
from jaxkeras.tensors import int_shape, ndim

__all__ = ["batch_dot", "dot"]


def _check_same(a: int | None, b: int | None, fn: str, what: str, x: Any, y: Any) -> None:
    if a is not None and b is not None and a != b:
        raise ValueError(
            f"{fn}: incompatible shapes {int_shape(x)} and {int_shape(y)}: {what} ({a} != {b})"
        )


def _dot_splits(x: Any, y: Any) -> tuple[int, int, int] | None:
    """A matrix (or stack of them) ``y``'s columns are the output's last axis."""
    return (1, -1, -1) if len(static_shape(y) or ()) >= 2 else None


def _dot_body(x: Any, y: Any) -> Any:
    return product(jnp.dot, x, y)


_dot = op(_dot_body, name="dot", splits=_dot_splits)


def dot(x: TensorLike, y: TensorLike) -> TensorLike:
    """Tensor product, as ``numpy.dot``: sums over the last axis of ``x`` and the
    second-to-last axis of ``y`` (its only axis when ``y`` is 1-D).

    Examples of shapes: ``(2, 3) . (3, 4) -> (2, 4)``, ``(32, 28, 3) . (3, 4) -> (32, 28, 4)``,
    ``(2, 3) . (4, 3, 5) -> (2, 4, 5)``, ``(2, 3, 4) . (5, 4, 6) -> (2, 3, 5, 6)``.

    Args:
        x: a tensor or variable.
        y: a tensor or variable.

    Returns:
        A tensor of shape ``x.shape[:-1] + y.shape[:-2] + y.shape[-1:]``.

    Raises:
        ValueError: when the summed dimensions differ.
    """
    if plain_eager(x, y):  # jax.numpy's product, as the op's body runs it there
        try:
            return jnp.dot(x, y)
        except TypeError:
            pass  # (shapes that do not fit: the message below names them)
    shape_x, shape_y = static_shape(x), static_shape(y)
    if len(shape_x) and len(shape_y):
        y_axis = -2 if len(shape_y) >= 2 else -1
        if shape_x[-1] != shape_y[y_axis]:  # (the message is formatted only then)
            which = "second-to-last" if y_axis == -2 else "only"
            what = f"the last dimension of x must equal the {which} dimension of y"
            _check_same(shape_x[-1], shape_y[y_axis], "dot", what, x, y)
    return _dot(x, y)


@op(name="batch_dot", jit=("axes", "pad"))
def _batch_dot(x: Any, y: Any, axes: tuple[int, int], pad: bool) -> Any:
    dtype = jnp.result_type(x, y)
    dims = (((axes[0],), (axes[1],)), ((0,), (0,)))
    contract = functools.partial(lax.dot_general, dimension_numbers=dims)
    result = product(contract, jnp.asarray(x, dtype), jnp.asarray(y, dtype))
    return result[:, None] if pad else result


def _pair_of_axes(axes: Any, x: TensorLike, y: TensorLike) -> tuple[Any, Any]:
    if axes is None:
        return ndim(x) - 1, ndim(y) - (1 if ndim(y) == 2 else 2)
    if is_int(axes):
        return axes, axes
    if isinstance(axes, Sequence) and len(axes) == 2:
        return tuple(_single_axis(a, axes) for a in axes)
    raise ValueError(f"batch_dot: axes must be None, an int or a pair of ints, got {axes!r}")


def _single_axis(a: Any, axes: Any) -> Any:
    if isinstance(a, Sequence):
        if len(a) != 1:
            raise ValueError(
                f"batch_dot: axes={axes!r} sums over several axes of one input; only one "
                "axis per input is supported"
            )
        return a[0]
    return a


def batch_dot(x: TensorLike, y: TensorLike, axes: Any = None) -> TensorLike:
    """Batch-wise dot product: for each sample ``i``, sums ``x[i]`` and ``y[i]`` over one axis.

    The result's shape is the batch size, then the dimensions of ``x`` other than the batch
    and the summed one, then those of ``y``. When both inputs have rank 2 the result has
    shape ``(batch_size, 1)``. Examples: ``(32, 20, 1), (32, 30, 20), axes=(1, 2)`` gives
    ``(32, 1, 30)``; ``(100, 20), (100, 30, 20), axes=(1, 2)`` gives ``(100, 30)``;
    ``[[1, 2], [3, 4]]`` and ``[[5, 6], [7, 8]]`` with ``axes=1`` give ``[[17], [53]]``.

    Args:
        x: a tensor or variable of rank >= 2.
        y: a tensor or variable of rank >= 2, with the same batch size.
        axes: the axes summed over: an int for both, a pair ``(axis_of_x, axis_of_y)``
            (single-element lists are accepted as entries), or ``None``: the last axis of
            ``x`` with the last axis of a rank-2 ``y``, else the second-to-last axis of ``y``.

    Returns:
        A tensor.

    Raises:
        ValueError: for ranks below 2, different batch sizes, a summed axis of 0 or out of
            range, or summed dimensions of different sizes.
    """
    if ndim(x) < 2 or ndim(y) < 2:
        raise ValueError(
            f"batch_dot: inputs must have rank >= 2, got shapes {int_shape(x)} and {int_shape(y)}"
        )
    _check_same(int_shape(x)[0], int_shape(y)[0], "batch_dot", "batch sizes differ", x, y)
    ax, ay = _pair_of_axes(axes, x, y)
    pair = (
        check_axis_of("batch_dot", "axes[0]", x, ax),
        check_axis_of("batch_dot", "axes[1]", y, ay),
    )
    if 0 in pair:
        raise ValueError(
            f"batch_dot: axes={axes!r} would sum over the batch axis 0; add a batch axis "
            "with K.expand_dims(x, 0) if your inputs are not batched"
        )
    _check_same(
        int_shape(x)[pair[0]],
        int_shape(y)[pair[1]],
        "batch_dot",
        f"x.shape[{pair[0]}] must equal y.shape[{pair[1]}]",
        x,
        y,
    )
    return _batch_dot(x, y, pair, ndim(x) == 2 and ndim(y) == 2)
