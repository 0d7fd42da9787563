"""Convolutions: conv1d/2d/3d, transposed, depthwise and separable (pooling and locally
connected layers live in ``pool.py`` and ``local_conv.py``; their names are re-exported here).

Kernels use the Keras layouts: ``(spatial..., in_channels, out_channels)``; depthwise
``(spatial..., in_channels, multiplier)``; transposed ``(spatial..., out_channels, in_channels)``.
Both data formats go straight to XLA through dimension numbers, so no data is transposed. How
each convolution is lowered (XLA's convolution, or a matmul form that is faster on CPU) is
chosen per platform in :mod:`jaxkeras._xla.conv_lowering`; ``lowering=`` picks one by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

from jaxkeras._engine.graph import Symbolic, op
from jaxkeras._ops.spatial import (
    channel_axis,
    common_dtype,
    in_loop_body,
    lower,
    output_size,
    spatial_sizes,
    window_pads,
)
from jaxkeras._xla import conv_lowering as lowerings
from jaxkeras._xla.conv_lowering import (
    DEPTHWISE_LOWERINGS,
    LOWERINGS,
    TRANSPOSE_LOWERINGS,
    depthwise_lowering,
    loop_conv_lowering,
    transpose_lowering,
)
from jaxkeras.checks import (
    PADDINGS,
    check_choice,
    check_data_format,
    check_int_tuple,
    check_padding,
    check_rank,
    check_same_size,
)
from jaxkeras.local_conv import local_conv1d, local_conv2d
from jaxkeras.pool import pool2d, pool3d

__all__ = [
    "conv1d",
    "conv2d",
    "conv2d_transpose",
    "conv3d",
    "conv3d_transpose",
    "depthwise_conv2d",
    "local_conv1d",
    "local_conv2d",
    "pool2d",
    "pool3d",
    "separable_conv1d",
    "separable_conv2d",
]


def _pads_for(x, kernel, strides, padding, dilation, data_format):
    n = kernel.ndim - 2
    sizes = spatial_sizes(x.shape, n, data_format)
    return window_pads(sizes, kernel.shape[:n], strides, dilation, padding)


def _positions(x, kernel, strides, pads, dilation, data_format):
    """The output's spatial sizes."""
    n = kernel.ndim - 2
    sizes = spatial_sizes(x.shape, n, data_format)
    return [
        output_size(size + lo + hi, k, s, d, "valid")
        for size, (lo, hi), k, s, d in zip(sizes, pads, kernel.shape[:n], strides, dilation)
    ]


def _conv_splits(x, kernel, strides, padding, dilation, data_format, lowering):
    """Output filters are the kernel's last axis: the output's channel axis."""
    return 1, -1, (1 if data_format == "channels_first" else -1)


@op(
    name="conv",
    splits=_conv_splits,
    jit=("strides", "padding", "dilation", "data_format", "lowering"),
)
def _conv(x, kernel, strides, padding, dilation, data_format, lowering):
    x, kernel = common_dtype(x, kernel)
    pads = _pads_for(x, kernel, strides, padding, dilation, data_format)
    return lower(
        lowerings.CONV,
        lowering,
        loop_conv_lowering(kernel.shape[-1], kernel.shape[-2])
        if in_loop_body()
        else lowerings.conv_lowering(
            "cpu",
            kernel.ndim - 2,
            kernel.shape[-1],
            kernel.shape[-2],
            kernel.shape[:-2],
            _positions(x, kernel, strides, pads, dilation, data_format),
        ),
        (x, kernel),
        strides,
        pads,
        dilation,
        data_format,
    )


def _depthwise(x, kernel, strides, padding, dilation, data_format, lowering):
    """Depthwise convolution: each input channel with its own ``multiplier`` filters."""
    x, kernel = common_dtype(x, kernel)
    pads = _pads_for(x, kernel, strides, padding, dilation, data_format)
    return lower(
        lowerings.DEPTHWISE,
        lowering,
        depthwise_lowering("cpu"),
        (x, kernel),
        strides,
        pads,
        dilation,
        data_format,
    )


