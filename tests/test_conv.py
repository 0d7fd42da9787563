"""Tests of jaxkeras.conv (convolutions: plain, transposed, depthwise, separable) against float64
NumPy loops (tests/conv_reference.py)."""

from __future__ import annotations

import functools
import itertools

import jax
import numpy as np
import pytest

import jaxkeras as K
from jaxkeras import conv
from jaxkeras._ops import spatial
from jaxkeras._xla import conv_lowering
from tests.conv_reference import (
    TOL,
    channels,
    check_input_and_kernel_gradients,
    lowered_for,
    np_conv,
    np_conv_transpose,
    np_depthwise,
    np_depthwise_vjp,
    np_separable,
    np_separable_vjp,
    uniform,
)
from tests.helpers import check_grad, check_op

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


@pytest.mark.parametrize("lowering", ["lax", "im2col", "taps", "lax_im2col"])
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


@pytest.mark.parametrize("lowering", ["im2col", "taps", "lax_im2col"])
@pytest.mark.parametrize(("n", "data_format", "padding", "strides", "dilation"), CONV_CASES)
def test_lowering_gradients_match_lax(lowering, n, data_format, padding, strides, dilation):
    # Both gradients (input and kernel) of each matmul lowering against lax's, same cotangent.
    x, w = conv_inputs(n, data_format, c_in=5, c_out=2)

    def vjp(low):
        fn = lambda a, b: CONV_OPS[n](a, b, strides, padding, data_format, dilation, lowering=low)  # noqa: E731
        y, back = jax.vjp(fn, x, w)
        ct = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
        return back(ct)

    for got, want in zip(jax.jit(lambda: vjp(lowering))(), jax.jit(lambda: vjp("lax"))()):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lowering", ["im2col", "taps"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_matmul_lowerings_contract_channels_as_one_matrix(n, lowering):
    # channels_last: the patches (or the input) reshape to (positions, channels) and multiply
    # as a matrix, so the kernel's gradient is a plain transposed-lhs product; a product over
    # the unflattened batch and spatial axes made XLA:CPU copy the whole cotangent transposed
    x, w = conv_inputs(n, "channels_last")
    fn = lambda a, b: K.sum(  # noqa: E731
        K.square(CONV_OPS[n](a, b, 1, "same", "channels_last", 1, lowering=lowering))
    )
    text = jax.jit(jax.grad(fn, argnums=(0, 1))).lower(x, w).as_text()
    dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
    assert len(dots) == 3  # forward, input gradient, kernel gradient
    for line in dots:
        operands = line.split(": (")[-1].split(") ->")[0]
        assert all(t.count("x") == 2 for t in operands.split(", ")), line  # rank-2 operands


def test_conv_lowering_policy():
    assert [conv_lowering.conv_lowering("cpu", n) for n in (1, 2, 3)] == ["lax", "lax", "im2col"]
    assert [conv_lowering.conv_lowering("cpu", 3, f) for f in (1, 7, 8)] == [
        "taps",
        "taps",
        "im2col",
    ]
    # few filters: taps from more input channels, im2col's narrow patches from as few
    few = [conv_lowering.conv_lowering("cpu", 2, 4, c) for c in (1, 4, 5, 40)]
    assert few == ["im2col", "im2col", "taps", "taps"]
    assert conv_lowering.conv_lowering("cpu", 3, 4, 2) == "im2col"
    assert conv_lowering.conv_lowering("cpu", 2, 40, 40) == "lax"
    # pointwise (1x1, 1, 1x1x1) kernels on CPU: one matmul, whatever the channel counts
    for n in (1, 2, 3):
        assert conv_lowering.conv_lowering("cpu", n, 64, 64, (1,) * n) == "im2col"
    assert conv_lowering.conv_lowering("cpu", 2, 64, 64, (1, 3)) == "lax"
    assert conv_lowering.conv_lowering("cuda", 2, 64, 64, (1, 1)) == "lax"
    # outputs no larger than the window (VGG16's and ResNet50V2's last stages on 32x32
    # inputs): one matmul
    tiny = [conv_lowering.conv_lowering("cpu", 2, 512, 512, (3, 3), (s, s)) for s in (1, 2, 3, 4)]
    assert tiny == ["im2col", "im2col", "im2col", "lax"]
    assert conv_lowering.conv_lowering("cpu", 1, 64, 64, (3,), (3,)) == "im2col"
    assert conv_lowering.conv_lowering("cpu", 1, 64, 64, (3,), (4,)) == "lax"
    assert conv_lowering.conv_lowering("cpu", 2, 160, 160, (1, 7), (3, 3)) == "lax"
    assert conv_lowering.conv_lowering("cuda", 2, 512, 512, (3, 3), (2, 2)) == "lax"
    platforms = ("cuda", "rocm", "tpu")
    choices = {
        conv_lowering.conv_lowering(p, n, f, 40)
        for p in platforms
        for n in (1, 2, 3)
        for f in (1, 64)
    }
    assert choices == {"lax"}


