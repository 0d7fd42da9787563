"""Convolution lowerings: the ways a convolution becomes XLA ops, and which one each platform gets.

Plain convolutions have four: XLA's convolution (``'lax'``), im2col + matmul (patches by
strided slicing, then one dot), taps (one dot with every window offset's kernel, then a sum of
shifted slices), and XLA's convolution with matmul gradients (``'lax_im2col'``), chosen per
platform and shape by :func:`conv_lowering` (inside compiled loops by
:func:`loop_conv_lowering`). Transposed convolutions have XLA's or ``'col2im'`` (one matmul,
then each window offset's slice added in place), chosen by :func:`transpose_lowering`.
Depthwise convolutions (and the depthwise step of separable ones) are XLA's grouped
convolution or ``'taps'`` (a sum of the input's shifted slices times each window offset's
per-channel filters), chosen by :func:`depthwise_lowering`.

Every choice other than XLA's own is a workaround for XLA:CPU, measured in
``benchmarks/bench_conv.py`` (``benchmarks/RESULTS.md``, the conv rows) or by hand
(``benchmarks/RESULTS.md``, "Design measurements (by hand)"); each chooser names the upstream
issue it works around and the rows that measure it. Other platforms get XLA's convolutions.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_derivatives import SymbolicZero

from jaxkeras._ops.spatial import (
    channel_axis,
    dimension_numbers,
    effective_size,
    output_size,
    pad_spatial,
    spatial_axes,
    spatial_sizes,
    window_pads,
    window_slice,
    window_slices,
)
from jaxkeras.mixed_precision import product, transposable_products

LOWERINGS = ("auto", "lax", "im2col", "taps", "lax_im2col")

# ---------------------------------------------------------------------------------------------
# lowerings (pure functions on arrays; pads are explicit (low, high) pairs)


FEW_FILTERS = 8
"""Convolutions with fewer output filters use the ``'taps'`` lowering on CPU (or ``'im2col'``
when they have as few input channels; see :func:`conv_lowering`)."""


FEW_POSITIONS = 1
"""Convolutions whose output has at most this many positions per offset of the kernel's window
use the ``'im2col'`` lowering on CPU (see :func:`conv_lowering`); at 2, InceptionV3's 1x7 and
5x5 convolutions over 3x3 and 7x7 images took it too, and its step and compile took 3-5% and
10% longer (measured by hand, 2026-12-07)."""


def conv_lowering(
    platform: str,
    n: int,
    filters: int | None = None,
    in_channels: int | None = None,
    window: Sequence[int] | None = None,
    positions: Sequence[int] | None = None,
) -> str:
    """The lowering ``lowering='auto'`` uses for an ``n``-D convolution on ``platform``.

    Measured by ``benchmarks/bench_conv.py`` on CPU, forward and forward+backward
    (``benchmarks/RESULTS.md``, the rows named below):

    - pointwise (1x1) kernels: ``'im2col'``, which is a reshape (a strided slice when
      strided) and one matmul, so both gradients are matmuls too, where XLA:CPU computes the
      kernel gradient as a convolution over the batch (rows "conv2d 8x56x56x64->256 k1" and
      "conv2d 16x8x8x144->32 k1", a ResNet bottleneck's and a MobileNetV2 projection's; no
      upstream issue found, checked 2026-11-27).
    - outputs of at most :data:`FEW_POSITIONS` positions per window offset (3x3 or fewer
      under a 3x3 kernel, as in VGG16's, ResNet's and ResNet50V2's last stages on 32x32
      inputs): ``'im2col'``, whose patches are then no larger than the kernel's window
      times the output. XLA:CPU's own convolution there, forward and gradients, is many
      times slower than one matmul over the patches (rows "conv2d 16x2x2x512->512 k3",
      "conv2d 16x1x1x512->512 k3" and ResNet50V2's padded "conv2d 16x4x4x256->256 k3
      valid", a 2x2 output; its whole train step 3x as long). Above the rule, "conv2d
      16x4x4x512->512 k3 same" and "conv2d 16x8x8x256->256 k3 same". The closest upstream
      report is openxla/xla#34273 (XLA's choice of convolution against PyTorch's); none found
      for these sizes (checked 2026-12-07).
    - few output filters (< ``FEW_FILTERS``) from more input channels: ``'taps'``, which
      copies only ``k^n * filters`` channels and whose gradients are matmuls, where XLA's
      kernel gradient is not (the conv_lstm example's 40 -> 1 Conv3D: row "``K.conv3d``
      fwd+bwd (10, 15, 40, 40, 40) -> 1 filter, 3x3x3: 'auto' vs 'lax'"; rows "conv1d
      128x100x32->4", "conv2d 10x40x40x40->1", "conv2d 10x40x40x40->4" and "conv3d
      8x16x16x16x8->4", taps vs lax). From as few input channels its gradient is the slower
      and im2col's patches are narrow: ``'im2col'`` (rows "conv2d 128x28x28x1->4").
    - otherwise XLA's own convolution for 1-D and 2-D, where im2col's patch copy costs more
      than it saves (rows "conv2d B=128 ...: im2col vs lax" and "conv1d 128x100x32->64"), and
      im2col + matmul for 3-D (rows "conv3d 8x16x16x16x8->16").

    Upstream: jax-ml/jax#31662 (open; openxla/xla#34273) reports the gradient of a 3-D
    (transposed) convolution between many channels and one many times slower than PyTorch's,
    the conv_lstm example's Conv3D case; no issue found for the 1-D and 2-D cases (checked
    2026-11-27).

    Accelerators keep XLA's convolution.

    Args:
        platform: a JAX platform name (``'cpu'``, ``'cuda'``, ``'rocm'``, ``'tpu'``, ...).
        n: the number of spatial dimensions.
        filters: the number of output filters; ``None`` means many.
        in_channels: the number of input channels; ``None`` means many.
        window: the kernel's spatial sizes; ``None`` means larger than 1x1.
        positions: the output's spatial sizes; ``None`` means many.

    Returns:
        ``'taps'``, ``'im2col'`` or ``'lax'``.
    """
    if platform != "cpu":
        return "lax"
    if window is not None and all(size == 1 for size in window):
        return "im2col"  # pointwise: a reshape and one matmul, whose gradients are matmuls
    few = None if window is None else FEW_POSITIONS * math.prod(window)
    if few is not None and positions is not None and math.prod(positions) <= few:
        return "im2col"  # a small output: patches at most FEW_POSITIONS windows large
    if filters is not None and filters < FEW_FILTERS:
        return "taps" if in_channels is None or in_channels > filters else "im2col"
    return "im2col" if n == 3 else "lax"


def loop_conv_lowering(filters: int | None, in_channels: int | None) -> str:
    """The lowering ``lowering='auto'`` uses on CPU inside a compiled loop's body.

    XLA:CPU runs its own convolution's gradients inside a compiled loop many times slower
    than outside (jax-ml/jax#12868, open: "Convolution is significantly slower inside a loop
    body (CPU)"), and fully unrolling the loop instead lets XLA fuse each step's elementwise
    work into later steps' (a ConvLSTM's cell state chain recomputed once per consumer), so
    in loops the gradients are matmuls: taps to fewer filters than input channels, otherwise
    XLA's convolution forward with matmul gradients (``'lax_im2col'``), which writes no
    patches in the forward pass. At the conv_lstm example's sizes its training step is the
    quicker with ``'lax_im2col'`` than with ``'im2col'``, and the slower with taps, since
    ``rnn`` recomputes the patches in the gradient (measured by hand:
    ``benchmarks/RESULTS.md``, "Design measurements (by hand)", "convolutions in compiled
    loops"; the whole step against TF-Keras: row "Keras 2.3.1 ``ConvLSTM2D``(40) + BatchNorm
    + Conv3D train step").

    Args:
        filters: the number of output filters; ``None`` means many.
        in_channels: the number of input channels; ``None`` means many.

    Returns:
        ``'lax_im2col'`` or ``'taps'``.
    """
    fewer_filters = filters is not None and (in_channels is None or filters < in_channels)
    return "taps" if fewer_filters else "lax_im2col"


def _lax_conv(x, kernel, strides, pads, dilation, data_format, groups=1):
    n = kernel.ndim - 2
    convolve = functools.partial(
        lax.conv_general_dilated,
        window_strides=tuple(strides),
        padding=tuple(tuple(p) for p in pads),
        rhs_dilation=tuple(dilation),
        dimension_numbers=dimension_numbers(n, data_format),
        feature_group_count=groups,
    )
    return product(convolve, x, kernel)


def _contract_channels(x: Any, matrix: Any, c_axis: int) -> Any:
    """``x``'s channel axis contracted with ``matrix``'s rows; the result's channels are last.

    Channels last, ``x`` multiplies as one ``(positions, channels)`` matrix: the gradient with
    respect to ``matrix`` is then a transposed-lhs matrix product, where a product over the
    batch and spatial axes unflattened made XLA:CPU copy the whole cotangent transposed first
    (measurable per step of a ConvLSTM's recurrent convolution: ``benchmarks/RESULTS.md``,
    "Design measurements (by hand)", "convolutions in compiled loops").

    Args:
        x: an array with its channels on ``c_axis``.
        matrix: ``(channels, out)``.
        c_axis: ``x``'s channel axis.

    Returns:
        ``x``'s other axes in order, then ``out``.
    """
    if c_axis % x.ndim == x.ndim - 1:
        y = product(jnp.matmul, x.reshape(-1, matrix.shape[0]), matrix)
        return y.reshape(*x.shape[:-1], matrix.shape[1])
    contract = functools.partial(lax.dot_general, dimension_numbers=(((c_axis,), (0,)), ((), ())))
    return product(contract, x, matrix)


def _padded_input(x, kernel, strides, pads, dilation, data_format):
    """The input padded, its spatial axes, and the output's spatial sizes."""
    n = kernel.ndim - 2
    axes = spatial_axes(n, data_format)
    x = pad_spatial(x, axes, pads)
    outs = [
        output_size(x.shape[a], k, s, d, "valid")
        for a, k, s, d in zip(axes, kernel.shape[:n], strides, dilation)
    ]
    return x, axes, outs


def _input_windows(x, kernel, strides, pads, dilation, data_format):
    """The padded input's strided slice at each window offset (row-major over the window): at
    output position ``o``, the elements the offset's kernel entry multiplies."""
    x, axes, outs = _padded_input(x, kernel, strides, pads, dilation, data_format)
    return window_slices(x, axes, kernel.shape[: kernel.ndim - 2], strides, dilation, outs)


def _im2col_conv(x, kernel, strides, pads, dilation, data_format):
    """Convolution as one matmul: the window's strided slices are concatenated along the channel
    axis (patches ordered (offset, channel), as ``kernel.reshape(-1, out)``) and contracted."""
    c_axis = channel_axis(kernel.ndim - 2, data_format)
    slices = _input_windows(x, kernel, strides, pads, dilation, data_format)
    patches = jnp.concatenate(slices, axis=c_axis) if len(slices) > 1 else slices[0]
    y = _contract_channels(patches, kernel.reshape(-1, kernel.shape[-1]), c_axis)
    return y if data_format == "channels_last" else jnp.moveaxis(y, -1, 1)


def _offsets_conv(x, kernel, strides, pads, dilation, data_format):
    """Convolution as a sum over the window's offsets of the input's strided slice at that
    offset times the offset's ``(in, out)`` matrix: ``k^n`` matmuls and no patches. Its
    gradient with respect to the kernel is one matmul per offset, of the input's slice and the
    cotangent (see :func:`_lax_im2col`)."""
    n = kernel.ndim - 2
    slices = _input_windows(x, kernel, strides, pads, dilation, data_format)
    matrices = kernel.reshape(-1, *kernel.shape[n:])
    c_axis = channel_axis(n, data_format)
    y = functools.reduce(
        operator.add, (_contract_channels(s, m, c_axis) for s, m in zip(slices, matrices))
    )
    return y if data_format == "channels_last" else jnp.moveaxis(y, -1, 1)


def _taps_conv(x, kernel, strides, pads, dilation, data_format):
    """Convolution as one matmul, then a sum of shifted slices: every window offset's
    ``(in, out)`` matrix applies to every position at once (channels ordered (offset, out)),
    and output position ``o`` adds offset ``k``'s channels at ``o * stride + k * dilation``.

    The copies are ``k^n * out_channels`` wide, so this suits few output channels, where
    im2col's patches (``k^n * in_channels`` wide) would not. Both gradients are matmuls too:
    the offsets' channels are split apart before they are shifted, so that the gradient
    concatenates their (padded) cotangents instead of adding ``k^n`` full-width pads.
    """
    n = kernel.ndim - 2
    window, (c_in, c_out) = kernel.shape[:n], kernel.shape[n:]
    offsets = list(itertools.product(*(range(w) for w in window)))
    flat = jnp.moveaxis(kernel.reshape(len(offsets), c_in, c_out), 0, 1)
    flat = flat.reshape(c_in, len(offsets) * c_out)
    z = _contract_channels(x, flat, channel_axis(n, data_format))
    axes = range(1, n + 1)  # z is channels last whatever x's format
    padded = [s + lo + hi for s, (lo, hi) in zip(z.shape[1:-1], pads)]
    outs = [
        output_size(size, k, s, d, "valid")
        for size, k, s, d in zip(padded, window, strides, dilation)
    ]
    parts = lax.split(z, [c_out] * len(offsets), axis=z.ndim - 1)
    y = functools.reduce(
        operator.add,
        (
            window_slice(pad_spatial(part, axes, pads), axes, offset, strides, dilation, outs)
            for part, offset in zip(parts, offsets)
        ),
    )
    return y if data_format == "channels_last" else jnp.moveaxis(y, -1, 1)


def _lax_im2col_conv(x, kernel, strides, pads, dilation, data_format):
    """XLA's convolution with matmul derivatives (see :func:`_lax_im2col`)."""
    pads = tuple(tuple(p) for p in pads)
    return _lax_im2col(x, kernel, tuple(strides), pads, tuple(dilation), data_format)


_PATCH_CHANNELS = 8
"""The most input channels for which ``'lax_im2col'``'s kernel gradient multiplies the input's
patches by the cotangent; with more, it multiplies each window offset's slice of the input by
the cotangent instead (:func:`_offsets_conv`), writing no patches. Per step of a compiled
loop, patches are the quicker from one input channel and offset slices from 16 and 40, the
two about even at 8 (measured by hand: ``benchmarks/RESULTS.md``, "Design measurements (by
hand)", "convolutions in compiled loops")."""


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4, 5))
def _lax_im2col(x, kernel, strides, pads, dilation, data_format):
    """``lax.conv_general_dilated`` forward; its tangent is a matmul lowering's, so that
    reverse mode gets matmul gradients: the cotangent times the kernel for the input (then
    col2im, as :func:`_im2col_conv`), and the input's patches or offset slices times the
    cotangent for the kernel (see :data:`_PATCH_CHANNELS`). XLA:CPU runs its own convolution
    forward without writing patches out (a ConvLSTM's 40 -> 160 channels in well under
    im2col's time: ``benchmarks/RESULTS.md``, "Design measurements (by hand)", "convolutions
    in compiled loops"), but runs its own kernel gradient many times slower inside a compiled
    loop (jax-ml/jax#12868, open)."""
    return _lax_conv(x, kernel, strides, pads, dilation, data_format)


