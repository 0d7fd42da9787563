"""Variables, the store, updates and bookkeeping names."""

import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxkeras as K

ksum = K.op(lambda x, axis=None: jnp.sum(x, axis=axis), name="sum")


def test_variable_from_many_kinds_of_value():
    a = np.arange(6.0).reshape(2, 3)
    for value in (a, a.tolist(), jnp.asarray(a), K.variable(a), K.variable(a) * 1):
        v = K.variable(value)
        assert v.shape == (2, 3) and v.dtype == "float32"
        np.testing.assert_array_equal(K.eval(v), a)
    s = K.variable(3)
    assert s.shape == () and s.dtype == "float32" and float(K.eval(s)) == 3.0
    i = K.variable([1, 2], dtype="int32")
    assert i.dtype == "int32"


def test_variable_copies_its_input_and_get_value_copies_out():
    a = np.ones(3, dtype=np.float32)
    v = K.variable(a)
    a[0] = 5
    assert K.eval(v)[0] == 1
    got = K.get_value(v)
    got[1] = 7
    assert K.get_value(v)[1] == 1


def test_variable_attributes_and_names():
    v = K.variable(np.zeros((2, 2)), name="w", constraint=lambda x: x)
    w = K.variable(np.zeros((2, 2)), name="w")
    assert v.name != w.name and v.name.startswith("w")
    assert callable(v.constraint) and v.trainable
    v._keras_shape = (2, 2)
    v._uses_learning_phase = False
    assert v._keras_shape == (2, 2)
    np.testing.assert_array_equal(v.numpy(), np.zeros((2, 2)))
    np.testing.assert_array_equal(np.asarray(v), np.zeros((2, 2)))
    assert "w" in repr(v)
    with pytest.raises(TypeError, match="constraint"):
        K.variable(1.0, constraint=3)


def test_name_scope_prefixes_names():
    with K.name_scope("scope_test"), K.name_scope("inner"):
        v = K.variable(1.0, name="kernel")
        w = K.variable(1.0, name="kernel")
        p = K.placeholder((None, 2), name="x")
    assert v.name == "scope_test/inner/kernel"
    assert w.name == "scope_test/inner/kernel_1"
    assert p.name == "scope_test/inner/x"


def test_operators_with_numbers_on_either_side():
    v = K.variable([1.0, 2.0, 4.0])
    a = np.array([1.0, 2.0, 4.0])
    cases = {
        "add": (v + 1, a + 1),
        "radd": (1 + v, 1 + a),
        "sub": (v - 1, a - 1),
        "rsub": (1.0 - v, 1.0 - a),
        "mul": (v * 3, a * 3),
        "rmul": (3 * v, 3 * a),
        "div": (v / 2, a / 2),
        "rdiv": (2 / v, 2 / a),
        "pow": (v**2, a**2),
        "rpow": (2**v, 2**a),
        "neg": (-v, -a),
        "abs": (abs(-v), a),
        "lt": (v < 2, a < 2),
        "ge": (v >= 2, a >= 2),
        "gt": (3 > v, 3 > a),
        "np_scalar": (np.float32(2) * v, 2 * a),
    }
    for name, (got, want) in cases.items():
        np.testing.assert_allclose(K.eval(got), want, rtol=1e-6, err_msg=name)
    assert (v == v) is True and (v != v) is False  # identity, as Keras-2 graph tensors


def test_slice_of_variable_reads_current_value():
    v = K.variable([1.0, 2.0, 3.0])
    first = v[0]
    tail = v[1:]
    K.set_value(v, [10.0, 20.0, 30.0])
    assert float(K.eval(first)) == 10.0
    np.testing.assert_array_equal(K.eval(tail), [20.0, 30.0])


