"""Small full reductions (jaxkeras/_xla/summation.py).

By default K.sum/K.mean of a vector are XLA's, and of up to 4,096 floats spanning two or more
axes a cascaded compensated sum, the same whatever the layout; with the exact sums switched on,
every small full reduction is the correctly rounded sum whatever the order. Larger and partial
reductions are XLA's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxkeras as K
from jaxkeras._xla import summation
from jaxkeras._xla.options import compiler_options
from tests.helpers import run_all_ways

_INSTRUCTION = re.compile(r"^\s+(?:ROOT )?%\S+ = ", re.MULTILINE)


@pytest.fixture(autouse=True)
def _default_switch() -> Iterator[None]:
    """Each test starts with the exact sums off (as by default) and leaves the switch as it
    found it."""
    before = summation.exact_sums()
    summation.set_exact_sums(False)
    try:
        yield
    finally:
        summation.set_exact_sums(before)


@pytest.fixture
def exact() -> Iterator[None]:
    """The exact sums switched on for the test (the autouse fixture restores the switch)."""
    summation.set_exact_sums(True)
    yield


def _rounded_sum(values: np.ndarray) -> np.float32:
    """The exact sum of float32 values, rounded once to float32 (hand-derived reference)."""
    return np.float32(float(sum(Fraction(float(v)) for v in values.ravel())))


def _wide_range(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` float32 values of both signs over six orders of magnitude."""
    return (rng.standard_normal(n) * 10 ** rng.uniform(-3, 3, n)).astype(np.float32)


def _plain_sum_misses(rng: np.random.Generator, n: int) -> np.ndarray:
    """A float32 vector of ``n`` values whose plain (XLA) sum is not the correctly rounded one."""
    for _ in range(200):
        x = _wide_range(rng, n)
        if jnp.sum(x) != _rounded_sum(x):
            return x
    raise AssertionError(f"XLA's sums of {n} values were all correctly rounded: no test case")


def _instructions(f: K.Function, inputs: list) -> int:
    """The number of instructions in ``f``'s optimized HLO for ``inputs``."""
    return len(_INSTRUCTION.findall(f.lower(inputs).compile().as_text()))


# ---------------------------------------------------------------------------------------------
# the default


@pytest.mark.parametrize("shape", [(2,), (37,), (4096,), (3, 6), (64, 64), (2, 3, 4, 5)])
def test_default_sums_match_a_float64_reference(shape: tuple) -> None:
    rng = np.random.default_rng(len(shape) * 100 + shape[-1])
    x = rng.standard_normal(shape).astype(np.float32)
    reference = np.sum(x.astype(np.float64))
    tolerance = 4 * np.finfo(np.float32).eps * np.sum(np.abs(x.astype(np.float64)))
    for way, value in run_all_ways(lambda t: K.sum(t), [x]).items():
        if way != "symbolic":
            np.testing.assert_allclose(value, reference, rtol=0, atol=tolerance, err_msg=way)
    np.testing.assert_allclose(K.mean(x), reference / x.size, rtol=0, atol=tolerance / x.size)


def test_default_vector_sums_are_xlas() -> None:
    x = _plain_sum_misses(np.random.default_rng(11), 3)
    assert K.sum(x) == jnp.sum(x)
    assert K.mean(x) == np.float32(jnp.sum(x)) / np.float32(3)  # divided, as TF divides
    p = K.placeholder((3,))
    assert K.function([p], [K.sum(p)])([x])[0] == jax.jit(jnp.sum)(x)


@pytest.mark.parametrize("exact_sums", [False, True])
def test_layouts_agree_where_xla_sums_in_memory_order(exact_sums: bool) -> None:
    # The channels-first/last pair of Keras's crossentropy test: the same 18 numbers.
    summation.set_exact_sums(exact_sums)
    rng = np.random.default_rng(7)
    found = False
    for _ in range(50):
        last = rng.uniform(0, 2, (1, 3, 3, 2)).astype(np.float32)
        first = np.moveaxis(last, -1, 1).copy()
        plain = jnp.sum(jnp.asarray(last)) != jnp.sum(jnp.asarray(first))
        found = found or bool(plain)
        for reduce in (K.sum, K.mean):
            assert reduce(last) == reduce(first)
        assert K.sum(last) == _rounded_sum(last)  # summands of one sign: no cancellation
    assert found, "XLA's plain sums never differed: the test would not show a fix"


def test_default_multi_axis_sums_agree_compiled() -> None:
    rng = np.random.default_rng(8)
    last = rng.uniform(0, 2, (4, 5, 5, 3)).astype(np.float32)
    first = np.moveaxis(last, -1, 1).copy()
    results = []
    for x in (last, first):
        p = K.placeholder(x.shape)
        results.append(K.function([p], [K.sum(p), K.mean(p, keepdims=True)])([x]))
    assert results[0][0] == results[1][0] == _rounded_sum(last)
    np.testing.assert_array_equal(results[0][1], results[1][1])


