"""Float sums whose value does not depend on the order of the summands.

XLA sums a float array in memory order, so the same numbers laid out differently (channels
first or last) can sum to results a few ulps apart, where TensorFlow's reductions agree. A full
reduction of at most :data:`LIMIT` floats -- a loss averaged over a batch, a metric -- is
therefore a pairwise sum that keeps the rounding error of every addition (Knuth's TwoSum) and
adds the errors back at the end: the correctly rounded sum in all but contrived cases, whatever
the layout. It compiles to one small kernel, as cheap as XLA's own reduction at these sizes.
Larger and partial reductions stay XLA's: done level by level, a large pairwise sum costs
many times a plain one.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

LIMIT = 4096
"""The most summands a full reduction may have to be summed exactly."""

_EXACT_DTYPES = (jnp.dtype("float32"), jnp.dtype("float64"))


def applies(x: Any, axis: Any) -> bool:
    """Whether ``sum``/``mean`` of ``x`` over ``axis`` use :func:`compensated_sum`.

    Args:
        x: the reduced value (an array or tracer; anything else is not summed exactly).
        axis: the reduced axes as the reduction gets them: ``None``, an int or a tuple.

    Returns:
        True for a full reduction of 2 to :data:`LIMIT` float32/float64 values (a known
        number of them).
    """
    if axis is None:
        size = getattr(x, "size", 0)
    elif type(axis) is int:  # one axis: full only for a vector
        size = x.size if x.ndim == 1 else 0
    else:
        size = x.size if len({a % x.ndim for a in axis}) == x.ndim else 0
    return type(size) is int and 1 < size <= LIMIT and x.dtype in _EXACT_DTYPES


def two_sum(
    a: Any, b: Any, add: Callable = operator.add, sub: Callable = operator.sub
) -> tuple[Any, Any]:
    """Knuth's TwoSum, on NumPy or JAX arrays of one float dtype.

    Args:
        a: summands.
        b: summands (broadcast with ``a``).
        add: the addition to use (``lax.add`` traces faster than ``+`` on tracers).
        sub: the subtraction to use.

    Returns:
        The rounded sum ``a + b`` and its rounding error (exactly ``a + b`` minus that sum).
    """
    total = add(a, b)
    b_part = sub(total, a)
    return total, add(sub(a, sub(total, b_part)), sub(b, b_part))


@jax.custom_jvp
def _compensated_sum(x: Any) -> Any:
    # lax's primitives, not jax.numpy's functions (each of them a nested jit to trace): this
    # body is traced anew for every shape, in every loss and metric of a training step
    s = lax.reshape(x, (x.size,))
    n = s.shape[0]
    s = lax.pad(s, lax.full((), 0, s.dtype), [(0, (1 << (n - 1).bit_length()) - n, 0)])
    err = None
    while s.shape[0] > 1:
        half = s.shape[0] // 2
        a, b = lax.slice_in_dim(s, 0, half), lax.slice_in_dim(s, half, 2 * half)
        s, rounding = two_sum(a, b, lax.add, lax.sub)
        if err is not None:
            rounding = lax.add(
                lax.add(lax.slice_in_dim(err, 0, half), lax.slice_in_dim(err, half, 2 * half)),
                rounding,
            )
        err = rounding
    total = lax.reshape(s, ())
    # an inf among the summands makes every error term after it NaN: the plain sum stands
    return lax.select(lax.is_finite(total), lax.add(total, lax.reshape(err, ())), total)


@_compensated_sum.defjvp
def _compensated_sum_jvp(primals: tuple, tangents: tuple) -> tuple:
    (x,), (dx,) = primals, tangents
    return compensated_sum(x), jnp.sum(dx)


compensated_sum = jax.jit(_compensated_sum)
compensated_sum.__doc__ = """The sum of every element of ``x`` (at least 2), pairwise with each
addition's rounding error carried and added back: order-independent and correctly rounded in
all but contrived cases; an infinite or NaN sum is the plain one's. Its derivative is that of
a plain sum.

Args:
    x: a float array or tracer with at least two elements.

Returns:
    A scalar of ``x``'s dtype.
"""


@jax.jit
def _compensated_mean(x: Any) -> Any:
    # Divided inside the compiled function (one dispatch, as jnp.mean's), by a count XLA cannot
    # see as a constant: it would multiply by the count's rounded reciprocal instead, 1 ulp off
    # the correctly rounded quotient for about half the inputs. The barrier holds the sum too,
    # so that it is staged even where JAX evaluates constants eagerly (compile-time eval).
    total, count = jax.lax.optimization_barrier((_compensated_sum(x), jnp.asarray(x.size, x.dtype)))
    return total / count


def _exact_reduction(plain: Callable, mean: bool) -> Callable:
    """``plain`` (``jnp.sum`` or ``jnp.mean``), summing exactly where :func:`applies` says."""

    def reduce(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        if not applies(x, axis):
            return plain(x, axis, keepdims=keepdims)
        total = _compensated_mean(x) if mean else compensated_sum(x)
        return jnp.reshape(total, (1,) * x.ndim) if keepdims else total

    reduce.__name__ = plain.__name__
    reduce.__doc__ = f"""``jnp.{plain.__name__}``, its sum exact for the full reductions
    :func:`applies` names.

    Args:
        x: the value.
        axis: ``None``, an int or a tuple of axes.
        keepdims: keep the reduced axes with size 1.

    Returns:
        The {plain.__name__}.
    """
    return reduce


full_sum = _exact_reduction(jnp.sum, mean=False)
full_mean = _exact_reduction(jnp.mean, mean=True)
