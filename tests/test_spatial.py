"""Tests of jaxkeras._ops.spatial (window arithmetic) and the static output shapes of convolution
and pooling it decides, against hand-derived sizes."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import jaxkeras as K
from jaxkeras._ops import spatial
from tests.conv_reference import channels, np_pads

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


@given(windows(2, ("same", "valid", "causal")))
def test_window_pads_match_tensorflow_padding(case):
    size, k, s, d, padding, _ = case
    got = spatial.window_pads(size, k, s, d, padding)
    assert got == [np_pads(*a, padding) for a in zip(size, k, s, d)]