def _mlp_step(mean: Callable) -> tuple[K.Function, list]:
    """A small MLP's training step (crossentropy loss, accuracy, SGD), its means ``mean``."""
    rng = np.random.default_rng(0)
    x, y = K.placeholder((None, 20)), K.placeholder((None, 10))
    params = [
        K.variable(rng.normal(size=(20, 64)).astype(np.float32) * 0.1),
        K.variable(np.zeros(64, np.float32)),
        K.variable(rng.normal(size=(64, 10)).astype(np.float32) * 0.1),
        K.variable(np.zeros(10, np.float32)),
    ]
    hidden = K.relu(K.dot(x, params[0]) + params[1])
    p = K.softmax(K.dot(hidden, params[2]) + params[3])
    loss = mean(K.categorical_crossentropy(y, p))
    accuracy = mean(K.cast(K.equal(K.argmax(y, -1), K.argmax(p, -1)), "float32"))
    grads = K.gradients(loss, params)
    updates = [K.update_sub(v, 0.01 * g) for v, g in zip(params, grads)]
    f = K.function([x, y], [loss, accuracy], updates=updates)
    labels = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 32)]
    return f, [rng.normal(size=(32, 20)).astype(np.float32), labels]


def test_the_default_training_step_is_xlas_size() -> None:
    # jnp.mean as an op of its own: the step with XLA's reductions alone
    xla_mean = K.op(jnp.mean, name="xla_mean")
    reference = _instructions(*_mlp_step(xla_mean))
    default = _instructions(*_mlp_step(K.mean))
    summation.set_exact_sums(True)
    exact = _instructions(*_mlp_step(K.mean))
    assert default <= 1.05 * reference, (default, reference)
    assert exact > 1.2 * reference, (exact, reference)  # what the test tells apart


# ---------------------------------------------------------------------------------------------
# the switch


def test_the_switch_takes_a_bool_only() -> None:
    with pytest.raises(TypeError, match=r"enabled must be a bool, got 1"):
        summation.set_exact_sums(1)  # type: ignore[arg-type]
    assert summation.exact_sums() is False


def test_the_switch_is_read_where_the_sum_is_built() -> None:
    x = _plain_sum_misses(np.random.default_rng(12), 5)
    expected = _rounded_sum(x)
    p = K.placeholder((5,))
    plain_graph = K.sum(p)
    assert K.sum(x) == jnp.sum(x) != expected  # compiled eagerly for this shape
    summation.set_exact_sums(True)
    exact_graph = K.sum(p)
    assert K.sum(x) == expected  # not the plain sum compiled above
    assert jax.jit(lambda t: K.sum(t))(x) == expected
    summation.set_exact_sums(False)
    assert K.sum(x) == jnp.sum(x) != expected
    plain, exact = K.function([p], [plain_graph, exact_graph])([x])  # compiled switched off
    assert plain == jnp.sum(x) and exact == expected


@pytest.mark.slow
@pytest.mark.parametrize(("value", "said"), [("ON", "True"), ("0", "False"), ("2", "")])
def test_the_environment_variable_sets_the_switch_at_import(value: str, said: str) -> None:
    code = "from jaxkeras._xla import summation; print(summation.exact_sums())"
    environ = dict(os.environ, **{summation.ENV: value})
    out = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True)
    if said:
        assert out.returncode == 0 and out.stdout.split()[-1] == said, out.stderr[-2000:]
    else:
        assert out.returncode != 0
        assert "$JAXKERAS_EXACT_SUMS must be a yes" in out.stderr and "'2'" in out.stderr


# ---------------------------------------------------------------------------------------------
# the exact sums, switched on


@pytest.mark.parametrize("n", [2, 3, 17, 18, 255, 1000, 4096])
def test_sum_is_correctly_rounded_in_any_order(exact: None, n: int) -> None:
    rng = np.random.default_rng(n)
    x = _wide_range(rng, n)
    expected = _rounded_sum(x)
    for order in (np.arange(n), rng.permutation(n), np.arange(n)[::-1]):
        assert K.sum(x[order]) == expected
        assert K.mean(x[order]) == np.float32(expected / np.float32(n))


def test_every_way_of_running_agrees(exact: None) -> None:
    x = np.random.default_rng(1).uniform(-1, 1, (6, 5)).astype(np.float32)
    expected = _rounded_sum(x)
    results = run_all_ways(lambda t: K.sum(t), [x])
    assert K.int_shape(results.pop("symbolic")) == ()
    for way, value in results.items():
        assert np.asarray(value) == expected, way
    results = run_all_ways(lambda t: K.mean(t, keepdims=True), [x])
    assert K.int_shape(results.pop("symbolic")) == (1, 1)
    for way, value in results.items():
        assert np.asarray(value).shape == (1, 1), way
        np.testing.assert_array_equal(value, [[np.float32(expected / np.float32(30))]])


