"""Gradient accumulation, both ways: ``optax.MultiSteps`` through ``OptaxOptimizer`` (k calls,
one optimizer step) and ``K.function(..., micro_batches=k)`` (one call, k micro-batches in a
``lax.scan``).

References are plain JAX: ``jax.grad`` of the same loss written in ``jax.numpy``, and optax
applied by hand to the whole batch's gradient.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxkeras as K
from jaxkeras import mixed_precision
from jaxkeras.optimizers import OptaxOptimizer
from tests.helpers import run_on_keras2

_rng = np.random.default_rng(0)
X = _rng.normal(size=(64, 5)).astype("float32")
Y = _rng.normal(size=(64, 2)).astype("float32")
INIT = [
    (_rng.normal(size=(5, 8)) * 0.5).astype("float32"),
    np.zeros(8, "float32"),
    (_rng.normal(size=(8, 2)) * 0.5).astype("float32"),
    np.full(2, 0.1, "float32"),
]


def _loss_of(params, x, y):
    w1, b1, w2, b2 = params
    return jnp.mean(jnp.square(jnp.tanh(x @ w1 + b1) @ w2 + b2 - y))


def _grad(params, x, y):
    return jax.grad(_loss_of)([jnp.asarray(p) for p in params], x, y)


def _model():
    params = [K.variable(p) for p in INIT]
    x, y = K.placeholder((None, 5)), K.placeholder((None, 2))
    w1, b1, w2, b2 = params
    prediction = K.dot(K.tanh(K.dot(x, w1) + b1), w2) + b2
    loss = K.mean(K.square(prediction - y))
    return params, x, y, prediction, loss


def _close(actual, expected, rtol=1e-5, atol=1e-6):
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------------
# optax.MultiSteps: k calls, one step


@pytest.mark.parametrize("form", ["MultiSteps", "gradient_transformation"])
def test_multisteps_k_mini_steps_are_one_sgd_step_on_their_mean_gradient(form):
    k, lr = 4, 0.5
    multi = optax.MultiSteps(optax.sgd(lr), every_k_schedule=k)
    opt = OptaxOptimizer(multi if form == "MultiSteps" else multi.gradient_transformation())
    params, x, y, _, loss = _model()
    train = K.function([x, y], [loss], updates=opt.get_updates(loss, params))
    batches = np.split(np.arange(64), 2 * k)
    expected = [np.asarray(p) for p in INIT]
    for cycle in range(2):
        grads, start = [], K.batch_get_value(params)
        for i in range(k):
            rows = batches[cycle * k + i]
            grads.append(_grad(expected, X[rows], Y[rows]))
            train([X[rows], Y[rows]])
            if i < k - 1:  # the params stay as they are between mini-steps
                for p, e in zip(K.batch_get_value(params), start):
                    np.testing.assert_array_equal(p, e)
        mean = [sum(g[j] for g in grads) / k for j in range(4)]
        expected = [e - lr * np.asarray(g) for e, g in zip(expected, mean)]
        _close(K.batch_get_value(params), expected)
    # iterations counts calls (mini-steps); MultiSteps counts the optimizer steps
    assert int(K.get_value(opt.iterations)) == 2 * k
    state = opt.optax_state()
    assert int(state.gradient_step) == 2
    assert int(state.mini_step) == 0
    assert train.trace_count == 1


def test_multisteps_passes_the_loss_to_the_transform_it_wraps():
    # reduce_on_plateau takes the loss as `value` (without it, its update raises); its state
    # after each call is that of MultiSteps applied by hand with the same values
    def transform():
        inner = optax.chain(optax.sgd(0.1), optax.contrib.reduce_on_plateau(patience=1, factor=0.5))
        return optax.MultiSteps(inner, every_k_schedule=2)

    opt = OptaxOptimizer(transform())
    w = K.variable(np.float32(1.0))
    x = K.placeholder(())
    loss = w * 0.0 + x  # the loss is the fed value
    train = K.function([x], [loss], updates=opt.get_updates(loss, [w]))
    by_hand = transform()
    state = by_hand.init([jnp.float32(1.0)])
    scales = []
    for value in np.float32([3.0, 2.0, 2.0, 2.0, 2.5, 2.0, 2.0, 2.0]):
        train([value])
        with jax.numpy_dtype_promotion("standard"):
            _, state = by_hand.update([jnp.float32(0.0)], state, [jnp.float32(1.0)], value=value)
        mine = opt.optax_state().inner_opt_state[1]
        for a, b in zip(mine, state.inner_opt_state[1]):
            np.testing.assert_array_equal(a, b)
        scales.append(float(mine.scale))
    assert scales[0] == 1.0 and scales[-1] < 1.0  # the plateau was seen


# ---------------------------------------------------------------------------------------------
# micro_batches: one call, k micro-batches


def _keras_sgd(params, loss, lr=0.1):
    """A Keras 2 SGD step: ``iterations + 1`` and ``p - lr * g``."""
    iterations = K.variable(0, dtype="int32")
    lr = K.variable(lr)
    grads = K.gradients(loss, params)
    return [K.update_add(iterations, 1)] + [
        K.update(p, p - lr * g) for p, g in zip(params, grads)
    ], iterations


@pytest.mark.parametrize("k", [1, 2, 8])
def test_keras_sgd_step_over_micro_batches_equals_one_big_batch(k):
    params, x, y, prediction, loss = _model()
    updates, iterations = _keras_sgd(params, loss)
    train = K.function([x, y], [loss, prediction], updates, micro_batches=k)
    expected = [np.asarray(p) for p in INIT]
    for _ in range(3):
        loss_value, predicted = train([X, Y])
        np.testing.assert_allclose(loss_value, _loss_of(expected, X, Y), rtol=1e-5)
        reference = jnp.tanh(X @ expected[0] + expected[1]) @ expected[2] + expected[3]
        assert predicted.shape == (64, 2)  # batch-shaped: concatenated
        np.testing.assert_allclose(predicted, reference, rtol=1e-5, atol=1e-6)
        grads = _grad(expected, X, Y)
        expected = [e - np.float32(0.1) * np.asarray(g) for e, g in zip(expected, grads)]
        _close(K.batch_get_value(params), expected)
    assert int(K.get_value(iterations)) == 3  # once per call, not per micro-batch
    assert train.trace_count == 1


def test_optax_adam_over_micro_batches_equals_one_big_batch():
    tx = optax.adam(1e-2)
    params, x, y, _, loss = _model()
    opt = OptaxOptimizer(tx)
    train = K.function([x, y], [loss], opt.get_updates(loss, params), micro_batches=4)
    expected = [jnp.asarray(p) for p in INIT]
    with jax.numpy_dtype_promotion("standard"):
        state = tx.init(expected)
    for _ in range(5):
        train([X, Y])
        with jax.numpy_dtype_promotion("standard"):
            steps, state = tx.update(_grad(expected, X, Y), state, expected)
            expected = optax.apply_updates(expected, steps)
    _close(K.batch_get_value(params), expected)
    assert int(K.get_value(opt.iterations)) == 5


def test_peak_memory_is_one_micro_batch():
    # a GPU's temporaries include a fixed workspace for its matrix-product library (tens of
    # MiB), so the batch is large enough for the activations to outweigh it
    n, d, h = 32768, 64, 512
    rng = np.random.default_rng(1)
    feeds = [rng.normal(size=(n, d)).astype("float32"), rng.normal(size=(n, 1)).astype("float32")]

    def temp_bytes(k):
        shapes = [(d, h), (h, h), (h, 1)]
        weights = [K.variable(rng.normal(size=s).astype("float32") * 0.1) for s in shapes]
        x, y = K.placeholder((None, d)), K.placeholder((None, 1))
        hidden = x
        for w in weights[:-1]:
            hidden = K.relu(K.dot(hidden, w))
        loss = K.mean(K.square(K.dot(hidden, weights[-1]) - y))
        updates = [K.update_sub(w, 0.01 * g) for w, g in zip(weights, K.gradients(loss, weights))]
        f = K.function([x, y], [loss], updates, micro_batches=k)
        return f.lower(feeds).compile().memory_analysis().temp_size_in_bytes

    whole, sliced = temp_bytes(1), temp_bytes(8)
    # one hidden activation of the whole batch is n * h * 4 = 64 MiB; of a micro-batch, 8 MiB
    assert whole > 2 * n * h * 4
    assert sliced < whole / 3


def test_outputs_are_combined_per_kind():
    x = K.placeholder((None, 3))
    w = K.variable(np.float32([1.0, -2.0, 0.5]))
    loss = K.mean(K.square(x * w))
    (g,) = K.gradients(loss, [w])
    outputs = [
        loss,  # scalar: mean over the micro-batches
        x * 2.0,  # batch-shaped: concatenated
        K.sum(x, axis=0),  # fixed shape (3,): mean over the micro-batches
        K.sqrt(K.sum(K.square(g))),  # reads the gradients: from their mean
        w * 1.0,  # depends on no feed: once
    ]
    feed = np.arange(24, dtype="float32").reshape(8, 3)
    values = K.function([x], outputs, micro_batches=4)([feed])
    whole = K.function([x], outputs)([feed])
    np.testing.assert_allclose(values[0], whole[0], rtol=1e-6)
    np.testing.assert_array_equal(values[1], feed * 2)
    np.testing.assert_allclose(values[2], feed.sum(axis=0) / 4, rtol=1e-6)
    np.testing.assert_allclose(values[3], whole[3], rtol=1e-6)
    np.testing.assert_array_equal(values[4], K.get_value(w))


def test_gradients_with_respect_to_rows_are_each_micro_batchs():
    params, x, y, _, loss = _model()
    hidden = K.tanh(K.dot(x, params[0]) + params[1])
    loss = K.mean(K.square(K.dot(hidden, params[2]) + params[3] - y))
    grads = K.gradients(loss, [x, hidden, params[0]])
    whole = K.function([x, y], grads)([X, Y])
    sliced = K.function([x, y], grads, micro_batches=4)([X, Y])
    assert [g.shape for g in sliced] == [(64, 5), (64, 8), (5, 8)]
    # rows: each example's gradient of its micro-batch's mean loss (4 times the whole
    # batch's, in the order of the rows); the variable's gradient: the whole batch's
    _close(sliced, [whole[0] * 4, whole[1] * 4, whole[2]])
    by_hand = np.zeros_like(X)
    for i in range(4):
        by_hand[i::4] = jax.grad(_loss_of, argnums=1)(INIT, X[i::4], Y[i::4])
    np.testing.assert_allclose(sliced[0], by_hand, rtol=1e-5, atol=1e-7)


def test_a_gradient_penalty_step_over_micro_batches_equals_one_big_batch():
    # WGAN-GP style: the loss holds the norm of each example's input gradient (a gradient
    # node inside the loss of the gradient node the update reads)
    def train(k):
        params, x, y, prediction, _ = _model()
        (input_grad,) = K.gradients(K.sum(prediction), [x])
        norms = K.sqrt(K.sum(K.square(input_grad), axis=1) + 1e-6)
        loss = K.mean(prediction[:, 0]) + K.mean(K.square(norms - 1.0))
        updates, _ = _keras_sgd(params, loss, lr=0.01)
        f = K.function([x, y], [loss], updates, micro_batches=k)
        losses = [f([X, Y])[0] for _ in range(3)]
        return K.batch_get_value(params), losses

    (whole, whole_losses), (sliced, sliced_losses) = train(1), train(8)
    _close(sliced, whole)
    np.testing.assert_allclose(sliced_losses, whole_losses, rtol=1e-5)


def test_moving_average_update_reads_the_mean_of_its_micro_batch_statistics():
    x = K.placeholder((None, 3))
    mean = K.variable(np.zeros(3, "float32"))
    update = K.moving_average_update(mean, K.mean(x, axis=0), 0.9)
    f = K.function([x], [], [update], micro_batches=4)
    feed = _rng.normal(size=(16, 3)).astype("float32")
    f([feed])
    np.testing.assert_allclose(K.get_value(mean), 0.1 * feed.mean(axis=0), rtol=1e-5, atol=1e-7)


def test_random_ops_draw_per_micro_batch_and_pure_is_the_same_computation():
    x = K.placeholder((None, 4))
    w = K.variable(np.ones((4, 1), "float32"))
    dropped = K.in_train_phase(K.dropout(x, 0.5), x)
    loss = K.mean(K.square(K.dot(dropped, w)))
    (g,) = K.gradients(loss, [w])
    f = K.function(
        [x, K.learning_phase()], [loss, dropped], [K.update_sub(w, 0.1 * g)], micro_batches=4
    )
    feed = np.ones((16, 4), "float32")
    pure = jax.jit(f.pure, static_argnames="learning_phase", compiler_options=f.compiler_options)
    state, key = f.state(), f.next_key()
    (loss_p, dropped_p), new = pure(state, key, [feed], learning_phase=1)
    loss_f, dropped_f = f([feed, 1])
    np.testing.assert_array_equal(np.asarray(dropped_p), dropped_f)
    assert np.asarray(loss_p).tobytes() == loss_f.tobytes()
    np.testing.assert_array_equal(np.asarray(new[w.name]), K.get_value(w))
    # each micro-batch (rows i, i + 4, ...: equal rows of ones) draws its own mask
    masks = [(dropped_f != 0)[i::4] for i in range(4)]
    assert len({m.tobytes() for m in masks}) == 4
    assert set(np.unique(dropped_f)) == {0.0, 2.0}
    # the test phase drops nothing
    np.testing.assert_array_equal(f([feed, 0])[1], feed)


@pytest.mark.parametrize("name", ["mixed_float16", "mixed_bfloat16"])
def test_micro_batches_under_mixed_precision(name):
    # float16 scales the loss of each micro-batch; the step is that of the whole batch, to the
    # precision of the products (16-bit)
    results = []
    for k in (1, 4):
        with mixed_precision.policy(name):
            params, x, y, _, loss = _model()
            updates, _ = _keras_sgd(params, loss)
            train = K.function([x, y], [loss], updates, micro_batches=k)
            losses = [train([X, Y])[0] for _ in range(3)]
        results.append((K.batch_get_value(params), losses))
    (whole, whole_losses), (sliced, sliced_losses) = results
    _close(sliced, whole, rtol=1e-2, atol=2e-3)
    np.testing.assert_allclose(sliced_losses, whole_losses, rtol=1e-2)
    assert sliced_losses[-1] < sliced_losses[0]


def test_bad_micro_batches():
    x = K.placeholder((None, 3))
    s = K.placeholder(())
    with pytest.raises(ValueError, match="micro_batches must be at least 1, got 0"):
        K.function([x], [x], micro_batches=0)
    for bad in ("2", True, 2.0):
        with pytest.raises(TypeError, match="micro_batches must be an int"):
            K.function([x], [x], micro_batches=bad)
    with pytest.raises(ValueError, match="micro_batches=2 splits the feeds, but the function"):
        K.function([K.learning_phase()], [K.variable(1.0) * 2.0], micro_batches=2)
    f = K.function([x], [K.sum(x)], micro_batches=3)
    name = x.name
    with pytest.raises(
        ValueError, match=rf"micro_batches=3: the feed for '{name}' is of shape \(8, 3\)"
    ):
        f([np.ones((8, 3), "float32")])
    np.testing.assert_allclose(f([np.ones((9, 3), "float32")]), 9.0)  # mean of 3 sums of 9
    scalar = K.function([x, s], [K.sum(x) * s], micro_batches=2)
    with pytest.raises(ValueError, match=r"is of shape \(\)"):
        scalar([np.ones((4, 3), "float32"), np.float32(2.0)])
    counted = K.function([x], [K.sum(K.cast(x > 0, "int32"))], micro_batches=2)
    with pytest.raises(ValueError, match="not floating-point"):
        counted([np.ones((4, 3), "float32")])


# ---------------------------------------------------------------------------------------------
# Keras 2.3.1


KERAS_PROBE = """
import numpy as np, optax, keras
from keras import backend as K
from jaxkeras.optimizers import OptaxOptimizer
rng = np.random.default_rng(0)
x = rng.normal(size=(32, 4)).astype("float32")
y = rng.normal(size=(32, 2)).astype("float32")