def _bilinear_jvp(
    primal: Callable,
    by_input: Callable,
    by_kernel: Callable,
    args: tuple,
    primals: tuple,
    tangents: tuple,
    products: Callable = contextlib.nullcontext,
) -> tuple:
    """The JVP of a convolution, which is bilinear in its input and kernel: the primal
    ``primal(x, kernel)``, the tangent ``by_input(dx, kernel) + by_kernel(x, dkernel)``
    (a symbolic-zero tangent's term left out), each called with ``args`` after the two arrays
    and the tangent terms computed inside ``products()``."""
    (x, kernel), (dx, dkernel) = primals, tangents
    y = primal(x, kernel, *args)
    terms = []
    with products():
        if type(dx) is not SymbolicZero:
            terms.append(by_input(dx, kernel, *args))
        if type(dkernel) is not SymbolicZero:
            terms.append(by_kernel(x, dkernel, *args))
    return y, functools.reduce(operator.add, terms) if terms else jnp.zeros_like(y)


def _lax_im2col_jvp(strides, pads, dilation, data_format, primals, tangents):
    # the primal as a convolution in the trace, not a call of _lax_im2col: rnn's checkpoint
    # policy sees it, and saves it rather than recomputing it in a loop's backward pass.
    # The tangents' products are transposable (JAX transposes them).
    by_offsets = primals[1].shape[-2] > _PATCH_CHANNELS  # input channels
    by_kernel = _offsets_conv if by_offsets else _im2col_conv
    args = (strides, pads, dilation, data_format)
    return _bilinear_jvp(
        _lax_conv, _im2col_conv, by_kernel, args, primals, tangents, transposable_products
    )


