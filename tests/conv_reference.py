"""Float64 NumPy references for the convolution, pooling and local-convolution tests, written
with their own padding arithmetic (TensorFlow's), and helpers those tests share."""

from __future__ import annotations

import jax
import numpy as np

from tests.helpers import check_grad

RNG = np.random.default_rng(0)
TOL = {"rtol": 1e-5, "atol": 1e-5}


def uniform(*shape):
    return RNG.uniform(-1.0, 1.0, size=shape).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# NumPy references (channels_last internally; channels_first moves the channel axis)


def np_pads(size, window, stride, dilation, padding):
    """TensorFlow's explicit padding: 'same' gives ceil(size / stride) outputs, smaller half
    first; 'causal' pads the dilated window minus one before; 'valid' nothing."""
    extent = dilation * (window - 1) + 1
    if padding == "valid":
        return 0, 0
    if padding == "causal":
        return extent - 1, 0
    out = -(-size // stride)
    total = max((out - 1) * stride + extent - size, 0)
    return total // 2, total - total // 2


def to_last(x, data_format):
    return np.moveaxis(x, 1, -1) if data_format == "channels_first" else x


def from_last(y, data_format):
    return np.moveaxis(y, -1, 1) if data_format == "channels_first" else y


def tup(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v)


def np_conv(x, w, strides=1, padding="valid", dilation=1, data_format="channels_last"):
    """N-D cross-correlation by loops over output positions and kernel offsets."""
    n = w.ndim - 2
    strides, dilation = tup(strides, n), tup(dilation, n)
    x = to_last(np.asarray(x, np.float64), data_format)
    w = np.asarray(w, np.float64)
    pads = [np_pads(x.shape[1 + i], w.shape[i], strides[i], dilation[i], padding) for i in range(n)]
    xp = np.pad(x, [(0, 0), *pads, (0, 0)])
    outs = [
        (xp.shape[1 + i] - dilation[i] * (w.shape[i] - 1) - 1) // strides[i] + 1 for i in range(n)
    ]
    y = np.zeros((x.shape[0], *outs, w.shape[-1]))
    for pos in np.ndindex(*outs):
        for off in np.ndindex(*w.shape[:n]):
            idx = tuple(p * s + o * d for p, s, o, d in zip(pos, strides, off, dilation))
            y[(slice(None), *pos)] += xp[(slice(None), *idx)] @ w[off]
    return from_last(y, data_format)


def np_depthwise(x, w, strides=1, padding="valid", dilation=1, data_format="channels_last"):
    """Each channel c with its own filters w[..., c, :]; output channel c * multiplier + m."""
    xl = to_last(np.asarray(x, np.float64), data_format)
    parts = [
        np_conv(xl[..., c : c + 1], w[..., c : c + 1, :], strides, padding, dilation)
        for c in range(xl.shape[-1])
    ]
    return from_last(np.concatenate(parts, axis=-1), data_format)


def np_separable(x, dw, pw, strides=1, padding="valid", dilation=1, data_format="channels_last"):
    y = np_depthwise(x, dw, strides, padding, dilation, data_format)
    return np_conv(y, pw, 1, "valid", 1, data_format)


def np_depthwise_vjp(x, w, ct, strides=1, padding="valid", dilation=1, data_format="channels_last"):
    """Both gradients of <ct, np_depthwise(x, w)>: each output position's cotangent scattered
    back through every kernel offset (loops, float64). Returns (d x, d w)."""
    n = w.ndim - 2
    strides, dilation = tup(strides, n), tup(dilation, n)
    x = to_last(np.asarray(x, np.float64), data_format)
    w = np.asarray(w, np.float64)
    channels, multiplier = w.shape[-2:]
    ct = to_last(np.asarray(ct, np.float64), data_format)
    ct = ct.reshape(*ct.shape[:-1], channels, multiplier)
    pads = [np_pads(x.shape[1 + i], w.shape[i], strides[i], dilation[i], padding) for i in range(n)]
    xp = np.pad(x, [(0, 0), *pads, (0, 0)])
    dxp, dw = np.zeros_like(xp), np.zeros_like(w)
    for pos in np.ndindex(*ct.shape[1 : n + 1]):
        g = ct[(slice(None), *pos)]  # (batch, channels, multiplier)
        for off in np.ndindex(*w.shape[:n]):
            idx = (slice(None), *(p * s + o * d for p, s, o, d in zip(pos, strides, off, dilation)))
            dw[off] += np.einsum("bc,bcm->cm", xp[idx], g)
            dxp[idx] += np.einsum("bcm,cm->bc", g, w[off])
    inner = tuple(slice(lo, lo + size) for (lo, _), size in zip(pads, x.shape[1:-1]))
    return from_last(dxp[(slice(None), *inner)], data_format), dw


def np_separable_vjp(
    x, dw, pw, ct, strides=1, padding="valid", dilation=1, data_format="channels_last"
):
    """The gradients of <ct, np_separable(x, dw, pw)>: (d x, d dw, d pw)."""
    args = (strides, padding, dilation, data_format)
    y = to_last(np_depthwise(x, dw, *args), data_format)
    ct_last = to_last(np.asarray(ct, np.float64), data_format)
    matrix = np.asarray(pw, np.float64).reshape(pw.shape[-2:])
    d_pw = (y.reshape(-1, y.shape[-1]).T @ ct_last.reshape(-1, ct_last.shape[-1])).reshape(pw.shape)
    d_y = from_last(ct_last @ matrix.T, data_format)
    return (*np_depthwise_vjp(x, dw, d_y, *args), d_pw)


def np_conv_transpose(
    x, w, out_spatial, strides=1, padding="valid", dilation=1, data_format="channels_last"
):
    """Scatter: input position p with offset o adds x[p] @ w[o].T at p * s + o * d - pad."""
    n = w.ndim - 2
    strides, dilation = tup(strides, n), tup(dilation, n)
    x = to_last(np.asarray(x, np.float64), data_format)
    w = np.asarray(w, np.float64)
    lows = [
        np_pads(out_spatial[i], w.shape[i], strides[i], dilation[i], padding)[0] for i in range(n)
    ]
    y = np.zeros((x.shape[0], *out_spatial, w.shape[n]))
    for pos in np.ndindex(*x.shape[1:-1]):
        for off in np.ndindex(*w.shape[:n]):
            idx = tuple(
                p * s + o * d - lo for p, s, o, d, lo in zip(pos, strides, off, dilation, lows)
            )
            if all(0 <= i < size for i, size in zip(idx, out_spatial)):
                y[(slice(None), *idx)] += x[(slice(None), *pos)] @ w[off].T
    return from_last(y, data_format)


def np_pool(x, pool_size, strides, padding="valid", data_format="channels_last", mode="max"):
    """Max or mean over the real (unpadded) elements of each window."""
    n = x.ndim - 2
    pool_size, strides = tup(pool_size, n), tup(strides, n)
    x = to_last(np.asarray(x, np.float64), data_format)
    sizes = x.shape[1:-1]
    lows = [np_pads(sizes[i], pool_size[i], strides[i], 1, padding)[0] for i in range(n)]
    if padding == "same":
        outs = [-(-sizes[i] // strides[i]) for i in range(n)]
    else:
        outs = [(sizes[i] - pool_size[i]) // strides[i] + 1 for i in range(n)]
    y = np.zeros((x.shape[0], *outs, x.shape[-1]))
    for pos in np.ndindex(*outs):
        window = tuple(
            slice(max(p * s - lo, 0), min(p * s - lo + k, size))
            for p, s, lo, k, size in zip(pos, strides, lows, pool_size, sizes)
        )
        patch = x[(slice(None), *window)].reshape(x.shape[0], -1, x.shape[-1])
        y[(slice(None), *pos)] = patch.max(1) if mode == "max" else patch.mean(1)
    return from_last(y, data_format)


def np_local_conv(x, w, kernel_size, strides, out_spatial, data_format="channels_last"):
    """TF-Keras: patch features ordered (window, channel) for channels_last, (channel, window)
    for channels_first; positions row-major."""
    n = len(out_spatial)
    x = np.asarray(x, np.float64)
    y = np.zeros((x.shape[0], *out_spatial, w.shape[-1]))
    for p, pos in enumerate(np.ndindex(*out_spatial)):
        window = tuple(slice(q * s, q * s + k) for q, s, k in zip(pos, strides, kernel_size))
        if data_format == "channels_last":
            patch = x[(slice(None), *window, slice(None))]
        else:
            patch = x[(slice(None), slice(None), *window)]
        y[(slice(None), *pos)] = patch.reshape(x.shape[0], -1) @ w[p]
    return from_last(y, data_format) if n else y


def channels(shape_last, data_format):
    """A channels_last shape in ``data_format`` order."""
    if data_format == "channels_first":
        return (shape_last[0], shape_last[-1], *shape_last[1:-1])
    return shape_last


# ---------------------------------------------------------------------------------------------


def lowered_for(platform, fn, x):
    """The StableHLO text of ``fn(x)`` compiled for ``platform`` (no such device needed)."""
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return jax.export.export(jax.jit(fn), platforms=[platform])(spec).mlir_module()


def check_input_and_kernel_gradients(op, ref, x_shape, w_shape):
    """Checks the gradients of ``op(x, w)`` w.r.t. ``x`` and ``w`` (random values of the given
    shapes) against finite differences of the NumPy reference ``ref(x, w)``."""
    x, w = uniform(*x_shape), uniform(*w_shape)
    check_grad(lambda a: op(a, w), lambda a: ref(a, w), x)
    check_grad(lambda b: op(x, b), lambda b: ref(x, b), w)
