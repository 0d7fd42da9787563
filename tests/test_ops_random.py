"""Random ops (jaxkeras/_ops/random.py): distribution statistics over 1e5 samples, fresh draws
per compiled call, one value per node within a call, seeds reproducing across processes."""

import subprocess
import sys

import jax
import numpy as np
import pytest
import scipy.stats
from helpers import EXECUTABLES

import jaxkeras as K
from jaxkeras._ops import random as ops_random

N = 100_000


def _draw(make, n=N):
    """Draws through a compiled function, with the shape taken from a fed placeholder."""
    x = K.placeholder((None,))
    f = K.function([x], [make(K.shape(x))])
    return f([np.zeros(n, np.float32)])[0]


def test_random_normal_statistics():
    values = _draw(lambda shape: K.random_normal(shape, mean=2.0, stddev=3.0))
    assert values.shape == (N,) and values.dtype == np.float32
    assert abs(values.mean() - 2.0) < 0.05  # about 5 standard errors
    assert abs(values.std() - 3.0) < 0.04
    assert scipy.stats.kstest((values - 2.0) / 3.0, "norm").pvalue > 1e-4


def test_random_uniform_statistics():
    values = _draw(lambda shape: K.random_uniform(shape, minval=-1.0, maxval=3.0))
    assert values.min() >= -1.0 and values.max() < 3.0
    assert abs(values.mean() - 1.0) < 0.02
    assert abs(values.var() - 16 / 12) < 0.03
    assert scipy.stats.kstest(values, "uniform", args=(-1.0, 4.0)).pvalue > 1e-4


def test_truncated_normal_stays_within_two_standard_deviations():
    values = _draw(lambda shape: K.truncated_normal(shape, mean=1.0, stddev=2.0))
    assert values.min() >= 1.0 - 4.0 and values.max() <= 1.0 + 4.0
    expected = scipy.stats.truncnorm(-2, 2, loc=1.0, scale=2.0)
    assert abs(values.mean() - 1.0) < 0.03
    assert abs(values.std() - expected.std()) < 0.03


@pytest.mark.parametrize("fn", [K.random_bernoulli, K.random_binomial])
def test_bernoulli_values_are_zero_or_one(fn):
    values = _draw(lambda shape: fn(shape, p=0.3))
    assert set(np.unique(values).tolist()) == {0.0, 1.0}
    assert abs(values.mean() - 0.3) < 0.01


@pytest.mark.parametrize("p, expected", [(0.0, 0.0), (1.0, 1.0)])
def test_bernoulli_extreme_probabilities(p, expected):
    assert np.all(np.asarray(K.random_bernoulli((1000,), p=p)) == expected)


def test_bernoulli_dtype():
    out = K.random_bernoulli(K.shape(K.placeholder((None, 2))), p=0.5, dtype="int32")
    assert K.dtype(out) == "int32" and K.int_shape(out) == (None, 2)


def test_fresh_draws_per_call_and_one_value_per_node_within_a_call():
    x = K.placeholder((None, 4))
    r = K.random_uniform(K.shape(x))
    f = K.function([x], [r, r * 1, K.random_uniform(K.shape(x))])
    first, same, other = f([np.zeros((3, 4))])
    second = f([np.zeros((3, 4))])[0]
    np.testing.assert_array_equal(first, same)  # one node, one draw per call
    assert not np.array_equal(first, other)  # two nodes draw independently
    assert not np.array_equal(first, second)  # every call draws afresh


def test_symbolic_shape_entries():
    x = K.placeholder((None, 3))
    r = K.random_normal((K.shape(x)[0], 5), dtype="float16")
    assert K.int_shape(r) == (None, 5) and K.dtype(r) == "float16"
    assert K.function([x], [r])([np.zeros((2, 3))])[0].shape == (2, 5)


def test_tensor_mean_and_bounds():
    mean = K.placeholder((2,))
    r = K.random_normal((1000, 2), mean=mean, stddev=0.01)
    values = K.function([mean], [r])([np.array([-5.0, 5.0])])[0]
    np.testing.assert_allclose(values.mean(axis=0), [-5.0, 5.0], atol=0.01)