_lax_im2col.defjvp(_lax_im2col_jvp, symbolic_zeros=True)

CONV = {
    "lax": _lax_conv,
    "im2col": _im2col_conv,
    "taps": _taps_conv,
    "lax_im2col": _lax_im2col_conv,
}


DEPTHWISE_LOWERINGS = ("auto", "lax", "taps")


def depthwise_lowering(platform: str) -> str:
    """The lowering ``lowering='auto'`` uses for a depthwise convolution on ``platform`` (and
    for a separable one).

    XLA:CPU runs a grouped convolution slower than ``'taps'`` even forward, and differentiates
    it far worse: the kernel's gradient is a batch-grouped convolution, which XLA rewrites into
    an ungrouped one over every pair of channels, ``channels`` times the work (see the comment
    at :func:`_taps_depthwise_sum`). ``'taps'`` needs no convolution: each window offset
    multiplies the input's strided slice by its per-channel filters, and the gradients are
    elementwise products and sums too; a separable convolution's pointwise step is then one
    matmul, whose gradients XLA:CPU runs faster than its 1x1 convolution's. This works around
    jax-ml/jax#13800 (open: "Slow conv_general_dilated backward pass for feature_group_count
    != 1", reported on GPU). ``benchmarks/bench_conv.py`` measures ``'taps'`` the faster
    forward and forward+backward at every depthwise and separable layer it tries (MobileNet,
    MobileNetV2 and Xception sizes, strides 1 and 2, multipliers 1 and 2, 1-D and 2-D):
    ``benchmarks/RESULTS.md``, rows "depthwise ``K.depthwise_conv2d`` ...: taps vs lax" and
    "depthwise ``K.separable_conv...``: taps vs lax"; against TF-Keras, rows "... fwd+bwd:
    'auto' vs TF-Keras".

    Accelerators keep XLA's grouped convolution (cuDNN has depthwise kernels).

    Args:
        platform: a JAX platform name (``'cpu'``, ``'cuda'``, ``'rocm'``, ``'tpu'``, ...).

    Returns:
        ``'taps'`` or ``'lax'``.
    """
    return "taps" if platform == "cpu" else "lax"