def model(optimizer, **kwargs):
    m = keras.models.Sequential([keras.layers.Dense(2, input_shape=(4,))])
    m.compile(optimizer=optimizer, loss="mse", **kwargs)
    return m

def grad(w, b, xs, ys):  # of mse = mean((xW + b - y)^2) over rows and outputs
    error = xs @ w + b - ys
    return 2 * xs.T @ error / error.size, 2 * error.sum(axis=0) / error.size

# MultiSteps: two train_on_batch calls, one SGD step on their mean gradient
m = model(OptaxOptimizer(optax.MultiSteps(optax.sgd(0.5), every_k_schedule=2)))
w0, b0 = m.get_weights()
m.train_on_batch(x[:16], y[:16])
unchanged = all(np.array_equal(a, b) for a, b in zip(m.get_weights(), [w0, b0]))
m.train_on_batch(x[16:], y[16:])
g1, g2 = grad(w0, b0, x[:16], y[:16]), grad(w0, b0, x[16:], y[16:])
w1, b1 = w0 - 0.5 * (g1[0] + g2[0]) / 2, b0 - 0.5 * (g1[1] + g2[1]) / 2
error = max(np.abs(a - b).max() for a, b in zip(m.get_weights(), [w1, b1]))
print(unchanged, error < 1e-5, int(K.get_value(m.optimizer.iterations)))

