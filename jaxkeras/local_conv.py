"""Locally connected (unshared-weight) convolutions: local_conv1d and local_conv2d.

The patches of every output position are gathered by a static loop over the *window* (one
strided slice per offset, never a loop over positions) and contracted with the per-position
kernels in one batched matmul.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
from jax import lax

from jaxkeras._engine.graph import op
from jaxkeras._ops.spatial import (
    channel_axis,
    common_dtype,
    spatial_axes,
    window_slices,
)
from jaxkeras.checks import (
    check_data_format,
    check_int_tuple,
    check_rank,
    check_same_size,
)
from jaxkeras.mixed_precision import product

__all__ = ["local_conv1d", "local_conv2d"]

# (batch, positions, features) x (positions, features, filters) -> (positions, batch, filters)
_PER_POSITION = functools.partial(lax.dot_general, dimension_numbers=(((2,), (1,)), ((1,), (0,))))


@op(name="local_conv", jit=("kernel_size", "strides", "out_sizes", "data_format"))
def _local_conv(inputs, kernel, kernel_size, strides, out_sizes, data_format):
    inputs, kernel = common_dtype(inputs, kernel)
    n = len(kernel_size)
    axes = spatial_axes(n, data_format)
    slices = window_slices(inputs, axes, kernel_size, strides, (1,) * n, out_sizes)
    if data_format == "channels_last":
        patches = jnp.stack(slices, axis=-2)  # (batch, *out, window, channels)
    else:  # TensorFlow orders the features (channel, window) here
        patches = jnp.moveaxis(jnp.stack(slices, axis=2), (1, 2), (-2, -1))
    positions = math.prod(out_sizes)
    patches = patches.reshape(patches.shape[0], positions, kernel.shape[1])
    y = jnp.moveaxis(product(_PER_POSITION, patches, kernel), 0, 1)  # (batch, positions, filters)
    y = y.reshape(y.shape[0], *out_sizes, kernel.shape[2])
    return y if data_format == "channels_last" else jnp.moveaxis(y, -1, 1)


def _local(fn: str, n: int, inputs, kernel, kernel_size, strides, output_shape, data_format):
    data_format = check_data_format(fn, data_format)
    kernel_size = check_int_tuple(fn, "kernel_size", kernel_size, n)
    strides = check_int_tuple(fn, "strides", strides, n)
    out_sizes = check_int_tuple(fn, "output_shape", output_shape, n)
    layout = "(batch, spatial..., channels) or channels first"
    shape = check_rank(fn, "inputs", inputs, n + 2, layout=layout)
    k_shape = check_rank(
        fn, "kernel", kernel, 3, layout="(output positions, window * channels, filters)"
    )
    check_same_size(fn, "output positions and kernel.shape[0]", math.prod(out_sizes), k_shape[0])
    channels = shape[channel_axis(n, data_format)]
    features = None if channels is None else math.prod(kernel_size) * channels
    check_same_size(
        fn, "prod(kernel_size) * input channels and kernel.shape[1]", features, k_shape[1]
    )
    for a, o, k, s in zip(spatial_axes(n, data_format), out_sizes, kernel_size, strides):
        if shape[a] is not None and (o - 1) * s + k > shape[a]:
            raise ValueError(
                f"{fn}: output_shape {out_sizes} with kernel_size {kernel_size} and "
                f"strides {strides} needs more than the input's {shape[a]} steps"
            )
    return _local_conv(inputs, kernel, kernel_size, strides, out_sizes, data_format)


def local_conv1d(
    inputs: Any,
    kernel: Any,
    kernel_size: int | Sequence[int],
    strides: int | Sequence[int],
    data_format: str | None = None,
) -> Any:
    """1D convolution with unshared weights (Keras ``LocallyConnected1D``), 'valid' padding.

    Args:
        inputs: ``(batch, steps, channels)`` (``channels_last``) or ``(batch, channels, steps)``.
        kernel: ``(output_length, kernel_size * channels, filters)``; the features of a
            patch are ordered (offset, channel) for ``channels_last`` and (channel, offset) for
            ``channels_first``, as in TF-Keras.
        kernel_size: an int or a 1-tuple, the window length.
        strides: an int or a 1-tuple.
        data_format: ``'channels_last'`` or ``'channels_first'``; default from the config.

    Returns:
        ``(batch, output_length, filters)``, or ``(batch, filters, output_length)`` for
        ``channels_first``.

    Raises:
        ValueError: for an unknown ``data_format``, bad ranks, or a kernel shape that does not
            match the input and window.
    """
    k_shape = check_rank(
        "local_conv1d",
        "kernel",
        kernel,
        3,
        layout="(output_length, kernel_size * channels, filters)",
    )
    if k_shape[0] is None:
        raise ValueError("local_conv1d: the output length kernel.shape[0] must be known")
    return _local("local_conv1d", 1, inputs, kernel, kernel_size, strides, k_shape[0], data_format)


def local_conv2d(
    inputs: Any,
    kernel: Any,
    kernel_size: int | Sequence[int],
    strides: int | Sequence[int],
    output_shape: Sequence[int],
    data_format: str | None = None,
) -> Any:
    """2D convolution with unshared weights (Keras ``LocallyConnected2D``), 'valid' padding.

    Args:
        inputs: ``(batch, rows, cols, channels)`` (``channels_last``) or
            ``(batch, channels, rows, cols)``.
        kernel: ``(output_rows * output_cols, kh * kw * channels, filters)``; positions are
            row-major; the features of a patch are ordered (kh, kw, channel) for
            ``channels_last`` and (channel, kh, kw) for ``channels_first``, as in TF-Keras.
        kernel_size: an int or a 2-tuple, the window.
        strides: an int or a 2-tuple.
        output_shape: ``(output_rows, output_cols)``.
        data_format: ``'channels_last'`` or ``'channels_first'``; default from the config.

    Returns:
        ``(batch, output_rows, output_cols, filters)``, or
        ``(batch, filters, output_rows, output_cols)`` for ``channels_first``.

    Raises:
        ValueError: for an unknown ``data_format``, bad ranks, or a kernel shape that does not
            match ``output_shape``, the input and the window.
    """
    return _local(
        "local_conv2d", 2, inputs, kernel, kernel_size, strides, output_shape, data_format
    )