def _lax_depthwise(x, kernel, strides, pads, dilation, data_format):
    """Depthwise convolution as a grouped convolution: one group per input channel, output
    channel ``c * multiplier + m`` (TensorFlow's order)."""
    n = kernel.ndim - 2
    grouped = kernel.reshape(*kernel.shape[:n], 1, -1)
    return _lax_conv(x, grouped, strides, pads, dilation, data_format, groups=kernel.shape[n])


def _scale_channels(x: Any, filters: Any, c_axis: int) -> Any:
    """Input channel ``c`` of ``x`` times ``filters[c, m]``, as output channel
    ``c * multiplier + m``.

    Args:
        x: an array with its channels on ``c_axis`` (non-negative).
        filters: ``(channels, multiplier)``.
        c_axis: ``x``'s channel axis.

    Returns:
        ``x``'s shape with ``channels * multiplier`` channels.
    """
    channels, multiplier = filters.shape
    if multiplier == 1:  # no multiplier axis: XLA:CPU sums a rank-5 product over its
        # positions several times slower (the kernel's gradient)
        return x * filters.reshape([channels if a == c_axis else 1 for a in range(x.ndim)])
    shape = [1] * (x.ndim + 1)
    shape[c_axis : c_axis + 2] = [channels, multiplier]
    y = jnp.expand_dims(x, c_axis + 1) * filters.reshape(shape)
    return y.reshape(*x.shape[:c_axis], channels * multiplier, *x.shape[c_axis + 1 :])