# micro_batches through compile: fit over micro-batches equals fit over whole batches
runs = []
for k in (1, 4):
    np.random.seed(1)
    m = model(keras.optimizers.SGD(0.1), micro_batches=k)
    history = m.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    runs.append((m.get_weights(), history.history["loss"], m.predict(x, batch_size=8)))
(wa, la, pa), (wb, lb, pb) = runs
same = all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(wa + [pa], wb + [pb]))
print(same, np.allclose(la, lb, rtol=1e-5), m.train_function.micro_batches)
"""


@pytest.mark.keras2
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("keras") is None, reason="keras 2.3.1 not installed")
def test_keras_compile_with_multisteps_and_with_micro_batches(tmp_path):
    lines = run_on_keras2(KERAS_PROBE, tmp_path).strip().splitlines()
    assert lines[-2] == "True True 2"
    assert lines[-1] == "True True 4"


DATA_PARALLEL_PROBE = """
import contextlib, re
import numpy as np
import jaxkeras as K
from jaxkeras import distribution as D
rng = np.random.default_rng(0)
x_data = rng.normal(size=(64, 5)).astype("float32")
y_data = rng.normal(size=(64, 2)).astype("float32")
inits = [(rng.normal(size=s) * 0.5).astype("float32") for s in [(5, 8), (8, 2)]]

