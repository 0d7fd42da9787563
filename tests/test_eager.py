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
from jaxkeras import checks
from jaxkeras._engine import graph
from jaxkeras._engine.graph import context
from tests.conv_reference import np_conv, np_depthwise, np_pool, uniform

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


X32 = X.astype(np.float32)


def test_a_compiled_body_is_traced_once_per_static_value_and_runs_as_numpy():
    traces = []

    def body(x, bound, axis):
        traces.append(axis)
        return jnp.sum(jnp.minimum(x, bound), axis=axis)

    clipped_sum = K.op(body, name="clipped_sum", jit=("axis",))
    value = jnp.asarray(X32)
    for bound in (0.5, 1.0, 1.5):  # new values of a traced argument: no new trace
        np.testing.assert_allclose(
            clipped_sum(value, bound, 1), np.minimum(X32, bound).sum(1), rtol=1e-6
        )
    assert traces == [1]
    np.testing.assert_allclose(clipped_sum(value, 0.5, 0), np.minimum(X32, 0.5).sum(0), rtol=1e-6)
    assert traces == [1, 0]  # a new static value: one more
    assert clipped_sum.concrete._cache_size() == 2
    recorded = clipped_sum(K.variable(X32), 0.5, 0)  # the graph runs the plain body
    np.testing.assert_allclose(K.eval(recorded), np.minimum(X32, 0.5).sum(0), rtol=1e-6)


def test_a_compiled_body_is_refused_with_an_eager_shortcut_or_for_random_ops():
    with pytest.raises(ValueError, match=r"op: jit=\('axis',\) cannot be given with eager="):
        K.op(jnp.sum, jit=("axis",), eager=jnp.sum)
    with pytest.raises(ValueError, match=r"op: jit=\(\) cannot be given"):
        K.op(lambda shape, seed=None, key=None: None, random=True, jit=())


P = RNG.uniform(0.05, 1.0, size=(3, 4)).astype(np.float32)  # probabilities, rows not normalized
T = np.eye(4, dtype=np.float32)[[2, 0, 3]]
LABELS = np.array([2, 0, 3])
EPS = 1e-7
IMAGES = uniform(2, 5, 6, 3)
KERNEL = uniform(3, 3, 3, 4)
GAMMA = RNG.uniform(0.5, 2.0, size=3).astype(np.float32)
BETA = RNG.normal(size=3).astype(np.float32)


def _clipped(p):
    return np.clip(p.astype(np.float64), EPS, 1 - EPS)


def _relu_reference(v, alpha, max_value, threshold):
    kept = np.where(v > threshold, v, alpha * (v - threshold))
    return np.where(v >= max_value, max_value, kept)


