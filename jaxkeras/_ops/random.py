"""Random tensors (normal, uniform, truncated normal, Bernoulli) and randomly initialized
variables.

Random ops draw from the key the framework gives each node: fresh on every call of a compiled
function, the same for one node within a call, and derived from ``seed`` when one is given.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from jaxkeras import state
from jaxkeras._engine.graph import Node, op
from jaxkeras._ops.common import (
    TensorLike,
    concrete_dims,
)
from jaxkeras._xla.options import compiled_helper
from jaxkeras.checks import (
    check_dtype,
    check_float_dtype,
    check_seed,
    check_shape_arg,
    check_variable_shape,
)

__all__ = [
    "random_bernoulli",
    "random_binomial",
    "random_normal",
    "random_normal_variable",
    "random_uniform",
    "random_uniform_variable",
    "truncated_normal",
]

_TRUNCATION = 2.0  # truncated_normal redraws values beyond this many standard deviations


# Drawing ``n`` numbers compiles JAX's random-bit generator for that size, which takes up to a
# second on CPU, per shape; Keras initializes each weight with its own shape. Where JAX's key
# implementation is its partitionable Threefry (its defaults), a draw is prefix-stable and
# independent of the shape: the first ``n`` numbers of a longer flat draw are the numbers of a
# draw of ``n``, in any shape. Eager draws are then made at a bucketed flat size and cut to the
# shape, so a model compiles a few buckets, not every shape: the smallest bucket (65536 numbers,
# drawn in under a millisecond) holds every weight of a small model, which then compiles one.
# Under other settings an eager draw is made at its exact shape. Either way it is the same
# jax.random computation as in a compiled graph, compiled with K.function's compiler options,
# so a seeded node draws the same numbers eagerly and compiled (benchmarks/bench_overhead.py
# measures what a fresh process pays for it).
_MIN_BUCKET = 1 << 16


def _sample(key: Any, a: Any, b: Any, *, kind: str, shape: tuple, dtype: str) -> Any:
    if kind == "normal":
        return (a + b * jax.random.normal(key, shape, dtype)).astype(dtype)
    if kind == "truncated_normal":
        draw = jax.random.truncated_normal(key, -_TRUNCATION, _TRUNCATION, shape, dtype)
        return (a + b * draw).astype(dtype)
    if kind == "uniform":
        return (a + (b - a) * jax.random.uniform(key, shape, dtype)).astype(dtype)
    return jax.random.bernoulli(key, a, shape).astype(dtype)


def _eager_sample(key: Any, a: Any, b: Any, *, kind: str, shape: tuple, dtype: str) -> Any:
    """:func:`_sample`, compiled as ``K.function`` compiles (``compiled_helper``)."""
    sampler = compiled_helper(_sample, static_argnames=("kind", "shape", "dtype"))
    return sampler(key, a, b, kind=kind, shape=shape, dtype=dtype)


def _prefix_stable() -> bool:
    """Whether JAX's settings make a draw of ``n`` numbers the prefix of any longer draw."""
    return (
        jax.config.jax_default_prng_impl == "threefry2x32" and jax.config.jax_threefry_partitionable
    )


def _draw(kind: str, key: Any, shape: Any, a: Any, b: Any, dtype: str) -> Any:
    """``kind`` numbers of ``shape`` (affine in ``a``, ``b``); see the note above."""
    dims = concrete_dims(shape)
    n = math.prod(dims)
    eager = not isinstance(key, jax.core.Tracer) and np.ndim(a) == 0 and np.ndim(b) == 0
    if not eager or n == 0:
        return _sample(key, a, b, kind=kind, shape=dims, dtype=dtype)
    if not _prefix_stable():
        return _eager_sample(key, a, b, kind=kind, shape=dims, dtype=dtype)
    size = max(_MIN_BUCKET, 1 << (n - 1).bit_length())
    flat = _eager_sample(key, a, b, kind=kind, shape=(size,), dtype=dtype)
    return np.asarray(flat)[:n].reshape(dims)


