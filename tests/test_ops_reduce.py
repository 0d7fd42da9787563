"""Reductions and scans (jaxkeras/_ops/reduce.py): property tests over shapes, axes, keepdims and
dtypes against NumPy; logsumexp stability; in_top_k ties; gradients."""

import jax
import numpy as np
import pytest
import scipy.special
from helpers import check_grad, check_op, run_all_ways
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import jaxkeras as K

RNG = np.random.default_rng(1)
X = RNG.normal(size=(2, 3, 4)).astype(np.float32)


def _np_std(a, axis=None, keepdims=False):
    return np.std(a.astype(np.float64), axis=axis, keepdims=keepdims)


def _np_var(a, axis=None, keepdims=False):
    return np.var(a.astype(np.float64), axis=axis, keepdims=keepdims)


def _np_logsumexp(a, axis=None, keepdims=False):
    return scipy.special.logsumexp(a.astype(np.float64), axis=axis, keepdims=keepdims)


# name -> (K op, NumPy reference, dtypes it is checked on)
REDUCTIONS = {
    "sum": (K.sum, np.sum, ("float32", "int32", "bool")),
    "prod": (K.prod, np.prod, ("float32", "int32")),
    "mean": (K.mean, np.mean, ("float32", "int32", "bool")),
    "max": (K.max, np.max, ("float32", "int32", "bool")),
    "min": (K.min, np.min, ("float32", "int32", "bool")),
    "std": (K.std, _np_std, ("float32", "bool")),
    "var": (K.var, _np_var, ("float32", "bool")),
    "logsumexp": (K.logsumexp, _np_logsumexp, ("float32",)),
    "all": (K.all, np.all, ("float32", "int32", "bool")),
    "any": (K.any, np.any, ("float32", "int32", "bool")),
}


@st.composite
def arrays_and_axes(draw):
    """An array (float32 quarter-integers, small int32 or bool) with reduction axes."""
    dtype = draw(st.sampled_from(["float32", "int32", "bool"]))
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3))
    elements = {
        "float32": st.integers(-8, 8).map(lambda v: v / 4),
        "int32": st.integers(-3, 3),
        "bool": st.booleans(),
    }[dtype]
    x = draw(hnp.arrays(dtype, shape, elements=elements))
    rank = len(shape)
    some_axes = st.lists(
        st.integers(-rank, rank - 1), min_size=1, max_size=rank, unique_by=lambda a: a % rank
    )
    axis = draw(st.one_of(st.none(), st.integers(-rank, rank - 1), some_axes.map(tuple)))
    return x, axis, draw(st.booleans())


# each example checks every op of the family in one compiled function (~0.5 s)
@settings(max_examples=15)
@given(arrays_and_axes())
def test_reductions_match_numpy(case):
    x, axis, keepdims = case
    names = [n for n, (_, _, dtypes) in REDUCTIONS.items() if x.dtype.name in dtypes]
    check_op(
        lambda a: [REDUCTIONS[n][0](a, axis=axis, keepdims=keepdims) for n in names],
        lambda a: [REDUCTIONS[n][1](a, axis=axis, keepdims=keepdims) for n in names],
        [x],
    )


@pytest.mark.parametrize("name", ["all", "any"])
def test_all_any_return_bool(name):
    out = REDUCTIONS[name][0](K.placeholder((None, 3)), axis=1)
    assert K.dtype(out) == "bool" and K.int_shape(out) == (None,)
    assert np.asarray(REDUCTIONS[name][0](np.array([[0, 2]]), axis=1)).dtype == np.bool_


@pytest.mark.parametrize("name", ["mean", "std", "var"])
def test_mean_std_var_of_bool_are_floatx(name):
    assert K.dtype(REDUCTIONS[name][0](K.placeholder((None, 3), dtype="bool"))) == "float32"


def test_std_and_var_are_biased():
    x = np.array([[1.0, 2.0, 3.0, 6.0]], np.float32)  # mean 3, squared deviations 4+1+0+9
    np.testing.assert_allclose(K.eval(K.var(K.variable(x))), 14 / 4, rtol=1e-6)
    np.testing.assert_allclose(K.eval(K.std(K.variable(x))), np.sqrt(14 / 4), rtol=1e-6)


@pytest.mark.parametrize("name", ["sum", "max", "mean", "all"])
def test_reduction_axis_out_of_range(name):
    with pytest.raises(ValueError, match="axis=3 is out of range"):
        REDUCTIONS[name][0](K.placeholder((None, 3, 4)), axis=3)
    with pytest.raises(ValueError, match="axis=-4 is out of range"):
        REDUCTIONS[name][0](X, axis=(0, -4))