# (K call on wrapped arrays, NumPy reference): ops whose concrete calls run one compiled body
COMPILED_EAGER = {
    "clip": (lambda w: K.clip(w(X32), -0.7, 0.9), lambda: np.clip(X32, -0.7, 0.9)),
    "clip_other_bounds": (lambda w: K.clip(w(X32), 0.1, 1.3), lambda: np.clip(X32, 0.1, 1.3)),
    "bias_add": (lambda w: K.bias_add(w(X32), w(P[0])), lambda: X32 + P[0]),
    "batch_dot": (lambda w: K.batch_dot(w(X32), w(P), axes=1), lambda: (X32 * P).sum(1)[:, None]),
    "switch": (lambda w: K.switch(w(X32 > 0), w(X32), w(P)), lambda: np.where(X32 > 0, X32, P)),
    "l2_normalize": (
        lambda w: K.l2_normalize(w(X32), axis=1),
        lambda: (
            X32 / np.sqrt(np.maximum((X32.astype(np.float64) ** 2).sum(1, keepdims=True), 1e-12))
        ),
    ),
    "relu": (
        lambda w: K.relu(w(X32), alpha=0.1, max_value=1.5, threshold=0.2),
        lambda: _relu_reference(X32, 0.1, 1.5, 0.2),
    ),
    "softmax": (lambda w: K.softmax(w(X32), axis=0), lambda: scipy.special.softmax(X32, axis=0)),
    "hard_sigmoid": (lambda w: K.hard_sigmoid(w(X32)), lambda: np.clip(0.2 * X32 + 0.5, 0, 1)),
    "softsign": (lambda w: K.softsign(w(X32)), lambda: X32 / (1 + np.abs(X32))),
    "binary_crossentropy": (
        lambda w: K.binary_crossentropy(w(T), w(P)),
        lambda: -(T * np.log(_clipped(P) + EPS) + (1 - T) * np.log(_clipped(1 - P) + EPS)),
    ),
    "categorical_crossentropy": (
        lambda w: K.categorical_crossentropy(w(T), w(P)),
        lambda: -(T * np.log(_clipped(P / P.sum(1, keepdims=True)))).sum(1),
    ),
    "sparse_categorical_crossentropy": (
        lambda w: K.sparse_categorical_crossentropy(w(LABELS), w(P)),
        lambda: -np.log(_clipped(P)[np.arange(3), LABELS] / _clipped(P).sum(1)),
    ),
    "in_top_k": (
        lambda w: K.in_top_k(w(P), w(LABELS), 2),
        lambda: (P > P[np.arange(3), LABELS][:, None]).sum(1) < 2,
    ),
    "repeat": (lambda w: K.repeat(w(X32), 3), lambda: np.repeat(X32[:, None], 3, axis=1)),
    "repeat_elements": (lambda w: K.repeat_elements(w(X32), 2, 0), lambda: np.repeat(X32, 2, 0)),
    "cast": (lambda w: K.cast(w(X32), "float16"), lambda: X32.astype(np.float16)),
    "concatenate": (
        lambda w: K.concatenate([w(X32), w(P), w(X32)], axis=0),
        lambda: np.concatenate([X32, P, X32], axis=0),
    ),
    "stack": (lambda w: K.stack([w(X32), w(P)], axis=1), lambda: np.stack([X32, P], axis=1)),
    "expand_dims": (lambda w: K.expand_dims(w(X32), 1), lambda: X32[:, None]),
    "squeeze": (lambda w: K.squeeze(w(X32[:, :1]), 1), lambda: X32[:, 0]),
    "permute_dimensions": (
        lambda w: K.permute_dimensions(w(IMAGES), (0, 3, 1, 2)),
        lambda: IMAGES.transpose(0, 3, 1, 2),
    ),
    "conv2d": (
        lambda w: K.conv2d(w(IMAGES), w(KERNEL), padding="same"),
        lambda: np_conv(IMAGES, KERNEL, padding="same"),
    ),
    "depthwise_conv2d": (
        lambda w: K.depthwise_conv2d(w(IMAGES), w(KERNEL[..., :1]), strides=2),
        lambda: np_depthwise(IMAGES, KERNEL[..., :1], strides=2),
    ),
    "pool2d_avg": (
        lambda w: K.pool2d(w(IMAGES), (2, 2), (2, 2), padding="same", pool_mode="avg"),
        lambda: np_pool(IMAGES, (2, 2), (2, 2), padding="same", mode="avg"),
    ),
    "normalize_batch_in_training": (
        lambda w: K.normalize_batch_in_training(w(IMAGES), w(GAMMA), w(BETA), [0, 1, 2])[0],
        lambda: (
            (IMAGES - IMAGES.mean((0, 1, 2))) / np.sqrt(IMAGES.var((0, 1, 2)) + 1e-3) * GAMMA + BETA
        ),
    ),
    "batch_normalization": (
        lambda w: K.batch_normalization(w(IMAGES), w(BETA), w(GAMMA), w(BETA), w(GAMMA)),
        lambda: (IMAGES - BETA) / np.sqrt(GAMMA + 1e-3) * GAMMA + BETA,
    ),
    "spatial_2d_padding": (
        lambda w: K.spatial_2d_padding(w(IMAGES), ((1, 2), (0, 1))),
        lambda: np.pad(IMAGES, ((0, 0), (1, 2), (0, 1), (0, 0))),
    ),
    "resize_images": (
        lambda w: K.resize_images(w(IMAGES), 2, 3, "channels_last"),
        lambda: np.repeat(np.repeat(IMAGES, 2, 1), 3, 2),
    ),
}


