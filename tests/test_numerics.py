"""Numerics at extreme inputs: the losses and activations that saturate (±1e4 logits,
probabilities of exactly 0 and 1) give finite values equal to float64 NumPy references of the
Keras semantics (epsilon clipping), and finite gradients equal to hand-derived references; in
float16 and bfloat16 they stay finite and within a stated tolerance of float32.

Tolerances: float32 results are within rtol 1e-5 (values) / 1e-4 (gradients) of the float64
references; float16 results are within rtol=atol=1e-2 of float32 on the same (rounded) inputs,
bfloat16 within rtol=atol=6e-2 (about 8 times float16's, as bfloat16 keeps 8 significand bits
to float16's 11), on moderate inputs (logits in [-8, 8], probabilities in [0.01, 0.99]).
16-bit inputs are computed in float32 inside the crossentropies and l2_normalize (an epsilon of
1e-7 flushes to zero in float16, 1e4**2 overflows); results keep the input's dtype. One
exception: in float16, l2_normalize's gradient at a zero vector (1e6 times the incoming one)
overflows to inf.
"""

import zlib

import numpy as np
import pytest
import scipy.special as sp

import jaxkeras as K

EPS = 1e-7  # K.epsilon()

LOGITS = np.array(
    [[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4], [1e4, 1e4, -1e4], [0.5, -0.25, 2.0]], np.float32
)
ONE_HOT = np.array([[0, 1, 0], [1, 0, 0], [0, 0, 1], [0, 0, 1]], np.float32)
LABELS = ONE_HOT.argmax(-1).astype(np.int32)
PROBS = np.array(  # rows sum to 1, with entries of exactly 0 and 1
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]], np.float32
)
BINARY_P = np.array([[0.0, 1.0, 0.0, 1.0, 0.5, 1e-9]], np.float32)
BINARY_T = np.array([[0.0, 1.0, 1.0, 0.0, 1.0, 0.0]], np.float32)
BINARY_Z = np.array([[1e4, -1e4, -1e4, 1e4, 0.0, 30.0]], np.float32)


# ---------------------------------------------------------------------------------------------
# float64 references of the Keras semantics, and their gradients (derived by hand)


def _in_clip(p):
    return (p > EPS) & (p < 1 - EPS)


def ref_bce(t, p):
    # clipped to the float32 bounds TF-Keras's float32 computation has (1 - eps rounds to the
    # float32 below it: 1 - q + eps is then 2.19e-7 at p = 1)
    q = np.clip(p, float(np.float32(EPS)), float(np.float32(1 - EPS)))
    value = -(t * np.log(q + EPS) + (1 - t) * np.log(1 - q + EPS))
    grad = np.where(_in_clip(p), -t / (q + EPS) + (1 - t) / (1 - q + EPS), 0.0)
    return value, grad


def ref_bce_logits(t, z):
    return np.maximum(z, 0) - z * t + np.log1p(np.exp(-np.abs(z))), sp.expit(z) - t


def ref_cce(t, p):
    total = p.sum(-1, keepdims=True)
    q = p / total
    c = np.clip(q, EPS, 1 - EPS)
    g = np.where(_in_clip(q), -t / c, 0.0)  # d loss / d q
    grad = (g - (g * q).sum(-1, keepdims=True)) / total
    return -(t * np.log(c)).sum(-1), grad


def ref_cce_logits(t, z):
    return -(t * sp.log_softmax(z, -1)).sum(-1), sp.softmax(z, -1) * t.sum(-1, keepdims=True) - t


def ref_scce(labels, p):
    one_hot = np.eye(p.shape[-1])[labels]
    c = np.clip(p, EPS, 1 - EPS)
    u = np.log(c)
    value = -(one_hot * sp.log_softmax(u, -1)).sum(-1)
    grad = np.where(_in_clip(p), (sp.softmax(u, -1) - one_hot) / c, 0.0)
    return value, grad


def ref_scce_logits(labels, z):
    one_hot = np.eye(z.shape[-1])[labels]
    return -(one_hot * sp.log_softmax(z, -1)).sum(-1), sp.softmax(z, -1) - one_hot


WEIGHTS = np.array([0.3, -1.0, 2.0])  # gradients of sum(WEIGHTS * f(x)) for vector outputs


def ref_softmax(_, x):
    s = sp.softmax(x, -1)
    return s, s * (WEIGHTS - (WEIGHTS * s).sum(-1, keepdims=True))


def ref_logsumexp(_, x):
    return sp.logsumexp(x, -1), sp.softmax(x, -1)


def ref_sigmoid(_, x):
    s = sp.expit(x)
    return s, WEIGHTS * s * (1 - s)


def ref_hard_sigmoid(_, x):
    return np.clip(0.2 * x + 0.5, 0, 1), WEIGHTS * np.where(np.abs(x) < 2.5, 0.2, 0.0)


def ref_l2_normalize(_, x):
    squares = (x**2).sum(-1, keepdims=True)
    norm = np.sqrt(np.maximum(squares, 1e-12))
    n = x / norm
    grad = np.where(
        squares > 1e-12, (WEIGHTS - n * (WEIGHTS * n).sum(-1, keepdims=True)) / norm, WEIGHTS / norm
    )
    return n, grad


def _w(x):
    return K.cast(WEIGHTS, K.dtype(x))  # in the dtype of x: no promotion