def test_reduction_axis_named_twice():
    with pytest.raises(ValueError, match=r"axis=\(1, -2\) names an axis twice"):
        K.sum(X, axis=(1, -2))


def test_reduction_axis_not_an_int():
    with pytest.raises(TypeError, match="axis must be an int, got 'rows'"):
        K.mean(X, axis="rows")


@pytest.mark.parametrize(
    "name, axis",
    [
        ("sum", (0, 2)),
        ("prod", 1),
        ("mean", None),
        ("max", -1),
        ("min", 0),
        ("std", 1),
        ("var", (0, 1)),
        ("logsumexp", -1),
    ],
)
def test_reduction_gradients(name, axis):
    op, reference, _ = REDUCTIONS[name]
    check_grad(lambda a: op(a, axis=axis), lambda a: reference(a, axis=axis), X)


def test_logsumexp_is_stable_for_large_and_minus_inf_inputs():
    x = np.array(
        [[1000.0, 1000.0, -np.inf], [-np.inf, -np.inf, -np.inf], [-1000.0, -np.inf, -1000.0]],
        np.float32,
    )
    expected = [1000 + np.log(2), -np.inf, -1000 + np.log(2)]
    check_op(lambda a: K.logsumexp(a, axis=1), lambda a: np.array(expected), [x], rtol=1e-6)


@pytest.mark.parametrize("fn, reference", [(K.argmax, np.argmax), (K.argmin, np.argmin)])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_argmax_argmin(fn, reference, axis):
    x = np.array([[3.0, 1.0, 3.0], [0.0, 5.0, 0.0]], np.float32)  # ties: first index wins
    check_op(lambda a: fn(a, axis), lambda a: reference(a, axis), [x])


def test_argmax_default_axis_is_last():
    assert K.int_shape(K.argmax(K.placeholder((None, 3, 4)))) == (None, 3)


@pytest.mark.parametrize("fn, reference", [(K.cumsum, np.cumsum), (K.cumprod, np.cumprod)])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumulative(fn, reference, axis):
    check_op(lambda a: fn(a, axis), lambda a: reference(a.astype(np.float64), axis), [X])
    check_grad(lambda a: fn(a, axis), lambda a: reference(a, axis), X)


def test_cumsum_default_axis_is_0():
    np.testing.assert_allclose(K.cumsum(X), np.cumsum(X, axis=0), rtol=1e-6)


def test_cumsum_axis_out_of_range():
    with pytest.raises(ValueError, match="cumsum: axis=2 is out of range"):
        K.cumsum(np.ones((2, 2)), axis=2)


def _np_l2_normalize(a, axis):
    squares = np.sum(np.square(a.astype(np.float64)), axis=axis, keepdims=True)
    return a / np.sqrt(np.maximum(squares, 1e-12))


@pytest.mark.parametrize("axis", [None, -1, (1, 2)])
def test_l2_normalize(axis):
    check_op(lambda a: K.l2_normalize(a, axis), lambda a: _np_l2_normalize(a, axis), [X])
    check_grad(lambda a: K.l2_normalize(a, axis), lambda a: _np_l2_normalize(a, axis), X)


def test_l2_normalize_keeps_zero_vectors_at_zero():
    x = np.array([[0.0, 0.0], [3.0, 4.0]], np.float32)
    np.testing.assert_allclose(K.l2_normalize(x, axis=1), [[0.0, 0.0], [0.6, 0.8]], rtol=1e-6)


@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool"])
@pytest.mark.parametrize("floatx", ["float32", "float16"])
def test_l2_normalize_of_integers_is_floatx_under_strict_promotion(dtype, floatx):
    # TF-Keras raises a TypeError here; jaxkeras normalizes the values as floats, as K.sqrt and
    # K.softmax of integers give floats (conftest runs this under strict promotion).
    a = np.array([[3, 4], [0, 0], [1, 0]]).astype(dtype)
    expected = _np_l2_normalize(a.astype(np.float32), 1)
    K.set_floatx(floatx)
    try:
        eager = K.l2_normalize(a, axis=1)
        p = K.placeholder((None, 2), dtype=dtype)
        graph = K.l2_normalize(p, axis=1)
        (compiled,) = K.function([p], [graph])([a])
        on_variable = K.eval(K.l2_normalize(K.variable(a, dtype=dtype), axis=-1))
    finally:
        K.set_floatx("float32")
    assert eager.dtype == graph.dtype == compiled.dtype == on_variable.dtype == floatx
    for got in (eager, compiled, on_variable):
        np.testing.assert_allclose(np.asarray(got, np.float32), expected, rtol=1e-3)


