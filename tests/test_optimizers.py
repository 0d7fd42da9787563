"""The optax bridge: OptaxOptimizer steps equal optax applied by hand, through K.function,
through ``f.pure`` under ``jax.jit``, inside a state scope, and across a checkpoint.

References are computed here with ``jax.grad`` of the same loss written in ``jax.numpy`` and the
same optax transform applied by hand (``tx.update`` + ``optax.apply_updates``).
"""

from __future__ import annotations

import gc

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxkeras as K
from jaxkeras.optimizers import OptaxOptimizer

STEPS = 25
_rng = np.random.default_rng(0)
X = _rng.normal(size=(16, 5)).astype("float32")
Y = _rng.normal(size=(16, 2)).astype("float32")
INIT = [
    (_rng.normal(size=(5, 8)) * 0.5).astype("float32"),
    np.zeros(8, "float32"),
    (_rng.normal(size=(8, 2)) * 0.5).astype("float32"),
    np.full(2, 0.1, "float32"),
]

TRANSFORMS = {
    "adam": lambda: optax.adam(1e-2),
    "sgd_nesterov": lambda: optax.sgd(0.1, momentum=0.9, nesterov=True),
    "clip_adamw_schedule": lambda: optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(optax.linear_schedule(1e-2, 1e-3, transition_steps=20), weight_decay=0.1),
    ),
}


def _loss_of(w1, b1, w2, b2, x, y):
    return jnp.mean(jnp.square(jnp.tanh(x @ w1 + b1) @ w2 + b2 - y))


def _reference(tx, steps=STEPS):
    """``steps`` steps of ``tx`` applied by hand with jax.grad; returns the params."""
    params = [jnp.asarray(p) for p in INIT]
    grad = jax.grad(lambda p: _loss_of(*p, X, Y))
    with jax.numpy_dtype_promotion("standard"):  # optax mixes dtypes: as OptaxOptimizer runs it
        state = tx.init(params)
        for _ in range(steps):
            updates, state = tx.update(grad(params), state, params)
            params = optax.apply_updates(params, updates)
    return [np.asarray(p) for p in params]


def _symbolic_loss(params, x, y):
    w1, b1, w2, b2 = params
    return K.mean(K.square(K.dot(K.tanh(K.dot(x, w1) + b1), w2) + b2 - y))


def _variables():
    return [K.variable(p) for p in INIT]


def _assert_params(actual, expected):
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_steps_through_k_function_equal_optax_by_hand(name):
    params = _variables()
    unused = K.variable(np.ones(3))  # the loss does not depend on it: its gradient is None
    x, y = K.placeholder((None, 5)), K.placeholder((None, 2))
    loss = _symbolic_loss(params, x, y)
    opt = OptaxOptimizer(TRANSFORMS[name]())
    train = K.function([x, y], [loss], updates=opt.get_updates(loss, [*params, unused]))
    losses = [train([X, Y])[0] for _ in range(STEPS)]
    _assert_params(K.batch_get_value(params), _reference(TRANSFORMS[name]()))
    np.testing.assert_array_equal(K.get_value(unused), np.ones(3))
    assert losses[-1] < losses[0]
    assert int(K.get_value(opt.iterations)) == STEPS
    assert train.trace_count == 1
    # every leaf of the optax state is a variable listed in opt.weights, read by the function
    names = {w.name for w in opt.weights}
    assert names <= set(train.variable_names)
    counts = [leaf for leaf in jax.tree_util.tree_leaves(opt.optax_state()) if leaf.ndim == 0]
    assert all(int(c) == STEPS for c in counts)  # the step counts of adam and the schedule


def test_steps_through_pure_under_user_jit():
    tx = TRANSFORMS["clip_adamw_schedule"]
    params = _variables()
    x, y = K.placeholder((None, 5)), K.placeholder((None, 2))
    loss = _symbolic_loss(params, x, y)
    opt = OptaxOptimizer(tx())
    f = K.function([x, y], [loss], updates=opt.get_updates(loss, params))
    state = f.state()
    assert {w.name for w in opt.weights} <= set(state)
    step = jax.jit(f.pure)
    key = jax.random.PRNGKey(0)
    for _ in range(STEPS):
        _, state = step(state, key, [X, Y])
    _assert_params([state[p.name] for p in params], _reference(tx()))
    assert int(state[opt.iterations.name]) == STEPS
    assert int(opt.optax_state(state)[1][0].count) == STEPS
    # pure: the store is untouched
    for p, init in zip(params, INIT):
        np.testing.assert_array_equal(K.get_value(p), init)
    assert int(K.get_value(opt.iterations)) == 0