@pytest.mark.parametrize("c_in", [3, conv_lowering._PATCH_CHANNELS + 4])
@pytest.mark.parametrize("n", [2, 3])
def test_lax_im2col_derivatives_match_lax(c_in, n):
    # its own derivative rule (the kernel's part by patches, or by offset slices from more
    # channels): tangents in forward mode, gradients, and the derivative of a gradient
    x, w = conv_inputs(n, "channels_first", c_in=c_in, c_out=4)
    dx, dw = uniform(*x.shape), uniform(*w.shape)
    strides, dilation = (2,) + (1,) * (n - 1), (1,) * (n - 1) + (2,)

    def conv_with(lowering):
        return lambda a, b: CONV_OPS[n](
            a, b, strides, "same", "channels_first", dilation, lowering=lowering
        )

    def derivatives(lowering):
        conv_ = conv_with(lowering)
        loss = lambda a, b: K.sum(K.square(conv_(a, b)))  # noqa: E731
        grads = jax.grad(loss, argnums=(0, 1))(x, w)
        # d/dw of <d/dx loss, dx>
        second = jax.grad(lambda b: K.sum(jax.grad(loss)(x, b) * dx))(w)
        return (*jax.jvp(conv_, (x, w), (dx, dw)), *grads, second)

    got = jax.jit(lambda: derivatives("lax_im2col"))()
    want = jax.jit(lambda: derivatives("lax"))()
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)


def test_loop_conv_lowering_policy():
    assert conv_lowering.loop_conv_lowering(40, 1) == "lax_im2col"
    assert [conv_lowering.loop_conv_lowering(f, 40) for f in (1, 39, 40, 160)] == [
        "taps",
        "taps",
        "lax_im2col",
        "lax_im2col",
    ]
    assert conv_lowering.loop_conv_lowering(4, None) == "taps"
    assert conv_lowering.loop_conv_lowering(None, 4) == "lax_im2col"


def _convolutions(text):
    """The result types of the convolutions in StableHLO ``text``."""
    lines = [line for line in text.splitlines() if "stablehlo.convolution" in line]
    return [line.rsplit("-> ", 1)[-1].split()[0] for line in lines]


def test_auto_conv_in_a_loop_body_has_matmul_gradients_on_cpu():
    # in a loop body, 'auto' on CPU convolves forward only: the kernel's gradient is a matmul
    # (XLA's would be a convolution giving a kernel-shaped result) and so is the input's
    # (XLA's would convolve with the reversed kernel)
    x, w = conv_inputs(2, "channels_last", c_in=2, c_out=8)  # 'lax' outside a loop
    loss = lambda a, b: K.sum(K.square(K.conv2d(a, b, padding="same")))  # noqa: E731
    both = lambda a: jax.grad(loss, argnums=(0, 1))(a, w)  # noqa: E731
    with spatial.loop_body():
        assert spatial.in_loop_body()
        text = lowered_for("cpu", both, x)
        on_cuda = lowered_for("cuda", both, x)
    assert not spatial.in_loop_body()
    y_type = "tensor<{}x8xf32>".format("x".join(map(str, x.shape[:-1])))
    assert _convolutions(text) == [y_type]  # the forward pass alone
    assert "stablehlo.reverse" not in text and text.count("stablehlo.dot_general") == 2
    assert len(_convolutions(on_cuda)) == 3  # XLA's own gradients elsewhere
    outside = lowered_for("cpu", lambda a: jax.grad(loss, argnums=(0, 1))(a, w), x)
    assert len(_convolutions(outside)) == 3  # ... and outside a loop