@pytest.mark.parametrize("seed", range(6))
def test_the_mean_is_correctly_rounded_compiled_too(exact: None, seed: int) -> None:
    # A compiled division by a constant count would be a multiplication by its rounded
    # reciprocal: 1 ulp off for about half of such inputs.
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((10, 100)) * 10 ** rng.uniform(-3, 3, (10, 100))).astype(np.float32)
    expected = np.float32(_rounded_sum(x) / np.float32(x.size))
    for way, value in run_all_ways(lambda t: K.mean(t), [x]).items():
        if way != "symbolic":
            assert np.asarray(value) == expected, way


def test_full_reductions_by_axes_and_keepdims(exact: None) -> None:
    x = np.random.default_rng(2).normal(size=(2, 3, 4)).astype(np.float32)
    expected = _rounded_sum(x)
    for axis in (None, (0, 1, 2), [2, 0, 1], (-1, -2, -3)):
        assert K.sum(x, axis=axis) == expected
        assert K.sum(x, axis=axis, keepdims=True).shape == (1, 1, 1)


def test_unknown_sizes_are_summed_by_xla_at_build_and_exactly_at_run(exact: None) -> None:
    p = K.placeholder((None, 3))
    total = K.sum(p)
    assert K.int_shape(total) == ()
    x = np.random.default_rng(5).normal(size=(7, 3)).astype(np.float32)
    assert K.function([p], [total])([x])[0] == _rounded_sum(x)


# ---------------------------------------------------------------------------------------------
# either way


@pytest.mark.parametrize("exact_sums", [False, True])
def test_gradient_is_a_plain_sums_gradient(exact_sums: bool) -> None:
    summation.set_exact_sums(exact_sums)
    x = jnp.asarray(np.random.default_rng(3).normal(size=(4, 5)), jnp.float32)
    np.testing.assert_array_equal(jax.grad(lambda v: K.sum(v))(x), np.ones((4, 5)))
    np.testing.assert_allclose(jax.grad(lambda v: K.mean(v))(x), np.full((4, 5), 1 / 20))
    p = K.placeholder((4, 5))
    (g,) = K.gradients(K.mean(K.square(p)), [p])
    np.testing.assert_allclose(
        K.function([p], [g])([np.asarray(x)])[0], 2 * np.asarray(x) / 20, rtol=1e-6
    )


@pytest.mark.parametrize(
    ("body", "marks"),
    [(summation._compensated_sum, ("add", "slice")), (summation._cascaded_sum, ("reduce",))],
)
def test_the_compensated_sums_trace_to_primitives_alone(body: Callable, marks: tuple) -> None:
    # their bodies are traced for every shape in every loss and metric, and in their gradients:
    # jax.numpy's functions would each be a nested jit to trace and linearize
    x = jnp.linspace(0.0, 1.0, 37, dtype=jnp.float32).reshape(1, 37)
    forward = str(jax.make_jaxpr(body)(x))
    gradient = str(jax.make_jaxpr(jax.grad(body))(x))
    assert all(mark in forward for mark in marks)
    jits = re.compile(r"\bp?jit\[\s*name=(\w+)")
    assert jits.findall(forward) == []
    assert set(jits.findall(gradient)) <= {"_compensated_sum"}  # the primal, once compiled