_depthwise_conv = op(
    _depthwise,
    name="depthwise_conv",
    jit=("strides", "padding", "dilation", "data_format", "lowering"),
)


@op(name="separable_conv", jit=("strides", "padding", "dilation", "data_format", "lowering"))
def _separable_conv(
    x, depthwise_kernel, pointwise_kernel, strides, padding, dilation, data_format, lowering
):
    """A depthwise step, then a pointwise one: XLA's 1x1 convolution after ``'lax'``, one
    matmul over the channels after ``'taps'`` (on CPU its gradients are the faster too)."""
    y = _depthwise(x, depthwise_kernel, strides, padding, dilation, data_format, lowering)
    y, pointwise_kernel = common_dtype(y, pointwise_kernel)
    n = pointwise_kernel.ndim - 2
    ones = (1,) * n
    return lower(
        lowerings.POINTWISE,
        lowering,
        depthwise_lowering("cpu"),
        (y, pointwise_kernel),
        ones,
        [(0, 0)] * n,
        ones,
        data_format,
    )


@op(name="conv_transpose")
def _conv_transpose(x, kernel, out_sizes, strides, padding, dilation, data_format, lowering):
    """The adjoint of the convolution that maps an ``out_sizes`` input to ``x``'s size."""
    x, kernel = common_dtype(x, kernel)
    n = kernel.ndim - 2
    out_sizes = [int(s) for s in out_sizes]
    in_sizes = spatial_sizes(x.shape, n, data_format)
    return lower(
        lowerings.TRANSPOSE,
        lowering,
        transpose_lowering("cpu", in_sizes, out_sizes),
        (x, kernel),
        out_sizes,
        strides,
        padding,
        dilation,
        data_format,
    )


# XLA:CPU runs these (and their gradients) inside a compiled loop several times slower than
# unrolled (https://github.com/jax-ml/jax/issues/12868, open): rnn unrolls short loops whose
# step runs one (see rnn._scan). Plain convolutions choose lowerings with matmul gradients
# there instead (see loop_conv_lowering).
for _body in (_depthwise, _separable_conv.pure, _conv_transpose.pure):
    _body.slow_in_cpu_loops = True


# ---------------------------------------------------------------------------------------------
# validation

_SPATIAL_NAMES = {1: "steps", 2: "rows, cols", 3: "depth, rows, cols"}
_KERNEL_SPATIAL = {1: "k", 2: "kh, kw", 3: "kd, kh, kw"}


def _data_layout(n: int, data_format: str) -> str:
    if data_format == "channels_first":
        return f"(batch, channels, {_SPATIAL_NAMES[n]})"
    return f"(batch, {_SPATIAL_NAMES[n]}, channels)"