def test_set_value_checks_shape_and_leaves_store_unchanged():
    v = K.variable([1.0, 2.0])
    with pytest.raises(ValueError, match=r"\(3,\).*\(2,\)"):
        K.set_value(v, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(K.get_value(v), [1.0, 2.0])
    K.set_value(v, np.array([5, 6], dtype=np.int64))
    assert K.get_value(v).dtype == np.float32


def test_batch_set_value_is_all_or_nothing():
    a, b = K.variable([1.0]), K.variable([2.0, 3.0])
    with pytest.raises(ValueError):
        K.batch_set_value([(a, [9.0]), (b, [1.0])])
    assert K.batch_get_value([a, b])[0][0] == 1.0
    K.batch_set_value([(a, [9.0]), (b, [7.0, 8.0])])
    np.testing.assert_array_equal(K.batch_get_value([a, b])[1], [7.0, 8.0])


def test_count_params_and_constant():
    assert K.count_params(K.variable(np.zeros((3, 4)))) == 12
    with pytest.raises(ValueError, match="unknown"):
        K.count_params(K.placeholder((None, 2)))
    c = K.constant(2.0, shape=(2, 3))
    np.testing.assert_array_equal(np.asarray(c), np.full((2, 3), 2.0))
    assert c.dtype == jnp.float32
    np.testing.assert_array_equal(
        np.asarray(K.constant([1, 2, 3, 4], shape=(2, 2))), [[1, 2], [3, 4]]
    )


def test_eval_of_update_applies_once():
    v = K.variable(1.0)
    up = K.update_add(v, 2.0)
    assert "pending" in repr(up) and float(K.get_value(v)) == 1.0
    assert float(K.eval(up)) == 3.0
    assert float(K.get_value(v)) == 3.0
    assert float(K.eval(up)) == 5.0  # each eval runs it once more


def test_update_forms_and_formulas():
    x = K.variable([1.0, 2.0])
    K.eval(K.update(x, [4.0, 6.0]))
    np.testing.assert_array_equal(K.get_value(x), [4.0, 6.0])
    K.eval(K.update_sub(x, 1.0))
    np.testing.assert_array_equal(K.get_value(x), [3.0, 5.0])
    K.eval(K.moving_average_update(x, np.array([1.0, 1.0]), 0.9))
    np.testing.assert_allclose(K.get_value(x), [3.0 - 2.0 * 0.1, 5.0 - 4.0 * 0.1], rtol=1e-6)


def test_moving_average_update_computes_in_the_variables_dtype():
    # As TF-Keras: the observation and the momentum are cast to the variable's dtype; under
    # strict promotion (conftest), so no implicit promotion is left.
    half = K.variable([0.0, 4.0], dtype="float16")
    p = K.placeholder((2,), dtype="float32")
    momentum = K.variable(0.5)  # a float32 momentum for a float16 average
    f = K.function([p], [], updates=[K.moving_average_update(half, p, momentum)])
    f([np.array([2.0, 0.0], np.float32)])
    assert K.get_value(half).dtype == np.float16
    np.testing.assert_array_equal(K.get_value(half), [1.0, 2.0])
    single = K.variable([10.0, 20.0])
    K.eval(K.moving_average_update(single, np.array([0, 10], np.int32), 0.9))
    np.testing.assert_allclose(K.get_value(single), [9.0, 19.0], rtol=1e-6)
    with K.state_scope({half: jnp.zeros(2, jnp.float16)}) as scope:
        K.moving_average_update(half, jnp.ones(2, jnp.float32), 0.75)
    assert scope.values[half.name].dtype == jnp.float16
    np.testing.assert_array_equal(scope.values[half.name], [0.25, 0.25])


@pytest.mark.parametrize("dtype", ["int32", "bool"])
def test_moving_average_update_of_an_integer_variable_says_what_to_do(dtype):
    # TF-Keras casts the momentum to the variable's dtype (0 for 0.9), so its "average" of an int
    # variable is an assignment of the value; jaxkeras refuses it, naming the variable.
    counts = K.variable([10, 20], dtype=dtype, name="counts")
    with pytest.raises(TypeError, match=rf"x must be a floating-point.*'counts'.*{dtype}.*float"):
        K.moving_average_update(counts, np.array([0, 0], dtype), 0.9)


def test_update_errors():
    x = K.variable([1.0, 2.0])
    with pytest.raises(TypeError, match="variable"):
        K.update(np.ones(2), np.zeros(2))
    with pytest.raises(ValueError, match=r"\(3,\)"):
        K.update(x, np.zeros(3))


def test_bookkeeping_predicates():
    v = K.variable(1.0)
    p = K.placeholder((2,))
    t = v * 2
    assert K.is_variable(v) and not K.is_variable(t) and not K.is_variable(p)
    assert K.is_tensor(v) and K.is_tensor(t) and not K.is_tensor(np.ones(2))
    assert K.is_placeholder(p) and not K.is_placeholder(t)
    assert not K.is_keras_tensor(t)
    t._keras_history = (None, 0, 0)
    assert K.is_keras_tensor(t)
    with pytest.raises(ValueError, match="int"):
        K.is_keras_tensor(3)
    with pytest.raises(ValueError, match="ndarray"):
        K.is_keras_tensor(np.ones(2))
    assert K.placeholder((None, 2))._keras_shape == (None, 2)
    t._keras_shape = (5, 2)
    assert t._keras_shape == (5, 2) and K.int_shape(t) == ()
    assert K.is_sparse(K.placeholder((2, 2), sparse=True)) and not K.is_sparse(p)
    # Keras tests hasattr(t, "_uses_learning_phase") and hasattr(t, "_keras_shape"): as in the
    # TF backend, placeholders and variables have both, in_train_phase results the first, and
    # other op results neither until someone sets them
    assert p._uses_learning_phase is False and v._uses_learning_phase is False
    assert v._keras_shape == () and p._keras_shape == (2,)
    u = v + p
    assert not hasattr(u, "_uses_learning_phase") and not hasattr(u, "_keras_shape")
    phased = K.in_train_phase(p * 2, p)
    assert phased._uses_learning_phase is True
    assert not hasattr(phased + 1, "_uses_learning_phase")


def test_uids_and_clear_session():
    assert K.get_uid("dense") == 1 and K.get_uid("dense") == 2 and K.get_uid("conv") == 1
    K.reset_uids()
    assert K.get_uid("dense") == 1
    v = K.variable([1.0])
    K.set_learning_phase(1)
    K.clear_session()
    assert K.get_uid("dense") == 1
    assert K.is_tensor(K.learning_phase())  # learning phase reset
    np.testing.assert_array_equal(K.get_value(v), [1.0])  # variables stay valid


def test_clear_session_collects_unreachable_variables():
    class Layer:  # a Keras-like object in a reference cycle with its variable
        def __init__(self):
            self.kernel = K.variable(np.ones(3), name="cyclic")
            self.kernel.owner = self

    gc.disable()  # only clear_session may collect the cycle
    try:
        Layer()
        assert K.variable(np.ones(3), name="cyclic").name != "cyclic"  # still taken
        K.clear_session()
    finally:
        gc.enable()
    assert K.variable(np.ones(3), name="cyclic").name == "cyclic"


def test_session_compatibility_objects():
    sess = K.get_session()
    assert K.get_session() is sess
    x = K.placeholder((2,))
    v = K.variable([1.0, 1.0])
    got = sess.run([x * 2, v], feed_dict={x: [1.0, 2.0]})
    np.testing.assert_array_equal(got[0], [2.0, 4.0])
    marker = object()
    K.set_session(marker)
    assert K.get_session() is marker
    K.set_session(None)
    K.manual_variable_initialization(True)
    K.manual_variable_initialization(False)


def test_control_dependencies_read_variables_after_the_updates():
    total, count = K.variable(0.0), K.variable(0.0)
    x = K.placeholder((None,))
    ups = [K.update_add(total, ksum(x)), K.update_add(count, 2.0)]
    with K.control_dependencies(ups):
        mean = total / count
    untouched = total * 1
    f = K.function([x], [mean, untouched], updates=ups)
    np.testing.assert_allclose(f([np.array([1.0, 3.0])]), [2.0, 0.0])
    np.testing.assert_allclose(f([np.array([5.0, 7.0])]), [4.0, 4.0])
    assert float(K.get_value(count)) == 4.0
    with K.control_dependencies(None):
        assert float(K.eval(total * 1)) == 16.0


def test_symbolic_and_eager_decorators():
    def f(a):
        return a + 1

    assert K.symbolic(f) is f and K.eager(f) is f


def test_variables_are_freed_with_their_handles():
    import gc

    from jaxkeras import state

    v = K.variable(np.zeros(10), name="temporary")
    name = v.name
    assert name in state.store().values
    del v
    gc.collect()
    assert name not in state.store().values


_BACKEND_COMPILES: list = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, seconds, **kw: (
        _BACKEND_COMPILES.append(event)
        if event == "/jax/core/compile/backend_compile_duration"
        else None
    )
)