def _drawn_shape(shape: Any, *params_and_dtype: Any, **_: Any) -> tuple[tuple, str] | None:
    """The shape rule of the random ops: a draw of a concrete ``shape`` with scalar parameters
    has that shape and the dtype that ends the positional arguments; tracing JAX's generator
    to learn it takes tens of milliseconds per shape (a Keras model initializes each weight
    this way). ``None`` for symbolic shapes or array parameters (inference runs the op)."""
    *params, dtype = params_and_dtype
    if not isinstance(shape, tuple) or not all(isinstance(d, (int, np.integer)) for d in shape):
        return None
    if any(isinstance(p, Node) or np.ndim(p) for p in params):
        return None
    return shape, jax.dtypes.canonicalize_dtype(dtype).name


@op(name="random_normal", random=True, shape_rule=_drawn_shape)
def _normal(
    shape: Any, mean: Any, stddev: Any, dtype: str, seed: Any = None, key: Any = None
) -> Any:
    return _draw("normal", key, shape, mean, stddev, dtype)


@op(name="truncated_normal", random=True, shape_rule=_drawn_shape)
def _truncated_normal(
    shape: Any, mean: Any, stddev: Any, dtype: str, seed: Any = None, key: Any = None
) -> Any:
    return _draw("truncated_normal", key, shape, mean, stddev, dtype)


@op(name="random_uniform", random=True, shape_rule=_drawn_shape)
def _uniform(
    shape: Any, minval: Any, maxval: Any, dtype: str, seed: Any = None, key: Any = None
) -> Any:
    return _draw("uniform", key, shape, minval, maxval, dtype)


@op(name="random_bernoulli", random=True, shape_rule=_drawn_shape)
def _bernoulli(shape: Any, p: Any, dtype: str, seed: Any = None, key: Any = None) -> Any:
    return _draw("bernoulli", key, shape, p, 0.0, dtype)


def _bernoulli_checked(shape: Any, p: TensorLike, dtype: Any, seed: Any, fn: str) -> TensorLike:
    shape = check_shape_arg(fn, "shape", shape)
    if isinstance(p, (int, float)) and not 0.0 <= p <= 1.0:
        raise ValueError(f"{fn}: p must be in [0, 1], got {p!r}")
    return _bernoulli(shape, p, check_dtype(fn, dtype), seed=check_seed(fn, seed))


def random_normal(
    shape: Any,
    mean: TensorLike = 0.0,
    stddev: TensorLike = 1.0,
    dtype: Any = None,
    seed: int | None = None,
) -> TensorLike:
    """Samples from a normal distribution.

    Args:
        shape: the shape: a tuple of ints and scalar tensors known when the graph is traced
            (e.g. ``(K.shape(x)[0], 16)``), or a 1-D integer tensor such as ``K.shape(x)``.
        mean: the mean (a number or a tensor broadcastable to ``shape``).
        stddev: the standard deviation (likewise).
        dtype: a float dtype; default floatx.
        seed: an int making the draws reproducible, or ``None``.

    Returns:
        A tensor (an array when every argument is concrete).
    """
    shape = check_shape_arg("random_normal", "shape", shape)
    dtype = check_float_dtype("random_normal", dtype)
    return _normal(shape, mean, stddev, dtype, seed=check_seed("random_normal", seed))


def truncated_normal(
    shape: Any,
    mean: TensorLike = 0.0,
    stddev: TensorLike = 1.0,
    dtype: Any = None,
    seed: int | None = None,
) -> TensorLike:
    """Samples from a normal distribution truncated to within 2 standard deviations of the
    mean (values beyond are redrawn).

    Args:
        shape: the shape (see :func:`random_normal`).
        mean: the mean.
        stddev: the standard deviation of the normal distribution before truncation.
        dtype: a float dtype; default floatx.
        seed: an int making the draws reproducible, or ``None``.

    Returns:
        A tensor.
    """
    shape = check_shape_arg("truncated_normal", "shape", shape)
    dtype = check_float_dtype("truncated_normal", dtype)
    seed = check_seed("truncated_normal", seed)
    return _truncated_normal(shape, mean, stddev, dtype, seed=seed)