class _Spec:
    """The validated static arguments of an ``n``-D sliding-window op."""

    def __init__(
        self,
        fn: str,
        n: int,
        x: Any,
        strides: Any,
        padding: Any,
        data_format: Any,
        dilation_rate: Any,
        paddings: Sequence[str] = PADDINGS,
    ) -> None:
        self.fn = fn
        self.n = n
        self.data_format = check_data_format(fn, data_format)
        self.padding = check_padding(fn, padding, allowed=paddings)
        self.strides = check_int_tuple(fn, "strides", strides, n)
        self.dilation = check_int_tuple(fn, "dilation_rate", dilation_rate, n)
        self.x_shape = check_rank(fn, "x", x, n + 2, layout=_data_layout(n, self.data_format))

    @property
    def channels(self) -> int | None:
        """The input channel count, ``None`` when unknown."""
        return self.x_shape[channel_axis(self.n, self.data_format)]

    @property
    def sizes(self) -> list[int | None]:
        """The input spatial sizes, ``None`` where unknown."""
        return spatial_sizes(self.x_shape, self.n, self.data_format)

    def kernel(self, kernel: Any, layout: str, arg: str = "kernel") -> tuple:
        """The static shape of a kernel, after checking its rank against ``layout``."""
        return check_rank(
            self.fn, arg, kernel, self.n + 2, layout=f"({_KERNEL_SPATIAL[self.n]}, {layout})"
        )

    def check_window(self, sizes: Sequence[int | None], kernel_shape: tuple) -> None:
        """Checks the dilated window fits the (padded) input where sizes are known."""
        for size, k, s, d in zip(sizes, kernel_shape, self.strides, self.dilation):
            if size is not None and k is not None and output_size(size, k, s, d, self.padding) < 1:
                raise ValueError(
                    f"{self.fn}: the kernel window {tuple(kernel_shape[: self.n])} with "
                    f"dilation_rate {self.dilation} does not fit the input of spatial size "
                    f"{tuple(sizes)} with padding {self.padding!r}"
                )


def _plain_conv(
    fn: str,
    n: int,
    x,
    kernel,
    strides,
    padding,
    data_format,
    dilation_rate,
    lowering,
    paddings: Sequence[str] = PADDINGS,
):
    spec = _Spec(fn, n, x, strides, padding, data_format, dilation_rate, paddings)
    check_choice(fn, "lowering", lowering, allowed=LOWERINGS)
    k_shape = spec.kernel(kernel, "in_channels, out_channels")
    check_same_size(fn, "input channels of x and kernel", spec.channels, k_shape[n])
    spec.check_window(spec.sizes, k_shape)
    return _conv(x, kernel, spec.strides, spec.padding, spec.dilation, spec.data_format, lowering)


def _depthwise_spec(
    fn: str, n: int, x, depthwise_kernel, strides, padding, data_format, dilation_rate, lowering
) -> tuple[_Spec, tuple, str]:
    """The validated arguments of a depthwise step: its spec, the depthwise kernel's static
    shape and the lowering (lower-cased)."""
    spec = _Spec(fn, n, x, strides, padding, data_format, dilation_rate)
    lowering = check_choice(fn, "lowering", lowering, allowed=DEPTHWISE_LOWERINGS)
    d_shape = spec.kernel(depthwise_kernel, "in_channels, multiplier", "depthwise_kernel")
    check_same_size(fn, "input channels of x and depthwise_kernel", spec.channels, d_shape[n])
    spec.check_window(spec.sizes, d_shape)
    return spec, d_shape, lowering


def _separable(
    fn: str,
    n: int,
    x,
    depthwise_kernel,
    pointwise_kernel,
    strides,
    padding,
    data_format,
    dilation_rate,
    lowering,
):
    spec, d_shape, lowering = _depthwise_spec(
        fn, n, x, depthwise_kernel, strides, padding, data_format, dilation_rate, lowering
    )
    p_shape = spec.kernel(
        pointwise_kernel, "in_channels * multiplier, out_channels", "pointwise_kernel"
    )
    if any(k not in (1, None) for k in p_shape[:n]):
        raise ValueError(
            f"{fn}: pointwise_kernel must be 1 in every spatial dimension, got shape {p_shape}"
        )
    depth = None if None in d_shape[n:] else d_shape[n] * d_shape[n + 1]
    check_same_size(
        fn,
        "depthwise output channels (in_channels * multiplier) and pointwise_kernel input channels",
        depth,
        p_shape[n],
    )
    return _separable_conv(
        x,
        depthwise_kernel,
        pointwise_kernel,
        spec.strides,
        spec.padding,
        spec.dilation,
        spec.data_format,
        lowering,
    )


def _static_size(value: Any) -> int | None:
    """A size known now, or ``None`` (unknown, symbolic or traced)."""
    if value is None or isinstance(value, (Symbolic, jax.core.Tracer)):
        return None
    return int(value)


