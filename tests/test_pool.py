"""Tests of jaxkeras.pool (pool2d, pool3d and their lowerings) against float64 NumPy loops."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxkeras as K
from jaxkeras import pool
from tests.conv_reference import RNG, TOL, channels, lowered_for, np_pool, uniform
from tests.helpers import check_grad, check_op, run_all_ways

SPATIAL = {2: (7, 6), 3: (5, 4, 5)}


def test_pool_lowering_policy():
    assert pool.pool_lowering("cpu") == "reshape"
    assert {pool.pool_lowering(p) for p in ("cuda", "rocm", "tpu")} == {"lax"}


@pytest.mark.parametrize(
    "strides, padding", [((1, 3), "valid"), ((1, 1), "valid"), ((1, 1), "same")]
)
def test_average_pool_divides_as_tf(strides, padding):
    # TF divides each window's sum by its count: 0.2 here, where a multiplication by the
    # reciprocal of 3 reads 0.20000002; also the uneven counts of 'same' padding's edge
    # windows, which XLA folds into one constant in K.function (summation.quotient)
    x = np.tile(np.float32([0.2, 0.1, 0.3]), 4).reshape(1, 4, 3, 1)
    full = (np.float32(0.2) + np.float32(0.1) + np.float32(0.3)) / np.float32(3)
    for way, got in run_all_ways(
        lambda t: K.pool2d(t, (1, 3), strides, padding, pool_mode="avg"), [x], batch_none=False
    ).items():
        if way == "symbolic":
            continue
        got = np.asarray(got).reshape(4, -1)
        assert got[0, 1 if padding == "same" else 0] == full, way
        if padding == "same":  # the padded edge windows count 2
            assert got[0, 2] == (np.float32(0.1) + np.float32(0.3)) / np.float32(2), way


def test_auto_pool_lowering_is_decided_per_platform():
    x = uniform(2, 6, 6, 2)
    for platform in ("cpu", "cuda", "tpu"):
        text = lowered_for(platform, lambda a: K.pool2d(a, 2, 2), x)
        assert ("reduce_window" in text) == (pool.pool_lowering(platform) == "lax"), platform
    overlapping = lowered_for("cpu", lambda a: K.pool2d(a, 3, 2), x)
    assert "reduce_window" in overlapping  # only tiling windows have a reshape lowering


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


@pytest.mark.parametrize(
    ("dtype", "result"), [("float16", "float16"), ("bfloat16", "bfloat16"), ("int32", "float32")]
)
def test_average_pooling_of_other_types_averages_in_float32(dtype, result):
    """16-bit floats are summed in float32 and averaged back in their own type, as TF does;
    integers (which TF rejects) average to float32."""
    x = np.arange(32).reshape(1, 4, 4, 2) % 5  # exact in every type
    got = K.pool2d(jax.numpy.asarray(x).astype(dtype), (2, 2), pool_mode="avg")
    assert got.dtype == result
    want = K.pool2d(x.astype(np.float32), (2, 2), pool_mode="avg")
    np.testing.assert_array_equal(got, np.asarray(want).astype(result))


def test_average_pooling_of_float16_sums_in_float32():
    # 2048 + 1 + 1 + 1 in float16 loses the ones (whatever the order: at most 2050, mean
    # 512.5); in float32 it is 2051, and 2051 / 4 = 512.75 rounds to 513 in float16
    x = jax.numpy.asarray(np.array([2048, 1, 1, 1], np.float16).reshape(1, 2, 2, 1))
    assert float(K.pool2d(x, (2, 2), pool_mode="avg")[0, 0, 0, 0]) == 513.0


def test_average_pooling_excludes_same_padding():
    got = np.asarray(
        K.pool2d(np.ones((1, 5, 5, 1), np.float32), (3, 3), (2, 2), "same", pool_mode="avg")
    )
    np.testing.assert_array_equal(got, np.ones((1, 3, 3, 1)))


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


X4 = np.zeros((1, 5, 5, 2), np.float32)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: K.pool2d(X4, 2, pool_mode="sum"), "'sum'"),
        (lambda: K.pool2d(X4, 2, padding="causal"), "'causal'"),
        (lambda: K.pool2d(X4, (2, 2, 2)), r"pool_size.*\(2, 2, 2\)"),
        (lambda: K.pool2d(X4, 2, 1, lowering="reshape"), "reshape"),
        (lambda: K.pool3d(X4, 2), r"x must have rank 5"),
    ],
)
def test_bad_arguments_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