def train(k, scope):
    K.clear_session()
    with scope:
        weights = [K.variable(w) for w in inits]
        x, y = K.placeholder((None, 5)), K.placeholder((None, 2))
        prediction = K.dot(K.tanh(K.dot(x, weights[0])), weights[1])
        loss = K.mean(K.square(prediction - y))
        grads = K.gradients(loss, weights)
        updates = [K.update_sub(w, 0.1 * g) for w, g in zip(weights, grads)]
        f = K.function([x, y], [loss, prediction], updates, micro_batches=k)
        for _ in range(3):
            _, predicted = f([x_data, y_data])
        hlo = f.lower([x_data, y_data]).compile().as_text()
    return K.batch_get_value(weights) + [predicted], hlo

one, _ = train(1, contextlib.nullcontext())
split, hlo = train(4, D.DataParallel().scope())
error = max(float(np.abs(a - b).max()) for a, b in zip(one, split))
# every device computes its share of each micro-batch: gradients are summed over devices, and
# no feed is gathered (what is gathered is at most one partial sum per device)
gathered = [s for s in re.findall(r"= \\w+\\[([\\d,]*)\\][^=]* all-gather\\(", hlo)]
largest = max((int(np.prod([int(d) for d in s.split(",") if d])) for s in gathered), default=0)
print(error < 1e-5, "all-reduce(" in hlo, largest <= 4)
"""


@pytest.mark.slow
def test_micro_batches_under_data_parallel_split_each_micro_batch_over_the_devices(tmp_path):
    env = dict(
        os.environ, KERAS_HOME=str(tmp_path), XLA_FLAGS="--xla_force_host_platform_device_count=4"
    )
    out = subprocess.run(
        [sys.executable, "-c", DATA_PARALLEL_PROBE], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "True True True"
