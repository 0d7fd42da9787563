"""Tests of jaxkeras.local_conv (local_conv1d, local_conv2d) against float64 NumPy loops."""

from __future__ import annotations

import numpy as np
import pytest

import jaxkeras as K
from tests.conv_reference import (
    TOL,
    channels,
    check_input_and_kernel_gradients,
    np_local_conv,
    uniform,
)
from tests.helpers import check_op


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


GRAD_CASES = {
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
    check_input_and_kernel_gradients(*GRAD_CASES[name])


X4 = np.zeros((1, 5, 5, 2), np.float32)


@pytest.mark.parametrize(
    ("call", "match"),
    [
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
