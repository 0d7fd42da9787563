"""K.gradients: jax.grad over a graph replay, checked against finite differences and jax.grad."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxkeras as K
from tests.helpers import numeric_grad

ksum = K.op(lambda x, axis=None: jnp.sum(x, axis=axis), name="sum")
ktanh = K.op(jnp.tanh, name="tanh")
kexp = K.op(jnp.exp, name="exp")

rng = np.random.default_rng(0)
X = rng.normal(size=(5, 3)).astype(np.float32)
W0 = rng.normal(size=(3, 2)).astype(np.float32)


def _np_loss(w, x=X):
    return np.sum(np.tanh(x.astype(np.float64) @ w) ** 2)


def test_gradient_wrt_variable_matches_finite_differences_and_jax_grad():
    w = K.variable(W0)
    x = K.placeholder((None, 3))
    loss = ksum(ktanh(x @ w) ** 2)
    (g,) = K.gradients(loss, [w])
    assert K.int_shape(g) == (3, 2)
    got = K.function([x], [g])([X])[0]
    np.testing.assert_allclose(
        got, numeric_grad(_np_loss, W0.astype(np.float64), 1e-6), rtol=1e-4, atol=1e-5
    )
    by_hand = jax.grad(lambda w_: jnp.sum(jnp.tanh(X @ w_) ** 2))(W0)
    np.testing.assert_allclose(got, by_hand, rtol=1e-6)
    np.testing.assert_allclose(
        K.eval(K.gradients(ksum(ktanh(X @ w) ** 2), [w])[0]), by_hand, rtol=1e-6
    )


def test_gradient_wrt_placeholder_and_intermediate():
    w = K.variable(W0)
    x = K.placeholder((None, 3))
    h = x @ w
    loss = ksum(ktanh(h) ** 2) + ksum(x * 0.5)
    gx, gh = K.gradients(loss, [x, h])
    out_x, out_h = K.function([x], [gx, gh])([X])
    hv = X.astype(np.float64) @ W0
    want_h = 2 * np.tanh(hv) * (1 - np.tanh(hv) ** 2)
    np.testing.assert_allclose(out_h, want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out_x, want_h @ W0.T + 0.5, rtol=1e-5, atol=1e-6)


def test_second_order_gradients():
    x = K.placeholder((4,))
    y = ksum(x**3)
    (g,) = K.gradients(y, [x])
    (gg,) = K.gradients(ksum(g), [x])
    data = np.array([1.0, -2.0, 0.5, 3.0], dtype=np.float32)
    first, second = K.function([x], [g, gg])([data])
    np.testing.assert_allclose(first, 3 * data**2, rtol=1e-6)
    np.testing.assert_allclose(second, 6 * data, rtol=1e-6)
    v = K.variable(2.0)
    (gv,) = K.gradients(kexp(v * v), [v])
    (ggv,) = K.gradients(gv, [v])
    # d/dv exp(v^2) = 2v exp(v^2); second derivative (2 + 4v^2) exp(v^2)
    np.testing.assert_allclose(K.eval(ggv), (2 + 16) * np.exp(4.0), rtol=1e-5)


def test_non_scalar_loss_is_summed_and_disconnected_is_none():
    a = K.variable([1.0, 2.0])
    b = K.variable([3.0])
    ga, gb = K.gradients(a * a, [a, b])
    np.testing.assert_allclose(K.eval(ga), [2.0, 4.0])
    assert gb is None
    assert K.gradients(K.constant(1.0), [a]) == [None]


def test_stop_gradient_of_tensor_and_list():
    a = K.variable([1.0, 2.0])
    (g,) = K.gradients(ksum(K.stop_gradient(a * a) * a), [a])
    np.testing.assert_allclose(K.eval(g), [1.0, 4.0])
    s1, s2 = K.stop_gradient([a, a * 2])
    (g2,) = K.gradients(ksum(s1 + s2 + a), [a])
    np.testing.assert_allclose(K.eval(g2), [1.0, 1.0])


def test_training_loop_with_gradients_and_updates_converges():
    w = K.variable(np.zeros((3, 1)))
    x = K.placeholder((None, 3))
    y = K.placeholder((None, 1))
    loss = ksum((x @ w - y) ** 2) / 20.0
    (g,) = K.gradients(loss, [w])
    step = K.function([x, y], [loss], updates=[K.update_sub(w, 0.1 * g)])
    true_w = np.array([[1.0], [-2.0], [0.5]], dtype=np.float32)
    data = rng.normal(size=(20, 3)).astype(np.float32)
    for _ in range(300):
        step([data, data @ true_w])
    np.testing.assert_allclose(K.get_value(w), true_w, atol=1e-3)
    assert step.trace_count == 1


def test_gradients_rejects_non_tensors():
    with pytest.raises(TypeError, match="variables"):
        K.gradients(K.variable(1.0) * 2, [np.ones(2)])


def test_training_step_computes_the_forward_pass_once():
    calls = []

    def body(h):
        calls.append(1)
        return jnp.tanh(h)

    counted = K.op(body, name="counted_tanh")
    w = K.variable(W0)
    x = K.placeholder((None, 3))
    loss = ksum(counted(x @ w) ** 2)
    (g,) = K.gradients(loss, [w])
    step = K.function([x], [loss], updates=[K.update_sub(w, 0.01 * g)])
    calls.clear()  # shape inference ran the body while the graph was built
    out = step([X])[0]
    assert len(calls) == 1  # one trace, and in it one forward pass shared with the gradients
    np.testing.assert_allclose(out, _np_loss(W0), rtol=1e-5)