@pytest.mark.parametrize("exact_sums", [False, True])
def test_what_stays_xla(exact_sums: bool) -> None:
    summation.set_exact_sums(exact_sums)
    rng = np.random.default_rng(4)
    big = rng.normal(size=(2, (summation.LIMIT + 2) // 2)).astype(np.float32)
    assert not summation.applies(jnp.asarray(big), None)
    np.testing.assert_array_equal(K.sum(big), jnp.sum(big))
    part = rng.normal(size=(8, 3)).astype(np.float32)
    assert not summation.applies(jnp.asarray(part), 0)
    np.testing.assert_array_equal(K.sum(part, axis=0), jnp.sum(part, axis=0))
    ints = np.arange(10, dtype=np.int32).reshape(2, 5)
    assert not summation.applies(jnp.asarray(ints), None)
    assert K.sum(ints) == 45 and K.sum(ints).dtype == np.int32
    half = rng.normal(size=(2, 5)).astype(np.float16)
    assert K.sum(half).dtype == np.float16
    assert not summation.applies(jnp.asarray(part[0, 0]), None)  # one element


@pytest.mark.parametrize("exact_sums", [False, True])
@pytest.mark.parametrize(
    "values",
    [[np.inf, 1.0, 2.0], [1.0, -np.inf, 3.0], [np.inf, -np.inf], [np.nan, 1.0, 2.0]],
)
def test_non_finite_sums_are_the_plain_ones(exact_sums: bool, values: list) -> None:
    summation.set_exact_sums(exact_sums)
    for x in (np.asarray(values, np.float32), np.tile(np.asarray(values, np.float32), (2, 1))):
        with np.errstate(invalid="ignore"):
            expected = np.sum(x)
        np.testing.assert_array_equal(K.eval(K.sum(K.constant(x))), expected)
        np.testing.assert_array_equal(K.sum(x), expected)


@pytest.mark.parametrize("exact_sums", [False, True])
def test_overflowing_mean_is_inf(exact_sums: bool) -> None:
    # Keras's TerminateOnNaN test: a mean squared error of huge values must read inf, not NaN.
    summation.set_exact_sums(exact_sums)
    x = np.full((4, 3), 1e25, np.float32)
    assert K.mean(K.square(x)) == np.inf


# ---------------------------------------------------------------------------------------------
# quotient: divided wherever XLA compiles it, and the same in a loop's body as at top level


def _sgd_step(w: jax.Array, batch: tuple) -> tuple:
    """One SGD step of a softmax regression whose loss is the batch's mean crossentropy (a
    quotient, as K.mean divides): the new weights, the loss and the gradient."""
    x, t = batch

    def loss(w: jax.Array) -> jax.Array:
        per = -jnp.sum(t * jax.nn.log_softmax(x @ w), axis=-1)
        return summation.quotient(jnp.sum(per), per.shape[0])

    value, grad = jax.value_and_grad(loss)(w)
    return w - 0.1 * grad, (value, grad)


@pytest.mark.parametrize("batch", [16, 12])
def test_quotient_in_a_scan_is_the_top_levels_bit_for_bit(batch: int) -> None:
    # K.function(steps_per_call=n) runs n steps in a lax.scan, which must compute what n calls
    # compute. A barrier around the count alone was hoisted out of the loop's body with the
    # gradient's 1/count, and under K.function's options (XLA:CPU's classic emitters, LLVM
    # level 1) the body's gradient fused another product into a multiply-add: 1 ulp off
    options = compiler_options()
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((4, batch, 8)).astype(np.float32)
    ts = np.eye(4, dtype=np.float32)[rng.integers(0, 4, (4, batch))]
    w = w0 = (np.random.default_rng(0).standard_normal((8, 4)) * 0.1).astype(np.float32)
    one = jax.jit(_sgd_step, compiler_options=options)
    calls = []
    for i in range(4):
        w, out = one(w, (xs[i], ts[i]))
        calls.append(out)
    scanned = jax.jit(lambda w, x, t: jax.lax.scan(_sgd_step, w, (x, t)), compiler_options=options)
    w_scan, (losses, grads) = scanned(w0, xs, ts)
    np.testing.assert_array_equal(w_scan, w)
    np.testing.assert_array_equal(losses, [loss for loss, _ in calls])
    np.testing.assert_array_equal(grads, np.stack([grad for _, grad in calls]))


def test_means_in_a_scan_are_the_top_levels_quotients() -> None:
    # integer values: every sum is exact, so NumPy's float32 mean (which divides) is the
    # reference bit for bit, inside the loop's body as at top level
    x = np.random.default_rng(5).integers(-9, 10, size=(5, 4, 3)).astype(np.float32)
    want = np.mean(x, axis=-1)
    assert np.any(want != np.sum(x, axis=-1) * (np.float32(1) / np.float32(3)))
    options = compiler_options()

    def body(carry: jax.Array, step: jax.Array) -> tuple:
        return carry, K.mean(step, axis=-1)

    _, scanned = jax.jit(lambda v: jax.lax.scan(body, 0.0, v), compiler_options=options)(x)
    top = jax.jit(lambda v: K.mean(v, axis=-1), compiler_options=options)
    np.testing.assert_array_equal(scanned, want)
    np.testing.assert_array_equal(np.stack([top(step) for step in x]), want)


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
def test_quotient_of_non_finite_totals(value: float) -> None:
    # the divisor is chosen by (total > inf): false for inf and NaN too, so the quotient is
    # the plain one, and the derivative the count's reciprocal whatever the values
    x = np.asarray([1.0, value, 2.0], np.float32)
    with np.errstate(invalid="ignore"):
        want = np.mean(x)
    np.testing.assert_array_equal(summation.quotient(jnp.sum(x), 3), want)
    for grad in (jax.grad, lambda f: jax.jit(jax.grad(f))):
        got = grad(lambda v: summation.quotient(jnp.sum(v), 3))(x)
        np.testing.assert_array_equal(got, np.full(3, np.float32(1) / np.float32(3)))
