"""Pooling: pool2d and pool3d, max or average, over ``lax.reduce_window`` or reshapes.

Windows that tile the input (``strides == pool_size``, the common case) have a second lowering:
pad, crop, split each spatial axis into (positions, window) and reduce the window axes. Its
gradient is an elementwise select instead of XLA's select-and-scatter, which is several times
faster on CPU; :func:`pool_lowering` picks it per platform.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxkeras._engine.graph import op
from jaxkeras._ops.common import standard_result_type
from jaxkeras._ops.spatial import (
    lower,
    pad_spatial,
    spatial_axes,
    window_pads,
)
from jaxkeras._xla.summation import quotient
from jaxkeras.checks import (
    check_choice,
    check_data_format,
    check_int_tuple,
    check_padding,
    check_rank,
)

__all__ = ["pool2d", "pool3d"]

POOL_MODES = ("max", "avg")
POOL_LOWERINGS = ("auto", "lax", "reshape")


def pool_lowering(platform: str) -> str:
    """The lowering ``lowering='auto'`` uses for tiling windows on ``platform``.

    Measured by ``benchmarks/bench_conv.py``: on CPU the reshape lowering's backward pass is
    several times faster than XLA's select-and-scatter, its forward as fast
    (``benchmarks/RESULTS.md``, rows "pool2d max 2x2/2 ...: reshape vs lax"; in a convnet's
    train step, rows "convnet SGD step train step ...: reshape pool vs lax"); accelerators
    keep ``reduce_window``. No upstream issue found for XLA:CPU's select-and-scatter speed
    (checked 2026-11-27).

    Args:
        platform: a JAX platform name (``'cpu'``, ``'cuda'``, ``'rocm'``, ``'tpu'``, ...).

    Returns:
        ``'reshape'`` or ``'lax'``.
    """
    return "reshape" if platform == "cpu" else "lax"


def _identity(kind: str, dtype: Any) -> Any:
    """The neutral element of a window reduction (also the value padding takes)."""
    if kind == "sum":
        return np.zeros((), dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        return np.array(-np.inf, dtype)
    return np.array(jnp.iinfo(dtype).min, dtype)


def _reduce_lax(x, kind, windows, strides, pads, axes):
    dims = [1] * x.ndim
    steps = [1] * x.ndim
    full_pads = [(0, 0)] * x.ndim
    for axis, w, s, p in zip(axes, windows, strides, pads):
        dims[axis], steps[axis], full_pads[axis] = w, s, p
    reducer = lax.max if kind == "max" else lax.add
    return lax.reduce_window(x, _identity(kind, x.dtype), reducer, dims, steps, full_pads)


def _reduce_reshape(x, kind, windows, strides, pads, axes):
    """Tiling windows (``strides == windows``): split every spatial axis into (positions,
    window) and reduce the window axes."""
    del strides  # equal to windows
    x = pad_spatial(x, axes, pads, _identity(kind, x.dtype))
    limits = list(x.shape)
    for axis, w in zip(axes, windows):
        limits[axis] = x.shape[axis] // w * w
    x = lax.slice(x, [0] * x.ndim, limits)
    shape, window_axes = [], []
    for axis, size in enumerate(x.shape):
        if axis in axes:
            w = windows[axes.index(axis)]
            shape += [size // w, w]
            window_axes.append(len(shape) - 1)
        else:
            shape.append(size)
    tiles = x.reshape(shape)
    reduce = jnp.max if kind == "max" else jnp.sum
    return reduce(tiles, axis=tuple(window_axes))


_POOL_LOWERINGS = {"lax": _reduce_lax, "reshape": _reduce_reshape}


def _window_reduce(x, kind, windows, strides, pads, axes, lowering):
    tiling = tuple(windows) == tuple(strides)
    return lower(
        _POOL_LOWERINGS,
        lowering if tiling else "lax",
        pool_lowering("cpu"),
        (x,),
        kind,
        windows,
        strides,
        pads,
        axes,
    )


@op(name="pool", jit=("pool_size", "strides", "padding", "data_format", "mode", "lowering"))
def _pool(x, pool_size, strides, padding, data_format, mode, lowering):
    n = len(pool_size)
    axes = spatial_axes(n, data_format)
    sizes = [x.shape[a] for a in axes]
    pads = window_pads(sizes, pool_size, strides, (1,) * n, padding)
    reduce = functools.partial(
        _window_reduce, windows=pool_size, strides=strides, pads=pads, axes=axes, lowering=lowering
    )
    if mode == "max":
        return reduce(x, "max")
    # Average over the real elements only: divide by the window sums of ones padded with zeros.
    # 16-bit floats are summed in float32 and the mean returned in their dtype, as TF does.
    dtype = standard_result_type(x.dtype, jnp.float32)
    ones = jnp.ones([x.shape[a] if a in axes else 1 for a in range(x.ndim)], dtype)
    mean = quotient(reduce(x.astype(dtype), "sum"), reduce(ones, "sum"))  # divided, as TF does
    return mean.astype(x.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else mean


def _pool_nd(fn: str, n: int, x, pool_size, strides, padding, data_format, pool_mode, lowering):
    data_format = check_data_format(fn, data_format)
    padding = check_padding(fn, padding)
    pool_size = check_int_tuple(fn, "pool_size", pool_size, n)
    strides = check_int_tuple(fn, "strides", strides, n)
    check_choice(fn, "pool_mode", pool_mode, allowed=POOL_MODES)
    check_choice(fn, "lowering", lowering, allowed=POOL_LOWERINGS)
    if lowering == "reshape" and pool_size != strides:
        raise ValueError(
            f"{fn}: lowering='reshape' needs strides equal to pool_size, got "
            f"strides {strides} and pool_size {pool_size}"
        )
    shape = check_rank(fn, "x", x, n + 2, layout="(batch, spatial..., channels) or channels first")
    for a, w in zip(spatial_axes(n, data_format), pool_size):
        if padding == "valid" and shape[a] is not None and shape[a] < w:
            raise ValueError(
                f"{fn}: pool_size {pool_size} is larger than the input's spatial "
                f"size {shape[a]} with padding 'valid'"
            )
    return _pool(x, pool_size, strides, padding, data_format, pool_mode, lowering)


def pool2d(
    x: Any,
    pool_size: int | Sequence[int],
    strides: int | Sequence[int] = (1, 1),
    padding: str = "valid",
    data_format: str | None = None,
    pool_mode: str = "max",
    *,
    lowering: str = "auto",
) -> Any:
    """2D pooling.

    Args:
        x: input of shape ``(batch, rows, cols, channels)`` (``channels_last``) or
            ``(batch, channels, rows, cols)``.
        pool_size: an int or a 2-tuple.
        strides: an int or a 2-tuple.
        padding: ``'valid'`` or ``'same'`` (TensorFlow's rule: output ``ceil(size / stride)``;
            average pooling then divides by the number of real, unpadded, elements).
        data_format: ``'channels_last'`` or ``'channels_first'``; default from the config.
        pool_mode: ``'max'`` or ``'avg'``.
        lowering: ``'auto'`` (per platform, see :func:`pool_lowering`), ``'lax'``
            (``lax.reduce_window``) or ``'reshape'`` (needs ``strides == pool_size``). The
            reshape lowering splits the gradient of a max-pooling window evenly among tied
            maxima; ``reduce_window`` gives it to one of them.

    Returns:
        The pooled tensor, in the same data format.

    Raises:
        ValueError: for an unknown ``padding``, ``data_format``, ``pool_mode`` or ``lowering``,
            bad ``pool_size``/``strides``, or a rank other than 4.
    """
    return _pool_nd("pool2d", 2, x, pool_size, strides, padding, data_format, pool_mode, lowering)


def pool3d(
    x: Any,
    pool_size: int | Sequence[int],
    strides: int | Sequence[int] = (1, 1, 1),
    padding: str = "valid",
    data_format: str | None = None,
    pool_mode: str = "max",
    *,
    lowering: str = "auto",
) -> Any:
    """3D pooling.

    Args:
        x: input of shape ``(batch, depth, rows, cols, channels)`` (``channels_last``) or
            ``(batch, channels, depth, rows, cols)``.
        pool_size: an int or a 3-tuple.
        strides: an int or a 3-tuple.
        padding: ``'valid'`` or ``'same'`` (as :func:`pool2d`).
        data_format: ``'channels_last'`` or ``'channels_first'``; default from the config.
        pool_mode: ``'max'`` or ``'avg'``.
        lowering: ``'auto'``, ``'lax'`` or ``'reshape'``, as :func:`pool2d`.

    Returns:
        The pooled tensor, in the same data format.

    Raises:
        ValueError: for an unknown ``padding``, ``data_format``, ``pool_mode`` or ``lowering``,
            bad ``pool_size``/``strides``, or a rank other than 5.
    """
    return _pool_nd("pool3d", 3, x, pool_size, strides, padding, data_format, pool_mode, lowering)