def _live_offsets(x, kernel, strides, pads, dilation, data_format) -> list[tuple[int, tuple]]:
    """The window offsets whose strided slice of the padded input holds some of the input, each
    with its index in the window (row-major): the others' slices are padding alone, whose
    products are zeros. A map smaller than the window has many: a 7x7 depthwise convolution
    of a 1x1 map (NASNet's last cells at small inputs) multiplies one offset of 49 by the
    input, a 2x2 map nine."""
    n = kernel.ndim - 2
    axes, window = spatial_axes(n, data_format), kernel.shape[:n]
    live = []
    for a, k, s, d, (lo, hi) in zip(axes, window, strides, dilation, pads):
        size = x.shape[a]
        out = output_size(size + lo + hi, k, s, d, "valid")
        live.append(
            [o for o in range(k) if any(lo <= p * s + o * d < lo + size for p in range(out))]
        )
    flat = {offset: i for i, offset in enumerate(itertools.product(*(range(k) for k in window)))}
    return [(flat[offset], offset) for offset in itertools.product(*live)]


def _taps_of_slices(x, kernel, strides, pads, dilation, data_format):
    """The depthwise taps sum, each window offset's strided slice of the input times the
    offset's per-channel filters, over the offsets whose slices hold some of the input
    (:func:`_live_offsets`). With a multiplier, each filter index ``m`` sums on its own
    and the sums interleave as channels ``c * multiplier + m``: the gradient with respect to
    the input is then one elementwise sum of the cotangent's products padded into place (with
    a multiplier axis in each product, XLA:CPU wrote out a sum over it per offset)."""
    n = kernel.ndim - 2
    live = _live_offsets(x, kernel, strides, pads, dilation, data_format)
    padded, axes, outs = _padded_input(x, kernel, strides, pads, dilation, data_format)
    slices = [window_slice(padded, axes, offset, strides, dilation, outs) for _, offset in live]
    c_axis = channel_axis(n, data_format)
    flat = kernel.reshape(-1, *kernel.shape[n:])
    filters = [flat[i] for i, _ in live]
    sums = [
        functools.reduce(
            operator.add,
            (_scale_channels(s, f[:, m : m + 1], c_axis) for s, f in zip(slices, filters)),
        )
        for m in range(kernel.shape[-1])
    ]
    if len(sums) == 1:
        return sums[0]
    y = jnp.stack(sums, axis=c_axis + 1)
    return y.reshape(*y.shape[:c_axis], -1, *y.shape[c_axis + 2 :])