def _np_in_top_k(predictions, targets, k):
    """Hand-written TF rule: fewer than k strictly larger scores, finite row, valid target."""
    result = []
    for row, t in zip(predictions, targets):
        valid = 0 <= t < len(row) and np.all(np.isfinite(row))
        result.append(bool(valid and np.sum(row > row[t]) < k))
    return np.array(result)


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_in_top_k_counts_ties_as_tf(k):
    predictions = np.array(
        [[0.1, 0.5, 0.5, 0.2], [0.3, 0.3, 0.3, 0.3], [0.9, 0.1, 0.4, 0.4], [1.0, np.nan, 0, 0]],
        np.float32,
    )
    targets = np.array([2, 3, 3, 0], np.int32)
    check_op(
        lambda p, t: K.in_top_k(p, t, k), lambda p, t: _np_in_top_k(p, t, k), [predictions, targets]
    )


def test_in_top_k_tie_at_the_boundary_counts():
    # target 3 ties with the 2nd largest value: in the top 2
    out = K.in_top_k(np.array([[0.9, 0.1, 0.5, 0.5]], np.float32), np.array([3]), 2)
    assert np.asarray(out).tolist() == [True]
    assert np.asarray(out).dtype == np.bool_


def test_in_top_k_checks_ranks():
    with pytest.raises(ValueError, match=r"in_top_k: .*shapes \(None, 3\) and \(None, 1\)"):
        K.in_top_k(K.placeholder((None, 3)), K.placeholder((None, 1), dtype="int32"), 1)


def test_reductions_accept_lists_of_scalar_tensors():
    x = K.placeholder((None, 3, 4))
    n = K.prod([K.shape(x)[i] for i in (0, 2)])
    total = K.sum([K.shape(x)[1], 2])
    f = K.function([x], [n, total])
    got = f([np.zeros((5, 3, 4))])
    assert int(got[0]) == 20 and int(got[1]) == 5


# ---------------------------------------------------------------------------------------------
# means divide by the count, as TF and NumPy do (XLA alone multiplies by its reciprocal)


def _needs_division(totals, count):
    """Whether some of the float32 ``totals`` divided by ``count`` differ from the totals
    multiplied by the rounded reciprocal (what XLA rewrites a division by a constant into)."""
    totals = np.asarray(totals, np.float32)
    return bool(np.any(totals / np.float32(count) != totals * (np.float32(1) / np.float32(count))))


def _every_way(fn, x):
    """``fn(x)`` eagerly, through K.function, on a variable and inside jax.jit, by way."""
    results = run_all_ways(fn, [x], batch_none=False)
    results.pop("symbolic")
    return results


def test_mean_over_an_axis_is_tfs_value():
    # a layer-normalization test's row: TF and NumPy read 0.2, XLA's multiplication 0.20000002
    x = np.array([[0.2, 0.1, 0.3]], np.float32)
    for way, got in _every_way(lambda t: K.mean(t, axis=-1), x).items():
        assert np.asarray(got).tobytes() == np.float32([0.2]).tobytes(), way
    assert K.eval(K.mean(K.variable(x))) == np.float32(0.2)


@pytest.mark.parametrize(
    "axis, keepdims", [(-1, False), (0, True), ((0, 1), False), (None, False), (None, True)]
)
def test_means_are_correctly_rounded_quotients(axis, keepdims):
    # integer values: every summation order gives the exact sum, so the quotient is the only
    # rounding, and NumPy's float32 mean (which divides) is the reference bit for bit
    x = np.random.default_rng(4).integers(-9, 10, size=(7, 3)).astype(np.float32)
    want = np.mean(x, axis=axis, keepdims=keepdims)
    assert _needs_division(np.sum(x, axis=axis), x.size // np.size(np.sum(x, axis=axis)))
    for way, got in _every_way(lambda t: K.mean(t, axis=axis, keepdims=keepdims), x).items():
        np.testing.assert_array_equal(got, want, err_msg=way)
        assert np.asarray(got).dtype == np.float32


def test_var_and_std_are_tfs_mean_of_squared_deviations():
    # rows whose means are integers: the squared deviations and their sums are exact, so the
    # division is the only rounding (TF: reduce_mean(square(x - reduce_mean(x))))
    x = np.array([[0, 1, 5], [2, 3, 7], [-4, 1, 6], [1, 1, 7]], np.float32)
    assert _needs_division(np.sum(np.square(x - x.mean(1, keepdims=True)), axis=1), 3)
    for axis, data in ((1, x), (0, x.T.copy())):
        results = _every_way(lambda t, a=axis: [K.var(t, axis=a), K.std(t, axis=a)], data)
        for way, (var, std) in results.items():
            np.testing.assert_array_equal(var, np.var(data, axis=axis), err_msg=way)
            np.testing.assert_array_equal(std, np.std(data, axis=axis), err_msg=way)


def test_means_of_16_bit_floats_and_integers():
    # float16 is summed in float32 and the quotient rounded to float16; integers give floatx
    x = np.array([[1, 2, 2], [3, 3, 1]], np.int32)
    np.testing.assert_array_equal(K.mean(x, axis=1), np.float32([5, 7]) / np.float32(3))
    half = K.mean(x.astype(np.float16), axis=1)
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, (np.float32([5, 7]) / np.float32(3)).astype(np.float16))
    var = K.var(x.astype(np.float16), axis=1)
    np.testing.assert_array_equal(var, np.var(x.astype(np.float32), axis=1).astype(np.float16))