def test_updates_apply_at_once_in_a_state_scope_under_jit():
    tx = TRANSFORMS["adam"]
    params = _variables()
    x, y = K.variable(X), K.variable(Y)  # data as variables: the loss has no placeholder
    loss = _symbolic_loss(params, x, y)
    opt = OptaxOptimizer(tx())
    traces = []

    @jax.jit
    def step(values):
        traces.append(1)
        with K.state_scope(values) as scope:
            new = opt.get_updates(loss, params)
            assert not isinstance(new[0], K.Update)  # applied, not pending
        return scope.values

    values = K.get_state([*params, x, y])  # the optimizer state is made by the first trace
    for _ in range(STEPS):
        values = step(values)
    _assert_params([values[p.name] for p in params], _reference(tx()))
    assert int(values[opt.iterations.name]) == STEPS
    assert len(traces) <= 2  # the second call adds the optimizer's state to the dict
    for p, init in zip(params, INIT):
        np.testing.assert_array_equal(K.get_value(p), init)


def test_one_step_in_an_eager_state_scope():
    tx = TRANSFORMS["sgd_nesterov"]
    params = _variables()
    loss = _symbolic_loss(params, K.variable(X), K.variable(Y))
    opt = OptaxOptimizer(tx())
    with K.state_scope({}) as scope:
        opt.get_updates(loss, params)
    _assert_params([scope.values[p.name] for p in params], _reference(tx(), steps=1))
    np.testing.assert_array_equal(K.get_value(params[0]), INIT[0])  # the store is untouched


def test_checkpoint_round_trip_carries_optimizer_state(tmp_path):
    params = _variables()
    x, y = K.placeholder((None, 5)), K.placeholder((None, 2))
    loss = _symbolic_loss(params, x, y)
    opt = OptaxOptimizer(optax.adam(1e-2))
    train = K.function([x, y], [loss], updates=opt.get_updates(loss, params))
    for _ in range(5):
        train([X, Y])
    saved = opt.get_weights()
    path = tmp_path / "ckpt.npz"
    K.save_checkpoint(path)
    for _ in range(5):
        train([X, Y])
    after = K.batch_get_value(params)
    K.restore_checkpoint(path)
    for got, want in zip(opt.get_weights(), saved):
        np.testing.assert_array_equal(got, want)
    assert int(K.get_value(opt.iterations)) == 5
    for _ in range(5):
        train([X, Y])
    for got, want in zip(K.batch_get_value(params), after):
        np.testing.assert_array_equal(got, want)
    # and these are 10 steps of Adam by hand (so the moments were restored, not restarted)
    _assert_params(after, _reference(optax.adam(1e-2), steps=10))


def test_schedule_sees_the_step_count_of_each_call():
    # loss = sum(c * w): constant gradient c, so after k steps of SGD with learning rate
    # lr_i = 0.1 * 0.5**i, w = w0 - c * sum_{i<k} lr_i (derived by hand)
    c = np.array([1.0, -2.0, 3.0], "float32")
    w = K.variable(np.zeros(3))
    schedule = optax.exponential_decay(0.1, transition_steps=1, decay_rate=0.5)
    opt = OptaxOptimizer(optax.inject_hyperparams(optax.sgd)(learning_rate=schedule))
    train = K.function([], [], updates=opt.get_updates(K.sum(w * c), [w]))
    for k in range(1, 6):
        train([])
        lrs = 0.1 * 0.5 ** np.arange(k)
        np.testing.assert_allclose(K.get_value(w), -c * lrs.sum(), rtol=1e-6)
        np.testing.assert_allclose(opt.optax_state().hyperparams["learning_rate"], lrs[-1])


def test_transforms_with_extra_args_get_the_loss_as_value():
    # reduce_on_plateau scales the step down once the loss stops improving: it needs the loss
    def make():
        return optax.chain(
            optax.sgd(0.01), optax.contrib.reduce_on_plateau(factor=0.5, patience=2, rtol=0.1)
        )

    target = np.array([1.0, -1.0], "float32")
    w = K.variable(np.zeros(2))
    opt = OptaxOptimizer(make())
    train = K.function([], [], updates=opt.get_updates(K.sum(K.square(w - target)), [w]))
    tx, p = make(), jnp.zeros(2)
    with jax.numpy_dtype_promotion("standard"):  # optax mixes dtypes: as OptaxOptimizer runs it
        state = tx.init(p)
    for _ in range(12):
        train([])
        value, grad = jax.value_and_grad(lambda p: jnp.sum(jnp.square(p - target)))(p)
        with jax.numpy_dtype_promotion("standard"):
            updates, state = tx.update(grad, state, p, value=value)
            p = optax.apply_updates(p, updates)
        np.testing.assert_allclose(K.get_value(w), p, rtol=1e-6, atol=1e-7)
    assert float(opt.optax_state()[1].scale) < 1.0  # the plateau was detected


def test_none_gradient_keeps_param_with_weight_decay_and_masks():
    w, unused = K.variable(np.ones(2)), K.variable(np.ones(2))
    tx = optax.chain(optax.masked(optax.add_decayed_weights(0.5), [True, True]), optax.sgd(0.1))
    opt = OptaxOptimizer(tx)
    train = K.function([], [], updates=opt.get_updates(K.sum(w), [w, unused]))
    train([])
    # w: grad 1 + decay 0.5 * 1, step 0.1 -> 1 - 0.15; unused: untouched
    np.testing.assert_allclose(K.get_value(w), [0.85, 0.85], rtol=1e-6)
    np.testing.assert_array_equal(K.get_value(unused), [1.0, 1.0])