def _taps_of_scaled_input(x, kernel, strides, pads, dilation, data_format):
    """The same sum with the padded input scaled by each offset's filters first, then sliced.
    The gradient with respect to the kernel is then, per offset, the sum over batch and
    positions of the padded input times the cotangent padded into place, which XLA:CPU
    computes reading both where they are; from slices of the input (:func:`_taps_of_slices`)
    it writes every offset's slice out first. Strides pad the cotangent with holes, which it
    writes out too."""
    n = kernel.ndim - 2
    live = _live_offsets(x, kernel, strides, pads, dilation, data_format)
    x, axes, outs = _padded_input(x, kernel, strides, pads, dilation, data_format)
    c_axis = channel_axis(n, data_format)
    filters = kernel.reshape(-1, *kernel.shape[n:])
    return functools.reduce(
        operator.add,
        (
            window_slice(
                _scale_channels(x, filters[i], c_axis), axes, offset, strides, dilation, outs
            )
            for i, offset in live
        ),
    )


def _taps_depthwise(x, kernel, strides, pads, dilation, data_format):
    """Depthwise convolution as a sum over the window's offsets of the input's strided slice at
    that offset times the offset's per-channel filters: elementwise multiply-adds, no
    convolution (see :func:`_taps_depthwise_sum`)."""
    pads = tuple(tuple(p) for p in pads)
    return _taps_depthwise_sum(x, kernel, tuple(strides), pads, tuple(dilation), data_format)


