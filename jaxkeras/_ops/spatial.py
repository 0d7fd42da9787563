"""Argument checks and window arithmetic shared by convolution, pooling and local convolution.

Everything here is static: it runs on Python ints and shape tuples, either in the thin public
wrappers (validation) or inside op bodies (padding and slicing of arrays whose shapes are known
at trace time).
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax.numpy as jnp
from jax import lax

# ---------------------------------------------------------------------------------------------
# layouts


def spatial_axes(n: int, data_format: str) -> tuple[int, ...]:
    """The axes of the ``n`` spatial dimensions of a rank ``n + 2`` array."""
    first = 2 if data_format == "channels_first" else 1
    return tuple(range(first, first + n))


def spatial_sizes(shape: Sequence[Any], n: int, data_format: str) -> list:
    """The ``n`` spatial sizes of a rank ``n + 2`` shape (``None`` where a size is unknown)."""
    return [shape[a] for a in spatial_axes(n, data_format)]


def channel_axis(n: int, data_format: str) -> int:
    """The channel axis of a rank ``n + 2`` array."""
    return 1 if data_format == "channels_first" else n + 1


def dimension_numbers(n: int, data_format: str) -> lax.ConvDimensionNumbers:
    """``lax`` convolution dimension numbers for Keras layouts.

    Args:
        n: the number of spatial dimensions.
        data_format: the layout of the input and output; kernels are ``(spatial..., in, out)``.

    Returns:
        A ``lax.ConvDimensionNumbers``.
    """
    data = (0, channel_axis(n, data_format), *spatial_axes(n, data_format))
    return lax.ConvDimensionNumbers(data, (n + 1, n, *range(n)), data)


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

    Args:
        sizes: the input's spatial sizes.
        windows: the window (kernel or pool) sizes.
        strides: the strides.
        dilations: the dilation rates.
        padding: ``'same'``, ``'valid'`` or ``'causal'``.

    Returns:
        One ``(low, high)`` pair per spatial dimension.
    """
    extents = [effective_size(w, d) for w, d in zip(windows, dilations)]
    if padding == "causal":
        return [(extent - 1, 0) for extent in extents]
    return [tuple(p) for p in lax.padtype_to_pads(sizes, extents, strides, padding.upper())]


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


_IN_LOOP_BODY: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "jaxkeras_in_loop_body", default=False
)


@contextlib.contextmanager
def loop_body() -> Iterator[None]:
    """Marks the ops traced inside as the body of a compiled loop (``lax.scan``), where
    ``lowering='auto'`` may choose differently (see :func:`in_loop_body`).

    Returns:
        A context manager.
    """
    token = _IN_LOOP_BODY.set(True)
    try:
        yield
    finally:
        _IN_LOOP_BODY.reset(token)


def in_loop_body() -> bool:
    """Whether ops are being traced inside :func:`loop_body`.

    Returns:
        ``True`` inside a compiled loop's body.
    """
    return _IN_LOOP_BODY.get()


_LOWERED_FOR: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "jaxkeras_lowered_for", default=None
)


@contextlib.contextmanager
def lowered_for(platform: str | None) -> Iterator[None]:
    """Marks the ops traced inside as part of a computation that will be lowered for
    ``platform`` alone (``K.function``'s own compiles), so that :func:`per_platform` picks
    its branch at once instead of tracing one per platform.

    Args:
        platform: a JAX platform name, or ``None`` when the platform is not known yet.

    Returns:
        A context manager.
    """
    token = _LOWERED_FOR.set(platform)
    try:
        yield
    finally:
        _LOWERED_FOR.reset(token)


def per_platform(operands: tuple, cpu: Callable, default: Callable) -> Any:
    """``cpu(*operands)`` where the computation is compiled for CPU, else ``default(*operands)``.

    Inside :func:`lowered_for` a platform the choice is made now; elsewhere (``f.pure`` in the
    user's own ``jax.jit``, an export for several platforms) by ``lax.platform_dependent`` when
    the computation is lowered, so it follows the device it runs on. ``lax.platform_dependent``
    traces every branch, and differentiates each in a gradient: half of a convnet's tracing
    time went there (``benchmarks/RESULTS.md``, "cold start" rows); the lowered program is the
    same either way (JAX keeps only the branch of the platform it lowers for).

    Args:
        operands: the arrays both branches take.
        cpu: the branch for CPU.
        default: the branch for every other platform.

    Returns:
        The chosen branch's result.
    """
    platform = _LOWERED_FOR.get()
    if platform is not None:
        return (cpu if platform == "cpu" else default)(*operands)
    return lax.platform_dependent(*operands, cpu=cpu, default=default)


def lower(
    lowerings: dict[str, Callable], lowering: str, cpu_choice: str, operands: tuple, *args: Any
) -> Any:
    """Calls one lowering of an op: ``lowerings[lowering](*operands, *args)``.

    ``lowering='auto'`` means ``lowerings[cpu_choice]`` where the computation is compiled for
    CPU and ``lowerings['lax']`` on every other platform (:func:`per_platform`), so it
    follows the device the computation runs on (not the default backend at trace time).
    """
    if lowering == "auto" and cpu_choice != "lax":
        on_cpu, elsewhere = lowerings[cpu_choice], lowerings["lax"]
        return per_platform(
            operands,
            cpu=lambda *ops: on_cpu(*ops, *args),
            default=lambda *ops: elsewhere(*ops, *args),
        )
    return lowerings["lax" if lowering == "auto" else lowering](*operands, *args)


def window_slice(
    x: Any,
    axes: Sequence[int],
    offset: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out_sizes: Sequence[int],
) -> Any:
    """The strided slice of an already padded ``x`` that holds, at output position ``o``, the
    element at ``o * stride + offset * dilation`` along each of ``axes`` (one window offset)."""
    start = [0] * x.ndim
    limit = list(x.shape)
    step = [1] * x.ndim
    for axis, k, s, d, o in zip(axes, offset, strides, dilations, out_sizes):
        start[axis] = k * d
        limit[axis] = k * d + (o - 1) * s + 1
        step[axis] = s
    return lax.slice(x, start, limit, step)


def window_slices(
    x: Any,
    axes: Sequence[int],
    windows: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out_sizes: Sequence[int],
) -> list:
    """One :func:`window_slice` of ``x`` per window offset (row-major over the window).

    Stacking the slices gives the patches of a sliding window over an already padded ``x`` (a
    static loop over the window, never over positions).
    """
    return [
        window_slice(x, axes, offset, strides, dilations, out_sizes)
        for offset in itertools.product(*(range(w) for w in windows))
    ]