# name -> (K function of (target, x), float64 reference of (target, x), target, x)
CASES = {
    "binary_crossentropy": (
        lambda t, p: K.binary_crossentropy(t, p),
        ref_bce,
        BINARY_T,
        BINARY_P,
    ),
    "binary_crossentropy from_logits": (
        lambda t, z: K.binary_crossentropy(t, z, from_logits=True),
        ref_bce_logits,
        BINARY_T,
        BINARY_Z,
    ),
    "categorical_crossentropy": (
        lambda t, p: K.categorical_crossentropy(t, p),
        ref_cce,
        ONE_HOT,
        PROBS,
    ),
    "categorical_crossentropy from_logits": (
        lambda t, z: K.categorical_crossentropy(t, z, from_logits=True),
        ref_cce_logits,
        ONE_HOT,
        LOGITS,
    ),
    "sparse_categorical_crossentropy": (
        lambda t, p: K.sparse_categorical_crossentropy(t, p),
        ref_scce,
        LABELS,
        PROBS,
    ),
    "sparse_categorical_crossentropy from_logits": (
        lambda t, z: K.sparse_categorical_crossentropy(t, z, from_logits=True),
        ref_scce_logits,
        LABELS,
        LOGITS,
    ),
    "softmax": (lambda _, x: K.softmax(x) * _w(x), ref_softmax, None, LOGITS),
    "logsumexp": (lambda _, x: K.logsumexp(x, axis=-1), ref_logsumexp, None, LOGITS),
    "sigmoid": (lambda _, x: K.sigmoid(x) * _w(x), ref_sigmoid, None, LOGITS),
    "hard_sigmoid": (lambda _, x: K.hard_sigmoid(x) * _w(x), ref_hard_sigmoid, None, LOGITS),
    "l2_normalize": (
        lambda _, x: K.l2_normalize(x, axis=-1) * _w(x),
        ref_l2_normalize,
        None,
        np.concatenate([LOGITS, np.zeros((1, 3), np.float32)]),  # and a zero vector
    ),
}
ACTIVATIONS = {"softmax", "sigmoid", "hard_sigmoid", "l2_normalize"}


def _value_and_grad(name, target, x, dtype):
    """Runs a case through K.function on placeholders: its value and d sum(value) / d x."""
    fn = CASES[name][0]
    xp = K.placeholder((None, *x.shape[1:]), dtype=dtype)
    if target is None:
        tp, feeds = None, [x.astype(dtype)]
        inputs = [xp]
    else:
        tp = K.placeholder((None, *target.shape[1:]), dtype=target.dtype.name)
        feeds, inputs = [target, x.astype(dtype)], [tp, xp]
    out = fn(tp, xp)
    (grad,) = K.gradients(K.sum(out), [xp])
    value, g = K.function(inputs, [out, grad])(feeds)
    if name in ACTIVATIONS:  # the K side multiplied by WEIGHTS for the gradient; undo it
        value = value / WEIGHTS.astype(value.dtype)
    return value, g


@pytest.mark.parametrize("name", sorted(CASES))
def test_extreme_inputs_give_finite_values_and_gradients_equal_to_float64(name):
    _, reference, target, x = CASES[name]
    value, grad = _value_and_grad(name, target, x, "float32")
    expected, expected_grad = reference(target, x.astype(np.float64))
    assert value.dtype == np.float32 and grad.dtype == np.float32
    assert np.all(np.isfinite(value)) and np.all(np.isfinite(grad))
    np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-4, atol=1e-6)


def test_eager_results_equal_compiled_ones_at_extremes():
    for name, (fn, reference, target, x) in CASES.items():
        value = np.asarray(fn(target, x))
        if name in ACTIVATIONS:
            value = value / WEIGHTS.astype(np.float32)
        expected, _ = reference(target, x.astype(np.float64))
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6, err_msg=name)


LOW = {"float16": 1e-2, "bfloat16": 6e-2}  # rtol = atol against float32 (module docstring)


def _moderate(name, x):
    """Moderate inputs of the same layout: logits in [-8, 8], probabilities in [0.01, 0.99]."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    if "crossentropy" in name and "logits" not in name:
        p = rng.uniform(0.01, 0.99, size=x.shape)
        return (p / p.sum(-1, keepdims=True) if "categorical" in name else p).astype(np.float32)
    return rng.uniform(-8, 8, size=x.shape).astype(np.float32)


@pytest.mark.parametrize("dtype", sorted(LOW))
@pytest.mark.parametrize("name", sorted(CASES))
def test_low_precision_stays_close_to_float32(name, dtype):
    _, _, target, x = CASES[name]
    tol = LOW[dtype]
    # at the extremes: finite values and gradients, in the input's dtype
    value, grad = _value_and_grad(name, target, x, dtype)
    assert value.dtype.name == dtype and grad.dtype.name == dtype
    assert np.all(np.isfinite(value.astype(np.float32)))
    if name == "l2_normalize" and dtype == "float16":
        # the one documented exception: at a zero vector the gradient is 1e6 (1 / sqrt(1e-12))
        # times the incoming one, beyond float16's range (65504)
        assert np.all(np.isinf(grad[-1])) and not np.any(x[-1])
        grad = grad[:-1]
    assert np.all(np.isfinite(grad.astype(np.float32)))
    # on moderate inputs: close to float32 on the same rounded inputs
    moderate = _moderate(name, x).astype(dtype).astype(np.float32)
    low_value, low_grad = _value_and_grad(name, target, moderate, dtype)
    value32, grad32 = _value_and_grad(name, target, moderate, "float32")
    np.testing.assert_allclose(low_value.astype(np.float32), value32, rtol=tol, atol=tol)
    np.testing.assert_allclose(low_grad.astype(np.float32), grad32, rtol=tol, atol=tol)