# Works around XLA's slow gradient of a grouped convolution,
# https://github.com/jax-ml/jax/issues/13800 (reported on GPU). On CPU the kernel's gradient is
# a batch-grouped convolution that XLA rewrites into an ungrouped one (the
# convolution_group_converter pass, https://github.com/tensorflow/tensorflow/pull/31597): a
# (channels, kh, kw, channels) result for a (kh, kw, channels, 1) kernel.
@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4, 5))
def _taps_depthwise_sum(x, kernel, strides, pads, dilation, data_format):
    """:func:`_taps_of_slices`, whose tangent with respect to the kernel is
    :func:`_taps_of_scaled_input`'s at stride 1 (reverse mode transposes each form into the
    gradient that form makes fast: the input's, the kernel's)."""
    return _taps_of_slices(x, kernel, strides, pads, dilation, data_format)


def _taps_depthwise_jvp(strides, pads, dilation, data_format, primals, tangents):
    unstrided = all(s == 1 for s in strides)
    by_kernel = _taps_of_scaled_input if unstrided else _taps_of_slices
    args = (strides, pads, dilation, data_format)
    return _bilinear_jvp(_taps_of_slices, _taps_of_slices, by_kernel, args, primals, tangents)


_taps_depthwise_sum.defjvp(_taps_depthwise_jvp, symbolic_zeros=True)

DEPTHWISE = {"lax": _lax_depthwise, "taps": _taps_depthwise}
POINTWISE = {"lax": _lax_conv, "taps": _im2col_conv}  # a 1x1 im2col: one matmul


