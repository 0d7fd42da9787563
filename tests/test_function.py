"""K.function: compilation, feeds, updates semantics, the pure function, learning phase."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxkeras as K

ksum = K.op(lambda x, axis=None: jnp.sum(x, axis=axis), name="sum")
kmean = K.op(lambda x, axis=None: jnp.mean(x, axis=axis), name="mean")
kreshape = K.op(lambda x, shape: jnp.reshape(x, tuple(int(d) for d in shape)), name="reshape")


def test_outputs_and_updates_see_the_pre_call_state():
    v = K.variable(1.0)
    w = K.variable(10.0)
    x = K.placeholder(())
    f = K.function([x], [v * 1, w + x], updates=[K.update_add(v, x), (w, v * 100)])
    out = f([2.0])
    assert out == [1.0, 12.0]
    assert float(K.get_value(v)) == 3.0 and float(K.get_value(w)) == 100.0
    out = f([2.0])
    assert out == [3.0, 102.0]
    assert float(K.get_value(v)) == 5.0 and float(K.get_value(w)) == 300.0


def test_updates_of_one_variable_compose():
    # increments add up in list order; an assignment replaces what came before it; every value
    # is computed from the state before the call (as TF's assign ops compose)
    v = K.variable(np.zeros(3))
    K.function([], [], updates=[K.update_add(v, 1.0), K.update_add(v, 2.0)])([])
    np.testing.assert_array_equal(K.get_value(v), [3.0, 3.0, 3.0])
    w = K.variable(1.0)
    f = K.function([], [w * 1], updates=[K.update_add(w, 1.0), (w, w * 10), K.update_sub(w, 0.5)])
    out = f([])
    assert out[0] == 1.0  # outputs see the state before the call
    assert K.get_value(w) == 1.0 * 10 - 0.5
    m = K.variable(np.full(2, 4.0))
    ups = [K.moving_average_update(m, np.full(2, 0.0), 0.5), K.moving_average_update(m, 2.0, 0.5)]
    K.function([], [], updates=ups)([])
    np.testing.assert_allclose(K.get_value(m), 4.0 - (4.0 - 0.0) * 0.5 - (4.0 - 2.0) * 0.5)
    # K.eval of several updates composes the same way; each result is the value right after it
    c = K.variable(0.0)
    results = K.eval([K.update_add(c, 1.0), K.update(c, 5.0), K.update_add(c, 2.0)])
    assert [float(r) for r in results] == [1.0, 5.0, 7.0] and K.get_value(c) == 7.0


def test_bad_updates_raise():
    with pytest.raises(TypeError, match="updates"):
        K.function([], [], updates=[3])


def test_missing_feed_names_the_placeholder():
    x = K.placeholder((2,), name="features")
    y = K.placeholder((2,), name="labels")
    f = K.function([x], [x + y])
    with pytest.raises(ValueError, match="labels"):
        f([np.ones(2)])
    with pytest.raises(ValueError, match="labels"):
        K.eval(x + y)


def test_feeds_are_cast_and_checked():
    x = K.placeholder((None, 3), dtype="float32", name="inp")
    f = K.function([x], [x * 2])
    out = f([np.ones((2, 3), dtype=np.int64)])[0]
    assert out.dtype == np.float32
    with pytest.raises(ValueError, match=r"inp.*\(2, 4\).*\(None, 3\)"):
        f([np.ones((2, 4))])
    with pytest.raises(ValueError, match=r"\(3,\)"):
        f([np.ones(3)])
    with pytest.raises(ValueError, match="list of 1"):
        f([np.ones((2, 3)), np.ones((2, 3))])


def test_compiles_once_per_shape():
    x = K.placeholder((None, 4))
    v = K.variable(np.ones((4, 2)))
    f = K.function([x], [ksum(x @ v)], updates=[K.update_add(v, 0.1)])
    for _ in range(100):
        f([np.ones((8, 4))])
    assert f.trace_count == 1
    f([np.ones((5, 4))])
    assert f.trace_count == 2
    for _ in range(10):
        f([np.ones((5, 4))])
        f([np.ones((8, 4))])
    assert f.trace_count == 2
    np.testing.assert_allclose(K.get_value(v), 1 + 0.1 * 121, rtol=1e-5)


def test_state_is_donated_and_outputs_stay_valid():
    v = K.variable(np.ones(3))
    f = K.function([], [v * 1, v], updates=[K.update_add(v, 1.0)])
    from jaxkeras import state

    before = state.store().values[v.name]
    first = f([])
    assert before.is_deleted()
    second = f([])
    np.testing.assert_array_equal(first[0], np.ones(3))
    np.testing.assert_array_equal(first[1], np.ones(3))
    np.testing.assert_array_equal(second[1], 2 * np.ones(3))


def test_failed_call_leaves_the_store_unchanged():
    v = K.variable([1.0, 2.0])
    x = K.placeholder((2,))
    bad = K.function([x], [v], updates=[(v, kreshape(v + x, (1, 2)))])
    with pytest.raises(ValueError, match="shape"):
        bad([np.ones(2)])
    np.testing.assert_array_equal(K.get_value(v), [1.0, 2.0])
    good = K.function([x], [v + x])
    np.testing.assert_array_equal(good([np.ones(2)])[0], [2.0, 3.0])


def test_symbolic_shape_elements_work_in_compiled_reshape():
    x = K.placeholder((None, 2, 3))
    y = kreshape(x, (K.shape(x)[0] * 2, 3))
    assert K.int_shape(y) == (None, 3)
    f = K.function([x], [y])
    out = f([np.arange(12.0).reshape(2, 2, 3)])[0]
    np.testing.assert_array_equal(out, np.arange(12.0).reshape(4, 3))
    np.testing.assert_array_equal(K.eval(K.shape(K.variable(np.zeros((4, 5))))), [4, 5])


def test_single_output_and_no_inputs():
    v = K.variable(2.0)
    f = K.function([], v * 3)
    out = f([])
    assert out == 6.0 and isinstance(out, np.float32)  # a NumPy scalar, as TF returned
    assert round(out, 1) == 6.0


def test_pure_function_composes_with_jit_vmap_scan_and_grad():
    w = K.variable(np.array([1.0, -2.0]))
    x = K.placeholder((None, 2))
    loss = kmean((x @ w) ** 2)
    (g,) = K.gradients(loss, [w])
    f = K.function([x], [loss], updates=[(w, w - 0.1 * g)])
    st = f.state()
    assert set(st) == {w.name}
    key = jax.random.PRNGKey(0)
    data = np.ones((4, 2), dtype=np.float32)

    outs, new = jax.jit(f.pure)(st, key, [data])
    np.testing.assert_allclose(outs[0], 1.0, rtol=1e-6)
    np.testing.assert_allclose(new[w.name], [1.2, -1.8], rtol=1e-6)

    def step(carry, batch):
        o, n = f.pure(carry, key, [batch])
        return n, o[0]

    _, losses = jax.lax.scan(step, st, jnp.stack([data] * 3))
    np.testing.assert_allclose(losses[0], 1.0, rtol=1e-6)
    assert losses[1] < losses[0] and losses[2] < losses[1]
    batched = jax.vmap(lambda d: f.pure(st, key, [d])[0][0])(jnp.stack([data, 2 * data]))
    np.testing.assert_allclose(batched, [1.0, 4.0], rtol=1e-6)
    dw = jax.grad(lambda s: f.pure(s, key, [data])[0][0])(st)
    np.testing.assert_allclose(dw[w.name], [-2.0, -2.0], rtol=1e-6)
    np.testing.assert_array_equal(K.get_value(w), [1.0, -2.0])  # pure never touches the store
    with pytest.raises(KeyError, match=w.name):
        f.pure({}, key, [data])


@pytest.mark.parametrize(
    "transform",
    [jax.jit, jax.grad, jax.vmap],
    ids=["jit", "grad", "vmap"],
)
def test_a_call_inside_a_users_trace_says_to_trace_f_pure_and_leaves_the_store_alone(transform):
    w = K.variable(np.array([1.0, -2.0], np.float32))
    x = K.placeholder((2,))
    step = K.function([x], [K.sum(x * w)], updates=[K.update_add(w, x)], name="step")
    data = jnp.asarray([0.5, 0.25])
    with pytest.raises(RuntimeError, match=r"K.function 'step' was called inside .*f\.pure"):
        transform(lambda v: step([v])[0])(
            jnp.stack([data, data]) if transform is jax.vmap else data
        )
    np.testing.assert_array_equal(K.get_value(w), [1.0, -2.0])  # nothing ran, nothing stored
    # what the error proposes: the pure form, traced, with the state passed in
    traced = jax.jit(step.pure)
    (total,), new_state = traced(step.state(), step.next_key(), [data])
    assert float(total) == 0.5 * 1.0 + 0.25 * -2.0
    K.set_state(new_state)
    np.testing.assert_array_equal(K.get_value(w), [1.5, -1.75])
    assert float(step([np.asarray(data)])[0]) == 0.5 * 1.5 + 0.25 * -1.75  # f works as before


def test_function_rejects_unknown_kwargs_and_bad_inputs():
    x = K.placeholder((2,))
    with pytest.raises(ValueError, match="fetches"):
        K.function([x], [x], fetches=[])
    with pytest.raises(TypeError, match="inputs"):
        K.function(x, [x])


def test_learning_phase_defaults_and_validation():
    lp = K.learning_phase()
    assert K.is_tensor(lp)
    with pytest.raises(ValueError, match="2"):
        K.set_learning_phase(2)
    with K.learning_phase_scope(1):
        assert K.learning_phase() == 1
    assert K.learning_phase() is lp
    K.set_learning_phase(0)
    assert K.learning_phase() == 0


def test_in_train_phase_is_static_and_skips_the_other_branch():
    traced = []

    def body(tag):
        def f(x):
            traced.append(tag)
            return x * (10.0 if tag == "train" else 1.0)

        return K.op(f, name=tag)

    x = K.placeholder((None,))
    y = K.in_train_phase(lambda: body("train")(x), lambda: body("test")(x))
    assert y._uses_learning_phase
    f = K.function([x, K.learning_phase()], [y])
    traced.clear()
    for _ in range(5):
        np.testing.assert_array_equal(f([np.ones(2), 1])[0], [10.0, 10.0])
        np.testing.assert_array_equal(f([np.ones(2), 0])[0], [1.0, 1.0])
    assert f.trace_count == 2
    assert traced.count("train") == 1 and traced.count("test") == 1
    g = K.function([x], [y])  # unfed learning phase: test
    np.testing.assert_array_equal(g([np.ones(2)])[0], [1.0, 1.0])
    with pytest.raises(ValueError, match="learning phase"):
        f([np.ones(2), 3])


def test_in_train_phase_with_fixed_training_argument():
    x = K.variable([1.0])
    assert K.in_train_phase(lambda: x * 2, lambda: x * 3, training=1) is not None
    np.testing.assert_array_equal(K.eval(K.in_train_phase(x * 2, x * 3, training=1)), [2.0])
    np.testing.assert_array_equal(K.eval(K.in_train_phase(x * 2, x * 3, training=0)), [3.0])
    np.testing.assert_array_equal(K.eval(K.in_test_phase(x * 2, x * 3, training=0)), [2.0])
    with K.learning_phase_scope(1):
        np.testing.assert_array_equal(K.eval(K.in_train_phase(x * 2, x * 3)), [2.0])
    flag = K.placeholder((), dtype="bool")
    f = K.function([flag], [K.in_train_phase(x * 2, x * 3, training=flag)])
    np.testing.assert_array_equal(f([True])[0], [2.0])
    np.testing.assert_array_equal(f([False])[0], [3.0])


def test_repr_shows_value_when_computable():
    v = K.variable([1.0, 2.0])
    assert "value=[2. 4.]" in repr(v * 2)
    assert "value" not in repr(K.placeholder((2,)) * 2)


def test_unknown_dims_survive_a_chain_of_ops():
    x = K.placeholder((None, 3, 4))
    w = K.variable(np.ones((4, 5)))
    y = x @ w
    y = y * 2 + 1
    y = -y
    y = abs(y) ** 2
    y = y / 3.0
    y = y - x[:, :, :1]
    y = y[:, 1:, :]
    y = ksum(y, axis=2)
    y = K.stop_gradient(y)
    y = kreshape(y, (K.shape(y)[0], 2, 1))
    assert K.int_shape(y) == (None, 2, 1)
    f = K.function([x], [y])
    data = np.random.default_rng(0).normal(size=(7, 3, 4)).astype(np.float32)
    ref = data @ np.ones((4, 5))
    ref = np.abs(-(ref * 2 + 1)) ** 2 / 3.0 - data[:, :, :1]
    ref = ref[:, 1:, :].sum(axis=2).reshape(7, 2, 1)
    np.testing.assert_allclose(f([data])[0], ref, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# the call path: what could make a function recompile, or let a bad feed through


def test_a_shape_that_passed_does_not_let_other_shapes_through():
    x = K.placeholder((None, 3))
    f = K.function([x], [ksum(x, axis=1)])
    np.testing.assert_allclose(f([np.ones((2, 3), np.float32)])[0], [3.0, 3.0])
    with pytest.raises(ValueError, match=r"\(2, 4\)"):
        f([np.ones((2, 4), np.float32)])
    with pytest.raises(ValueError, match=r"\(3,\)"):
        f([jnp.ones(3, jnp.float32)])
    np.testing.assert_allclose(f([jnp.ones((5, 3), jnp.float32)])[0], np.full(5, 3.0))
    f([np.ones((2, 3), np.float32)])
    assert f.trace_count == 2  # batch 2, batch 5; NumPy and JAX feeds share a compilation


def test_random_and_read_only_functions_compile_once():
    w = K.variable(np.ones((3, 3)))
    x = K.placeholder((None, 3))
    noisy = K.dot(x, w) + K.random_normal((4, 3), seed=3)
    dropped = K.dropout(K.dot(x, w), 0.5, seed=4)
    f = K.function([x], [noisy, dropped])  # reads w, updates nothing
    feed = np.ones((4, 3), np.float32)
    draws = [f([feed])[0] for _ in range(20)]
    f([jnp.asarray(feed)])
    f([feed.astype(np.float64)])
    assert f.trace_count == 1
    # each call draws new numbers, from a table of run counts passed in, not traced in
    assert len({d.tobytes() for d in draws}) == 20


def test_every_way_of_passing_feeds_shares_one_compilation():
    x = K.placeholder((2, 2))
    v = K.variable(np.eye(2))
    f = K.function([x], K.dot(x, v) + 1.0)  # one output, not a list
    want = np.array([[2.0, 3.0], [4.0, 5.0]], np.float32)
    feed = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    for inputs in (feed, [feed], (feed,), [jnp.asarray(feed)], [feed.tolist()], [feed * 1.0]):
        out = f(inputs)
        assert type(out) is np.ndarray
        np.testing.assert_array_equal(out, want)
    assert f.trace_count == 1
    y = K.placeholder((2,), dtype="int32")
    g = K.function((x, y), [ksum(x, axis=0), y * 2], updates=[K.update_add(v, x)])
    first, doubled = g((feed, np.array([1, 2], np.int64)))
    np.testing.assert_array_equal(first, [4.0, 6.0])
    np.testing.assert_array_equal(doubled, [2, 4])
    assert doubled.dtype == np.int32
    g([jnp.asarray(feed), [3, 4]])
    assert g.trace_count == 1
    np.testing.assert_array_equal(K.get_value(v), np.eye(2) + 2 * feed)
    with pytest.raises(ValueError, match=r"expects a list of 2 values") as raised:
        g([feed])
    # the values described, not printed whole (a batch of images would fill the screen)
    assert str(raised.value).endswith("got [ndarray of dtype float32 and shape (2, 2)]")


def test_sparse_outputs_come_out_dense():
    x = K.placeholder((2, 3), sparse=True)
    f = K.function([x], [x, K.to_dense(x) * 2])
    dense = np.array([[0.0, 1.0, 0.0], [2.0, 0.0, 0.0]], np.float32)
    out, doubled = f([dense])
    assert type(out) is np.ndarray
    np.testing.assert_array_equal(out, dense)
    np.testing.assert_array_equal(doubled, 2 * dense)


def test_outputs_are_writable_numpy_arrays_that_own_their_data():
    v = K.variable(np.arange(4.0))
    f = K.function([], [v * 2, K.sum(v)], updates=[K.update_add(v, 1.0)])
    first, total = f([])
    assert type(first) is np.ndarray and first.flags.writeable and first.flags.owndata
    first[:] = -1  # writing an output never touches the state
    np.testing.assert_allclose(K.get_value(v), np.arange(4.0) + 1)
    assert np.ndim(total) == 0 and float(total) == 6.0


def test_lower_shows_the_donated_state_and_runs_nothing():
    v = K.variable(np.zeros((64, 64), np.float32))
    kept = K.variable(np.ones((64, 64), np.float32))
    x = K.placeholder((64, 64))
    f = K.function([x], [K.dot(x, kept)], updates=[K.update_add(v, x)])
    memory = f.lower([np.ones((64, 64), np.float32)]).compile().memory_analysis()
    # the updated variable's buffer (64 * 64 float32) is donated and reused for its new value
    assert memory.alias_size_in_bytes == 64 * 64 * 4
    np.testing.assert_array_equal(K.get_value(v), 0.0)  # lowering ran nothing
    f([np.ones((64, 64), np.float32)])
    np.testing.assert_array_equal(K.get_value(v), 1.0)


def _bitwise(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), (a, b)


def _within_rounding(a, b):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_pure_is_the_computation_f_runs_bit_for_bit():
    # dropout (random), a packed bias and step counter, a large weight updated in place, a
    # reduction: f's call and the user's own jit of f.pure with f's options and key
    rng = np.random.default_rng(0)
    x = K.placeholder((None, 20))
    y = K.placeholder((None, 3))
    w = K.variable(rng.normal(size=(20, 3)).astype(np.float32))
    b = K.variable(np.zeros(3, np.float32))
    steps = K.variable(0.0)
    hidden = K.dropout(K.dot(x, w) + b, 0.3)
    loss = K.mean(K.square(hidden - y))
    gw, gb = K.gradients(loss, [w, b])
    f = K.function(
        [x, y],
        [loss, hidden],
        updates=[K.update_sub(w, 0.1 * gw), K.update_sub(b, 0.1 * gb), K.update_add(steps, 1.0)],
    )
    pure = jax.jit(f.pure, compiler_options=f.compiler_options)
    # on a GPU XLA's autotuner may choose other kernels for each compile, unless its
    # deterministic ops are asked for (checked on an H200: bit for bit with them)
    bitwise = jax.default_backend() == "cpu" or "xla_gpu_deterministic_ops=true" in os.environ.get(
        "XLA_FLAGS", ""
    )
    same = _bitwise if bitwise else _within_rounding
    for _ in range(3):
        feeds = [rng.normal(size=(16, 20)).astype(np.float32), rng.normal(size=(16, 3))]
        state, key = f.state(), f.next_key()
        (loss_p, hidden_p), new = pure(state, key, [feeds[0], feeds[1].astype(np.float32)])
        loss_f, hidden_f = f(feeds)
        same(np.asarray(hidden_p), hidden_f)
        same(np.asarray(loss_p), loss_f)
        for v in (w, b, steps):
            same(np.asarray(new[v.name]), K.get_value(v))
    assert K.get_value(steps) == 3.0


def test_next_key_is_the_seeded_key_of_the_next_run():
    K.set_random_seed(5)
    f = K.function([], [K.random_uniform((4,), seed=1)])
    np.testing.assert_array_equal(
        np.asarray(f.next_key()), jax.random.fold_in(jax.random.PRNGKey(5), 0)
    )
    f([])
    np.testing.assert_array_equal(
        np.asarray(f.next_key()), jax.random.fold_in(jax.random.PRNGKey(5), 1)
    )
    node = K.random_normal((2,), seed=3)
    g = K.function([], [node, K.random_uniform((2,), seed=4)])
    K.eval(node)  # one of g's random ops has run once more than the other
    with pytest.raises(ValueError, match=r"next_key: .*\[0, 1\] times"):
        g.next_key()
