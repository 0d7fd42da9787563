"""State scopes under jax.jit / vmap / grad, and randomness as state."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxkeras as K

ksum = K.op(lambda x, axis=None: jnp.sum(x, axis=axis), name="sum")


@K.op(random=True)
def uniform(shape, seed=None, key=None):
    return jax.random.uniform(key, tuple(int(d) for d in shape))


def test_scope_reads_values_and_collects_updates():
    v = K.variable(1.0)
    w = K.variable(2.0)
    with K.state_scope({v: 5.0}) as scope:
        y = v * 2 + w  # w falls back to the store
        new = K.update_add(v, 1.0)
    assert float(y) == 12.0 and float(new) == 6.0
    assert float(scope.values[v.name]) == 6.0
    assert float(K.get_value(v)) == 1.0  # the store is untouched


def test_scope_under_jit_vmap_and_grad():
    w = K.variable(np.array([1.0, 2.0]))
    count = K.variable(0.0)

    def step(values, x):
        with K.state_scope(values) as scope:
            loss = ksum((w * x) ** 2)
            K.update_add(count, 1.0)
            K.update(w, w - 0.1 * x)
        return loss, scope.values

    values = K.get_state([w, count])
    x = jnp.array([1.0, 1.0])
    loss, new = jax.jit(step)(values, x)
    assert float(loss) == 5.0
    np.testing.assert_allclose(new[w.name], [0.9, 1.9], rtol=1e-6)
    assert float(new[count.name]) == 1.0
    losses, _ = jax.vmap(step, in_axes=(None, 0))(values, jnp.stack([x, 2 * x]))
    np.testing.assert_allclose(losses, [5.0, 20.0], rtol=1e-6)
    grads = jax.grad(lambda vals: step(vals, x)[0])(values)
    np.testing.assert_allclose(grads[w.name], [2.0, 4.0], rtol=1e-6)
    K.set_state(new)
    np.testing.assert_allclose(K.get_value(w), [0.9, 1.9], rtol=1e-6)


def test_scope_opened_outside_a_trace_refuses_to_leak_tracers():
    v = K.variable(1.0)
    scope = K.state_scope({v: 1.0})

    @jax.jit
    def bad(x):
        with scope:
            K.update(v, v + x)
        return x

    with pytest.raises(ValueError, match="inside the traced function"):
        bad(1.0)
    assert float(K.get_value(v)) == 1.0


def test_writing_a_tracer_into_the_store_is_refused():
    v = K.variable(1.0)

    @jax.jit
    def bad(x):
        K.set_value(v, x)
        return x

    with pytest.raises(ValueError, match="state_scope"):
        bad(2.0)
    assert float(K.get_value(v)) == 1.0


def test_fresh_numbers_per_call_same_within_a_call():
    x = K.placeholder((None,))
    r = uniform((K.shape(x)[0], 3))
    assert K.int_shape(r) == (None, 3)
    f = K.function([x], [r, r * 1.0, r + 0.0 * x[:, None]])
    a1, a2, a3 = f([np.zeros(4)])
    b1, _, _ = f([np.zeros(4)])
    assert a1.shape == (4, 3)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(a1, a3)
    assert not np.array_equal(a1, b1)
    assert f.trace_count == 1


def test_gradient_replay_draws_the_same_numbers():
    v = K.variable(np.ones(5))
    mask = uniform((5,))
    loss = ksum(v * mask)
    (g,) = K.gradients(loss, [v])
    f = K.function([], [mask, g])
    m, grad = f([])
    np.testing.assert_allclose(grad, m, rtol=1e-6)


def test_distinct_nodes_draw_distinct_numbers():
    a, b = uniform((100,)), uniform((100,))
    f = K.function([], [a, b])
    x, y = f([])
    assert not np.array_equal(x, y)


def test_concrete_shape_draws_are_random_nodes_fresh_per_call():
    r = uniform((4,))
    assert K.is_tensor(r) and K.int_shape(r) == (4,)
    assert not np.array_equal(K.eval(r), K.eval(r))
    f = K.function([], [r])
    assert not np.array_equal(f([])[0], f([])[0])
    with pytest.raises(ValueError, match="state_scope"):
        jax.jit(lambda: uniform((4,)))()


def test_scope_rng_is_respected():
    key = jax.random.PRNGKey(7)
    with K.state_scope(rng=key):
        a = uniform((4,), seed=1)
    with K.state_scope(rng=key):
        b = uniform((4,), seed=1)
    np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_fixed_seed_reproduces_across_processes():
    code = (
        "import jax, jaxkeras as K, numpy as np\n"
        "u = K.op(lambda shape, seed=None, key=None: jax.random.normal(key, shape), "
        "random=True)\n"
        "x = K.placeholder((None,))\n"
        "f = K.function([x], [u((3,), seed=123) + 0 * x[:1]])\n"
        "a, b = f([np.zeros(2)])[0], f([np.zeros(2)])[0]\n"
        "print(np.round(a, 6).tolist(), np.round(b, 6).tolist())\n"
    )
    outs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        for _ in range(2)
    ]
    assert outs[0].returncode == 0, outs[0].stderr
    assert outs[0].stdout == outs[1].stdout
    first, second = outs[0].stdout.strip()[1:-1].split("] [")
    assert [float(v) for v in first.split(",")] != [float(v) for v in second.split(",")]


def test_set_random_seed_restarts_generation():
    def draw():
        K.set_random_seed(3)
        a = K.eval(uniform((3,)))
        f = K.function([], [uniform((2,))])
        return a, f([])[0], f([])[0]

    first = draw()
    uniform((5,))  # unrelated draws and nodes in between change nothing
    K.eval(uniform((5,)))
    second = draw()
    for x, y in zip(first, second):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(first[1], first[2])
    with pytest.raises(ValueError, match="-1"):
        K.set_random_seed(-1)


# ---------------------------------------------------------------------------------------------
# Keras-2 randomness: seeds from NumPy's global RNG, numbers from (seed, runs) alone


def test_unseeded_ops_take_their_seed_from_numpy():
    def build_and_draw():
        np.random.seed(7)
        return K.eval(K.random_normal((5,))), K.eval(K.dropout(np.ones((4, 4)), 0.5))

    first, second = build_and_draw(), build_and_draw()
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_array_equal(first[1], second[1])
    np.random.seed(8)
    assert not np.array_equal(K.eval(K.random_normal((5,))), first[0])


def test_a_seeded_op_depends_only_on_its_seed_and_runs():
    first = K.eval(K.random_normal((5,), seed=123))
    K.eval(K.random_uniform((3,)))  # other randomness in between changes nothing
    np.testing.assert_array_equal(K.eval(K.random_normal((5,), seed=123)), first)
    node = K.random_normal((5,), seed=123)
    runs = [K.eval(node) for _ in range(3)]
    np.testing.assert_array_equal(runs[0], first)
    assert not np.array_equal(runs[1], runs[0]) and not np.array_equal(runs[2], runs[1])
    # a compiled function continues the node's runs, with the same numbers as eager runs
    fresh = K.random_normal((5,), seed=123)
    f = K.function([], [fresh, fresh * 1.0])
    a, b = f([])
    np.testing.assert_array_equal(a, first)
    np.testing.assert_array_equal(a, b)  # one node, one draw per call
    np.testing.assert_array_equal(f([])[0], runs[1])


def test_keys_follow_the_global_seed():
    K.set_random_seed(1)
    a = K.eval(K.random_uniform((4,), seed=5))
    K.set_random_seed(2)
    b = K.eval(K.random_uniform((4,), seed=5))
    K.set_random_seed(1)
    np.testing.assert_array_equal(K.eval(K.random_uniform((4,), seed=5)), a)
    assert not np.array_equal(a, b)


def test_random_ops_inside_an_rnn_step_are_fresh_per_call():
    x = K.placeholder((None, 3, 2))

    def step(x_t, states):
        noise = K.random_uniform((1, 2), seed=11)
        return x_t + noise, [states[0]]

    _, outputs, _ = K.rnn(step, x, [K.zeros_like(x[:, 0, :1])])
    f = K.function([x], [outputs])
    first, second = f([np.zeros((1, 3, 2))])[0], f([np.zeros((1, 3, 2))])[0]
    np.testing.assert_array_equal(first[:, 0], first[:, 2])  # the same at every step of a call
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(first[0, 0], K.eval(K.random_uniform((1, 2), seed=11))[0])


@pytest.mark.parametrize("base", [0, 7, 2**31 - 1, 2**31, 2**32 - 1])
@pytest.mark.parametrize("seed", [0, 123, -1, 2**32 - 1, 2**40 + 3])
def test_eager_keys_equal_the_op_by_op_derivation(base, seed):
    # the one compiled key function against JAX's key functions applied one at a time: the
    # call's key (the run folded into the global seed's), then the op's seed folded in
    from jaxkeras._engine.graph import eager_key

    for run in (0, 1, 0x80000001, 2**32 - 1):
        expected = jax.random.fold_in(
            jax.random.fold_in(jax.random.PRNGKey(base), run), seed & 0xFFFFFFFF
        )
        np.testing.assert_array_equal(np.asarray(eager_key(base, seed, run)), expected)


def test_eager_keys_under_another_key_implementation():
    from jaxkeras._engine.graph import derive_key, eager_key

    previous = jax.config.jax_default_prng_impl
    jax.config.update("jax_default_prng_impl", "rbg")
    try:
        key = eager_key(3, 5, 7)
        assert key.shape == (4,)
        np.testing.assert_array_equal(np.asarray(key), derive_key(3, 5, 7))
    finally:
        jax.config.update("jax_default_prng_impl", previous)


def test_the_run_table_is_built_read_and_advanced_in_one_place():
    from jaxkeras._engine.graph import (
        advanced_runs,
        derive_key,
        empty_run_table,
        run_table,
        table_keys,
    )

    table = run_table(7, [(3, 0), (2**33 + 5, 4)])  # seeds keep their low 32 bits
    np.testing.assert_array_equal(table, np.array([7, 3, 0, 5, 4], np.uint32))
    assert empty_run_table(2).shape == table.shape and not empty_run_table(2).any()
    keys = table_keys(jax.numpy.asarray(table), 2)
    np.testing.assert_array_equal(keys[1], derive_key(7, 5, 4))
    later = advanced_runs(jax.numpy.asarray(table), jax.numpy.uint32(3))
    np.testing.assert_array_equal(later, np.array([7, 3, 3, 5, 7], np.uint32))