@pytest.mark.parametrize("n", [2, 3])
def test_auto_conv_lowering_is_decided_per_platform(n):
    x, w = conv_inputs(n, "channels_last")
    for platform in ("cpu", "cuda", "tpu"):
        text = lowered_for(platform, lambda a: CONV_OPS[n](a, w, padding="same"), x)
        chosen = conv_lowering.conv_lowering(
            platform, n, w.shape[-1], w.shape[-2], w.shape[:-2], x.shape[1:-1]
        )
        assert ("convolution" in text) == (chosen == "lax"), platform


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
@pytest.mark.parametrize("strides", [1, 2])
def test_auto_pointwise_conv2d_is_one_matmul_on_cpu_with_lax_gradients(data_format, strides):
    x, _ = conv_inputs(2, data_format)
    c_in = x.shape[-1] if data_format == "channels_last" else x.shape[1]
    w = uniform(1, 1, c_in, 16)
    fn = lambda a, k, low: K.conv2d(a, k, (strides,) * 2, "same", data_format, lowering=low)  # noqa: E731
    _check_auto_is_one_matmul_on_cpu(fn, x, w)


def test_auto_conv2d_of_an_image_smaller_than_its_window_is_one_matmul_on_cpu():
    x, w = uniform(4, 2, 2, 16), uniform(3, 3, 16, 32)
    _check_auto_is_one_matmul_on_cpu(
        lambda a, k, low: K.conv2d(a, k, padding="same", lowering=low), x, w
    )


