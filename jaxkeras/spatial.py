"""Argument checks and window arithmetic shared by convolution, pooling and local convolution.

Everything here is static: it runs on Python ints and shape tuples, either in the thin public
wrappers (validation) or inside op bodies (padding and slicing of arrays whose shapes are known
at trace time).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxkeras.config import normalize_data_format
from jaxkeras.tensors import int_shape

PADDINGS = ("same", "valid")


# ---------------------------------------------------------------------------------------------
# validation (public wrappers)


def int_tuple(value: Any, n: int, arg: str, fn: str) -> tuple[int, ...]:
    """Returns ``value`` as a tuple of ``n`` positive ints (an int is repeated ``n`` times).

    Raises:
        ValueError: naming ``fn``, ``arg`` and the value otherwise.
    """
    items = (value,) * n if isinstance(value, (int, np.integer)) else value
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


def padding_arg(padding: Any, fn: str, allowed: Sequence[str] = PADDINGS) -> str:
    """Returns ``padding`` lower-cased after checking it is one of ``allowed``.

    Raises:
        ValueError: naming ``fn`` and the value otherwise.
    """
    lowered = padding.lower() if isinstance(padding, str) else padding
    if lowered not in allowed:
        raise ValueError(f"{fn}: padding must be one of {tuple(allowed)}, got {padding!r}")
    return lowered


def data_format_arg(data_format: Any, fn: str) -> str:
    """Resolves ``data_format`` (``None`` means the configured default).

    Raises:
        ValueError: naming ``fn`` and the value when it is not a known format.
    """
    try:
        return normalize_data_format(data_format)
    except ValueError as err:
        raise ValueError(f"{fn}: {err}") from None


def choice_arg(value: Any, allowed: Sequence[str], arg: str, fn: str) -> str:
    """Checks that ``value`` is one of ``allowed``.

    Raises:
        ValueError: naming ``fn``, ``arg`` and the value otherwise.
    """
    if value not in allowed:
        raise ValueError(f"{fn}: {arg} must be one of {tuple(allowed)}, got {value!r}")
    return value


def shape_of(x: Any, rank: int, arg: str, fn: str, layout: str) -> tuple:
    """Returns the static shape of ``x`` (``None`` for unknown dims) after checking its rank.

    Args:
        layout: what the dimensions mean, for the error message.

    Raises:
        ValueError: naming ``fn``, ``arg`` and the shape when the rank is not ``rank``.
    """
    shape = int_shape(x)
    if shape is None or len(shape) != rank:
        raise ValueError(f"{fn}: {arg} must be {rank}-D {layout}, got shape {shape}")
    return shape


def check_equal(a: int | None, b: int | None, what: str, fn: str) -> None:
    """Raises ValueError naming ``what`` when two known sizes differ (``None`` is unknown)."""
    if a is not None and b is not None and a != b:
        raise ValueError(f"{fn}: {what} differ: {a} vs {b}")


# ---------------------------------------------------------------------------------------------
# layouts


def spatial_axes(n: int, data_format: str) -> tuple[int, ...]:
    """The axes of the ``n`` spatial dimensions of a rank ``n + 2`` array."""
    first = 2 if data_format == "channels_first" else 1
    return tuple(range(first, first + n))


def channel_axis(n: int, data_format: str) -> int:
    """The channel axis of a rank ``n + 2`` array."""
    return 1 if data_format == "channels_first" else n + 1


def dimension_numbers(n: int, data_format: str, transpose_kernel: bool = False):
    """``lax`` convolution dimension numbers for Keras layouts.

    Args:
        n: the number of spatial dimensions.
        data_format: the layout of the input and output.
        transpose_kernel: the kernel is ``(spatial..., out, in)`` (transposed convolutions)
            rather than ``(spatial..., in, out)``.

    Returns:
        A ``lax.ConvDimensionNumbers``.
    """
    io = (n, n + 1) if transpose_kernel else (n + 1, n)
    data = (0, channel_axis(n, data_format), *spatial_axes(n, data_format))
    return lax.ConvDimensionNumbers(data, (*io, *range(n)), data)


# ---------------------------------------------------------------------------------------------
# window arithmetic (inside op bodies)


def effective_size(window: int, dilation: int) -> int:
    """The extent of a dilated window."""
    return dilation * (window - 1) + 1


def output_size(size: int, window: int, stride: int, dilation: int, padding: str) -> int:
    """The output length of a sliding window over ``size`` positions (TensorFlow's rule)."""
    if padding == "same":
        return -(-size // stride)
    if padding == "causal":
        return (size - 1) // stride + 1
    return (size - effective_size(window, dilation)) // stride + 1


def window_pads(
    sizes: Sequence[int],
    windows: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    padding: str,
) -> list[tuple[int, int]]:
    """Explicit ``(low, high)`` padding per spatial dimension.

    ``'same'`` pads so that the output has ``ceil(size / stride)`` positions, with the smaller
    half before (as TensorFlow); ``'causal'`` pads only before, by the dilated window minus one;
    ``'valid'`` does not pad.
    """
    pads = []
    for size, window, stride, dilation in zip(sizes, windows, strides, dilations):
        extent = effective_size(window, dilation)
        if padding == "same":
            total = max(
                (output_size(size, window, stride, dilation, padding) - 1) * stride + extent - size,
                0,
            )
            pads.append((total // 2, total - total // 2))
        elif padding == "causal":
            pads.append((extent - 1, 0))
        else:
            pads.append((0, 0))
    return pads


def common_dtype(x: Any, kernel: Any) -> tuple[Any, Any]:
    """Casts an input and a kernel to their common dtype (``lax`` wants them equal)."""
    dtype = jnp.result_type(x, kernel)
    return x.astype(dtype), kernel.astype(dtype)


def pad_spatial(
    x: Any, axes: Sequence[int], pads: Sequence[tuple[int, int]], value: Any = 0
) -> Any:
    """Pads the ``axes`` of ``x`` by ``pads`` with ``value`` (skipped when nothing to pad)."""
    if not any(lo or hi for lo, hi in pads):
        return x
    config = [(0, 0, 0)] * x.ndim
    for axis, (lo, hi) in zip(axes, pads):
        config[axis] = (lo, hi, 0)
    return lax.pad(x, lax.convert_element_type(value, x.dtype), config)


def lower(
    lowerings: dict[str, Callable], lowering: str, cpu_choice: str, operands: tuple, *args: Any
) -> Any:
    """Calls one lowering of an op: ``lowerings[lowering](*operands, *args)``.

    ``lowering='auto'`` means ``lowerings[cpu_choice]`` where the computation is compiled for
    CPU and ``lowerings['lax']`` on every other platform. The choice is made by
    ``lax.platform_dependent`` when the computation is lowered, so it follows the device the
    computation runs on (not the default backend at trace time).
    """
    if lowering == "auto" and cpu_choice != "lax":
        on_cpu, elsewhere = lowerings[cpu_choice], lowerings["lax"]
        return lax.platform_dependent(
            *operands,
            cpu=lambda *ops: on_cpu(*ops, *args),
            default=lambda *ops: elsewhere(*ops, *args),
        )
    return lowerings["lax" if lowering == "auto" else lowering](*operands, *args)


def window_slices(
    x: Any,
    axes: Sequence[int],
    windows: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out_sizes: Sequence[int],
) -> list:
    """One strided slice of ``x`` per window offset (row-major over the window).

    Slice ``k`` holds, at output position ``o``, the element at ``o * stride + offset_k *
    dilation`` along each of ``axes``: stacking the slices gives the patches of a sliding window
    over an already padded ``x`` (a static loop over the window, never over positions).
    """
    slices = []
    for offset in itertools.product(*(range(w) for w in windows)):
        start = [0] * x.ndim
        limit = list(x.shape)
        step = [1] * x.ndim
        for axis, k, s, d, o in zip(axes, offset, strides, dilations, out_sizes):
            start[axis] = k * d
            limit[axis] = k * d + (o - 1) * s + 1
            step[axis] = s
        slices.append(lax.slice(x, start, limit, step))
    return slices
