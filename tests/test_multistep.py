"""Multi-step calls: ``K.function(..., steps_per_call=n)`` runs n steps in one compiled call."""

from __future__ import annotations

import jax
import numpy as np
import optax
import pytest

import jaxkeras as K
from jaxkeras.optimizers import OptaxOptimizer

STEPS = 6


def _step(steps_per_call, optimizer="sgd", **kwargs):
    """A train step with dropout, a moving average and a step counter, built afresh (same
    seeds, same weights): ``(function, variables)``."""
    K.clear_session()
    K.set_random_seed(0)
    rng = np.random.default_rng(0)
    x, t = K.placeholder((None, 8)), K.placeholder((None, 4))
    w = K.variable(rng.standard_normal((8, 4)).astype("float32") * 0.1)
    mean = K.variable(np.zeros(4, "float32"))
    counter = K.variable(0, dtype="int32")
    h = K.dot(K.dropout(x, 0.3), w)
    loss = K.mean(K.categorical_crossentropy(t, K.softmax(h)))
    updates = [K.moving_average_update(mean, K.mean(h, axis=0), 0.9), K.update_add(counter, 1)]
    if optimizer == "sgd":
        updates.append(K.update_sub(w, 0.1 * K.gradients(loss, [w])[0]))
        variables = [w, mean, counter]
    else:
        opt = OptaxOptimizer(optax.adam(1e-2))
        updates += opt.get_updates(loss, [w])
        variables = [w, mean, counter, opt.iterations, *opt.weights]
    inputs = [x, t, K.learning_phase()]
    f = K.function(inputs, [loss, h], updates=updates, steps_per_call=steps_per_call, **kwargs)
    return f, variables


def _data():
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((STEPS, 16, 8)).astype("float32")
    ts = np.eye(4, dtype="float32")[rng.integers(0, 4, (STEPS, 16))]
    return xs, ts


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("n", [2, 3, 6])
def test_n_steps_in_one_call_equal_n_calls_bit_for_bit(n, optimizer):
    xs, ts = _data()
    one, variables = _step(1, optimizer)
    separate = [one([xs[i], ts[i], 1]) for i in range(STEPS)]
    want = [K.get_value(v) for v in variables]
    multi, variables = _step(n, optimizer)
    stacked = [multi([xs[i : i + n], ts[i : i + n], 1]) for i in range(0, STEPS, n)]
    for got, expected in zip(variables, want):
        np.testing.assert_array_equal(K.get_value(got), expected)
    losses = np.concatenate([loss for loss, _ in stacked])
    np.testing.assert_array_equal(losses, [loss for loss, _ in separate])
    hidden = np.concatenate([h for _, h in stacked])
    assert hidden.shape == (STEPS, 16, 4)
    np.testing.assert_array_equal(hidden, np.stack([h for _, h in separate]))
    assert multi.trace_count == 1


def test_the_learning_phase_applies_to_every_step():
    xs, ts = _data()
    one, _ = _step(1)
    separate = [one([xs[i], ts[i], 0])[1] for i in range(3)]
    multi, _ = _step(3)
    (_, test) = multi([xs[:3], ts[:3], 0])
    np.testing.assert_array_equal(test, np.stack(separate))
    (_, train) = multi([xs[3:], ts[3:], 1])
    (_, again) = multi([xs[3:], ts[3:], 0])
    assert not np.array_equal(train, again)  # dropout in the training phase only


def test_device_outputs_are_jax_arrays():
    xs, ts = _data()
    f, _ = _step(2, device_outputs=True)
    loss, hidden = f([xs[:2], ts[:2], 1])
    assert isinstance(loss, jax.Array) and isinstance(hidden, jax.Array)
    assert loss.shape == (2,) and hidden.shape == (2, 16, 4)


def test_feeds_must_stack_the_steps():
    xs, ts = _data()
    f, _ = _step(3)
    with pytest.raises(ValueError, match=r"feed for 'placeholder.*' has shape \(16, 8\)"):
        f([xs[0], ts[0], 1])
    with pytest.raises(ValueError, match="steps_per_call must be at least 1, got 0"):
        K.function([K.placeholder((2,))], [K.constant(1.0)], steps_per_call=0)
    with pytest.raises(TypeError, match=r"steps_per_call must be an int, got 2\.5"):
        K.function([K.placeholder((2,))], [K.constant(1.0)], steps_per_call=2.5)


def _means_step(steps_per_call):
    """Means of a feed over 3, 7 and 21 values, and an update by a mean's gradient:
    ``(function, weights)``."""
    K.clear_session()
    x = K.placeholder((None, 3))
    w = K.variable(np.float32([[0.5], [-1.0], [2.0]]))
    (grad,) = K.gradients(K.mean(K.dot(x, w)) * 3.0, [w])
    outputs = [K.mean(x, axis=1), K.var(x, axis=0), K.mean(x)]
    updates = [K.update_sub(w, 0.25 * grad)]
    return K.function([x], outputs, updates=updates, steps_per_call=steps_per_call), w


def test_means_in_steps_are_the_calls_quotients():
    # a mean in the scan of a multi-step call is the one a call computes, bit for bit; integer
    # values make the sums exact, so a mean is also NumPy's quotient (TF's)
    xs = np.random.default_rng(3).integers(-9, 10, size=(3, 7, 3)).astype("float32")
    one, w_one = _means_step(1)
    separate = [one([xs[i]]) for i in range(3)]
    multi, w_multi = _means_step(3)
    stacked = multi([xs])
    for k, got in enumerate(stacked):
        np.testing.assert_array_equal(got, np.stack([s[k] for s in separate]))
    np.testing.assert_array_equal(stacked[0], np.mean(xs, axis=2))
    np.testing.assert_array_equal(stacked[2], np.mean(xs, axis=(1, 2)))
    np.testing.assert_allclose(stacked[1], np.var(xs, axis=1), rtol=1e-6)
    np.testing.assert_array_equal(K.get_value(w_multi), K.get_value(w_one))