def _transpose(
    fn: str, n: int, x, kernel, output_shape, strides, padding, data_format, dilation_rate, lowering
):
    spec = _Spec(fn, n, x, strides, padding, data_format, dilation_rate)
    check_choice(fn, "lowering", lowering, allowed=TRANSPOSE_LOWERINGS)
    k_shape = spec.kernel(kernel, "out_channels, in_channels")
    check_same_size(fn, "input channels of x and kernel (last axis)", spec.channels, k_shape[n + 1])
    if output_shape is None or len(output_shape) != n + 2:
        raise ValueError(
            f"{fn}: output_shape must hold {n + 2} sizes "
            f"{_data_layout(n, spec.data_format)}, got {output_shape!r}"
        )
    out = [output_shape[i] for i in range(n + 2)]
    check_same_size(
        fn,
        "output channels of output_shape and kernel (axis -2)",
        _static_size(out[channel_axis(n, spec.data_format)]),
        k_shape[n],
    )
    out_sizes = spatial_sizes(out, n, spec.data_format)
    if any(size is None for size in out_sizes):
        raise ValueError(
            f"{fn}: the spatial sizes of output_shape must be given, got {output_shape!r}"
        )
    for o, i, k, s, d in zip(out_sizes, spec.sizes, k_shape, spec.strides, spec.dilation):
        o = _static_size(o)
        if (
            o is not None
            and i is not None
            and k is not None
            and (output_size(o, k, s, d, spec.padding) != i)
        ):
            raise ValueError(
                f"{fn}: output_shape {output_shape!r} does not fit the input {spec.x_shape}: a "
                f"size {o} convolved with strides {spec.strides}, padding {spec.padding!r} "
                f"would give {output_size(o, k, s, d, spec.padding)}, not {i}"
            )
    return _conv_transpose(
        x, kernel, out_sizes, spec.strides, spec.padding, spec.dilation, spec.data_format, lowering
    )


# ---------------------------------------------------------------------------------------------
# public ops


def conv1d(
    x: Any,
    kernel: Any,
    strides: int | Sequence[int] = 1,
    padding: str = "valid",
    data_format: str | None = None,
    dilation_rate: int | Sequence[int] = 1,
    *,
    lowering: str = "auto",
) -> Any:
    """1D convolution (cross-correlation, as in every Keras backend).

    Args:
        x: input of shape ``(batch, steps, channels)`` (``channels_last``) or
            ``(batch, channels, steps)``.
        kernel: ``(kernel_size, in_channels, out_channels)``.
        strides: an int or a 1-tuple.
        padding: ``'valid'``, ``'same'`` or ``'causal'`` (left padding by
            ``dilation_rate * (kernel_size - 1)``, so output ``t`` sees inputs up to ``t``).
        data_format: ``'channels_last'`` or ``'channels_first'``; default from the config.
        dilation_rate: an int or a 1-tuple.
        lowering: ``'auto'`` (per platform, see :func:`conv_lowering`), ``'lax'``
            (``lax.conv_general_dilated``), ``'im2col'`` (strided patches and one matmul),
            ``'taps'`` (one matmul with every window offset's kernel, then a sum of shifted
            slices: for few output channels) or ``'lax_im2col'`` (``'lax'`` forward, matmul
            gradients).

    Returns:
        The output, ``(batch, new_steps, out_channels)`` or ``(batch, out_channels, new_steps)``.

    Raises:
        ValueError: for an unknown ``padding``, ``data_format`` or ``lowering``, bad
            ``strides``/``dilation_rate``, a rank other than 3, or mismatched channels.
    """
    return _plain_conv(
        "conv1d",
        1,
        x,
        kernel,
        strides,
        padding,
        data_format,
        dilation_rate,
        lowering,
        (*PADDINGS, "causal"),
    )


