"""Eager op dispatch: the op decorator's fast path on concrete arguments, the trace test it
relies on, and the shortcuts behind it (dtype names, axis and number checks)."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special
from jax.experimental import sparse

import jaxkeras as K
from jaxkeras import checks, graph
from jaxkeras.graph import context

RNG = np.random.default_rng(0)
X = RNG.uniform(0.5, 2.0, size=(3, 4)).astype(np.float32) * RNG.choice([-1, 1], size=(3, 4))


def _in_other_thread(fn):
    found = []
    worker = threading.Thread(target=lambda: found.append(fn()))
    worker.start()
    worker.join()
    return found[0]


def _trace_answers(at_top_level):
    """at_top_level() at the top level, in another thread, and inside jit, vmap and grad."""
    seen = {"top": at_top_level(), "thread": _in_other_thread(at_top_level)}

    def probe(name):
        def body(x):
            seen[name] = at_top_level()
            if name == "jit":  # another thread knows nothing of this thread's trace
                seen["thread inside jit"] = _in_other_thread(at_top_level)
            return x * 2.0

        return body

    jax.jit(probe("jit"))(1.0)
    jax.vmap(probe("vmap"))(jnp.ones(2))
    jax.grad(probe("grad"))(1.0)
    return seen


EXPECTED_TRACE_ANSWERS = {
    "top": True,
    "thread": True,
    "jit": False,
    "thread inside jit": True,
    "vmap": False,
    "grad": False,
}


def test_at_top_level_is_false_inside_every_trace_and_per_thread():
    assert _trace_answers(context.at_top_level) == EXPECTED_TRACE_ANSWERS


def test_the_public_fallback_of_the_trace_test_gives_the_same_answers(monkeypatch):
    monkeypatch.setattr(context, "TRACE", context._PublicTraceState())
    monkeypatch.setattr(context, "TOP_LEVEL", context._OUTSIDE)
    assert _trace_answers(context.at_top_level) == EXPECTED_TRACE_ANSWERS


def test_concrete_arguments_fold_inside_jit_and_tracers_stay_traced():
    seen = {}

    @jax.jit
    def f(y):
        seen["constant"] = K.sum(np.ones(3, np.float32))  # folded at trace time
        seen["traced"] = K.square(y)
        return seen["traced"] + seen["constant"]

    np.testing.assert_allclose(f(jnp.float32(2.0)), 7.0)
    assert not isinstance(seen["constant"], jax.core.Tracer)
    assert float(seen["constant"]) == 3.0
    assert isinstance(seen["traced"], jax.core.Tracer)


@pytest.mark.parametrize(
    "name, reference",
    [
        ("abs", np.abs),
        ("square", np.square),
        ("exp", np.exp),
        ("log", lambda v: np.log(np.abs(v))),
        ("sin", np.sin),
        ("cos", np.cos),
        ("sign", np.sign),
        ("round", np.round),
    ],
)
def test_eager_shortcuts_and_recorded_bodies_agree_with_numpy(name, reference):
    fn = getattr(K, name)
    value = np.abs(X) if name == "log" else X
    eager = fn(jnp.asarray(value))
    recorded = fn(K.variable(value))
    assert isinstance(eager, jax.Array) and isinstance(recorded, graph.Node)
    np.testing.assert_allclose(eager, reference(value), rtol=1e-6)
    np.testing.assert_allclose(K.eval(recorded), reference(value), rtol=1e-6)
    np.testing.assert_allclose(fn.pure(value), reference(value), rtol=1e-6)


REDUCTIONS = [
    ("sum", np.sum),
    ("prod", np.prod),
    ("mean", np.mean),
    ("max", np.max),
    ("min", np.min),
    ("var", np.var),
    ("std", np.std),
    ("logsumexp", scipy.special.logsumexp),
    ("any", lambda v, axis, keepdims: np.any(v > 0, axis, keepdims=keepdims)),
    ("all", lambda v, axis, keepdims: np.all(v > 0, axis, keepdims=keepdims)),
]


@pytest.mark.parametrize("name, reference", REDUCTIONS)
def test_reductions_eager_and_recorded(name, reference):
    fn = getattr(K, name)
    value = (X > 0) if name in ("any", "all") else X
    variable = K.variable(value, dtype=str(value.dtype))
    for axis in (None, 1, -2, (0, 1), [-1]):
        for keepdims in (False, True):
            ref_axis = tuple(axis) if isinstance(axis, list) else axis
            expected = reference(
                X if name in ("any", "all") else value, ref_axis, keepdims=keepdims
            )
            eager = fn(jnp.asarray(value), axis=axis, keepdims=keepdims)
            recorded = fn(variable, axis=axis, keepdims=keepdims)
            assert isinstance(eager, jax.Array) and isinstance(recorded, graph.Node)
            np.testing.assert_allclose(eager, expected, rtol=1e-5)
            np.testing.assert_allclose(K.eval(recorded), expected, rtol=1e-5)


def test_symbolic_and_sparse_arguments_still_take_the_recording_path():
    v = K.variable(X)
    assert isinstance(K.square(v), graph.Node)
    assert isinstance(K.concatenate([jnp.asarray(X), v]), graph.Node)
    assert isinstance(K.sum(v, axis=1), graph.Node)
    dense = np.array([[0.0, 2.0], [-3.0, 0.0]], np.float32)
    out = K.square(sparse.BCOO.fromdense(dense))
    np.testing.assert_allclose(
        K.eval(out) if isinstance(out, graph.Node) else out.todense(), dense**2
    )


def test_standardize_dtype_cache_follows_the_64_bit_mode():
    wide, narrow = np.dtype("float64"), np.dtype("int32")
    assert not jax.config.jax_enable_x64
    try:
        for x64, names in ((True, ("float64", "int64")), (False, ("float32", "int32"))) * 2:
            jax.config.update("jax_enable_x64", x64)
            for _ in range(2):  # the second call may read what the first one cached
                assert graph.standardize_dtype(wide) == names[0]
                assert graph.standardize_dtype(np.dtype("int64")) == names[1]
                assert graph.standardize_dtype(narrow) == "int32"
                assert graph.dtype_of(jnp.zeros(2, jnp.bfloat16)) == "bfloat16"
    finally:
        jax.config.update("jax_enable_x64", False)


def test_fast_checks_accept_the_common_values_and_still_reject_the_others():
    assert checks.check_float("f", "alpha", 2) == 2.0 and checks.check_float("f", "a", 0.5) == 0.5
    assert type(checks.check_float("f", "alpha", 2)) is float
    assert checks.check_float("f", "alpha", np.float32(1.5)) == 1.5
    with pytest.raises(TypeError, match=r"f: alpha must be a Python number, got True"):
        checks.check_float("f", "alpha", True)
    with pytest.raises(ValueError, match=r"f: alpha must be >= 0, got -1"):
        checks.check_float("f", "alpha", -1, minimum=0)
    x = jnp.zeros((2, 3))
    assert checks.check_axis_of("f", "axis", x, -1) == 1
    assert checks.check_axis_of("f", "axis", x, np.int64(-2)) == 0
    assert checks.check_axis_of("f", "axis", x, 2, extra=1) == 2
    with pytest.raises(
        ValueError, match=r"f: axis=2 is out of range for 2 axes \(shape \(2, 3\)\)"
    ):
        checks.check_axis_of("f", "axis", x, 2)
    with pytest.raises(TypeError, match=r"f: axis must be an int, got True"):
        checks.check_axis_of("f", "axis", x, True)
    assert graph.static_shape(x) == (2, 3) and graph.static_shape(np.zeros(4)) == (4,)
    assert graph.static_shape(3.0) == () and graph.static_shape([[1, 2]]) == (1, 2)


def test_dot_concatenate_and_relu_check_and_compute_as_numpy():
    a, b = RNG.normal(size=(2, 3)).astype(np.float32), RNG.normal(size=(3, 4)).astype(np.float32)
    np.testing.assert_allclose(K.dot(jnp.asarray(a), jnp.asarray(b)), a @ b, rtol=1e-5)
    with pytest.raises(ValueError, match=r"dot: incompatible shapes \(2, 3\) and \(4, 3\)"):
        K.dot(jnp.asarray(a), jnp.zeros((4, 3)))
    np.testing.assert_array_equal(K.concatenate([a, a], axis=0), np.concatenate([a, a], axis=0))
    with pytest.raises(ValueError, match=r"concatenate: incompatible shapes"):
        K.concatenate([a, b], axis=0)
    np.testing.assert_array_equal(K.relu(jnp.asarray(a)), np.where(a > 0, a, 0))
    np.testing.assert_array_equal(K.relu([-1.0, 2.0]), [0.0, 2.0])  # a list, made an array


def test_an_eager_shortcut_is_refused_for_random_ops():
    with pytest.raises(ValueError, match=r"op: eager=<.*> cannot be given for a random op"):
        K.op(lambda shape, seed=None, key=None: None, random=True, eager=jnp.zeros)