def test_concrete_arguments_make_a_random_node():
    node = K.random_normal((N,))
    assert isinstance(node, K.Tensor) and K.int_shape(node) == (N,)
    values = K.eval(node)
    assert abs(values.mean()) < 0.02 and abs(values.std() - 1) < 0.02
    assert not np.array_equal(values, K.eval(node))  # each evaluation draws anew


_SEEDED_PROGRAM = """
import numpy as np, jaxkeras as K
x = K.placeholder((None,))
f = K.function([x], [K.random_normal(K.shape(x), seed=123), K.random_uniform((4,), seed=7)])
for _ in range(2):
    normal, uniform = f([np.zeros(3)])
    print(np.round(normal, 6).tolist(), np.round(uniform, 6).tolist())
"""


@pytest.mark.slow
def test_fixed_seed_reproduces_across_processes():
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _SEEDED_PROGRAM],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    (out_1, err_1), (out_2, _) = [p.communicate(timeout=120) for p in processes]
    assert processes[0].returncode == 0, err_1
    assert out_1 == out_2
    call_1, call_2 = out_1.splitlines()
    assert call_1.split("] [")[0] != call_2.split("] [")[0]  # fresh per call all the same


def test_random_variables():
    v = K.random_normal_variable((300, 100), mean=1.0, scale=2.0, name="w")
    assert K.is_variable(v) and v.shape == (300, 100) and v.dtype == K.floatx()
    assert v.name.startswith("w")
    value = K.get_value(v)
    assert abs(value.mean() - 1.0) < 0.04 and abs(value.std() - 2.0) < 0.04
    u = K.random_uniform_variable((300, 100), low=2.0, high=4.0, dtype="float16")
    assert K.is_variable(u) and u.dtype == "float16"
    value = K.get_value(u).astype(np.float64)
    assert value.min() >= 2.0 and value.max() <= 4.0 and abs(value.mean() - 3.0) < 0.02


@pytest.mark.parametrize(
    "call, error, message",
    [
        (
            lambda: K.random_normal((2, 3), dtype="int32"),
            ValueError,
            "random_normal: dtype must be a floating-point type, got 'int32'",
        ),
        (lambda: K.random_uniform((2,), dtype="floaty"), TypeError, "unknown dtype 'floaty'"),
        (lambda: K.random_bernoulli((2,), p=1.5), ValueError, r"p must be in \[0, 1\], got 1.5"),
        (lambda: K.truncated_normal((2,), seed="abc"), TypeError, "seed must be an int"),
        (lambda: K.random_normal((2, -3)), ValueError, r"shape must hold ints >= 0 .*\(2, -3\)"),
        (lambda: K.random_normal("big"), ValueError, "shape must be a tuple of ints, got 'big'"),
        (
            lambda: K.random_normal_variable(K.shape(K.placeholder((None,))), 0, 1),
            ValueError,
            "a variable's shape must be a tuple of ints",
        ),
    ],
)
def test_argument_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_eager_draws_of_a_small_model_compile_one_generator():
    K.random_uniform((5,), seed=1)  # the first eager draw compiles the key derivation too
    shapes = [(3, 3, 1, 32), (3, 3, 32, 64), (256, 10), (64, 256), (65536,)]
    before = len(EXECUTABLES)
    for fn in (K.random_uniform, K.random_normal):
        for shape in shapes:
            assert fn(shape, seed=11).shape == shape
    # one bucket (65536 numbers) holds each of these weights: one compiled draw per kind
    assert len(EXECUTABLES) - before <= 2


@pytest.mark.parametrize("kind", ["uniform", "normal", "truncated_normal"])
def test_a_draw_cut_from_its_bucket_is_jax_s_draw_of_that_shape(kind):
    key = jax.random.PRNGKey(42)
    reference = {
        "uniform": lambda shape: -1.0 + 4.0 * jax.random.uniform(key, shape),  # in [-1, 3)
        "normal": lambda shape: -1.0 + 3.0 * jax.random.normal(key, shape),
        "truncated_normal": lambda shape: (
            -1.0 + 3.0 * jax.random.truncated_normal(key, -2, 2, shape)
        ),
    }[kind]
    for shape in [(3, 5), (300, 7), (70000,)]:
        drawn = ops_random._draw(kind, key, shape, -1.0, 3.0, "float32")
        np.testing.assert_allclose(drawn, reference(shape), rtol=1e-6, atol=1e-6)