def random_uniform(
    shape: Any,
    minval: TensorLike = 0.0,
    maxval: TensorLike = 1.0,
    dtype: Any = None,
    seed: int | None = None,
) -> TensorLike:
    """Samples uniformly from ``[minval, maxval)``.

    Args:
        shape: the shape (see :func:`random_normal`).
        minval: the lower bound (a number or a broadcastable tensor).
        maxval: the upper bound (likewise).
        dtype: a float dtype; default floatx.
        seed: an int making the draws reproducible, or ``None``.

    Returns:
        A tensor.
    """
    shape = check_shape_arg("random_uniform", "shape", shape)
    dtype = check_float_dtype("random_uniform", dtype)
    return _uniform(shape, minval, maxval, dtype, seed=check_seed("random_uniform", seed))


def random_bernoulli(
    shape: Any, p: TensorLike = 0.0, dtype: Any = None, seed: int | None = None
) -> TensorLike:
    """Samples 0/1 values that are 1 with probability ``p``.

    Args:
        shape: the shape (see :func:`random_normal`).
        p: the probability of a 1, in ``[0, 1]`` (a number or a broadcastable tensor).
        dtype: the dtype of the result; default floatx.
        seed: an int making the draws reproducible, or ``None``.

    Returns:
        A tensor of zeros and ones.

    Raises:
        ValueError: for a number ``p`` outside ``[0, 1]``.
    """
    return _bernoulli_checked(shape, p, dtype, seed, "random_bernoulli")


def random_binomial(
    shape: Any, p: TensorLike = 0.0, dtype: Any = None, seed: int | None = None
) -> TensorLike:
    """Samples 0/1 values that are 1 with probability ``p`` (a binomial with ``n = 1``; the
    older name of :func:`random_bernoulli`).

    Args:
        shape: the shape (see :func:`random_normal`).
        p: the probability of a 1, in ``[0, 1]``.
        dtype: the dtype of the result; default floatx.
        seed: an int making the draws reproducible, or ``None``.

    Returns:
        A tensor of zeros and ones.
    """
    return _bernoulli_checked(shape, p, dtype, seed, "random_binomial")


def random_uniform_variable(
    shape: Any,
    low: float,
    high: float,
    dtype: Any = None,
    name: str | None = None,
    seed: int | None = None,
) -> state.Variable:
    """Creates a variable holding samples from a uniform distribution on ``[low, high)``.

    Args:
        shape: a tuple of ints.
        low: the lower bound.
        high: the upper bound.
        dtype: a float dtype; default floatx.
        name: the variable's name.
        seed: an int making the draws reproducible, or ``None``.

    Returns:
        A :class:`Variable`.
    """
    shape = check_variable_shape("random_uniform_variable", shape)
    value = random_uniform(shape, low, high, dtype, seed)
    return state.variable(value, check_dtype("random_uniform_variable", dtype), name)


def random_normal_variable(
    shape: Any,
    mean: float,
    scale: float,
    dtype: Any = None,
    name: str | None = None,
    seed: int | None = None,
) -> state.Variable:
    """Creates a variable holding samples from a normal distribution.

    Args:
        shape: a tuple of ints.
        mean: the mean.
        scale: the standard deviation.
        dtype: a float dtype; default floatx.
        name: the variable's name.
        seed: an int making the draws reproducible, or ``None``.

    Returns:
        A :class:`Variable`.
    """
    shape = check_variable_shape("random_normal_variable", shape)
    value = random_normal(shape, mean, scale, dtype, seed)
    return state.variable(value, check_dtype("random_normal_variable", dtype), name)