def conv2d(
    x: Any,
    kernel: Any,
    strides: int | Sequence[int] = (1, 1),
    padding: str = "valid",
    data_format: str | None = None,
    dilation_rate: int | Sequence[int] = (1, 1),
    *,
    lowering: str = "auto",
) -> Any:
    """2D convolution.

    Args:
        x: input of shape ``(batch, rows, cols, channels)`` (``channels_last``) or
            ``(batch, channels, rows, cols)``.
        kernel: ``(kh, kw, in_channels, out_channels)``.
        strides: an int or a 2-tuple.
        padding: ``'valid'`` or ``'same'`` (TensorFlow's: output size ``ceil(size / stride)``,
            the smaller half of the padding first).
        data_format: ``'channels_last'`` or ``'channels_first'``; default from the config.
        dilation_rate: an int or a 2-tuple.
        lowering: ``'auto'`` (per platform, see :func:`conv_lowering`), ``'lax'``,
            ``'im2col'``, ``'taps'`` or ``'lax_im2col'`` (as in :func:`conv1d`).

    Returns:
        The output, with ``out_channels`` channels in the same data format.

    Raises:
        ValueError: for an unknown ``padding``, ``data_format`` or ``lowering``, bad
            ``strides``/``dilation_rate``, a rank other than 4, or mismatched channels.

    Example:
        >>> x = K.placeholder((None, 28, 28, 1))
        >>> K.int_shape(K.conv2d(x, K.variable(np.ones((3, 3, 1, 8))), padding="same"))
        (None, 28, 28, 8)
    """
    return _plain_conv(
        "conv2d", 2, x, kernel, strides, padding, data_format, dilation_rate, lowering
    )


def conv3d(
    x: Any,
    kernel: Any,
    strides: int | Sequence[int] = (1, 1, 1),
    padding: str = "valid",
    data_format: str | None = None,
    dilation_rate: int | Sequence[int] = (1, 1, 1),
    *,
    lowering: str = "auto",
) -> Any:
    """3D convolution.

    Args:
        x: input of shape ``(batch, depth, rows, cols, channels)`` (``channels_last``) or
            ``(batch, channels, depth, rows, cols)``.
        kernel: ``(kd, kh, kw, in_channels, out_channels)``.
        strides: an int or a 3-tuple.
        padding: ``'valid'`` or ``'same'``.
        data_format: ``'channels_last'`` or ``'channels_first'``; default from the config.
        dilation_rate: an int or a 3-tuple.
        lowering: ``'auto'`` (per platform, see :func:`conv_lowering`), ``'lax'``,
            ``'im2col'``, ``'taps'`` or ``'lax_im2col'`` (as in :func:`conv1d`).

    Returns:
        The output, with ``out_channels`` channels in the same data format.

    Raises:
        ValueError: for an unknown ``padding``, ``data_format`` or ``lowering``, bad
            ``strides``/``dilation_rate``, a rank other than 5, or mismatched channels.
    """
    return _plain_conv(
        "conv3d", 3, x, kernel, strides, padding, data_format, dilation_rate, lowering
    )