GLOROT = np.float64(np.sqrt(6 / 266))  # Keras passes NumPy float64 bounds

_SEEDED_NODES = """
import json, numpy as np, jax, jaxkeras as K
glorot = np.float64(np.sqrt(6 / 266))
nodes = [K.random_uniform((40, 30), -glorot, glorot, seed=5),
         K.random_uniform((3, 7), -1.7, 3.25, seed=6),
         K.random_normal((300, 7), 0.5, 2.0, seed=7),
         K.truncated_normal((70, 9), -1.0, 3.0, seed=8),
         K.random_bernoulli((5, 11), 0.3, seed=9)]
x = K.placeholder((40, 30))
same = []
for node in nodes:
    K.set_random_seed(2)
    eager = K.eval(node)
    K.set_random_seed(2)
    compiled = K.function([], [node])([])[0]
    same.append(np.array_equal(eager.view(np.uint32), compiled.view(np.uint32)))
# a draw fused into what consumes it draws the same numbers with K.function's options (with
# other XLA options, XLA may contract the draw's multiply-add with its consumer otherwise)
K.set_random_seed(2)
eager = K.eval(nodes[0]) * 2.0 + np.ones((40, 30), np.float32)
K.set_random_seed(2)
fused = K.function([x], [nodes[0] * 2.0 + x])([np.ones((40, 30), np.float32)])[0]
print(json.dumps({"same": same, "partitionable": jax.config.jax_threefry_partitionable,
                  "fused": np.array_equal(eager.view(np.uint32), fused.view(np.uint32))}))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "setting",
    [{}, {"JAX_THREEFRY_PARTITIONABLE": "0"}, {"XLA_FLAGS": "--xla_backend_optimization_level=0"}],
    ids=["defaults", "threefry-not-partitionable", "xla-level-0"],
)
def test_a_seeded_node_draws_the_same_eagerly_and_compiled(setting):
    # one implementation (jax.random, compiled with K.function's options) for both, bucketed
    # eagerly only where JAX's PRNG settings make a cut draw exact
    import json
    import os

    env = dict(os.environ, **setting)
    out = subprocess.run(
        [sys.executable, "-c", _SEEDED_NODES], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["partitionable"] == (setting.get("JAX_THREEFRY_PARTITIONABLE") != "0")
    assert all(result["same"]), result
    if not setting:
        assert result["fused"], result


def test_a_seeded_uniform_node_draws_the_same_eagerly_and_compiled():
    node = K.random_uniform((40, 30), -GLOROT, GLOROT, seed=5)
    K.set_random_seed(2)
    eager = K.eval(node)
    K.set_random_seed(2)
    compiled = K.function([], [node])([])[0]
    np.testing.assert_array_equal(eager.view(np.uint32), compiled.view(np.uint32))


def test_eager_draws_are_exact_shape_where_threefry_is_not_partitionable():
    previous = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", False)
    try:
        key = jax.random.PRNGKey(3)
        drawn = ops_random._draw("uniform", key, (3, 5), -1.0, 3.0, "float32")
        reference = -1.0 + 4.0 * jax.random.uniform(key, (3, 5))
        np.testing.assert_allclose(drawn, reference, rtol=1e-6, atol=1e-6)
        cut = jax.random.uniform(key, (65536,))[:15].reshape(3, 5)
        assert not np.allclose(-1.0 + 4.0 * cut, reference)  # a bucket would be wrong here
    finally:
        jax.config.update("jax_threefry_partitionable", previous)


def test_eager_draws_and_keys_share_one_cache_of_helpers():
    # issue 41: the eager sampler and the eager key function are compiled once each, with
    # K.function's options, in one cache keyed by the function, JAX's PRNG implementation
    # and the options
    from jaxkeras._xla import options

    K.random_uniform((3,), seed=1)
    K.random_normal((5,), seed=2)
    helpers = [key[0].__name__ for key in options._HELPERS]  # (each jit wraps its own copy)
    assert sorted(set(helpers)) == ["_key_of_table", "_sample"]
    assert len(helpers) == len(set(options._HELPERS))  # nothing made twice
    for key, helper in options._HELPERS.items():
        assert key[1] == jax.config.jax_default_prng_impl
        assert options.compiled_helper(key[0], **dict(key[3])) is helper