def _check_auto_is_one_matmul_on_cpu(fn, x, w):
    """``fn(x, w, 'auto')`` lowers to a matmul on CPU and to XLA's convolution on CUDA, and
    agrees with ``'lax'`` in value and in both gradients."""
    text = lowered_for("cpu", lambda a: fn(a, w, "auto"), x)
    assert "convolution" not in text and "dot_general" in text
    assert "convolution" in lowered_for("cuda", lambda a: fn(a, w, "auto"), x)
    y, back = jax.vjp(lambda a, k: fn(a, k, "auto"), x, w)
    y_lax, back_lax = jax.vjp(lambda a, k: fn(a, k, "lax"), x, w)
    np.testing.assert_allclose(np.asarray(y), np.asarray(y_lax), rtol=1e-5, atol=1e-5)
    ct = np.random.default_rng(2).standard_normal(y.shape).astype(np.float32)
    for got, want in zip(back(ct), back_lax(ct)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_auto_conv3d_with_few_filters_uses_taps_on_cpu():
    x = uniform(1, 4, 5, 5, 6)
    few, many = uniform(3, 3, 3, 6, 1), uniform(3, 3, 3, 6, 8)
    for kernel in (few, many):
        text = lowered_for("cpu", lambda a, k=kernel: K.conv3d(a, k, padding="same"), x)
        assert "convolution" not in text and "dot_general" in text
    text = lowered_for("cuda", lambda a: K.conv3d(a, few, padding="same"), x)
    assert "convolution" in text
    ref = K.conv3d(x, few, padding="same", lowering="lax")
    np.testing.assert_allclose(K.conv3d(x, few, padding="same"), ref, rtol=1e-5, atol=1e-6)


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


@pytest.mark.parametrize("lowering", conv_lowering.TRANSPOSE_LOWERINGS)
@pytest.mark.parametrize(
    ("n", "data_format", "padding", "strides", "dilation", "out"), TRANSPOSE_CASES
)
def test_conv_transpose_matches_scatter_reference(
    lowering, n, data_format, padding, strides, dilation, out
):
    x, w = transpose_inputs(n, data_format)
    shape = full_shape(None, out, 2, data_format)
    check_op(
        lambda a: TRANSPOSE_OPS[n](
            a, w, shape, strides, padding, data_format, dilation, lowering=lowering
        ),
        lambda a: np_conv_transpose(a, w, out, strides, padding, dilation, data_format),
        [x],
        **TOL,
    )


@pytest.mark.parametrize(
    ("n", "data_format", "padding", "strides", "dilation", "out"), TRANSPOSE_CASES
)
def test_col2im_transpose_derivatives_match_lax(n, data_format, padding, strides, dilation, out):
    # tangents in forward mode, both gradients, and the derivative of a gradient
    x, w = transpose_inputs(n, data_format)
    dx, dw = uniform(*x.shape), uniform(*w.shape)
    shape = full_shape(2, out, 2, data_format)

    def derivatives(lowering):
        def up(a, b):
            return TRANSPOSE_OPS[n](
                a, b, shape, strides, padding, data_format, dilation, lowering=lowering
            )

        loss = lambda a, b: K.sum(K.square(up(a, b)))  # noqa: E731
        second = jax.grad(lambda b: K.sum(jax.grad(loss)(x, b) * dx))(w)
        return (*jax.jvp(up, (x, w), (dx, dw)), *jax.grad(loss, argnums=(0, 1))(x, w), second)

    got = jax.jit(lambda: derivatives("col2im"))()
    want = jax.jit(lambda: derivatives("lax"))()
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_col2im_transpose_agrees_with_lax_on_random_configurations():
    # ranks, windows, strides or dilations, paddings, formats, and every output size that maps
    # back to the input (extra rows and columns under 'valid' included)
    rng = np.random.default_rng(7)
    checked = 0
    while checked < 24:
        n = int(rng.integers(2, 4))
        window = tuple(int(v) for v in rng.integers(1, 5, n))
        strides = tuple(int(v) for v in rng.integers(1, 4, n))
        dilation = tuple(int(v) for v in rng.integers(1, 3, n))
        if max(strides) > 1:
            dilation = (1,) * n
        padding = ("same", "valid")[checked % 2]
        data_format = ("channels_last", "channels_first")[(checked // 2) % 2]
        sizes = tuple(int(v) for v in rng.integers(1, 5, n))
        outs = []
        for i, k, s, d in zip(sizes, window, strides, dilation):
            fits = [o for o in range(1, 24) if spatial.output_size(o, k, s, d, padding) == i]
            outs.append(int(rng.choice(fits)) if fits else None)
        if None in outs:
            continue
        x = uniform(*channels((2, *sizes, 2), data_format))
        w = uniform(*window, 3, 2)
        shape = full_shape(2, outs, 3, data_format)
        up = functools.partial(
            TRANSPOSE_OPS[n], x, w, shape, strides, padding, data_format, dilation
        )
        np.testing.assert_allclose(
            up(lowering="col2im"), up(lowering="lax"), rtol=1e-5, atol=1e-5, err_msg=str(shape)
        )
        checked += 1


def test_col2im_transpose_upsamples_a_small_input_exactly():
    # the mnist_acgan generator's first layer in small: 3x3 -> 7x7 with a 5x5 window, stride
    # 1, 'valid' (XLA's transposed convolution multiplies mostly zeros there)
    x, w = uniform(2, 3, 3, 6), uniform(5, 5, 4, 6)
    got = K.conv2d_transpose(x, w, (2, 7, 7, 4), lowering="col2im")
    np.testing.assert_allclose(got, np_conv_transpose(x, w, (7, 7), 1, "valid"), **TOL)


def test_transpose_lowering_policy():
    assert conv_lowering.transpose_lowering("cpu", (7, 7), (14, 14)) == "col2im"
    assert conv_lowering.transpose_lowering("cpu", (3, 3), (7, 7)) == "col2im"
    assert conv_lowering.transpose_lowering("cpu", (10,), (20,)) == "col2im"
    assert conv_lowering.transpose_lowering("cpu", (16, 16), (16, 16)) == "lax"  # stride 1, 'same'
    assert conv_lowering.transpose_lowering("cpu", (16, 16), (18, 18)) == "lax"
    assert all(
        conv_lowering.transpose_lowering(p, (7, 7), (14, 14)) == "lax" for p in ("cuda", "tpu")
    )


def test_auto_conv_transpose_lowering_is_decided_per_platform():
    x, w = transpose_inputs(2, "channels_last")
    for out, uses_col2im in (((8, 6), True), ((4, 3), False)):
        strides = (2, 2) if uses_col2im else (1, 1)

        def up(a, out=out, strides=strides):
            return K.conv2d_transpose(a, w, (2, *out, 2), strides, "same")

        assert ("convolution" not in lowered_for("cpu", up, x)) == uses_col2im
        assert "convolution" in lowered_for("cuda", up, x)


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


DEPTHWISE_CASES = [
    # data_format, padding, strides, dilation, multiplier (stride 1 and strided kernel
    # gradients take different forms in 'taps')
    ("channels_last", "same", 1, 1, 1),
    ("channels_first", "same", 1, (2, 1), 1),
    ("channels_last", "valid", 1, (1, 2), 2),
    ("channels_first", "same", (2, 1), 1, 2),
    ("channels_last", "same", 2, 1, 1),
    ("channels_first", "valid", (1, 2), (2, 1), 2),
]


def depthwise_inputs(data_format, multiplier, n=2):
    """An input with 3 channels and a depthwise kernel with ``multiplier`` filters each."""
    x = uniform(*channels((2, *SPATIAL[n], 3), data_format))
    return x, uniform(*KERNEL[n], 3, multiplier)


def cotangent(y):
    """A random output cotangent of ``y``'s shape (float32)."""
    return np.random.default_rng(1).standard_normal(np.shape(y)).astype(np.float32)


def check_depthwise(conv_, x, w, args):
    """``conv_(x, w)`` and its gradients (for a random cotangent) against the NumPy reference
    of a depthwise convolution with ``args`` (strides, padding, dilation, data format)."""
    y = jax.jit(conv_)(x, w)
    np.testing.assert_allclose(np.asarray(y), np_depthwise(x, w, *args), **TOL)
    ct = cotangent(y)
    grads = jax.jit(lambda a, b: jax.vjp(conv_, a, b)[1](ct))(x, w)
    for got, want in zip(grads, np_depthwise_vjp(x, w, ct, *args)):
        np.testing.assert_allclose(np.asarray(got), want, **TOL)


@pytest.mark.parametrize("lowering", ["lax", "taps"])
@pytest.mark.parametrize(
    ("data_format", "padding", "strides", "dilation", "multiplier"), DEPTHWISE_CASES
)
def test_depthwise_lowerings_and_gradients_match_reference(
    lowering, data_format, padding, strides, dilation, multiplier
):
    # output channel c * multiplier + m is input channel c with kernel[..., c, m] (TF's order)
    x, w = depthwise_inputs(data_format, multiplier)
    args = (strides, padding, dilation, data_format)

    def conv_(a, b):
        return K.depthwise_conv2d(a, b, strides, padding, data_format, dilation, lowering=lowering)

    check_depthwise(conv_, x, w, args)


@pytest.mark.parametrize(
    ("sizes", "window", "data_format", "strides", "dilation", "multiplier"),
    [
        ((1, 1), (7, 7), "channels_last", 1, 1, 1),  # NASNet's last cells at small inputs
        ((2, 2), (5, 7), "channels_first", 1, 1, 2),
        ((2, 3), (7, 5), "channels_last", 2, 1, 1),
        ((3, 2), (3, 3), "channels_last", 1, (2, 1), 2),
    ],
)
def test_taps_depthwise_of_a_map_smaller_than_its_window_multiplies_only_the_input(
    sizes, window, data_format, strides, dilation, multiplier
):
    x = uniform(*channels((2, *sizes, 3), data_format))
    w = uniform(*window, 3, multiplier)
    args = (strides, "same", dilation, data_format)

    def conv_(a, b):
        return K.depthwise_conv2d(a, b, strides, "same", data_format, dilation, lowering="taps")

    check_depthwise(conv_, x, w, args)
    # the offsets whose slices are padding alone are left out: a 1x1 map keeps its centre's
    s, d = ((v, v) if isinstance(v, int) else v for v in (strides, dilation))
    pads = conv_lowering.window_pads(sizes, window, s, d, "same")
    live = conv_lowering._live_offsets(x, w, s, pads, d, data_format)
    if sizes == (1, 1):
        assert live == [(24, (3, 3))]
    else:  # (the 3x3 window with a dilated axis reaches the input from every offset)
        assert 0 < len(live) < window[0] * window[1] or window == (3, 3)


@pytest.mark.parametrize("multiplier", [1, 2])
@pytest.mark.parametrize("strides", [1, (2, 1)])
def test_taps_depthwise_second_derivatives_match_reference(strides, multiplier):
    # loss = |y|^2 / 2 with y bilinear in (x, w): the Hessian-vector product in x is
    # J^T J v, and d/dw <d loss/dx, v> = J_w^T D(v, w) + J_w(v)^T y, all in float64 NumPy
    x, w = depthwise_inputs("channels_last", multiplier)
    v = uniform(*x.shape)
    args = (strides, "same", 1, "channels_last")

    def loss(a, b):
        return 0.5 * K.sum(K.square(K.depthwise_conv2d(a, b, strides, "same", lowering="taps")))

    hvp = jax.jit(lambda: jax.jvp(lambda a: jax.grad(loss)(a, w), (x,), (v,))[1])()
    mixed = jax.jit(jax.grad(lambda b: K.sum(jax.grad(loss)(x, b) * v)))(w)
    y, y_v = np_depthwise(x, w, *args), np_depthwise(v, w, *args)
    np.testing.assert_allclose(np.asarray(hvp), np_depthwise_vjp(x, w, y_v, *args)[0], **TOL)
    want = np_depthwise_vjp(x, w, y_v, *args)[1] + np_depthwise_vjp(v, w, y, *args)[1]
    np.testing.assert_allclose(np.asarray(mixed), want, **TOL)


@pytest.mark.parametrize("lowering", ["lax", "taps"])
@pytest.mark.parametrize(
    ("n", "data_format", "padding", "strides", "dilation", "multiplier"),
    [
        (1, "channels_last", "same", 1, 2, 1),
        (1, "channels_first", "valid", 2, 1, 2),
        (2, "channels_last", "valid", (1, 2), 1, 2),
        (2, "channels_first", "same", 1, (1, 2), 1),
    ],
)
def test_separable_lowerings_and_gradients_match_reference(
    lowering, n, data_format, padding, strides, dilation, multiplier
):
    x, dw = depthwise_inputs(data_format, multiplier, n)
    pw = uniform(*(1,) * n, 3 * multiplier, 4)
    op = {1: K.separable_conv1d, 2: K.separable_conv2d}[n]
    args = (strides, padding, dilation, data_format)

    def conv_(a, b, c):
        return op(a, b, c, strides, padding, data_format, dilation, lowering=lowering)

    y = jax.jit(conv_)(x, dw, pw)
    np.testing.assert_allclose(np.asarray(y), np_separable(x, dw, pw, *args), **TOL)
    ct = cotangent(y)
    grads = jax.jit(lambda *a: jax.vjp(conv_, *a)[1](ct))(x, dw, pw)
    for got, want in zip(grads, np_separable_vjp(x, dw, pw, ct, *args)):
        np.testing.assert_allclose(np.asarray(got), want, **TOL)


def test_taps_depthwise_through_placeholders_and_variables():
    x, w = depthwise_inputs("channels_first", 2)
    check_op(
        lambda a: K.depthwise_conv2d(a, w, 2, "same", "channels_first", lowering="taps"),
        lambda a: np_depthwise(a, w, 2, "same", 1, "channels_first"),
        [x],
        **TOL,
    )


def test_depthwise_lowering_policy():
    assert conv_lowering.depthwise_lowering("cpu") == "taps"
    assert {conv_lowering.depthwise_lowering(p) for p in ("cuda", "rocm", "tpu")} == {"lax"}


def test_auto_depthwise_and_separable_lowering_is_decided_per_platform():
    # on CPU neither step (nor a gradient) is a convolution; elsewhere XLA's grouped one
    x, w = depthwise_inputs("channels_last", 2)
    pw = uniform(1, 1, 6, 4)
    ops = [
        lambda a: K.depthwise_conv2d(a, w, padding="same"),
        lambda a: K.separable_conv2d(a, w, pw, 2, "same"),
    ]
    for fn in ops:
        both = jax.grad(lambda a, fn=fn: K.sum(K.square(fn(a))))
        assert "convolution" not in lowered_for("cpu", both, x)
        assert "feature_group_count = 3" in lowered_for("cuda", fn, x)


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
    "conv2d taps": (
        lambda x, w: K.conv2d(x, w, (1, 2), "same", "channels_first", (2, 1), lowering="taps"),
        lambda x, w: np_conv(x, w, (1, 2), "same", (2, 1), "channels_first"),
        (1, 3, 5, 4),
        (2, 2, 3, 1),
    ),
    "conv3d taps": (
        lambda x, w: K.conv3d(x, w, (1, 2, 1), "valid", lowering="taps"),
        lambda x, w: np_conv(x, w, (1, 2, 1), "valid"),
        (1, 3, 4, 3, 3),
        (2, 2, 2, 3, 2),
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
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradients_wrt_input_and_kernel(name):
    check_input_and_kernel_gradients(*GRAD_CASES[name])


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
        (lambda: K.conv2d_transpose(X4, W4, (1, 9, 9, 2), lowering="im2col"), "'im2col'"),
        (lambda: K.depthwise_conv2d(X4, W4[:, :, :1]), "input channels.*2 vs 1"),
        (lambda: K.separable_conv2d(X4, W4, np.zeros((3, 3, 4, 2))), r"\(3, 3, 4, 2\)"),
        (lambda: K.separable_conv2d(X4, W4, np.zeros((1, 1, 3, 2))), "4 vs 3"),
        (lambda: K.depthwise_conv2d(X4, W4, lowering="im2col"), "'im2col'"),
        (lambda: K.separable_conv1d(X4[0], W4[0], np.zeros((1, 4, 2)), lowering="x"), "'x'"),
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