@pytest.mark.parametrize("name", sorted(COMPILED_EAGER))
def test_compiled_eager_ops_agree_with_numpy_and_with_their_recorded_graphs(name):
    call, reference = COMPILED_EAGER[name]
    eager = call(jnp.asarray)
    recorded = call(lambda v: K.variable(v, dtype=str(v.dtype)))
    assert isinstance(eager, jax.Array) and isinstance(recorded, graph.Node)
    expected = reference()
    assert eager.dtype == K.eval(recorded).dtype
    np.testing.assert_allclose(eager, expected, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(K.eval(recorded), expected, rtol=1e-5, atol=1e-7)


def test_eager_clip_reuses_its_compiled_body_for_new_bounds_and_keeps_the_dtype_of_x():
    from jaxkeras._ops import math as ops_math

    ints = jnp.arange(6)
    before = ops_math._clip.concrete._cache_size()
    np.testing.assert_array_equal(K.clip(ints, 1.5, 3.2), np.clip(np.arange(6), 1, 3))
    np.testing.assert_array_equal(K.clip(ints, 2.5, 4.7), np.clip(np.arange(6), 2, 4))
    assert K.clip(ints, 1.5, 3.2).dtype == ints.dtype
    assert ops_math._clip.concrete._cache_size() == before + 1
    # number bounds take the quickest path: a max below the min still clamps to the min
    np.testing.assert_array_equal(K.clip(ints, 4, 2), np.full(6, 4))
    with pytest.raises(TypeError, match="clip: max_value must be a tensor or a number"):
        K.clip(ints, 1, "3")


def test_eager_dot_of_jax_arrays_is_numpys_for_every_rank_and_names_shapes_that_differ():
    for x_shape, y_shape in [
        ((2, 3), (3, 4)),
        ((32, 28, 3), (3, 4)),
        ((2, 3), (4, 3, 5)),
        ((2, 3, 4), (5, 4, 6)),
        ((3,), (3,)),
        ((2, 3), (3,)),
    ]:
        a = RNG.normal(size=x_shape).astype(np.float32)
        b = RNG.normal(size=y_shape).astype(np.float32)
        got = K.dot(jnp.asarray(a), jnp.asarray(b))
        assert got.shape == np.dot(a, b).shape
        np.testing.assert_allclose(got, np.dot(a, b), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"dot: incompatible shapes \(2, 3\) and \(4,\)"):
        K.dot(jnp.zeros((2, 3)), jnp.zeros(4))


def test_eager_concatenate_takes_numpy_and_jax_arrays_together_and_lists_of_any_length():
    mixed = K.concatenate([X32, jnp.asarray(P)], axis=-1)
    np.testing.assert_array_equal(mixed, np.concatenate([X32, P], axis=-1))
    for n in (1, 2, 5):
        parts = [X32[:, i : i + 1] for i in range(n)]
        np.testing.assert_array_equal(K.concatenate(parts), X32[:, :n])


def test_eager_cast_of_arrays_compiles_and_of_large_python_numbers_stays_on_the_host():
    np.testing.assert_array_equal(K.cast(jnp.asarray(X32), "int32"), X32.astype(np.int32))
    assert K.cast(jnp.asarray(X32), "bool").dtype == np.bool_
    big = K.cast(2**40, "float32")  # beyond int32: cast by NumPy, not traced
    assert big.dtype == np.float32 and float(big) == 2.0**40
    assert graph.standardize_dtype("float64") == (
        "float64" if jax.config.jax_enable_x64 else "float32"
    )
