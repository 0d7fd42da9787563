"""Element-wise ops (jaxkeras/_ops/math.py) against NumPy, eagerly, through K.function, on
variables and under jax.jit; gradients against finite differences."""

import jax
import numpy as np
import pytest
from helpers import check_grad, check_op

import jaxkeras as K

RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 3)).astype(np.float32)
Y = RNG.normal(size=(2, 3)).astype(np.float32)
POSITIVE = (np.abs(X) + 0.5).astype(np.float32)

UNARY = [
    (K.abs, np.abs, X),
    (K.square, np.square, X),
    (K.sqrt, np.sqrt, POSITIVE),
    (K.exp, np.exp, X),
    (K.log, np.log, POSITIVE),
    (K.sin, np.sin, X),
    (K.cos, np.cos, X),
    (K.sign, np.sign, np.array([[-2.0, 0.0, 3.0]], np.float32)),
    (lambda x: K.pow(x, 3), lambda x: x**3, X),
    (lambda x: K.pow(x, 0.5), np.sqrt, POSITIVE),
]


@pytest.mark.parametrize("fn, reference, x", UNARY)
def test_unary_matches_numpy(fn, reference, x):
    check_op(fn, lambda a: reference(a.astype(np.float64)), [x])


@pytest.mark.parametrize("fn, reference, x", [u for u in UNARY if u[0] is not K.sign])
def test_unary_gradients(fn, reference, x):
    check_grad(fn, reference, x)


def test_sqrt_clips_negative_values_to_zero():
    x = np.array([[-4.0, 0.0, 9.0]], np.float32)
    check_op(K.sqrt, lambda a: np.sqrt(np.maximum(a, 0)), [x])


def test_round_is_half_to_even():
    x = np.array([[0.5, 1.5, 2.5, -0.5, -2.5, 0.4, 2.6]], np.float32)
    check_op(K.round, lambda a: np.array([[0.0, 2.0, 2.0, -0.0, -2.0, 0.0, 3.0]]), [x])


BINARY = [
    (K.maximum, np.maximum),
    (K.minimum, np.minimum),
    (K.pow, lambda a, b: np.power(np.abs(a) + 0.5, b)),
    (K.equal, np.equal),
    (K.not_equal, np.not_equal),
    (K.greater, np.greater),
    (K.greater_equal, np.greater_equal),
    (K.less, np.less),
    (K.less_equal, np.less_equal),
]


@pytest.mark.parametrize("fn, reference", BINARY)
def test_binary_matches_numpy(fn, reference):
    y = Y.copy()
    y[0, :2] = X[0, :2]  # some equal entries for the comparisons
    if fn is K.pow:
        fn = lambda a, b: K.pow(K.abs(a) + 0.5, b)  # noqa: E731
    check_op(fn, reference, [X, y])


@pytest.mark.parametrize(
    "fn", [K.equal, K.not_equal, K.greater, K.greater_equal, K.less, K.less_equal]
)
def test_comparisons_return_bool(fn):
    x = K.placeholder((None, 3))
    assert K.dtype(fn(x, 0.0)) == "bool"
    assert np.asarray(fn(X, 0.0)).dtype == np.bool_


def test_binary_ops_broadcast_against_a_row():
    row = np.array([0.0, 1.0, -1.0], np.float32)
    check_op(lambda a: K.maximum(a, row), lambda a: np.maximum(a, row), [X])


@pytest.mark.parametrize("fn, reference", [(K.maximum, np.maximum), (K.minimum, np.minimum)])
def test_maximum_minimum_gradients(fn, reference):
    check_grad(lambda a: fn(a, 0.1), lambda a: reference(a, 0.1), X)


def test_clip_with_number_bounds():
    check_op(lambda a: K.clip(a, -0.5, 0.5), lambda a: np.clip(a, -0.5, 0.5), [X])


def test_clip_with_max_below_min_clamps_to_min():
    check_op(lambda a: K.clip(a, 0.5, -1.0), lambda a: np.full_like(a, 0.5), [X])


def test_clip_with_tensor_bounds():
    low = np.full((2, 3), -0.2, np.float32)
    high = np.array([0.1, 0.3, 1.0], np.float32)
    check_op(
        lambda a, lo: K.clip(a, lo, high),
        lambda a, lo: np.minimum(np.maximum(a, lo), high),
        [X, low],
    )


def test_clip_with_none_bound_is_one_sided():
    check_op(lambda a: K.clip(a, None, 0.0), lambda a: np.minimum(a, 0.0), [X])


def test_clip_keeps_integer_dtype():
    x = np.array([[-3, 0, 7]], np.int32)
    out = K.clip(x, 0, 5)
    assert np.asarray(out).dtype == np.int32
    np.testing.assert_array_equal(out, [[0, 0, 5]])


def test_clip_gradient_is_one_inside_zero_outside():
    check_grad(lambda a: K.clip(a, -0.5, 0.5), lambda a: np.clip(a, -0.5, 0.5), X)


@pytest.mark.parametrize("dtype", ["float16", "int32", "bool", "float32"])
def test_cast(dtype):
    x = np.array([[-1.7, 0.0, 2.5]], np.float32)
    check_op(lambda a: K.cast(a, dtype), lambda a: a.astype(dtype), [x])
    assert K.dtype(K.cast(K.placeholder((None, 3)), dtype)) == dtype


@pytest.mark.parametrize(
    "value, dtype",
    [
        (np.int32(2**31 - 1), "float32"),  # rounds up to 2**31
        (np.int32(2049), "float16"),  # a tie: rounds to even, 2048
        (np.float32(0.1), "float16"),
        (np.bool_(True), "float32"),
        (np.float32(-2.7), "int32"),  # truncates
    ],
)
def test_cast_of_a_known_scalar(value, dtype):
    # scalars known at trace time, as K.cast(K.size(x), 'float32') gives inside a trace
    expected = np.asarray(value).astype(dtype)
    out = K.cast(value, dtype)
    assert out.dtype == dtype and out.shape == ()
    np.testing.assert_array_equal(np.asarray(out), expected)
    traced = jax.jit(lambda: K.cast(value, dtype))()
    np.testing.assert_array_equal(np.asarray(traced), expected)
    x = K.placeholder((4, 5))
    f = K.function([x], [K.cast(K.size(x), dtype)])
    np.testing.assert_array_equal(f([np.zeros((4, 5))])[0], np.asarray(20).astype(dtype))


def test_cast_of_a_variable_is_a_tensor():
    v = K.variable([1.5, 2.5])
    out = K.cast(v, "int32")
    assert not K.is_variable(out)
    np.testing.assert_array_equal(K.eval(out), [1, 2])


def test_cast_to_its_own_dtype_returns_the_tensor():
    # as tf.cast: Keras's metric wrapper casts y_pred to float32, and keras-contrib's CRF
    # metrics read the _keras_history Keras set on it; a variable still gives a tensor
    x = K.placeholder((None, 3))
    x._keras_history = "set by Keras"
    assert K.cast(x, "float32") is x
    assert K.cast(x, "int32") is not x
    v = K.variable([1.0])
    assert not K.is_variable(K.cast(v, "float32"))


def test_cast_rejects_unknown_dtype():
    with pytest.raises(TypeError, match=r"dtype.*'floaty'"):
        K.cast(X, "floaty")


def test_cast_to_floatx_returns_numpy_floatx():
    out = K.cast_to_floatx(np.array([1.0, 2.0], np.float64))
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, [1.0, 2.0])
    assert K.dtype(K.cast_to_floatx(K.placeholder((2,), dtype="int32"))) == "float32"