def conv2d_transpose(
    x: Any,
    kernel: Any,
    output_shape: Any,
    strides: int | Sequence[int] = (1, 1),
    padding: str = "valid",
    data_format: str | None = None,
    dilation_rate: int | Sequence[int] = (1, 1),
    *,
    lowering: str = "auto",
) -> Any:
    """2D transposed convolution (the gradient of :func:`conv2d` with respect to its input).

    Args:
        x: input of shape ``(batch, rows, cols, in_channels)`` or channels first.
        kernel: ``(kh, kw, out_channels, in_channels)``.
        output_shape: the output shape, 4 sizes in ``data_format`` order (a tuple, list, array
            or 1-D int tensor). The batch entry may be ``None`` or symbolic
            (``K.shape(x)[0]``): the batch size of ``x`` is used. The spatial sizes fix the
            padding, so that a :func:`conv2d` with the same arguments maps the output back to
            ``x``'s size (as ``tf.nn.conv2d_transpose``).
        strides: an int or a 2-tuple.
        padding: ``'valid'`` or ``'same'``.
        data_format: ``'channels_last'`` or ``'channels_first'``; default from the config.
        dilation_rate: an int or a 2-tuple.
        lowering: ``'auto'`` (per platform and sizes, see :func:`transpose_lowering`),
            ``'lax'`` (``lax.conv_transpose``) or ``'col2im'`` (one matmul, then each window
            offset's slice added in place).

    Returns:
        A tensor of shape ``output_shape``.

    Raises:
        ValueError: for an unknown ``padding``, ``data_format`` or ``lowering``, a rank
            other than 4, mismatched channels, or an ``output_shape`` that does not fit ``x``.
    """
    return _transpose(
        "conv2d_transpose",
        2,
        x,
        kernel,
        output_shape,
        strides,
        padding,
        data_format,
        dilation_rate,
        lowering,
    )


def conv3d_transpose(
    x: Any,
    kernel: Any,
    output_shape: Any,
    strides: int | Sequence[int] = (1, 1, 1),
    padding: str = "valid",
    data_format: str | None = None,
    dilation_rate: int | Sequence[int] = (1, 1, 1),
    *,
    lowering: str = "auto",
) -> Any:
    """3D transposed convolution (the gradient of :func:`conv3d` with respect to its input).

    Args:
        x: input of shape ``(batch, depth, rows, cols, in_channels)`` or channels first.
        kernel: ``(kd, kh, kw, out_channels, in_channels)``.
        output_shape: the output shape, 5 sizes in ``data_format`` order; as in
            :func:`conv2d_transpose`.
        strides: an int or a 3-tuple.
        padding: ``'valid'`` or ``'same'``.
        data_format: ``'channels_last'`` or ``'channels_first'``; default from the config.
        dilation_rate: an int or a 3-tuple.
        lowering: as in :func:`conv2d_transpose`.

    Returns:
        A tensor of shape ``output_shape``.

    Raises:
        ValueError: for an unknown ``padding``, ``data_format`` or ``lowering``, a rank
            other than 5, mismatched channels, or an ``output_shape`` that does not fit ``x``.
    """
    return _transpose(
        "conv3d_transpose",
        3,
        x,
        kernel,
        output_shape,
        strides,
        padding,
        data_format,
        dilation_rate,
        lowering,
    )


def depthwise_conv2d(
    x: Any,
    depthwise_kernel: Any,
    strides: int | Sequence[int] = (1, 1),
    padding: str = "valid",
    data_format: str | None = None,
    dilation_rate: int | Sequence[int] = (1, 1),
    *,
    lowering: str = "auto",
) -> Any:
    """2D depthwise convolution: each input channel convolved with its own filters.

    Args:
        x: input of shape ``(batch, rows, cols, channels)`` or channels first.
        depthwise_kernel: ``(kh, kw, in_channels, multiplier)``.
        strides: an int or a 2-tuple.
        padding: ``'valid'`` or ``'same'``.
        data_format: ``'channels_last'`` or ``'channels_first'``; default from the config.
        dilation_rate: an int or a 2-tuple.
        lowering: ``'auto'`` (per platform, see :func:`depthwise_lowering`), ``'lax'``
            (``lax.conv_general_dilated`` with one group per input channel) or ``'taps'``
            (each window offset's strided slice of the input times its per-channel filters,
            summed).

    Returns:
        The output with ``in_channels * multiplier`` channels; channel ``c * multiplier + m``
        is input channel ``c`` convolved with ``depthwise_kernel[..., c, m]``.

    Raises:
        ValueError: for an unknown ``padding``, ``data_format`` or ``lowering``, a rank other
            than 4, or mismatched channels.

    Example:
        >>> x = K.placeholder((None, 28, 28, 8))
        >>> kernel = K.variable(np.ones((3, 3, 8, 2)))
        >>> K.int_shape(K.depthwise_conv2d(x, kernel, (2, 2), "same"))
        (None, 14, 14, 16)
    """
    spec, _, lowering = _depthwise_spec(
        "depthwise_conv2d",
        2,
        x,
        depthwise_kernel,
        strides,
        padding,
        data_format,
        dilation_rate,
        lowering,
    )
    return _depthwise_conv(
        x, depthwise_kernel, spec.strides, spec.padding, spec.dilation, spec.data_format, lowering
    )