def test_mean_gradient_and_unknown_batch():
    p = K.placeholder((None, 3))
    out = K.mean(p, axis=0)
    assert K.int_shape(out) == (3,) and K.int_shape(K.var(p, axis=1)) == (None,)
    (g,) = K.gradients(K.sum(out), [p])
    np.testing.assert_allclose(K.function([p], [g])([np.ones((4, 3), np.float32)])[0], 0.25)


def test_in_top_k_takes_a_tensor_k_as_tf_does():
    predictions = np.array([[0.1, 0.5, 0.4], [0.3, 0.3, 0.4], [0.2, 0.7, 0.1]], np.float32)
    targets = np.array([2, 0, 2], np.int32)
    for k, want in ((1, [False, False, False]), (2, [True, True, False]), (3, [True] * 3)):
        got = run_all_ways(lambda p, t, n: K.in_top_k(p, t, n), [predictions, targets, np.int32(k)])
        for way, value in got.items():
            if way != "symbolic":
                np.testing.assert_array_equal(value, want, err_msg=way)
    with pytest.raises(TypeError, match="k must be an int or an integer scalar tensor"):
        K.in_top_k(predictions, targets, K.variable(2.0))


def _integers_needing_division(shape, axis, seed=6):
    """Integer-valued float32 data whose sums over ``axis`` divided by the count differ, for
    some, from their multiplication by the rounded reciprocal."""
    rng = np.random.default_rng(seed)
    while True:
        x = rng.integers(-99, 100, size=shape).astype(np.float32)
        total = np.sum(x, axis=axis)
        if _needs_division(total, x.size // np.size(total)):
            return x


def test_mean_of_a_reduction_left_unfused_divides():
    # K.function hands a large reduction to YNNPACK: the division by the count stays outside
    # any fusion, where XLA's simplifier runs again (a count behind an optimization barrier
    # was multiplied by there); integer values, so the sum is exact and NumPy's mean the value
    x = _integers_needing_division((12, 999), None)
    for way, got in _every_way(lambda t: K.mean(t), x).items():
        assert np.asarray(got) == np.mean(x), way


def test_mean_gradient_is_jnp_means_every_way():
    # the derivative multiplies by the count's rounded reciprocal (what XLA makes of
    # jnp.mean's division by a constant): the same eagerly, in jax.jit and in K.function,
    # 3 * (1/7) and not 3 / 7
    x = np.arange(7, dtype=np.float32)
    want = np.full(7, np.float32(3) * (np.float32(1) / np.float32(7)))
    p = K.placeholder((7,))
    (g,) = K.gradients(K.mean(p) * 3.0, [p])
    np.testing.assert_array_equal(K.function([p], [g])([x])[0], want)
    np.testing.assert_array_equal(jax.jit(jax.grad(lambda t: K.mean(t) * 3.0))(x), want)
    np.testing.assert_array_equal(jax.grad(lambda t: K.mean(t) * 3.0)(x), want)


@pytest.mark.parametrize("unroll", [False, True])
def test_means_in_an_rnn_step_are_quotients(unroll):
    # a mean inside K.rnn's step (the body of a lax.scan unless unrolled) divides as at top level
    x = _integers_needing_division((2, 5, 3), -1)

    def step(x_t, states):
        mean = K.mean(x_t, axis=-1, keepdims=True)
        return mean, [states[0] + K.var(x_t, axis=-1, keepdims=True)]

    p = K.placeholder((2, 5, 3))
    _, outputs, (total_var,) = K.rnn(step, p, [K.zeros((2, 1))], unroll=unroll)
    got, got_var = K.function([p], [outputs, total_var])([x])
    np.testing.assert_array_equal(got[..., 0], np.mean(x, axis=-1))
    np.testing.assert_allclose(got_var[:, 0], np.sum(np.var(x, axis=-1), axis=1), rtol=1e-6)
