"""Tests of jaxkeras.nn: activations, crossentropies, dropout, bias_add, batch normalization,
padding and resizing, each against a float64 NumPy reference."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import expit, log_expit, log_softmax

import jaxkeras as K
from tests.helpers import check_grad, check_op, run_all_ways

RNG = np.random.default_rng(0)
EPS = 1e-7  # K.epsilon()


def uniform(shape, low=-2.0, high=2.0):
    return RNG.uniform(low, high, size=shape).astype(np.float32)


def away_from(values, points, margin=0.05):
    """Moves entries closer than ``margin`` to any of ``points`` (kinks) away from them."""
    values = values.copy()
    for p in points:
        near = np.abs(values - p) < margin
        values[near] = p + np.where(values[near] >= p, margin, -margin)
    return values


def run(fn, *inputs):
    """Evaluates ``fn`` of placeholders (shapes of ``inputs``) through K.function."""
    phs = [K.placeholder(shape=a.shape, dtype=a.dtype.name) for a in inputs]
    out = fn(*phs)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    return K.function(phs, outs)(list(inputs))


# ---------------------------------------------------------------------------------------------
# activations

X34 = away_from(uniform((3, 4), -3, 3), [0.0])
W34 = uniform((3, 4))


def np_relu(x, alpha=0.0, max_value=None, threshold=0.0):
    """The piecewise definition of the TF-Keras docstring, with its clip of the kept part."""
    kept = np.where(x > threshold, x, 0.0)
    if max_value is not None:
        kept = np.clip(kept, 0.0, max_value)
    return kept - alpha * np.maximum(threshold - x, 0.0)


def np_elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * (np.exp(np.minimum(x, 0)) - 1))


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


ELEMENTWISE = [
    ("sigmoid", K.sigmoid, expit),
    ("tanh", K.tanh, np.tanh),
    ("softplus", K.softplus, lambda x: np.log1p(np.exp(x))),
    ("softsign", K.softsign, lambda x: x / (1 + np.abs(x))),
    ("hard_sigmoid", K.hard_sigmoid, lambda x: np.clip(0.2 * x + 0.5, 0, 1)),
    ("elu", K.elu, np_elu),
    ("elu_alpha", lambda x: K.elu(x, 0.5), lambda x: np_elu(x, 0.5)),
    ("relu", K.relu, np_relu),
    ("leaky_relu", lambda x: K.relu(x, alpha=0.3), lambda x: np_relu(x, 0.3)),
    ("relu6", lambda x: K.relu(x, max_value=1.0), lambda x: np_relu(x, 0.0, 1.0)),
    (
        "relu_all",
        lambda x: K.relu(x, alpha=0.2, max_value=2.0, threshold=0.5),
        lambda x: np_relu(x, 0.2, 2.0, 0.5),
    ),
    ("softmax", K.softmax, np_softmax),
    ("softmax_axis0", lambda x: K.softmax(x, axis=0), lambda x: np_softmax(x, 0)),
]


@pytest.mark.parametrize("name,fn,ref", ELEMENTWISE, ids=[e[0] for e in ELEMENTWISE])
def test_activation_values_and_gradients(name, fn, ref):
    x = away_from(X34, [-2.5, 2.5, 0.5, 1.0, 2.0])  # off the kinks of relu and hard_sigmoid
    check_op(fn, ref, [x])
    check_grad(lambda t: fn(t) * W34, lambda t: ref(t) * W34, x)


def test_relu_hand_values():
    x = np.array([-3.0, -1.0, 0.5, 2.0, 7.0], np.float32)
    got = K.relu(x, alpha=0.1, max_value=6.0, threshold=1.0)
    np.testing.assert_allclose(got, [-0.4, -0.2, -0.05, 2.0, 6.0], rtol=1e-6)
    np.testing.assert_allclose(K.relu(x), [0, 0, 0.5, 2, 7])
    np.testing.assert_allclose(K.relu(x, max_value=6), [0, 0, 0.5, 2, 6])
    # TF-Keras clips the kept part to [0, max_value]: with a negative threshold, values in
    # (threshold, 0) survive only without max_value.
    y = np.array([-2.0, -0.5, 3.0], np.float32)
    np.testing.assert_allclose(K.relu(y, threshold=-1.0), [0.0, -0.5, 3.0])
    np.testing.assert_allclose(K.relu(y, max_value=6.0, threshold=-1.0), [0.0, 0.0, 3.0])


def test_hard_sigmoid_and_extremes():
    x = np.array([-3.0, -2.5, 0.0, 1.0, 2.5, 3.0], np.float32)
    np.testing.assert_allclose(K.hard_sigmoid(x), [0, 0, 0.5, 0.7, 1, 1], atol=1e-7)
    big = np.array([-100.0, 100.0], np.float32)
    np.testing.assert_allclose(K.softplus(big), [0.0, 100.0], atol=1e-30)
    np.testing.assert_allclose(K.sigmoid(big), [0.0, 1.0], atol=1e-30)
    np.testing.assert_allclose(K.softmax(np.array([1e4, -1e4, 0.0], np.float32)), [1, 0, 0])
    (g,) = run(lambda t: K.gradients(K.elu(t) + K.softplus(t), [t])[0], big)
    np.testing.assert_allclose(g, [0.0, 2.0], atol=1e-6)


def test_activations_accept_lists_and_ints():
    np.testing.assert_allclose(K.tanh([0.0, 1.0]), np.tanh([0.0, 1.0]), rtol=1e-6)
    np.testing.assert_array_equal(K.relu(np.array([-2, 3], np.int32)), [0, 3])


def test_relu_of_integers_and_booleans_has_the_dtypes_of_standard_promotion():
    # relu casts explicitly (this runs under strict promotion) to what standard promotion gives:
    # integers stay integers, a float max_value or alpha makes them float32, booleans int32
    x = np.array([-2, 0, 3, 9], np.int32)
    cases = [
        (K.relu(x), "int32", [0, 0, 3, 9]),
        (K.relu(x, max_value=6.0), "float32", [0, 0, 3, 6]),
        (K.relu(x, alpha=0.5, threshold=1.0), "float32", [-1.5, -0.5, 3, 9]),
        (K.relu(np.array([True, False])), "int32", [1, 0]),
    ]
    for got, dtype, want in cases:
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, want)


def test_activation_bad_arguments():
    with pytest.raises(ValueError, match="axis=2"):
        K.softmax(X34, axis=2)
    with pytest.raises(TypeError, match="alpha"):
        K.relu(X34, alpha="big")
    with pytest.raises(ValueError, match=r"max_value of shape \(2,\)"):
        K.relu(X34, max_value=[1, 2])
    with pytest.raises(TypeError, match="threshold must be a number or a tensor"):
        K.relu(X34, threshold=np.array(["a"]))
    with pytest.raises(TypeError, match="alpha must be a number or a tensor of numbers, got True"):
        K.elu(X34, alpha=True)
    with pytest.raises(ValueError, match=r"elu: x of shape \(3, 4\) and alpha of shape \(3,\)"):
        K.elu(X34, alpha=K.variable([1.0, 2.0, 3.0]))


def test_relu_takes_tensor_parameters_as_tf_keras_does():
    # keras-contrib's SReLU passes per-unit variables; TF and Theano broadcast them
    got = K.relu(
        K.variable([[-2.0, 0.5, 3.0]]),
        alpha=K.variable([[0.1, 0.2, 0.3]]),
        max_value=K.variable([[1.0, 1.0, 1.0]]),
    )
    np.testing.assert_allclose(K.eval(got), [[-0.2, 0.5, 1.0]], rtol=1e-6)
    x = away_from(X34, [-0.5, 0.0, 0.5, 1.0, 1.5])
    alpha = uniform((1, 4), 0.0, 0.5)
    ceiling = uniform((4,), 1.0, 2.0)
    threshold = np.array([[-0.5], [0.0], [0.5]], np.float32)
    # every way: eagerly, K.function, variables, jax.jit
    check_op(
        lambda t, a, m, h: K.relu(t, alpha=a, max_value=m, threshold=h),
        lambda t, a, m, h: np_relu(t, a, m, h),
        [x, alpha, ceiling, threshold],
        batch_none=False,
    )
    check_op(lambda t, a: K.elu(t, a), np_elu, [x, alpha], batch_none=False)
    # a float32 parameter is cast to the type of x, and an integer x is relu'd in float32
    half = K.relu(x.astype(np.float16), alpha=alpha)
    assert half.dtype == "float16"
    ints = K.relu(np.array([-2, 0, 3], np.int32), alpha=np.array([0.5, 0.5, 0.5]))
    assert ints.dtype == "float32"
    np.testing.assert_array_equal(ints, [-1.0, 0.0, 3.0])


def test_relu_slopes_get_gradients():
    x = np.array([[-2.0, 0.5, 3.0], [-1.0, -4.0, 2.0]], np.float32)
    slopes = K.variable([0.1, 0.2, 0.3])
    ph = K.placeholder(shape=(None, 3))
    loss = K.sum(K.relu(ph, alpha=slopes, max_value=2.5))
    grad = K.function([ph], K.gradients(loss, [slopes]))([x])[0]
    np.testing.assert_allclose(grad, [-3.0, -4.0, 0.0])  # d/d alpha: -(sum of max(-x, 0))


# ---------------------------------------------------------------------------------------------
# crossentropies

P34 = uniform((3, 4), 0.05, 0.95)
T34 = (RNG.uniform(size=(3, 4)) > 0.5).astype(np.float32)
ONE_HOT = np.eye(4, dtype=np.float32)[[0, 3, 1]]
LABELS = np.array([0, 3, 1], np.int32)


def np_bce(t, p):
    p = np.clip(p, EPS, 1 - EPS)
    return -(t * np.log(p + EPS) + (1 - t) * np.log(1 - p + EPS))


def np_bce_logits(t, z):
    return -(t * log_expit(z) + (1 - t) * log_expit(-z))


def np_cce(t, p, axis=-1):
    q = np.clip(p / p.sum(axis=axis, keepdims=True), EPS, 1 - EPS)
    return -(t * np.log(q)).sum(axis=axis)


def np_sparse_cce(labels, p, axis=-1, from_logits=False):
    """-log q[label] / sum(q) with q the clipped probabilities (exp(logits) for logits)."""
    p = np.moveaxis(p, axis, -1)
    log_q = p if from_logits else np.log(np.clip(p, EPS, 1 - EPS))
    log_p = log_q - np.log(np.exp(log_q).sum(axis=-1, keepdims=True))
    labels = labels.reshape(p.shape[:-1]).astype(int)
    return -np.take_along_axis(log_p, labels[..., None], axis=-1)[..., 0]


def test_binary_crossentropy():
    check_op(K.binary_crossentropy, np_bce, [T34, P34])
    check_op(lambda t, z: K.binary_crossentropy(t, z, from_logits=True), np_bce_logits, [T34, X34])
    check_grad(lambda p: K.binary_crossentropy(T34, p), lambda p: np_bce(T34, p), P34)
    check_grad(
        lambda z: K.binary_crossentropy(T34, z, from_logits=True),
        lambda z: np_bce_logits(T34, z),
        X34,
    )


def test_categorical_crossentropy():
    # the TF-Keras docstring example: -log of the probability of the true class
    b = np.array([[0.9, 0.05, 0.05], [0.05, 0.89, 0.06], [0.05, 0.01, 0.94]], np.float32)
    a = np.eye(3, dtype=np.float32)
    np.testing.assert_allclose(
        K.categorical_crossentropy(a, b), -np.log([0.9, 0.89, 0.94]), rtol=1e-5
    )
    np.testing.assert_allclose(
        K.categorical_crossentropy(a, 3 * b), -np.log([0.9, 0.89, 0.94]), rtol=1e-5
    )  # rescaled to sum to 1
    np.testing.assert_allclose(K.categorical_crossentropy(a, a), [0, 0, 0], atol=1e-6)
    check_op(K.categorical_crossentropy, np_cce, [ONE_HOT, P34])
    check_op(
        lambda t, z: K.categorical_crossentropy(t, z, from_logits=True),
        lambda t, z: -(t * log_softmax(z, axis=-1)).sum(-1),
        [ONE_HOT, X34],
    )
    check_grad(lambda p: K.categorical_crossentropy(ONE_HOT, p), lambda p: np_cce(ONE_HOT, p), P34)
    check_grad(
        lambda z: K.categorical_crossentropy(ONE_HOT, z, from_logits=True),
        lambda z: -(ONE_HOT * log_softmax(z, axis=-1)).sum(-1),
        X34,
    )


def test_categorical_crossentropy_channels_first_axis():
    p = uniform((2, 3, 4), 0.05, 0.95)
    t = np.moveaxis(np.eye(3, dtype=np.float32)[RNG.integers(0, 3, (2, 4))], -1, 1)
    check_op(
        lambda t, p: K.categorical_crossentropy(t, p, axis=1),
        lambda t, p: np_cce(t, p, axis=1),
        [t, p],
    )


def test_sparse_categorical_crossentropy():
    check_op(K.sparse_categorical_crossentropy, np_sparse_cce, [LABELS, P34])
    # float labels with a trailing 1, as Keras feeds them
    check_op(
        K.sparse_categorical_crossentropy, np_sparse_cce, [LABELS[:, None].astype(np.float32), P34]
    )
    check_op(
        lambda t, z: K.sparse_categorical_crossentropy(t, z, from_logits=True),
        lambda t, z: np_sparse_cce(t, z, from_logits=True),
        [LABELS, X34],
    )
    check_grad(
        lambda p: K.sparse_categorical_crossentropy(LABELS, p),
        lambda p: np_sparse_cce(LABELS, p),
        P34,
    )
    check_grad(
        lambda z: K.sparse_categorical_crossentropy(LABELS, z, from_logits=True),
        lambda z: np_sparse_cce(LABELS, z, from_logits=True),
        X34,
    )
    # for probabilities that sum to 1 it is -log p[label]
    p = np_softmax(X34.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(
        K.sparse_categorical_crossentropy(LABELS, p), -np.log(p[np.arange(3), LABELS]), rtol=1e-5
    )


def test_sparse_categorical_crossentropy_axis_and_rank3():
    p = uniform((2, 4, 3), 0.05, 0.95)  # (batch, classes, steps) with axis=1
    labels = RNG.integers(0, 4, (2, 3)).astype(np.int32)
    check_op(
        lambda t, p: K.sparse_categorical_crossentropy(t, p, axis=1),
        lambda t, p: np_sparse_cce(t, p, axis=1),
        [labels, p],
    )
    q = np.moveaxis(p, 1, -1)
    out = K.sparse_categorical_crossentropy(labels[..., None], q)
    np.testing.assert_allclose(out, np_sparse_cce(labels, q), rtol=1e-5)
    assert K.int_shape(
        K.sparse_categorical_crossentropy(K.placeholder((None, 3, 1)), K.placeholder((None, 3, 4)))
    ) == (None, 3)


def test_sparse_categorical_crossentropy_flattens_channels_first_targets():
    # TF-Keras flattens the target: (batch, 1, h, w) labels for a (batch, classes, h, w) output
    p = uniform((2, 4, 3, 3), 0.05, 0.95)
    labels = RNG.integers(0, 4, (2, 1, 3, 3)).astype(np.float32)
    t_ph, p_ph = K.placeholder((None, 1, 3, 3)), K.placeholder((None, 4, 3, 3))
    loss = K.sparse_categorical_crossentropy(t_ph, p_ph, axis=1)
    assert K.int_shape(loss) == (None, 3, 3)
    got = K.function([t_ph, p_ph], [loss])([labels, p])[0]
    np.testing.assert_allclose(got, np_sparse_cce(labels, p, axis=1), rtol=1e-5)
    flat = K.sparse_categorical_crossentropy(labels.reshape(-1), np.moveaxis(p, 1, -1))
    np.testing.assert_allclose(flat, np_sparse_cce(labels, p, axis=1), rtol=1e-5)
    with pytest.raises(ValueError, match=r"target of shape \(2, 2, 3, 3\)"):
        K.sparse_categorical_crossentropy(np.zeros((2, 2, 3, 3)), p, axis=1)


def _value_and_grad(loss, target, output):
    (value, grad) = run(lambda t, o: [loss(t, o), K.gradients(loss(t, o), [o])[0]], target, output)
    return value, grad


@pytest.mark.parametrize(
    "loss,target,output,expected",
    [
        # probabilities exactly 0 and 1: -log(2 eps) for a wrong certain answer (float32
        # rounding near 1 makes the second one ~15.25, hence rtol 2e-2), ~0 for a right one
        (
            K.binary_crossentropy,
            [[1.0, 0.0, 1.0, 0.0]],
            [[0.0, 1.0, 1.0, 0.0]],
            [[-np.log(2 * EPS)] * 2 + [0.0] * 2],
        ),
        (K.categorical_crossentropy, [[1.0, 0.0, 0.0]], [[0.0, 1.0, 0.0]], [-np.log(EPS)]),
        (
            K.sparse_categorical_crossentropy,
            [0.0],
            [[0.0, 1.0, 0.0]],
            [-np.log(EPS / (1 - EPS + 2 * EPS))],
        ),
        # extreme logits
        (
            lambda t, z: K.binary_crossentropy(t, z, from_logits=True),
            [[1.0, 0.0, 1.0, 0.0]],
            [[-1e4, 1e4, 1e4, -1e4]],
            [[1e4, 1e4, 0.0, 0.0]],
        ),
        (
            lambda t, z: K.categorical_crossentropy(t, z, from_logits=True),
            [[1.0, 0.0, 0.0]],
            [[-1e4, 1e4, 0.0]],
            [2e4],
        ),
        (
            lambda t, z: K.sparse_categorical_crossentropy(t, z, from_logits=True),
            [0.0],
            [[-1e4, 1e4, 0.0]],
            [2e4],
        ),
    ],
)
def test_crossentropy_finite_at_the_extremes(loss, target, output, expected):
    value, grad = _value_and_grad(loss, np.float32(target), np.float32(output))
    np.testing.assert_allclose(value, expected, rtol=2e-2, atol=1e-5)
    assert np.all(np.isfinite(grad)), grad


def test_crossentropy_bad_arguments():
    with pytest.raises(ValueError, match=r"target of shape \(3, 3\).*\(3, 4\)"):
        K.categorical_crossentropy(np.eye(3, dtype=np.float32), P34)
    with pytest.raises(ValueError, match="axis=2"):
        K.categorical_crossentropy(ONE_HOT, P34, axis=2)
    with pytest.raises(ValueError, match=r"target of shape \(3, 2\)"):
        K.sparse_categorical_crossentropy(np.zeros((3, 2)), P34)
    with pytest.raises(ValueError, match=r"target of shape \(4,\)"):
        K.sparse_categorical_crossentropy(np.zeros(4), P34)
    with pytest.raises(ValueError, match="axis=-3"):
        K.sparse_categorical_crossentropy(LABELS, P34, axis=-3)


# ---------------------------------------------------------------------------------------------
# dropout


def test_dropout_statistics_and_scaling():
    x = np.ones((200, 100), np.float32)
    xp = K.placeholder((None, 100))
    (y,) = K.function([xp], [K.dropout(xp, 0.3)])([x])
    kept = y != 0
    assert abs(kept.mean() - 0.7) < 0.015  # 4 standard deviations
    np.testing.assert_allclose(y[kept], 1 / 0.7, rtol=1e-6)
    eager = np.asarray(K.dropout(x, 0.6))
    assert abs((eager != 0).mean() - 0.4) < 0.015
    np.testing.assert_allclose(eager[eager != 0], 2.5, rtol=1e-6)
    np.testing.assert_array_equal(K.dropout(x, 0.0), x)


def test_dropout_fresh_mask_per_call_same_mask_in_gradients():
    x = uniform((8, 16), 0.5, 1.5)
    xp = K.placeholder((None, 16))
    y = K.dropout(xp, 0.5)
    f = K.function([xp], [y, K.gradients(y, [xp])[0], 2 * y])
    y1, g1, twice = f([x])
    y2, g2, _ = f([x])
    assert not np.array_equal(y1 != 0, y2 != 0)  # 2**-128 chance of a false failure
    for y_, g_ in ((y1, g1), (y2, g2)):
        np.testing.assert_allclose(g_, np.where(y_ != 0, 2.0, 0.0))
        np.testing.assert_allclose(y_, np.where(y_ != 0, 2 * x, 0.0), rtol=1e-6)
    np.testing.assert_allclose(twice, 2 * y1)


def test_dropout_seed_fixes_the_mask_for_a_key():
    x = np.ones((4, 32), np.float32)
    xp = K.placeholder((4, 32))
    masks = []
    for seed in (3, 3, 4):
        f = K.function([xp], [K.dropout(xp, 0.5, seed=seed)])
        (out,), _ = f.pure({}, jax.random.PRNGKey(0), [x])
        masks.append(np.asarray(out) != 0)
    np.testing.assert_array_equal(masks[0], masks[1])
    assert not np.array_equal(masks[0], masks[2])


@pytest.mark.parametrize(
    "noise_shape,axis", [((None, 1), 1), ((1, 32), 0), ("batch", 1)], ids=["rows", "cols", "sym"]
)
def test_dropout_noise_shape(noise_shape, axis):
    x = np.ones((16, 32), np.float32)
    xp = K.placeholder((None, 32))
    if noise_shape == "batch":
        noise_shape = (K.shape(xp)[0], 1)
    y = K.dropout(xp, 0.5, noise_shape=noise_shape)
    assert K.int_shape(y) == (None, 32)
    (out,) = K.function([xp], [y])([x])
    mask = out != 0
    assert np.all(mask == mask.take([0], axis=axis))  # constant along the broadcast axis
    assert 0 < mask.mean() < 1


def test_dropout_fixed_noise_shape_with_unknown_batch_is_checked_at_run_time():
    # the fixed noise_shape conflicts only with shape inference's stand-in batch sizes
    x = K.placeholder((None, 2))
    y = K.dropout(x, 0.5, noise_shape=(3, 1), seed=1)
    assert K.int_shape(y) == (None, 2)
    f = K.function([x], [y])
    out = f([np.ones((3, 2), np.float32)])[0]
    assert set(np.unique(out)) <= {0.0, 2.0}
    np.testing.assert_array_equal(out[:, 0], out[:, 1])  # one mask value per row
    with pytest.raises(ValueError, match=r"noise_shape \(3, 1\) does not broadcast.*\(5, 2\)"):
        f([np.ones((5, 2), np.float32)])


def test_dropout_bad_arguments():
    x = np.ones((2, 3), np.float32)
    for level in (1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match=f"level must be in \\[0, 1\\), got {level}"):
            K.dropout(x, level)
    with pytest.raises(TypeError, match="level"):
        K.dropout(x, "half")
    with pytest.raises(ValueError, match=r"noise_shape \(2, 3, 1\)"):
        K.dropout(x, 0.5, noise_shape=(2, 3, 1))
    with pytest.raises(ValueError, match=r"noise_shape \(2, 2\)"):
        K.dropout(x, 0.5, noise_shape=(2, 2))
    with pytest.raises(TypeError, match="seed"):
        K.dropout(x, 0.5, seed=1.5)


# ---------------------------------------------------------------------------------------------
# bias_add


def np_bias_add(x, bias, data_format):
    if bias.ndim == 1:
        shape = [1] * x.ndim
        shape[1 if data_format == "channels_first" else -1] = bias.size
        return x + bias.reshape(shape)
    if data_format == "channels_first":  # TF-Keras reshapes (spatial..., C) to (C, spatial...)
        bias = bias.reshape((bias.shape[-1], *bias.shape[:-1]))
    return x + bias[None]


def _bias_shape(x_shape, data_format, full):
    if not full:
        return (x_shape[1] if data_format == "channels_first" else x_shape[-1],)
    return x_shape[1:] if data_format == "channels_last" else x_shape[2:] + x_shape[1:2]


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
@pytest.mark.parametrize("rank,full", [(2, False), (3, False), (4, True), (5, False), (5, True)])
def test_bias_add(rank, full, data_format):
    x = uniform((2, 3, 4, 2, 3)[:rank])
    bias = uniform(_bias_shape(x.shape, data_format, full))
    check_op(
        lambda x, b: K.bias_add(x, b, data_format),
        lambda x, b: np_bias_add(x, b, data_format),
        [x, bias],
    )


def test_bias_add_gradients_and_default_format():
    x = uniform((2, 3, 4))
    bias = uniform((3,))
    w = uniform((2, 3, 4))
    check_grad(
        lambda b: K.bias_add(x, b, "channels_first") * w,
        lambda b: np_bias_add(x, b, "channels_first") * w,
        bias,
    )
    check_grad(lambda t: K.bias_add(t, uniform((4,))) * w, lambda t: t * w, x)
    K.set_image_data_format("channels_first")
    try:
        np.testing.assert_allclose(K.bias_add(x, bias), np_bias_add(x, bias, "channels_first"))
    finally:
        K.set_image_data_format("channels_last")


@pytest.mark.slow
@given(
    shape=st.lists(st.integers(1, 3), min_size=2, max_size=5),
    data_format=st.sampled_from(["channels_last", "channels_first"]),
    full=st.booleans(),
)
def test_bias_add_shapes_property(shape, data_format, full):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    bias = np.linspace(-1, 1, int(np.prod(_bias_shape(shape, data_format, full))))
    bias = bias.reshape(_bias_shape(shape, data_format, full)).astype(np.float32)
    np.testing.assert_allclose(
        K.bias_add(x, bias, data_format), np_bias_add(x, bias, data_format), rtol=1e-6
    )
    sym = K.bias_add(K.placeholder((None, *shape[1:])), bias, data_format)
    assert K.int_shape(sym) == (None, *shape[1:])


def test_bias_add_bad_arguments():
    x = np.zeros((2, 3, 4, 5), np.float32)
    with pytest.raises(ValueError, match="'NHWC'"):
        K.bias_add(x, np.zeros(5), "NHWC")
    with pytest.raises(ValueError, match=r"bias of shape \(4, 5\).*x of shape \(2, 3, 4, 5\)"):
        K.bias_add(x, np.zeros((4, 5)))
    with pytest.raises(ValueError, match=r"bias of shape \(4,\).*x of shape \(2, 3, 4, 5\)"):
        K.bias_add(x, np.zeros(4))
    with pytest.raises(ValueError, match=r"bias of shape \(3, 4, 5\).*expected.*\(4, 5, 3\)"):
        K.bias_add(x, np.zeros((3, 4, 5)), "channels_first")
    with pytest.raises(ValueError, match=r"rank 2 or more, got shape \(3,\)"):
        K.bias_add(np.zeros(3), np.zeros(3))


# ---------------------------------------------------------------------------------------------
# batch normalization


def np_batch_norm(x, mean, var, beta, gamma, axis=-1, epsilon=1e-3):
    def along(p):
        if p is None or np.ndim(p) != 1 or x.ndim == 1:
            return p
        shape = [1] * x.ndim
        shape[axis] = -1
        return np.reshape(p, shape)

    out = (x - along(mean)) / np.sqrt(along(var) + epsilon)
    if gamma is not None:
        out = out * along(gamma)
    return out if beta is None else out + along(beta)


def _bn_params(n):
    return [uniform((n,)), uniform((n,), 0.5, 2), uniform((n,)), uniform((n,), 0.5, 2)]


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_batch_normalization(axis):
    x = uniform((2, 3, 4))
    params = _bn_params(x.shape[axis])
    check_op(
        lambda x, m, v, b, g: K.batch_normalization(x, m, v, b, g, axis=axis),
        lambda *a: np_batch_norm(*a, axis=axis),
        [x, *params],
    )


def test_batch_normalization_full_rank_scalar_and_none():
    x = uniform((2, 3, 4))
    mean, var = uniform((1, 3, 1)), uniform((1, 3, 1), 0.5, 2)
    gamma = uniform((1, 3, 4), 0.5, 2)
    check_op(
        lambda x, m, v, g: K.batch_normalization(x, m, v, None, g, axis=1, epsilon=0.1),
        lambda x, m, v, g: np_batch_norm(x, m, v, None, g, epsilon=0.1),
        [x, mean, var, gamma],
    )
    got = K.batch_normalization(x, 0.5, 2.0, 1.0, None)
    np.testing.assert_allclose(got, (x - 0.5) / np.sqrt(2.001) + 1.0, rtol=1e-5)


def test_batch_normalization_gradients():
    x = uniform((2, 3, 4))
    m, v, b, g = _bn_params(3)
    w = uniform((2, 3, 4))
    check_grad(
        lambda t: K.batch_normalization(t, m, v, b, g, axis=1) * w,
        lambda t: np_batch_norm(t, m, v, b, g, axis=1) * w,
        x,
    )
    check_grad(
        lambda t: K.batch_normalization(x, m, t, b, g, axis=1) * w,
        lambda t: np_batch_norm(x, m, t, b, g, axis=1) * w,
        v,
    )
    check_grad(
        lambda t: K.batch_normalization(x, t, v, b, g, axis=1) * w,
        lambda t: np_batch_norm(x, t, v, b, g, axis=1) * w,
        m,
    )


@pytest.mark.slow
@given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=4), data=st.data())
def test_batch_normalization_axes_property(shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = np.linspace(-2, 2, int(np.prod(shape)), dtype=np.float32).reshape(shape)
    params = _bn_params(shape[axis])
    np.testing.assert_allclose(
        K.batch_normalization(x, *params, axis=axis),
        np_batch_norm(x, *params, axis=axis),
        rtol=1e-5,
        atol=1e-6,
    )


def test_batch_normalization_bad_arguments():
    x = np.zeros((2, 3, 4), np.float32)
    m = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match="axis=3"):
        K.batch_normalization(x, m, m, m, m, axis=3)
    with pytest.raises(ValueError, match=r"gamma of shape \(3,\).*\(2, 3, 4\) with axis=2"):
        K.batch_normalization(x, np.zeros(4), np.ones(4), None, m)
    with pytest.raises(ValueError, match=r"mean of shape \(1, 2, 1\)"):
        K.batch_normalization(x, np.zeros((1, 2, 1)), m, None, None, axis=1)
    with pytest.raises(ValueError, match="epsilon must be >= 0, got -1"):
        K.batch_normalization(x, m, m, None, None, axis=1, epsilon=-1)


def np_normalize_batch(x, gamma, beta, axes, epsilon=1e-3):
    axes = tuple(a % x.ndim for a in axes)
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)  # biased
    out = (x - mean) / np.sqrt(var + epsilon)
    if gamma is not None:
        out = out * np.reshape(gamma, mean.shape)
    if beta is not None:
        out = out + np.reshape(beta, mean.shape)
    return [out, np.squeeze(mean, axes), np.squeeze(var, axes)]


@pytest.mark.parametrize(
    "shape,axes",
    [((3, 2, 2, 4), [0, 1, 2]), ((3, 4, 2, 2), [0, 2, 3]), ((5, 3), [0]), ((2, 3, 4), [-1])],
)
def test_normalize_batch_in_training(shape, axes):
    x = uniform(shape)
    n = int(np.prod([d for i, d in enumerate(shape) if i not in [a % len(shape) for a in axes]]))
    gamma, beta = uniform((n,), 0.5, 2), uniform((n,))
    check_op(
        lambda x, g, b: K.normalize_batch_in_training(x, g, b, axes),
        lambda x, g, b: np_normalize_batch(x, g, b, axes),
        [x, gamma, beta],
    )


def test_normalize_batch_in_training_none_params_and_gradient():
    x = uniform((4, 3))
    normed, mean, var = K.normalize_batch_in_training(x, None, None, [0], epsilon=0.0)
    np.testing.assert_allclose(normed.mean(0), 0, atol=1e-6)
    np.testing.assert_allclose(normed.std(0), 1, rtol=1e-5)
    np.testing.assert_allclose(mean, x.astype(np.float64).mean(0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(var, x.astype(np.float64).var(0), rtol=1e-5)
    gamma, beta = uniform((1, 3), 0.5, 2), uniform((1, 3))  # broadcast shape also fits
    w = uniform((4, 3))
    check_grad(
        lambda t: K.normalize_batch_in_training(t, gamma, beta, [0])[0] * w,
        lambda t: np_normalize_batch(t, gamma, beta, [0])[0] * w,
        x,
    )


def test_normalize_batch_in_training_moments_and_their_gradient():
    # the variance is taken from the mean with its gradient stopped, as tf.nn.moments takes it:
    # the same moments bit for bit, and the same derivative (the stopped term is zero)
    from jaxkeras._xla import summation

    x = uniform((6, 2, 5), -3, 4)
    mean, var = summation.correctly_rounded_moments(x, (0, 1))
    np.testing.assert_array_equal(mean, summation.correctly_rounded_mean(x, (0, 1)))
    np.testing.assert_array_equal(var, summation.correctly_rounded_variance(x, (0, 1)))
    w = uniform((5,), 0.5, 2)
    check_grad(
        lambda t: (
            K.normalize_batch_in_training(t, None, None, [0, 1])[2] * w
            + K.normalize_batch_in_training(t, None, None, [0, 1])[1]
        ),
        lambda t: (
            np_normalize_batch(t, None, None, [0, 1])[2] * w
            + np_normalize_batch(t, None, None, [0, 1])[1]
        ),
        x,
    )


def test_normalize_batch_in_training_moments_are_tfs_quotients():
    # integer rows with integer means: sums and squared deviations are exact, so TF's moments
    # (sum / count, divided) are NumPy's float32 ones bit for bit; a multiplication by 1/3 is not
    x = np.array([[0, 1, 5], [2, 3, 7], [-4, 1, 6], [1, 1, 7]], np.float32)
    for way, (_, mean, var) in run_all_ways(
        lambda t: K.normalize_batch_in_training(t, None, None, [1]), [x], batch_none=False
    ).items():
        if way != "symbolic":
            np.testing.assert_array_equal(mean, np.mean(x, axis=1), err_msg=way)
            np.testing.assert_array_equal(var, np.var(x, axis=1), err_msg=way)


@pytest.mark.slow
@given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=4), data=st.data())
def test_normalize_batch_in_training_axes_property(shape, data):
    axes = data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))
    x = np.sin(np.arange(np.prod(shape), dtype=np.float32)).reshape(shape)
    got = K.normalize_batch_in_training(x, None, None, sorted(axes))
    want = np_normalize_batch(x.astype(np.float64), None, None, sorted(axes))
    for g, e in zip(got, want):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_normalize_batch_in_training_bad_arguments():
    x = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(ValueError, match="repeats an axis"):
        K.normalize_batch_in_training(x, None, None, [0, -3])
    with pytest.raises(ValueError, match="reduction_axes=3"):
        K.normalize_batch_in_training(x, None, None, [0, 3])
    with pytest.raises(ValueError, match=r"gamma of shape \(3,\).*12 elements"):
        K.normalize_batch_in_training(x, np.ones(3), None, [0])


# ---------------------------------------------------------------------------------------------
# padding


def _widths(pads, rank, data_format="channels_last"):
    first = 2 if data_format == "channels_first" else 1
    widths = [(0, 0)] * rank
    widths[first : first + len(pads)] = pads
    return widths


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_spatial_padding(data_format):
    x4, x5 = uniform((2, 3, 2, 2)), uniform((2, 2, 3, 2, 2))
    pad2, pad3 = ((1, 0), (2, 3)), ((0, 1), (2, 0), (1, 1))
    check_op(
        lambda x: K.spatial_2d_padding(x, pad2, data_format),
        lambda x: np.pad(x, _widths(pad2, 4, data_format)),
        [x4],
    )
    check_op(
        lambda x: K.spatial_3d_padding(x, pad3, data_format),
        lambda x: np.pad(x, _widths(pad3, 5, data_format)),
        [x5],
    )
    w = uniform(np.pad(x4, _widths(pad2, 4, data_format)).shape)
    check_grad(
        lambda t: K.spatial_2d_padding(t, pad2, data_format) * w,
        lambda t: np.pad(t, _widths(pad2, 4, data_format)) * w,
        x4,
    )


def test_temporal_padding_and_defaults():
    x = uniform((2, 3, 4))
    check_op(
        lambda t: K.temporal_padding(t, (2, 1)), lambda t: np.pad(t, [(0, 0), (2, 1), (0, 0)]), [x]
    )
    check_grad(
        lambda t: K.temporal_padding(t) * 2.0, lambda t: np.pad(t, _widths([(1, 1)], 3)) * 2.0, x
    )
    x4 = uniform((1, 2, 2, 1))
    np.testing.assert_array_equal(K.spatial_2d_padding(x4), np.pad(x4, _widths([(1, 1)] * 2, 4)))


@pytest.mark.slow
@given(
    pads=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=3),
    data_format=st.sampled_from(["channels_last", "channels_first"]),
    dims=st.lists(st.integers(1, 3), min_size=5, max_size=5),
)
def test_padding_shapes_property(pads, data_format, dims):
    rank = len(pads) + 2
    shape = tuple(dims[:rank])
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    if len(pads) == 1:
        got, sym = (
            K.temporal_padding(x, pads[0]),
            K.temporal_padding(K.placeholder((None, *shape[1:])), pads[0]),
        )
        widths = _widths(pads, 3)
    else:
        op = K.spatial_2d_padding if len(pads) == 2 else K.spatial_3d_padding
        got = op(x, pads, data_format)
        sym = op(K.placeholder((None, *shape[1:])), pads, data_format)
        widths = _widths(pads, rank, data_format)
    want = np.pad(x, widths)
    np.testing.assert_array_equal(got, want)
    assert K.int_shape(sym) == (None, *want.shape[1:])


def test_padding_bad_arguments():
    x3, x4 = np.zeros((1, 2, 3)), np.zeros((1, 2, 2, 1))
    with pytest.raises(ValueError, match=r"padding must be a pair.*got \(1, 2, 3\)"):
        K.temporal_padding(x3, (1, 2, 3))
    with pytest.raises(ValueError, match=r"got \(-1, 1\)"):
        K.temporal_padding(x3, (-1, 1))
    with pytest.raises(ValueError, match=r"got \(1.5, 1\)"):
        K.temporal_padding(x3, (1.5, 1))
    with pytest.raises(ValueError, match=r"rank 3, got shape \(1, 2, 2, 1\)"):
        K.temporal_padding(x4)
    with pytest.raises(ValueError, match=r"padding must be 2 pairs.*got \(1, 1\)"):
        K.spatial_2d_padding(x4, (1, 1))
    with pytest.raises(ValueError, match=r"got \(\(1, 1\), \(1,\)\)"):
        K.spatial_2d_padding(x4, ((1, 1), (1,)))
    with pytest.raises(ValueError, match=r"padding must be 3 pairs.*got \(\(1, 1\), \(1, 1\)\)"):
        K.spatial_3d_padding(np.zeros((1, 2, 2, 2, 1)), ((1, 1), (1, 1)))
    with pytest.raises(ValueError, match="'channels_middle'"):
        K.spatial_2d_padding(x4, data_format="channels_middle")
    with pytest.raises(ValueError, match=r"rank 5, got shape \(1, 2, 2, 1\)"):
        K.spatial_3d_padding(x4)


# ---------------------------------------------------------------------------------------------
# resizing


def np_repeat(x, factors, first_axis):
    for i, f in enumerate(factors):
        x = np.repeat(x, f, axis=first_axis + i)
    return x


def np_bilinear_tf(x, factors, first_axis):
    """tf.image.resize bilinear: half-pixel centers, source indices clamped to the image."""
    for i, f in enumerate(factors):
        axis = first_axis + i
        n = x.shape[axis]
        src = (np.arange(n * f) + 0.5) / f - 0.5
        low = np.floor(src)
        frac = (src - low).reshape([-1 if a == axis else 1 for a in range(x.ndim)])
        lo = np.take(x, np.clip(low, 0, n - 1).astype(int), axis=axis)
        hi = np.take(x, np.clip(low + 1, 0, n - 1).astype(int), axis=axis)
        x = lo + frac * (hi - lo)
    return x


def keys_cubic(t, a=-0.5):
    t = np.abs(t)
    return np.where(
        t <= 1,
        (a + 2) * t**3 - (a + 3) * t**2 + 1,
        np.where(t < 2, a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a, 0.0),
    )


def lanczos(n):
    return lambda t: np.where(np.abs(t) < n, np.sinc(t) * np.sinc(t / n), 0.0)


def np_resample(x, factors, first_axis, kernel):
    """Separable resampling at half-pixel centers; taps outside the image are dropped and the
    remaining weights renormalized (tf.image.resize / scale_and_translate semantics)."""
    for i, f in enumerate(factors):
        axis = first_axis + i
        n = x.shape[axis]
        centers = (np.arange(n * f) + 0.5) / f - 0.5
        w = kernel(np.arange(n)[None, :] - centers[:, None])
        w = w / w.sum(axis=1, keepdims=True)
        x = np.moveaxis(np.tensordot(w, np.moveaxis(x, axis, 0), axes=1), 0, axis)
    return x


def test_bilinear_hand_example():
    x = np.array([1.0, 2.0, 4.0], np.float32).reshape(1, 1, 3, 1)
    got = K.resize_images(x, 1, 2, "channels_last", interpolation="bilinear")
    np.testing.assert_allclose(np.ravel(got), [1.0, 1.25, 1.75, 2.5, 3.5, 4.0], rtol=1e-6)


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
@pytest.mark.parametrize(
    "interpolation,reference",
    [
        ("nearest", np_repeat),
        ("bilinear", np_bilinear_tf),
        ("bicubic", lambda x, f, a: np_resample(x, f, a, keys_cubic)),
        ("lanczos3", lambda x, f, a: np_resample(x, f, a, lanczos(3))),
        ("lanczos5", lambda x, f, a: np_resample(x, f, a, lanczos(5))),
    ],
)
def test_resize_images(interpolation, reference, data_format):
    x = uniform((2, 3, 4, 2))
    first = 2 if data_format == "channels_first" else 1
    check_op(
        lambda t: K.resize_images(t, 2, 3, data_format, interpolation),
        lambda t: reference(t, (2, 3), first),
        [x],
        rtol=1e-5,
        atol=1e-5,
    )
    if interpolation in ("nearest", "bilinear"):
        w = uniform(reference(x, (2, 3), first).shape)
        check_grad(
            lambda t: K.resize_images(t, 2, 3, data_format, interpolation) * w,
            lambda t: reference(t, (2, 3), first) * w,
            x,
        )


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_resize_volumes(data_format):
    x = uniform((1, 2, 3, 2, 2))
    first = 2 if data_format == "channels_first" else 1
    check_op(
        lambda t: K.resize_volumes(t, 2, 1, 3, data_format),
        lambda t: np_repeat(t, (2, 1, 3), first),
        [x],
    )
    w = uniform(np_repeat(x, (2, 1, 3), first).shape)
    check_grad(
        lambda t: K.resize_volumes(t, 2, 1, 3, data_format) * w,
        lambda t: np_repeat(t, (2, 1, 3), first) * w,
        x,
    )


@pytest.mark.slow
@given(
    factors=st.lists(st.integers(1, 3), min_size=2, max_size=3),
    dims=st.lists(st.integers(1, 3), min_size=5, max_size=5),
    data_format=st.sampled_from(["channels_last", "channels_first"]),
    bilinear=st.booleans(),
)
def test_resize_shapes_property(factors, dims, data_format, bilinear):
    rank = len(factors) + 2
    shape = tuple(dims[:rank])
    first = 2 if data_format == "channels_first" else 1
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    if rank == 4:
        interpolation = "bilinear" if bilinear else "nearest"
        reference = np_bilinear_tf if bilinear else np_repeat
        got = K.resize_images(x, *factors, data_format, interpolation)
        sym = K.resize_images(
            K.placeholder((None, *shape[1:])), *factors, data_format, interpolation
        )
    else:
        reference = np_repeat
        got = K.resize_volumes(x, *factors, data_format)
        sym = K.resize_volumes(K.placeholder((None, *shape[1:])), *factors, data_format)
    want = reference(x, factors, first)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert K.int_shape(sym) == (None, *want.shape[1:])


def test_resize_default_format_and_int_input():
    x = np.arange(4, dtype=np.int32).reshape(1, 1, 2, 2)
    K.set_image_data_format("channels_first")
    try:
        got = K.resize_images(x, 2, 1)
    finally:
        K.set_image_data_format("channels_last")
    np.testing.assert_array_equal(got, np_repeat(x, (2, 1), 2))
    assert np.asarray(got).dtype == np.int32
    assert np.asarray(K.resize_images(x, 1, 2, "channels_last", "bilinear")).dtype.kind == "f"


def test_resize_bad_arguments():
    x4, x5 = np.zeros((1, 2, 2, 1)), np.zeros((1, 2, 2, 2, 1))
    with pytest.raises(ValueError, match="'area'"):
        K.resize_images(x4, 2, 2, "channels_last", interpolation="area")
    with pytest.raises(ValueError, match="'NHWC'"):
        K.resize_images(x4, 2, 2, "NHWC")
    with pytest.raises(ValueError, match="height_factor must be a positive int, got 0"):
        K.resize_images(x4, 0, 2, "channels_last")
    with pytest.raises(TypeError, match=r"width_factor must be an int, got 1\.5"):
        K.resize_images(x4, 2, 1.5, "channels_last")
    with pytest.raises(ValueError, match=r"rank 4, got shape \(1, 2, 2, 2, 1\)"):
        K.resize_images(x5, 2, 2, "channels_last")
    with pytest.raises(ValueError, match="'bad'"):
        K.resize_volumes(x5, 2, 2, 2, "bad")
    with pytest.raises(ValueError, match="depth_factor must be a positive int, got -1"):
        K.resize_volumes(x5, -1, 2, 2, "channels_last")
    with pytest.raises(ValueError, match=r"rank 5, got shape \(1, 2, 2, 1\)"):
        K.resize_volumes(x4, 2, 2, 2, "channels_last")


def test_selu_as_keras_composes_it_is_correctly_rounded_at_minus_one():
    # Keras's selu is scale * K.elu(x, alpha). Keras 2.3.1's test_selu compares it with
    # (np.exp(x) - 1) * scale * alpha in float32, which with NumPy 2's float32 exp (0.69 ulp off
    # at -1) is one ulp from the correctly rounded value; jaxkeras (like TF) returns the
    # correctly rounded value at -1 and -2, and elsewhere stays within the error of expm1 and
    # two float32 products.
    alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    x = np.concatenate([np.linspace(-6, -0.01, 200), [-1.0, -2.0]]).astype(np.float32)
    got = np.asarray(K.eval(scale * K.elu(x, alpha)), np.float64)
    exact = scale * alpha * np.expm1(x.astype(np.float64))
    ulps = np.abs(got - exact) / np.spacing(np.abs(exact).astype(np.float32))
    assert ulps.max() <= 3.0, ulps.max()
    np.testing.assert_array_equal(got[-2:], exact[-2:].astype(np.float32))


# ---------------------------------------------------------------------------------------------
# crossentropies at the edges, against TF-Keras 2.21's formulas (tf_keras/src/backend.py) in
# float32 NumPy, one IEEE operation at a time as TF runs them


def tf_bce(t, p, eps=EPS):
    e = np.float32(eps)
    p = np.minimum(np.maximum(p, e), np.float32(1) - e)
    return -(t * np.log(p + e) + (np.float32(1) - t) * np.log(np.float32(1) - p + e))


def tf_bce_logits(t, z):
    """tf.nn.sigmoid_cross_entropy_with_logits."""
    return np.maximum(z, np.float32(0)) - z * t + np.log1p(np.exp(-np.abs(z)))


def tf_cce(t, p, eps=EPS):
    e = np.float32(eps)
    p = p / p.sum(axis=-1, keepdims=True)
    return -(t * np.log(np.minimum(np.maximum(p, e), np.float32(1) - e))).sum(axis=-1)


EDGE_T = np.array([0, 1, 0.25], np.float32)[:, None]
EDGE_P = np.array([0, 1, 1e-7, 1 - 1e-7, 1e-9, 0.5], np.float32)[None, :]
EDGE_Z = np.array([-1e4, -100, -1, 0, 1, 100, 1e4], np.float32)[None, :]
EDGE_ROWS = np.array([[1, 0, 0], [0, 1, 0], [0.5, 0.5, 0], [0, 0, 1]], np.float32)
EDGE_LOGITS = np.array([[100, -100, 0], [1e4, 0, -1e4], [0, 0, 0], [-50, 50, 0]], np.float32)


def test_binary_crossentropy_at_the_edges_equals_tf_keras():
    t, p = np.broadcast_arrays(EDGE_T, EDGE_P)
    got = np.asarray(K.binary_crossentropy(t, p))
    np.testing.assert_allclose(got, tf_bce(t, p), rtol=1e-6)
    assert got[0, 1] == pytest.approx(15.3332, abs=1e-4)  # target 0, output 1
    # the same inside a compiled function (XLA may not fold 1 - p + eps into 1 + eps - p)
    tp, pp = K.placeholder((None, 6)), K.placeholder((None, 6))
    compiled = K.function([tp, pp], [K.binary_crossentropy(tp, pp)])
    np.testing.assert_allclose(compiled([t, p])[0], tf_bce(t, p), rtol=1e-6)
    t, z = np.broadcast_arrays(EDGE_T, EDGE_Z)
    got = np.asarray(K.binary_crossentropy(t, z, from_logits=True))
    # atol: XLA:CPU flushes float32 subnormals (exp(-100) here) to zero, as TF on CPU does
    np.testing.assert_allclose(got, tf_bce_logits(t, z), rtol=1e-6, atol=1e-37)


def test_binary_crossentropy_logits_gradient_at_zero():
    t = np.array([0, 1, 0.25], np.float32)
    grad = jax.grad(lambda z: K.sum(K.binary_crossentropy(t, z, from_logits=True)))
    np.testing.assert_allclose(grad(np.zeros(3, np.float32)), 0.5 - t, rtol=1e-6)


def test_categorical_crossentropies_at_the_edges_equal_tf_keras():
    t = np.eye(3, dtype=np.float32)[[0, 0, 2, 1]]
    np.testing.assert_allclose(
        K.categorical_crossentropy(t, EDGE_ROWS), tf_cce(t, EDGE_ROWS), rtol=1e-6
    )
    labels = np.array([0, 0, 2, 1], np.int32)
    # TF clips in float32, where 1 - eps is the float just below (so log(p) at p = 1 is -1.2e-7)
    low, high = float(np.float32(EPS)), float(np.float32(1 - EPS))
    log_q = np.log(np.clip(EDGE_ROWS.astype(np.float64), low, high))
    want = -log_softmax(log_q, axis=-1)[np.arange(4), labels]
    got = K.sparse_categorical_crossentropy(labels, EDGE_ROWS)
    # atol: a loss of 2e-7 is float32 rounding of log-sums near 1 (TF-Keras gives 2.38e-7 too)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    logits = EDGE_LOGITS.astype(np.float64)
    np.testing.assert_allclose(
        K.categorical_crossentropy(t, EDGE_LOGITS, from_logits=True),
        -(t * log_softmax(logits, axis=-1)).sum(-1),
        rtol=1e-6,
    )


def test_crossentropies_follow_epsilon():
    t, p = np.broadcast_arrays(EDGE_T, EDGE_P)
    rows = np.eye(3, dtype=np.float32)[[0, 0, 2, 1]]
    try:
        K.set_epsilon(1e-3)
        np.testing.assert_allclose(K.binary_crossentropy(t, p), tf_bce(t, p, 1e-3), rtol=1e-6)
        np.testing.assert_allclose(
            K.categorical_crossentropy(rows, EDGE_ROWS), tf_cce(rows, EDGE_ROWS, 1e-3), rtol=1e-6
        )
    finally:
        K.set_epsilon(EPS)


def test_crossentropy_of_a_graph_activation_uses_its_logits():
    """As TF-Keras for a Sigmoid or Softmax op: the loss comes from the activation's input,
    unclipped; concrete arrays (TF's eager tensors) are clipped as given."""
    t, z = np.eye(3, dtype=np.float32)[[1, 0, 2, 0]], EDGE_LOGITS
    tp, zp = K.placeholder((None, 3)), K.placeholder((None, 3))
    exact = -(t * log_softmax(z.astype(np.float64), axis=-1)).sum(-1)
    losses = [
        K.categorical_crossentropy(tp, K.softmax(zp)),
        K.sparse_categorical_crossentropy(K.argmax(tp), K.softmax(zp)),
        K.binary_crossentropy(tp, K.sigmoid(zp)),
    ]
    with pytest.warns(UserWarning, match="from_logits=True, but output was computed by"):
        losses.append(K.categorical_crossentropy(tp, K.softmax(zp), from_logits=True))
    cce, sparse, bce, twice = K.function([tp, zp], losses)([t, z])
    np.testing.assert_allclose(cce, exact, rtol=1e-6)
    assert cce[0] == pytest.approx(200.0)  # clipped probabilities would give 16.1
    np.testing.assert_allclose(sparse, exact, rtol=1e-6)
    np.testing.assert_allclose(twice, exact, rtol=1e-6)
    np.testing.assert_allclose(bce, tf_bce_logits(t, z), rtol=1e-6, atol=1e-37)
    probs = np_softmax(z.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(
        K.categorical_crossentropy(t, K.softmax(z)), tf_cce(t, probs), rtol=1e-6
    )
    # a softmax over another axis than the loss's is not taken apart
    over_batch = K.function([tp, zp], [K.categorical_crossentropy(tp, K.softmax(zp, axis=0))])
    columns = np_softmax(z.astype(np.float64), axis=0).astype(np.float32)
    np.testing.assert_allclose(over_batch([t, z])[0], tf_cce(t, columns), rtol=1e-5)


def test_dropout_takes_a_rate_tensor_as_tf_does():
    # tf.nn.dropout takes its rate as a tensor: one compiled function, rates fed per call
    x = K.placeholder((None, 4000))
    rate = K.placeholder(shape=(), dtype="float32")
    f = K.function([x, rate], [K.dropout(x, rate, seed=3)])
    ones = np.ones((1, 4000), "float32")
    for level in (0.5, 0.1):
        out = f([ones, np.float32(level)])[0]
        assert abs(np.mean(out == 0) - level) < 0.03
        np.testing.assert_array_equal(np.unique(out), [0, np.float32(1) / np.float32(1 - level)])
    assert f.trace_count == 1
    # a variable rate gives the numbers of the same rate as a Python float
    v = K.variable(np.ones(64, "float32"))
    np.testing.assert_array_equal(
        K.eval(K.dropout(v, K.variable(0.25), seed=5)), K.eval(K.dropout(v, 0.25, seed=5))
    )
    with pytest.raises(ValueError, match="dropout: level must be a float or a float scalar"):
        K.dropout(v, K.variable(np.full(2, 0.5, "float32")))