def separable_conv1d(
    x: Any,
    depthwise_kernel: Any,
    pointwise_kernel: Any,
    strides: int | Sequence[int] = 1,
    padding: str = "valid",
    data_format: str | None = None,
    dilation_rate: int | Sequence[int] = 1,
    *,
    lowering: str = "auto",
) -> Any:
    """1D separable convolution: a depthwise convolution, then a pointwise (1x1) one.

    Args:
        x: input of shape ``(batch, steps, channels)`` or channels first.
        depthwise_kernel: ``(k, in_channels, multiplier)``.
        pointwise_kernel: ``(1, in_channels * multiplier, out_channels)``.
        strides: an int or a 1-tuple (of the depthwise step).
        padding: ``'valid'`` or ``'same'``.
        data_format: ``'channels_last'`` or ``'channels_first'``; default from the config.
        dilation_rate: an int or a 1-tuple (of the depthwise step).
        lowering: ``'auto'`` (per platform, see :func:`depthwise_lowering`), ``'lax'``
            (XLA's grouped convolution, then its 1x1 convolution) or ``'taps'`` (the
            depthwise step as in :func:`depthwise_conv2d`, then one matmul over the channels).

    Returns:
        The output with ``out_channels`` channels.

    Raises:
        ValueError: for an unknown ``padding``, ``data_format`` or ``lowering``, a rank other
            than 3, or mismatched kernel shapes.
    """
    return _separable(
        "separable_conv1d",
        1,
        x,
        depthwise_kernel,
        pointwise_kernel,
        strides,
        padding,
        data_format,
        dilation_rate,
        lowering,
    )


def separable_conv2d(
    x: Any,
    depthwise_kernel: Any,
    pointwise_kernel: Any,
    strides: int | Sequence[int] = (1, 1),
    padding: str = "valid",
    data_format: str | None = None,
    dilation_rate: int | Sequence[int] = (1, 1),
    *,
    lowering: str = "auto",
) -> Any:
    """2D separable convolution: a depthwise convolution, then a pointwise (1x1) one.

    Args:
        x: input of shape ``(batch, rows, cols, channels)`` or channels first.
        depthwise_kernel: ``(kh, kw, in_channels, multiplier)``.
        pointwise_kernel: ``(1, 1, in_channels * multiplier, out_channels)``.
        strides: an int or a 2-tuple (of the depthwise step).
        padding: ``'valid'`` or ``'same'``.
        data_format: ``'channels_last'`` or ``'channels_first'``; default from the config.
        dilation_rate: an int or a 2-tuple (of the depthwise step).
        lowering: ``'auto'`` (per platform, see :func:`depthwise_lowering`), ``'lax'``
            (XLA's grouped convolution, then its 1x1 convolution) or ``'taps'`` (the
            depthwise step as in :func:`depthwise_conv2d`, then one matmul over the channels).

    Returns:
        The output with ``out_channels`` channels.

    Raises:
        ValueError: for an unknown ``padding``, ``data_format`` or ``lowering``, a rank other
            than 4, or mismatched kernel shapes.
    """
    return _separable(
        "separable_conv2d",
        2,
        x,
        depthwise_kernel,
        pointwise_kernel,
        strides,
        padding,
        data_format,
        dilation_rate,
        lowering,
    )
