"""Tests of jaxkeras.conv (convolutions, transposed/depthwise/separable/local convolutions and
pooling) against direct float64 NumPy loops written here, with their own padding arithmetic."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jaxkeras as K
from jaxkeras import conv, pool
from tests.helpers import check_grad, check_op

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
# plain convolutions

CONV_OPS = {1: K.conv1d, 2: K.conv2d, 3: K.conv3d}

CONV_CASES = [
    # n, data_format, padding, strides, dilation
    (1, "channels_last", "valid", 1, 1),
    (1, "channels_first", "same", 2, 1),
    (1, "channels_last", "causal", 1, 2),
    (1, "channels_first", "causal", 2, 1),
    (2, "channels_last", "same", (2, 1), 1),
    (2, "channels_first", "valid", 1, (2, 1)),
    (2, "channels_last", "valid", (2, 2), 1),
    (2, "channels_first", "same", (1, 2), (2, 2)),
    (3, "channels_last", "same", (1, 2, 1), 1),
    (3, "channels_first", "valid", 1, (2, 1, 1)),
]
SPATIAL = {1: (9,), 2: (7, 6), 3: (5, 4, 5)}
KERNEL = {1: (3,), 2: (3, 2), 3: (2, 3, 2)}


def conv_inputs(n, data_format, c_in=2, c_out=3):
    x = uniform(*channels((2, *SPATIAL[n], c_in), data_format))
    return x, uniform(*KERNEL[n], c_in, c_out)


@pytest.mark.parametrize(("n", "data_format", "padding", "strides", "dilation"), CONV_CASES)
def test_conv_matches_reference(n, data_format, padding, strides, dilation):
    x, w = conv_inputs(n, data_format)
    check_op(
        lambda a: CONV_OPS[n](a, w, strides, padding, data_format, dilation),
        lambda a: np_conv(a, w, strides, padding, dilation, data_format),
        [x],
        **TOL,
    )


@pytest.mark.parametrize("lowering", ["lax", "im2col"])
@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_each_lowering_matches_reference(lowering, n, data_format):
    x, w = conv_inputs(n, data_format)
    strides, dilation = (2,) + (1,) * (n - 1), (1,) * (n - 1) + (2,)
    for padding in ("same", "valid"):
        got = jax.jit(
            lambda a, padding=padding: CONV_OPS[n](
                a, w, strides, padding, data_format, dilation, lowering=lowering
            )
        )(x)
        want = np_conv(x, w, strides, padding, dilation, data_format)
        np.testing.assert_allclose(np.asarray(got), want, **TOL)


def lowered_for(platform, fn, x):
    """The StableHLO text of ``fn(x)`` compiled for ``platform`` (no such device needed)."""
    spec = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return jax.export.export(jax.jit(fn), platforms=[platform])(spec).mlir_module()


def test_conv_lowering_policy():
    assert [conv.conv_lowering("cpu", n) for n in (1, 2, 3)] == ["lax", "lax", "im2col"]
    assert {conv.conv_lowering(p, n) for p in ("cuda", "rocm", "tpu") for n in (1, 2, 3)} == {"lax"}
    assert pool.pool_lowering("cpu") == "reshape"
    assert {pool.pool_lowering(p) for p in ("cuda", "rocm", "tpu")} == {"lax"}


@pytest.mark.parametrize("n", [2, 3])
def test_auto_conv_lowering_is_decided_per_platform(n):
    x, w = conv_inputs(n, "channels_last")
    for platform in ("cpu", "cuda", "tpu"):
        text = lowered_for(platform, lambda a: CONV_OPS[n](a, w, padding="same"), x)
        assert ("convolution" in text) == (conv.conv_lowering(platform, n) == "lax"), platform


def test_auto_pool_lowering_is_decided_per_platform():
    x = uniform(2, 6, 6, 2)
    for platform in ("cpu", "cuda", "tpu"):
        text = lowered_for(platform, lambda a: K.pool2d(a, 2, 2), x)
        assert ("reduce_window" in text) == (pool.pool_lowering(platform) == "lax"), platform
    overlapping = lowered_for("cpu", lambda a: K.pool2d(a, 3, 2), x)
    assert "reduce_window" in overlapping  # only tiling windows have a reshape lowering


def test_conv_with_variable_kernel_through_function_and_gradients():
    x, w = conv_inputs(2, "channels_last")
    xp = K.placeholder((None, *x.shape[1:]))
    kernel = K.variable(w)
    y = K.conv2d(xp, kernel, padding="same")
    assert K.int_shape(y) == (None, 7, 6, 3)
    (gk,) = K.gradients(K.sum(y), [kernel])
    out, grad = K.function([xp], [y, gk])([x])
    np.testing.assert_allclose(out, np_conv(x, w, padding="same"), **TOL)
    # d sum(y) / d w[o, :, f] is the sum of the inputs each offset o sees (any f).
    ones = np.ones((1, 1, 1, 1))
    seen = np.stack(
        [
            np_conv(
                x[..., c : c + 1],
                np.pad(ones, [(i, 2 - i), (j, 1 - j), (0, 0), (0, 0)]),
                padding="same",
            ).sum()
            for i in range(3)
            for j in range(2)
            for c in range(2)
        ]
    ).reshape(3, 2, 2, 1)
    np.testing.assert_allclose(grad, np.broadcast_to(seen, w.shape), rtol=1e-5, atol=1e-4)


def test_default_data_format_comes_from_config():
    x, w = conv_inputs(2, "channels_first")
    K.set_image_data_format("channels_first")
    try:
        got = K.conv2d(x, w, padding="same")
    finally:
        K.set_image_data_format("channels_last")
    np.testing.assert_allclose(
        got, np_conv(x, w, padding="same", data_format="channels_first"), **TOL
    )


def test_causal_conv1d_does_not_look_ahead():
    x, w = conv_inputs(1, "channels_last")
    changed = x.copy()
    changed[:, 5:] += 1.0
    a = np.asarray(K.conv1d(x, w, padding="causal", dilation_rate=2))
    b = np.asarray(K.conv1d(changed, w, padding="causal", dilation_rate=2))
    assert a.shape == (2, 9, 3)
    np.testing.assert_array_equal(a[:, :5], b[:, :5])
    assert np.all(np.abs(a[:, 5:] - b[:, 5:]).max(axis=(0, 2)) > 0)


# ---------------------------------------------------------------------------------------------
# transposed convolutions

TRANSPOSE_CASES = [
    # n, data_format, padding, strides, dilation, output spatial
    (2, "channels_last", "same", (2, 2), 1, (8, 6)),
    (2, "channels_last", "same", (2, 2), 1, (7, 5)),
    (2, "channels_first", "valid", (2, 1), 1, (10, 4)),
    (2, "channels_first", "valid", 1, (2, 2), (8, 5)),
    (3, "channels_last", "valid", (1, 2, 1), 1, (4, 7, 4)),
    (3, "channels_first", "same", (2, 1, 2), 1, (5, 3, 6)),
]
TRANSPOSE_OPS = {2: K.conv2d_transpose, 3: K.conv3d_transpose}
TRANSPOSE_IN = {2: (4, 3), 3: (3, 3, 3)}


def transpose_inputs(n, data_format):
    x = uniform(*channels((2, *TRANSPOSE_IN[n], 3), data_format))
    return x, uniform(*KERNEL[n], 2, 3)


def full_shape(batch, spatial, c, data_format):
    return channels((batch, *spatial, c), data_format)


@pytest.mark.parametrize(
    ("n", "data_format", "padding", "strides", "dilation", "out"), TRANSPOSE_CASES
)
def test_conv_transpose_matches_scatter_reference(n, data_format, padding, strides, dilation, out):
    x, w = transpose_inputs(n, data_format)
    shape = full_shape(None, out, 2, data_format)
    check_op(
        lambda a: TRANSPOSE_OPS[n](a, w, shape, strides, padding, data_format, dilation),
        lambda a: np_conv_transpose(a, w, out, strides, padding, dilation, data_format),
        [x],
        **TOL,
    )


def test_conv_transpose_is_the_adjoint_of_conv():
    x, w = transpose_inputs(2, "channels_last")
    y = uniform(2, 7, 5, 2)
    up = K.conv2d_transpose(x, w, (2, 7, 5, 2), (2, 2), "same")
    down = np_conv(y, w, (2, 2), "same")  # the same array is the forward kernel
    np.testing.assert_allclose(np.vdot(np.asarray(up, np.float64), y), np.vdot(x, down), rtol=1e-5)


def test_conv_transpose_output_shape_with_symbolic_batch():
    x, w = transpose_inputs(2, "channels_first")
    xp = K.placeholder((None, *x.shape[1:]))
    y = K.conv2d_transpose(xp, w, (K.shape(xp)[0], 2, 8, 6), (2, 2), "same", "channels_first")
    assert K.int_shape(y) == (None, 2, 8, 6)
    got = K.function([xp], [y])([x])[0]
    want = np_conv_transpose(x, w, (8, 6), (2, 2), "same", 1, "channels_first")
    np.testing.assert_allclose(got, want, **TOL)


# ---------------------------------------------------------------------------------------------
# depthwise and separable


@pytest.mark.parametrize(
    ("data_format", "padding", "strides", "dilation"),
    [
        ("channels_last", "same", (2, 1), 1),
        ("channels_first", "valid", 1, (2, 1)),
    ],
)
def test_depthwise_and_separable_conv2d(data_format, padding, strides, dilation):
    x, _ = conv_inputs(2, data_format)
    dw, pw = uniform(3, 2, 2, 2), uniform(1, 1, 4, 3)
    check_op(
        lambda a: K.depthwise_conv2d(a, dw, strides, padding, data_format, dilation),
        lambda a: np_depthwise(a, dw, strides, padding, dilation, data_format),
        [x],
        **TOL,
    )
    check_op(
        lambda a: K.separable_conv2d(a, dw, pw, strides, padding, data_format, dilation),
        lambda a: np_separable(a, dw, pw, strides, padding, dilation, data_format),
        [x],
        **TOL,
    )


@pytest.mark.parametrize(
    ("data_format", "padding", "strides", "dilation"),
    [
        ("channels_last", "valid", 2, 1),
        ("channels_first", "same", 1, 2),
    ],
)
def test_separable_conv1d(data_format, padding, strides, dilation):
    x, _ = conv_inputs(1, data_format)
    dw, pw = uniform(3, 2, 3), uniform(1, 6, 2)
    check_op(
        lambda a: K.separable_conv1d(a, dw, pw, strides, padding, data_format, dilation),
        lambda a: np_separable(a, dw, pw, strides, padding, dilation, data_format),
        [x],
        **TOL,
    )


# ---------------------------------------------------------------------------------------------
# local convolutions


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_local_conv1d(data_format):
    x = uniform(*channels((2, 9, 2), data_format))
    w = uniform(4, 3 * 2, 3)  # 4 positions of a 3-wide window, stride 2
    check_op(
        lambda a: K.local_conv1d(a, w, 3, 2, data_format),
        lambda a: np_local_conv(a, w, (3,), (2,), (4,), data_format),
        [x],
        **TOL,
    )


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_local_conv2d(data_format):
    x = uniform(*channels((2, 7, 6, 2), data_format))
    w = uniform(3 * 5, 3 * 2 * 2, 3)  # 3x5 positions of a 3x2 window, strides (2, 1)
    check_op(
        lambda a: K.local_conv2d(a, w, (3, 2), (2, 1), (3, 5), data_format),
        lambda a: np_local_conv(a, w, (3, 2), (2, 1), (3, 5), data_format),
        [x],
        **TOL,
    )


# ---------------------------------------------------------------------------------------------
# pooling

POOL_CASES = [
    # n, data_format, pool_size, strides, padding
    (2, "channels_last", (3, 3), (2, 2), "same"),
    (2, "channels_first", (2, 3), (1, 2), "valid"),
    (2, "channels_last", (2, 2), (2, 2), "same"),
    (2, "channels_first", (2, 2), (2, 2), "valid"),
    (3, "channels_last", (2, 2, 2), (2, 2, 2), "same"),
    (3, "channels_first", (2, 1, 3), (1, 1, 2), "same"),
]
POOL_OPS = {2: K.pool2d, 3: K.pool3d}


@pytest.mark.parametrize("mode", ["max", "avg"])
@pytest.mark.parametrize(("n", "data_format", "pool_size", "strides", "padding"), POOL_CASES)
def test_pool_matches_reference(mode, n, data_format, pool_size, strides, padding):
    x = uniform(*channels((2, *SPATIAL[n], 2), data_format))
    check_op(
        lambda a: POOL_OPS[n](a, pool_size, strides, padding, data_format, mode),
        lambda a: np_pool(a, pool_size, strides, padding, data_format, mode),
        [x],
        **TOL,
    )


@pytest.mark.parametrize("lowering", ["lax", "reshape"])
@pytest.mark.parametrize("mode", ["max", "avg"])
def test_each_pool_lowering_matches_reference(lowering, mode):
    x = uniform(2, 7, 5, 3, 2)
    for padding in ("same", "valid"):
        got = jax.jit(
            lambda a, padding=padding: K.pool3d(
                a, 2, 2, padding, "channels_last", mode, lowering=lowering
            )
        )(x)
        np.testing.assert_allclose(np.asarray(got), np_pool(x, 2, 2, padding, mode=mode), **TOL)


def test_average_pooling_excludes_same_padding():
    got = np.asarray(
        K.pool2d(np.ones((1, 5, 5, 1), np.float32), (3, 3), (2, 2), "same", pool_mode="avg")
    )
    np.testing.assert_array_equal(got, np.ones((1, 3, 3, 1)))


# ---------------------------------------------------------------------------------------------
# gradients (finite differences of the NumPy references)

GRAD_CASES = {
    "conv1d causal": (
        lambda x, w: K.conv1d(x, w, 1, "causal", dilation_rate=2),
        lambda x, w: np_conv(x, w, 1, "causal", 2),
        (2, 6, 2),
        (2, 2, 2),
    ),
    "conv2d im2col": (
        lambda x, w: K.conv2d(x, w, (2, 1), "same", "channels_first", lowering="im2col"),
        lambda x, w: np_conv(x, w, (2, 1), "same", 1, "channels_first"),
        (1, 2, 5, 4),
        (3, 2, 2, 2),
    ),
    "conv2d lax": (
        lambda x, w: K.conv2d(x, w, 1, "valid", dilation_rate=(1, 2), lowering="lax"),
        lambda x, w: np_conv(x, w, 1, "valid", (1, 2)),
        (1, 5, 5, 2),
        (2, 2, 2, 2),
    ),
    "conv3d": (
        lambda x, w: K.conv3d(x, w, (1, 2, 1), "same"),
        lambda x, w: np_conv(x, w, (1, 2, 1), "same"),
        (1, 3, 4, 3, 2),
        (2, 2, 2, 2, 2),
    ),
    "conv2d_transpose": (
        lambda x, w: K.conv2d_transpose(x, w, (1, 7, 5, 2), (2, 2), "same"),
        lambda x, w: np_conv_transpose(x, w, (7, 5), (2, 2), "same"),
        (1, 4, 3, 2),
        (3, 2, 2, 2),
    ),
    "conv3d_transpose": (
        lambda x, w: K.conv3d_transpose(
            x, w, (1, 2, 4, 5, 3), (1, 2, 1), "valid", "channels_first"
        ),
        lambda x, w: np_conv_transpose(x, w, (4, 5, 3), (1, 2, 1), "valid", 1, "channels_first"),
        (1, 2, 3, 2, 2),
        (2, 2, 2, 2, 2),
    ),
    "depthwise_conv2d": (
        lambda x, w: K.depthwise_conv2d(x, w, (1, 2), "same"),
        lambda x, w: np_depthwise(x, w, (1, 2), "same"),
        (1, 4, 5, 2),
        (2, 3, 2, 2),
    ),
    "local_conv1d": (
        lambda x, w: K.local_conv1d(x, w, 2, 2, "channels_first"),
        lambda x, w: np_local_conv(x, w, (2,), (2,), (3,), "channels_first"),
        (1, 2, 6),
        (3, 4, 2),
    ),
    "local_conv2d": (
        lambda x, w: K.local_conv2d(x, w, (2, 2), (1, 2), (2, 2), "channels_last"),
        lambda x, w: np_local_conv(x, w, (2, 2), (1, 2), (2, 2), "channels_last"),
        (1, 3, 4, 2),
        (4, 8, 2),
    ),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradients_wrt_input_and_kernel(name):
    op, ref, x_shape, w_shape = GRAD_CASES[name]
    x, w = uniform(*x_shape), uniform(*w_shape)
    check_grad(lambda a: op(a, w), lambda a: ref(a, w), x)
    check_grad(lambda b: op(x, b), lambda b: ref(x, b), w)


def test_separable_conv2d_gradients_wrt_input_and_both_kernels():
    x, dw, pw = uniform(1, 5, 4, 2), uniform(2, 2, 2, 2), uniform(1, 1, 4, 2)
    op = lambda a, b, c: K.separable_conv2d(a, b, c, 1, "same")  # noqa: E731
    ref = lambda a, b, c: np_separable(a, b, c, 1, "same")  # noqa: E731
    check_grad(lambda a: op(a, dw, pw), lambda a: ref(a, dw, pw), x)
    check_grad(lambda b: op(x, b, pw), lambda b: ref(x, b, pw), dw)
    check_grad(lambda c: op(x, dw, c), lambda c: ref(x, dw, c), pw)


def test_separable_conv1d_gradients_wrt_input_and_both_kernels():
    x, dw, pw = uniform(1, 6, 2), uniform(3, 2, 1), uniform(1, 2, 2)
    op = lambda a, b, c: K.separable_conv1d(a, b, c, 2, "valid", "channels_first")  # noqa: E731
    ref = lambda a, b, c: np_separable(a, b, c, 2, "valid", 1, "channels_first")  # noqa: E731
    x = x.transpose(0, 2, 1)
    check_grad(lambda a: op(a, dw, pw), lambda a: ref(a, dw, pw), x)
    check_grad(lambda b: op(x, b, pw), lambda b: ref(x, b, pw), dw)
    check_grad(lambda c: op(x, dw, c), lambda c: ref(x, dw, c), pw)


@pytest.mark.parametrize(
    ("mode", "lowering", "pool_size", "strides", "padding"),
    [
        ("max", "lax", (3, 3), (2, 2), "same"),
        ("max", "reshape", (2, 2), (2, 2), "same"),
        ("avg", "lax", (2, 3), (1, 2), "same"),
        ("avg", "reshape", (2, 2), (2, 2), "valid"),
    ],
)
def test_pool_gradients(mode, lowering, pool_size, strides, padding):
    x = RNG.permutation(np.linspace(-1, 1, 1 * 5 * 4 * 2)).reshape(1, 5, 4, 2)  # no ties
    check_grad(
        lambda a: K.pool2d(
            a, pool_size, strides, padding, "channels_last", mode, lowering=lowering
        ),
        lambda a: np_pool(a, pool_size, strides, padding, "channels_last", mode),
        x,
    )


@pytest.mark.parametrize(("mode", "strides"), [("avg", (1, 2, 2)), ("max", 2)])
def test_pool3d_gradient(mode, strides):
    x = RNG.permutation(np.linspace(-1, 1, 3 * 4 * 3 * 2)).reshape(1, 2, 3, 4, 3)
    check_grad(
        lambda a: K.pool3d(a, 2, strides, "same", "channels_first", mode),
        lambda a: np_pool(a, 2, strides, "same", "channels_first", mode),
        x,
    )


# ---------------------------------------------------------------------------------------------
# static output shapes (the batch stays None)


def out_size(size, k, s, d, padding):
    extent = d * (k - 1) + 1
    if padding in ("same", "causal"):
        return -(-size // s)
    return -(-(size - extent + 1) // s)


@st.composite
def windows(draw, n, paddings=("same", "valid")):
    k = draw(st.tuples(*[st.integers(1, 4)] * n))
    s = draw(st.tuples(*[st.integers(1, 3)] * n))
    d = draw(st.tuples(*[st.integers(1, 2)] * n))
    padding = draw(st.sampled_from(paddings))
    low = [di * (ki - 1) + 1 for ki, di in zip(k, d)]
    size = tuple(draw(st.integers(lo, lo + 8)) for lo in low)
    return size, k, s, d, padding, draw(st.sampled_from(["channels_last", "channels_first"]))


@given(windows(2))
def test_conv2d_static_shape(case):
    size, k, s, d, padding, data_format = case
    x = K.placeholder(channels((None, *size, 2), data_format))
    y = K.conv2d(x, np.zeros((*k, 2, 3), np.float32), s, padding, data_format, d)
    want = tuple(out_size(*a, padding) for a in zip(size, k, s, d))
    assert K.int_shape(y) == channels((None, *want, 3), data_format)


@given(windows(1, ("same", "valid", "causal")))
def test_conv1d_static_shape(case):
    size, k, s, d, padding, data_format = case
    x = K.placeholder(channels((None, *size, 2), data_format))
    y = K.conv1d(x, np.zeros((*k, 2, 3), np.float32), s, padding, data_format, d)
    want = tuple(out_size(*a, padding) for a in zip(size, k, s, d))
    assert K.int_shape(y) == channels((None, *want, 3), data_format)


@given(windows(2))
def test_pool2d_and_transpose_static_shapes(case):
    size, k, s, _, padding, data_format = case
    x = K.placeholder(channels((None, *size, 2), data_format))
    y = K.pool2d(x, k, s, padding, data_format, "avg")
    pooled = tuple(out_size(*a, 1, padding) for a in zip(size, k, s))
    assert K.int_shape(y) == channels((None, *pooled, 2), data_format)
    back = K.conv2d_transpose(
        y,
        np.zeros((*k, 4, 2), np.float32),
        channels((None, *size, 4), data_format),
        s,
        padding,
        data_format,
    )
    assert K.int_shape(back) == channels((None, *size, 4), data_format)


# ---------------------------------------------------------------------------------------------
# bad arguments

X4 = np.zeros((1, 5, 5, 2), np.float32)
W4 = np.zeros((3, 3, 2, 2), np.float32)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: K.conv2d(X4, W4, padding="full"), "'full'"),
        (lambda: K.conv2d(X4, W4, padding="causal"), "'causal'"),
        (lambda: K.conv2d(X4, W4, data_format="NHWC"), "'NHWC'"),
        (lambda: K.conv2d(X4, W4, lowering="fast"), "'fast'"),
        (lambda: K.conv2d(X4, W4, strides=(1, 2, 3)), r"strides.*\(1, 2, 3\)"),
        (lambda: K.conv2d(X4, W4, dilation_rate=0), "dilation_rate.*0"),
        (lambda: K.conv2d(X4, W4[0]), r"kernel must have rank 4.*\(3, 2, 2\)"),
        (lambda: K.conv2d(X4[0], W4), r"x must have rank 4.*\(5, 5, 2\)"),
        (lambda: K.conv3d(X4, W4), r"x must have rank 5.*\(1, 5, 5, 2\)"),
        (lambda: K.conv2d(X4, W4[:, :, :1]), "input channels.*2 vs 1"),
        (lambda: K.conv2d(X4, np.zeros((6, 6, 2, 1))), "does not fit"),
        (lambda: K.conv2d_transpose(X4, W4, (1, 12, 12, 2), (2, 2), "same"), r"\(1, 12, 12, 2\)"),
        (lambda: K.conv2d_transpose(X4, W4, (1, 10, 10, 5), (2, 2), "same"), "5"),
        (lambda: K.conv2d_transpose(X4, W4, (1, None, 10, 2), (2, 2)), "None"),
        (lambda: K.conv2d_transpose(X4, W4, (1, 10, 2), (2, 2)), r"\(1, 10, 2\)"),
        (lambda: K.depthwise_conv2d(X4, W4[:, :, :1]), "input channels.*2 vs 1"),
        (lambda: K.separable_conv2d(X4, W4, np.zeros((3, 3, 4, 2))), r"\(3, 3, 4, 2\)"),
        (lambda: K.separable_conv2d(X4, W4, np.zeros((1, 1, 3, 2))), "4 vs 3"),
        (lambda: K.pool2d(X4, 2, pool_mode="sum"), "'sum'"),
        (lambda: K.pool2d(X4, 2, padding="causal"), "'causal'"),
        (lambda: K.pool2d(X4, (2, 2, 2)), r"pool_size.*\(2, 2, 2\)"),
        (lambda: K.pool2d(X4, 2, 1, lowering="reshape"), "reshape"),
        (lambda: K.pool3d(X4, 2), r"x must have rank 5"),
        (lambda: K.local_conv2d(X4, np.zeros((9, 18, 2)), 3, 1, (2, 2)), "4 vs 9"),
        (lambda: K.local_conv2d(X4, np.zeros((4, 9, 2)), 3, 1, (2, 2)), "18 vs 9"),
        (lambda: K.local_conv2d(X4, np.zeros((9, 18, 2)), 3, 2, (3, 3)), "needs more"),
        (
            lambda: K.local_conv1d(X4[0], np.zeros((2, 4, 2)), 2, 1, "channels_middle"),
            "'channels_middle'",
        ),
    ],
)
def test_bad_arguments_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_all_names_are_exported():
    names = [
        "conv1d",
        "conv2d",
        "conv3d",
        "conv2d_transpose",
        "conv3d_transpose",
        "depthwise_conv2d",
        "separable_conv1d",
        "separable_conv2d",
        "local_conv1d",
        "local_conv2d",
        "pool2d",
        "pool3d",
    ]
    assert sorted(conv.__all__) == sorted(names)
    assert all(getattr(K, name) is getattr(conv, name) for name in names)


def test_offsets_cover_the_window_once():
    # The im2col patches hold each (offset, channel) once: a one-hot kernel picks one input.
    x, _ = conv_inputs(2, "channels_first")
    for i, j, c in itertools.product(range(3), range(2), range(2)):
        w = np.zeros((3, 2, 2, 1), np.float32)
        w[i, j, c, 0] = 1.0
        got = np.asarray(K.conv2d(x, w, lowering="im2col", data_format="channels_first"))
        np.testing.assert_array_equal(got[:, 0], x[:, c, i : i + 5, j : j + 5])