def transpose_lowering(platform: str, in_sizes: Sequence[int], out_sizes: Sequence[int]) -> str:
    """The lowering ``lowering='auto'`` uses for a transposed convolution on ``platform``.

    XLA's transposed convolution runs over the output's positions, the input dilated by the
    strides and padded by the window: it multiplies zeros wherever the output has more
    positions than the input, and XLA:CPU runs it far slower than a plain convolution of the
    same sizes (jax-ml/jax#23783, open: "Slow transpose convolutions (both cpu and cuda
    backends)"; in 3-D and through its gradient jax-ml/jax#31662, open, and openxla/xla#34273).
    ``'col2im'`` runs over the input's positions (one matmul to every window offset's output
    channels, then each offset's slice added at its place), so on CPU it takes over once the
    output has at least twice the input's positions. Measured by ``benchmarks/bench_conv.py``
    (Keras's mnist_acgan generator's layers among them): ``benchmarks/RESULTS.md``, rows
    "transposed conv2d 100x3x3x384->7x7x192", "transposed conv2d 100x7x7x192->14x14x96",
    "transposed conv2d 100x14x14x96->28x28x1" and "transposed conv3d 16x8x8x8x16->16^3x8"
    (col2im vs lax); one more layer by hand ("Design measurements (by hand)", "transposed
    convolutions"). With as many positions out as in (stride 1, ``'same'``), XLA's
    convolution multiplies no zeros and is the faster forward, so it stays (row "transposed
    conv2d 32x16x16x256->16x16x256", where the recorded run has col2im the faster
    forward+backward).

    Accelerators keep XLA's transposed convolution.

    Args:
        platform: a JAX platform name (``'cpu'``, ``'cuda'``, ...).
        in_sizes: the input's spatial sizes.
        out_sizes: the output's spatial sizes.

    Returns:
        ``'col2im'`` or ``'lax'``.
    """
    if platform == "cpu" and math.prod(out_sizes) >= 2 * math.prod(in_sizes):
        return "col2im"
    return "lax"


def _lax_transpose(x, kernel, out_sizes, strides, padding, dilation, data_format):
    """``lax.conv_transpose`` with explicit pads, so any output size in range is reachable."""
    n = kernel.ndim - 2
    in_sizes = spatial_sizes(x.shape, n, data_format)
    forward = window_pads(out_sizes, kernel.shape[:n], strides, dilation, padding)
    pads = [
        (effective_size(k, d) - 1 - lo, o - (i - 1) * s - 1 + lo)
        for o, i, k, s, d, (lo, _) in zip(
            out_sizes, in_sizes, kernel.shape[:n], strides, dilation, forward
        )
    ]
    convolve = functools.partial(
        lax.conv_transpose,
        strides=tuple(strides),
        padding=tuple(pads),
        rhs_dilation=tuple(dilation),
        dimension_numbers=dimension_numbers(n, data_format),
        transpose_kernel=True,  # a (spatial..., out, in) kernel, flipped
    )
    return product(convolve, x, kernel)


def _col2im_transpose(x, kernel, out_sizes, strides, padding, dilation, data_format):
    """Transposed convolution as one matmul, then a sum of placed slices: every input position
    times every window offset's ``(in, out)`` matrix (channels ordered (offset, out)); the
    forward convolution read output position ``o * stride + k * dilation - pad`` for input
    position ``o`` and offset ``k``, so offset ``k``'s channels are added there (each offset's
    slice padded into place, with ``stride - 1`` zeros between its elements). Both gradients
    are matmuls of strided slices."""
    n = kernel.ndim - 2
    window, (c_out, c_in) = kernel.shape[:n], kernel.shape[n:]
    offsets = list(itertools.product(*(range(w) for w in window)))
    flat = jnp.transpose(kernel.reshape(len(offsets), c_out, c_in), (2, 0, 1))
    z = _contract_channels(x, flat.reshape(c_in, -1), channel_axis(n, data_format))
    in_sizes = z.shape[1:-1]  # z is channels last whatever x's format
    forward = window_pads(out_sizes, window, strides, dilation, padding)
    zero = jnp.zeros((), z.dtype)

    def placed(part, offset):
        config = [(0, 0, 0)]
        for o, i, k, s, d, (lo, _) in zip(out_sizes, in_sizes, offset, strides, dilation, forward):
            low = k * d - lo
            config.append((low, o - low - (i - 1) * s - 1, s - 1))
        return lax.pad(part, zero, [*config, (0, 0, 0)])

    parts = lax.split(z, [c_out] * len(offsets), axis=z.ndim - 1)
    y = functools.reduce(operator.add, map(placed, parts, offsets))
    return y if data_format == "channels_last" else jnp.moveaxis(y, -1, 1)


TRANSPOSE_LOWERINGS = ("auto", "lax", "col2im")

TRANSPOSE = {"lax": _lax_transpose, "col2im": _col2im_transpose}