def test_variables_of_new_shapes_compile_nothing():
    # a model creates variables of many shapes; compiling a copy per shape cost seconds
    K.variable(np.ones((1, 1)))
    K.zeros((1, 2))
    before = len(_BACKEND_COMPILES)
    values = []
    for n in range(2, 7):
        source = np.full((n, n + 1), float(n))
        v = K.variable(source)
        source[:] = -1  # the store copied it
        values += [v, K.zeros((n, 3)), K.ones((3, n), dtype="int32"), K.constant(2.0, shape=(n,))]
    assert len(_BACKEND_COMPILES) == before
    np.testing.assert_array_equal(K.get_value(values[0]), np.full((2, 3), 2.0))
    assert K.get_value(values[2]).dtype == np.int32 and K.get_value(values[2]).sum() == 3 * 2
    np.testing.assert_array_equal(values[3], [2.0, 2.0])


def test_variables_made_while_jax_traces_hold_concrete_values(tmp_path):
    # a Keras layer built, or an optimizer's state made, inside the user's own jax.jit: the
    # store keeps concrete arrays, so the variables work once the trace is over
    import optax

    from jaxkeras.optimizers import OptaxOptimizer

    w = K.variable(np.ones((3, 2), "float32"))
    x = K.variable(np.full((4, 3), 0.5, "float32"))
    loss = K.sum(K.square(K.dot(x, w)))
    opt = OptaxOptimizer(optax.adam(0.1))
    made = []

    @jax.jit
    def step(values):
        made.append(K.variable(np.arange(3.0), name="made_in_trace"))
        with K.state_scope(values) as scope:
            opt.get_updates(loss, [w])
        return scope.values

    values = step(K.get_state([w, x]))
    np.testing.assert_array_equal(K.get_value(made[0]), np.arange(3.0, dtype="float32"))
    for slot in opt.weights:  # made by the trace, still at their initial values in the store
        np.testing.assert_array_equal(K.get_value(slot), np.zeros(K.int_shape(slot)))
    assert int(values[opt.iterations.name]) == 1  # the step's result is in the returned values
    K.save_checkpoint(tmp_path / "ckpt.npz")  # every live variable, none a tracer
    with pytest.raises(ValueError, match="traced value"):
        jax.jit(lambda a: K.variable(a))(np.ones(2))
