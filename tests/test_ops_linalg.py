"""dot and batch_dot (jaxkeras/_ops/linalg.py): shapes from the Keras docs, values against NumPy,
gradients, and shape errors."""

import numpy as np
import pytest
from helpers import check_grad, check_op

import jaxkeras as K

RNG = np.random.default_rng(2)


def _normal(*shape):
    return RNG.normal(size=shape).astype(np.float32)


@pytest.mark.parametrize(
    "x_shape, y_shape",
    [
        ((2, 3), (3, 4)),
        ((2, 3, 4), (4, 5)),
        ((2, 3), (4, 3, 5)),
        ((2, 3, 4), (5, 4, 6)),
        ((3,), (3, 4)),
        ((2, 3), (3,)),
    ],
)
def test_dot_matches_numpy(x_shape, y_shape):
    check_op(K.dot, np.dot, [_normal(*x_shape), _normal(*y_shape)], batch_none=False)


@pytest.mark.parametrize(
    "x_shape, y_shape, expected",
    [
        ((None, 3), (3, 4), (None, 4)),
        ((32, 28, 3), (3, 4), (32, 28, 4)),
        ((2, 3), (4, 3, 5), (2, 4, 5)),
        ((None, 3, 4), (5, 4, 6), (None, 3, 5, 6)),
    ],
)
def test_dot_static_shapes(x_shape, y_shape, expected):
    out = K.dot(K.placeholder(x_shape), K.placeholder(y_shape))
    assert K.int_shape(out) == expected


def test_dot_with_unknown_batch():
    y = _normal(4, 5)
    check_op(lambda a: K.dot(a, y), lambda a: np.dot(a, y), [_normal(3, 2, 4)])


def test_dot_gradient():
    y = _normal(4, 3, 2)
    check_grad(lambda a: K.dot(a, y), lambda a: np.dot(a, y), _normal(2, 3))


def test_dot_incompatible_shapes():
    with pytest.raises(ValueError, match=r"dot: incompatible shapes \(2, 3\) and \(4, 5\)"):
        K.dot(K.placeholder((2, 3)), K.placeholder((4, 5)))
    with pytest.raises(ValueError, match="second-to-last dimension of y"):
        K.dot(np.ones((2, 3)), np.ones((2, 4, 5)))


def _np_batch_dot(x, y, axes):
    """Per-sample tensordot over axes (given without the batch axis), (batch, 1) for 2-D."""
    out = np.stack([np.tensordot(a, b, axes=([axes[0] - 1], [axes[1] - 1])) for a, b in zip(x, y)])
    return out.reshape(-1, 1) if x.ndim == 2 and y.ndim == 2 else out


BATCH_DOT_CASES = [
    # (x shape, y shape, axes as passed, axes normalized)
    ((3, 5, 1), (3, 4, 5), (1, 2), (1, 2)),
    ((3, 5), (3, 4, 5), (1, 2), (1, 2)),
    ((3, 4), (3, 4), 1, (1, 1)),
    ((3, 4), (3, 4), None, (1, 1)),
    ((3, 2, 4), (3, 4, 5), None, (2, 1)),
    ((3, 4), (3, 4, 5), None, (1, 1)),
    ((3, 2, 4), (3, 4), None, (2, 1)),
    ((3, 2, 3, 4), (3, 5, 4, 2), None, (3, 2)),
    ((3, 2, 4), (3, 2, 4), 2, (2, 2)),
    ((3, 2, 4), (3, 4, 2), (-1, -2), (2, 1)),
    ((3, 2, 4), (3, 5, 2), [[1], [2]], (1, 2)),
]


@pytest.mark.parametrize("x_shape, y_shape, axes, normalized", BATCH_DOT_CASES)
def test_batch_dot_matches_numpy(x_shape, y_shape, axes, normalized):
    check_op(
        lambda a, b: K.batch_dot(a, b, axes),
        lambda a, b: _np_batch_dot(a, b, normalized),
        [_normal(*x_shape), _normal(*y_shape)],
    )


def test_batch_dot_doc_examples():
    xy = K.batch_dot(K.ones(shape=(32, 20, 1)), K.ones(shape=(32, 30, 20)), axes=(1, 2))
    assert K.int_shape(xy) == (32, 1, 30)
    np.testing.assert_allclose(K.eval(xy), np.full((32, 1, 30), 20.0))
    shape = K.int_shape(K.batch_dot(K.placeholder((100, 20)), K.placeholder((100, 30, 20)), (1, 2)))
    assert shape == (100, 30)
    x = np.array([[1, 2], [3, 4]], np.float32)
    y = np.array([[5, 6], [7, 8]], np.float32)
    np.testing.assert_allclose(K.batch_dot(x, y, axes=1), [[17], [53]])


def test_batch_dot_keeps_unknown_batch():
    out = K.batch_dot(K.placeholder((None, 2, 4)), K.placeholder((None, 4, 5)))
    assert K.int_shape(out) == (None, 2, 5)


def test_batch_dot_gradient():
    y = _normal(2, 4, 3)
    check_grad(
        lambda a: K.batch_dot(a, y, axes=(2, 1)),
        lambda a: _np_batch_dot(a, y, (2, 1)),
        _normal(2, 3, 4),
    )


@pytest.mark.parametrize(
    "x_shape, y_shape, axes, message",
    [
        ((3,), (3, 4), None, r"rank >= 2, got shapes \(3,\) and \(3, 4\)"),
        ((2, 4), (3, 4), None, r"incompatible shapes \(2, 4\) and \(3, 4\): batch sizes differ"),
        ((2, 4), (2, 4), 0, "axes=0 would sum over the batch axis"),
        ((2, 3, 4), (2, 5, 4), (1, 2), r"x.shape\[1\] must equal y.shape\[2\] \(3 != 4\)"),
        ((2, 3, 4), (2, 4, 3), (3, 1), r"axes\[0\]=3 is out of range"),
        ((2, 3, 4), (2, 3, 4), ([1, 2], [1, 2]), "sums over several axes"),
        ((2, 3, 4), (2, 3, 4), (1, 2, 3), r"axes must be None, an int or a pair"),
    ],
)
def test_batch_dot_errors(x_shape, y_shape, axes, message):
    with pytest.raises(ValueError, match=message):
        K.batch_dot(K.placeholder(x_shape), K.placeholder(y_shape), axes)
