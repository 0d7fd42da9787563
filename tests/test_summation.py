"""Exact small full reductions (jaxkeras/summation.py): K.sum and K.mean of up to 4,096 floats
are the correctly rounded sum whatever the layout; larger and partial ones are XLA's."""

from __future__ import annotations

import re
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxkeras as K
from jaxkeras import summation
from tests.helpers import run_all_ways


def _rounded_sum(values: np.ndarray) -> np.float32:
    """The exact sum of float32 values, rounded once to float32 (hand-derived reference)."""
    return np.float32(float(sum(Fraction(float(v)) for v in values.ravel())))


@pytest.mark.parametrize("n", [2, 3, 17, 18, 255, 1000, 4096])
def test_sum_is_correctly_rounded_in_any_order(n: int) -> None:
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 10 ** rng.uniform(-3, 3, n)).astype(np.float32)
    expected = _rounded_sum(x)
    for order in (np.arange(n), rng.permutation(n), np.arange(n)[::-1]):
        assert K.sum(x[order]) == expected
        assert K.mean(x[order]) == np.float32(expected / np.float32(n))


def test_layouts_agree_where_xla_sums_in_memory_order() -> None:
    # The channels-first/last pair of Keras's crossentropy test: the same 18 numbers.
    rng = np.random.default_rng(7)
    found = False
    for _ in range(50):
        last = rng.uniform(0, 2, (1, 3, 3, 2)).astype(np.float32)
        first = np.moveaxis(last, -1, 1).copy()
        plain = jnp.sum(jnp.asarray(last)) != jnp.sum(jnp.asarray(first))
        found = found or bool(plain)
        for reduce in (K.sum, K.mean):
            assert reduce(last) == reduce(first)
        assert K.sum(last) == _rounded_sum(last)
    assert found, "XLA's plain sums never differed: the test would not show a fix"


def test_every_way_of_running_agrees() -> None:
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
def test_the_mean_is_correctly_rounded_compiled_too(seed: int) -> None:
    # A compiled division by a constant count would be a multiplication by its rounded
    # reciprocal: 1 ulp off for about half of such inputs.
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((10, 100)) * 10 ** rng.uniform(-3, 3, (10, 100))).astype(np.float32)
    expected = np.float32(_rounded_sum(x) / np.float32(x.size))
    for way, value in run_all_ways(lambda t: K.mean(t), [x]).items():
        if way != "symbolic":
            assert np.asarray(value) == expected, way


def test_full_reductions_by_axes_and_keepdims() -> None:
    x = np.random.default_rng(2).normal(size=(2, 3, 4)).astype(np.float32)
    expected = _rounded_sum(x)
    for axis in (None, (0, 1, 2), [2, 0, 1], (-1, -2, -3)):
        assert K.sum(x, axis=axis) == expected
        assert K.sum(x, axis=axis, keepdims=True).shape == (1, 1, 1)


def test_gradient_is_a_plain_sums_gradient() -> None:
    x = jnp.asarray(np.random.default_rng(3).normal(size=(4, 5)), jnp.float32)
    np.testing.assert_array_equal(jax.grad(lambda v: K.sum(v))(x), np.ones((4, 5)))
    np.testing.assert_allclose(jax.grad(lambda v: K.mean(v))(x), np.full((4, 5), 1 / 20))
    p = K.placeholder((4, 5))
    (g,) = K.gradients(K.mean(K.square(p)), [p])
    np.testing.assert_allclose(
        K.function([p], [g])([np.asarray(x)])[0], 2 * np.asarray(x) / 20, rtol=1e-6
    )


def test_the_exact_sum_traces_to_primitives_alone() -> None:
    # its body is traced for every shape in every loss and metric, and in their gradients:
    # jax.numpy's functions would each be a nested jit to trace and linearize
    x = jnp.linspace(0.0, 1.0, 37, dtype=jnp.float32)
    forward = str(jax.make_jaxpr(summation._compensated_sum)(x))
    gradient = str(jax.make_jaxpr(jax.grad(summation._compensated_sum))(x))
    assert "add" in forward and "slice" in forward
    jits = re.compile(r"\bp?jit\[\s*name=(\w+)")
    assert jits.findall(forward) == []
    assert set(jits.findall(gradient)) <= {"_compensated_sum"}  # the primal, once compiled


def test_what_stays_xla() -> None:
    rng = np.random.default_rng(4)
    big = rng.normal(size=summation.LIMIT + 1).astype(np.float32)
    assert not summation.applies(jnp.asarray(big), None)
    np.testing.assert_array_equal(K.sum(big), jnp.sum(big))
    part = rng.normal(size=(8, 3)).astype(np.float32)
    assert not summation.applies(jnp.asarray(part), 0)
    np.testing.assert_array_equal(K.sum(part, axis=0), jnp.sum(part, axis=0))
    ints = np.arange(10, dtype=np.int32)
    assert not summation.applies(jnp.asarray(ints), None)
    assert K.sum(ints) == 45 and K.sum(ints).dtype == np.int32
    half = rng.normal(size=10).astype(np.float16)
    assert K.sum(half).dtype == np.float16
    assert not summation.applies(jnp.asarray(part[0, 0]), None)  # one element


def test_unknown_sizes_are_summed_by_xla_at_build_and_exactly_at_run() -> None:
    p = K.placeholder((None, 3))
    total = K.sum(p)
    assert K.int_shape(total) == ()
    x = np.random.default_rng(5).normal(size=(7, 3)).astype(np.float32)
    assert K.function([p], [total])([x])[0] == _rounded_sum(x)


@pytest.mark.parametrize(
    "values",
    [[np.inf, 1.0, 2.0], [1.0, -np.inf, 3.0], [np.inf, -np.inf], [np.nan, 1.0, 2.0]],
)
def test_non_finite_sums_are_the_plain_ones(values: list) -> None:
    x = np.asarray(values, np.float32)
    with np.errstate(invalid="ignore"):
        expected = np.sum(x)
    np.testing.assert_array_equal(K.eval(K.sum(K.constant(x))), expected)
    np.testing.assert_array_equal(K.sum(x), expected)


def test_overflowing_mean_is_inf() -> None:
    # Keras's TerminateOnNaN test: a mean squared error of huge values must read inf, not NaN.
    x = np.full((4, 3), 1e25, np.float32)
    assert K.mean(K.square(x)) == np.inf