def test_constraint_is_applied_after_the_step():
    w = K.variable(np.zeros(2), constraint=lambda p: K.clip(p, -0.05, 0.05))
    opt = OptaxOptimizer(optax.sgd(1.0))
    train = K.function([], [], updates=opt.get_updates(K.sum(w * np.array([1.0, -1.0])), [w]))
    train([])
    np.testing.assert_allclose(K.get_value(w), [-0.05, 0.05])


def test_same_params_reuse_the_state_other_params_get_a_fresh_one():
    w, v = K.variable(np.ones(2)), K.variable(np.ones(3))
    opt = OptaxOptimizer(optax.adam(1e-2))
    opt.get_updates(K.sum(w * w), [w])
    first = list(opt.weights)
    opt.get_updates(K.sum(w * w) * 2, [w])
    assert opt.weights == first
    opt.get_updates(K.sum(v * v), [v])
    assert opt.weights[0] is first[0]  # iterations is kept
    assert [K.int_shape(s) for s in opt.weights[2:]] == [(3,), (3,)]


def test_slots_that_mirror_a_param_are_named_after_it():
    # Earlier tests' optimizers (in reference cycles, through their compiled functions) may
    # still hold the names asked for here until the cyclic garbage collector runs.
    gc.collect()
    w = K.variable(np.ones((3, 2)), name="dense/kernel")
    b = K.variable(np.ones(3), name="dense/bias")
    opt = OptaxOptimizer(optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-2)))
    opt.get_updates(K.sum(K.dot(b, w)), [w, b])
    assert [v.name for v in opt.weights] == [
        "optax/iterations",
        "optax/state/1/0/count",
        "optax/state/1/0/mu/dense/kernel",
        "optax/state/1/0/mu/dense/bias",
        "optax/state/1/0/nu/dense/kernel",
        "optax/state/1/0/nu/dense/bias",
    ]


def test_weights_round_trip_and_config():
    w = K.variable(np.ones(2))
    opt = OptaxOptimizer(optax.adam(1e-2), name="adam")
    assert [v.name for v in opt.weights] == ["adam/iterations"]
    K.function([], [], updates=opt.get_updates(K.sum(w * w), [w]))([])
    values = opt.get_weights()
    assert len(values) == 4  # iterations, count, mu, nu
    opt.set_weights([np.zeros_like(v) for v in values])
    assert all(not np.any(v) for v in opt.get_weights())
    assert opt.get_config() == {"name": "adam"}
    with pytest.raises(TypeError, match="custom_objects"):
        OptaxOptimizer.from_config(opt.get_config())


def test_multisteps_is_accepted_and_its_state_named_after_the_params():
    # optax.MultiSteps is not a GradientTransformation; OptaxOptimizer takes it as it is (see
    # tests/test_accumulation.py for its steps)
    w = K.variable(np.ones((2, 3)), name="kernel")
    multi = optax.MultiSteps(optax.adam(1e-3), every_k_schedule=2)
    opt = OptaxOptimizer(multi)
    assert opt.tx is multi
    K.function([], [], updates=opt.get_updates(K.sum(w * w), [w]))
    assert [(v.name, v.dtype) for v in opt.weights] == [
        ("optax/iterations", "int32"),
        ("optax/state/mini_step", "int32"),
        ("optax/state/gradient_step", "int32"),
        ("optax/state/inner_opt_state/0/count", "int32"),
        ("optax/state/inner_opt_state/0/mu/kernel", "float32"),
        ("optax/state/inner_opt_state/0/nu/kernel", "float32"),
        ("optax/state/acc_grads/kernel", "float32"),
    ]


@pytest.mark.parametrize("bad", ["adam", optax.adam, None, (lambda p: p, lambda g, s, p: g)])
def test_bad_transform_raises_type_error_naming_tx(bad):
    with pytest.raises(TypeError, match=r"OptaxOptimizer: tx must be an optax .* or an optax"):
        OptaxOptimizer(bad)


def test_bad_arguments():
    w = K.variable(np.ones(2))
    opt = OptaxOptimizer(optax.sgd(0.1))
    with pytest.raises(ValueError, match="name"):
        OptaxOptimizer(optax.sgd(0.1), name="")
    with pytest.raises(TypeError, match="params must be a list"):
        opt.get_updates(K.sum(w), {"w": w})
    with pytest.raises(TypeError, match="params must be a variable"):
        opt.get_updates(K.sum(w), [np.ones(2)])
    with pytest.raises(TypeError, match="loss must be a symbolic tensor"):
        opt.get_updates(np.float32(1.0), [w])
    K.function([], [], updates=opt.get_updates(K.sum(w), [w]))
    with pytest.raises(ValueError, match="expected 1 arrays"):
        opt.set_weights([])


def test_exported_as_a_submodule_not_in_the_flat_namespace():
    assert K.optimizers.OptaxOptimizer is OptaxOptimizer
    assert not hasattr(K, "OptaxOptimizer")
