"""Small full float sums whose value does not depend on the layout of the summands, and means
divided by their counts as TF divides (:func:`quotient`).

XLA sums a float array in memory order, so the same numbers laid out differently (channels
first or last) can sum to results a few ulps apart: Keras's channels-first crossentropy test
(``test_model_with_crossentropy_losses_channels_first``) reads 2.7443476 channels-first and
2.7443471 channels-last, where TensorFlow's reductions agree. For a full reduction of 2 to
:data:`LIMIT` float32/float64 values (:func:`applies`), ``K.sum`` and ``K.mean`` are:

- By default (:func:`layout_free_sum`, :func:`layout_free_mean`), XLA's sum for a vector (a
  batch's losses, a metric's values: one order, whatever the layout), and for an array of two
  or more axes longer than 1 (per-position losses, channels first or last) one XLA reduction
  of (sum, rounding error) pairs, each addition's error carried by Knuth's TwoSum and added
  back at the end: the correctly rounded sum, so the same for every layout, in all but rare
  cases (a sum almost exactly halfway between two floats, or heavy cancellation).
- With :func:`set_exact_sums` (or ``JAXKERAS_EXACT_SUMS=1`` at import), :func:`exact_sum` and
  :func:`exact_mean` for vectors too: a pairwise sum carrying every addition's error, the
  errors summed pairwise as well, so that it stays correctly rounded through more
  cancellation than the cascaded sum, whatever the order; the mean is the correctly rounded
  quotient.

Either way the derivative is a plain sum's. The exact sums are opt-in because every loss and
metric of a training step would pay for them: on a small MLP's step they add instructions to
the optimized HLO and time to tracing, lowering and compiling it, where the default step is
``jnp.mean``'s to the instruction and its times within noise of it; a cascaded sum of its
vectors, or sorting them first (another way to a canonical order), would cost more than the
default too. A multi-axis full reduction pays a few instructions for its cascaded sum and a few
microseconds eagerly. Measured by hand: ``benchmarks/RESULTS.md``, "Design measurements (by
hand)", "order-independent sums" (with the cancellation test). Larger and partial reductions
are always XLA's.

XLA promises no order for a float reduction; no upstream issue found asking for
layout-independent sums (checked 2026-11-27).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jaxkeras.config import env_switch

LIMIT = 4096
"""The most summands of a full reduction this module sums."""

ENV = "JAXKERAS_EXACT_SUMS"
"""Environment variable read at import: a yes (``1``, ``on``, ...) turns :func:`exact_sums` on; a
no, an empty value or none leaves it off (:func:`jaxkeras.config.env_switch`)."""

_FLOAT_DTYPES = (jnp.dtype("float32"), jnp.dtype("float64"))
_HALF_DTYPES = (jnp.dtype("float16"), jnp.dtype("bfloat16"))


def _asked() -> bool:
    """Whether ``$JAXKERAS_EXACT_SUMS`` turns the exact sums on.

    Raises:
        ValueError: naming the variable and its value when it is neither a yes, a no nor empty.
    """
    return env_switch(ENV) is True


_ENABLED = [_asked()]


def exact_sums() -> bool:
    """Whether ``K.sum``/``K.mean`` build the exact small full reductions (off by default).

    Returns:
        The switch :func:`set_exact_sums` sets; at import, as ``$JAXKERAS_EXACT_SUMS`` says.
    """
    return _ENABLED[0]


def set_exact_sums(enabled: bool) -> None:
    """Turns the exact small full reductions on or off, for the sums and means built from now on.

    ``K.sum``/``K.mean`` choose between :func:`layout_free_sum` and :func:`exact_sum` when they
    are called: a graph built (a model compiled) with the switch on keeps its exact sums when a
    ``K.function`` of it compiles, whatever the switch says then; an array reduced at once, or
    a tracer inside ``jax.jit``, is summed as the switch says at that call.

    Args:
        enabled: ``True`` for the exact sums of the full reductions :func:`applies` names,
            ``False`` for the default ones.

    Raises:
        TypeError: when ``enabled`` is not a bool.
    """
    if type(enabled) is not bool:
        raise TypeError(f"set_exact_sums: enabled must be a bool, got {enabled!r}")
    _ENABLED[0] = enabled


def applies(x: Any, axis: Any) -> bool:
    """Whether ``sum``/``mean`` of ``x`` over ``axis`` is one this module sums.

    Args:
        x: the reduced value (an array or tracer; anything else is not).
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
    return type(size) is int and 1 < size <= LIMIT and x.dtype in _FLOAT_DTYPES


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


def _with_error(total: Any, err: Any) -> Any:
    # an inf among the summands makes every error term after it NaN: the plain sum stands
    return lax.select(lax.is_finite(total), lax.add(total, err), total)


def _carry(left: tuple, right: tuple) -> tuple:
    """Two partial sums and their rounding errors, combined (the reducer of a cascaded sum)."""
    total, rounding = two_sum(left[0], right[0], lax.add, lax.sub)
    return total, lax.add(lax.add(left[1], right[1]), rounding)


@jax.custom_jvp
def _cascaded_sum(x: Any) -> Any:
    # One XLA reduction of (sum, error) pairs, in whatever order or tree XLA chooses.
    flat = lax.reshape(x, (x.size,))
    zero = x.dtype.type(0)
    total, err = lax.reduce((flat, lax.full_like(flat, 0)), (zero, zero), _carry, (0,))
    return _with_error(total, err)


@_cascaded_sum.defjvp
def _cascaded_sum_jvp(primals: tuple, tangents: tuple) -> tuple:
    (x,), (dx,) = primals, tangents
    return _cascaded_sum(x), jnp.sum(dx)


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
    return _with_error(lax.reshape(s, ()), lax.reshape(err, ()))


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


@jax.custom_jvp
def _divided(total: Any, counts: Any) -> Any:
    # the counts, chosen by a comparison that no value passes (NaN neither): a runtime value
    divisor = lax.select(lax.gt(total, lax.full_like(total, math.inf)), total, counts)
    return lax.div(total, divisor)


@_divided.defjvp
def _divided_jvp(primals: tuple, tangents: tuple) -> tuple:
    total, counts = primals
    reciprocal = lax.div(lax.full_like(counts, 1), counts)  # a constant where counts is one
    return _divided(total, counts), lax.mul(tangents[0], reciprocal)


def quotient(total: Any, count: Any) -> Any:
    """``total / count``, divided (correctly rounded), even where ``count`` is a constant.

    XLA's algebraic simplifier rewrites a division by a constant, or by a broadcast constant,
    as a multiplication by the rounded reciprocal, 1 ulp off the quotient for about a third of
    float32 means of 3 values (``mean([0.2, 0.1, 0.3])`` reads ``0.20000002``); TF and NumPy
    divide. So the divisor is the count chosen at run time: ``select(total > inf, total,
    count)``, a comparison that no value passes (NaN neither), so it is exactly the count, yet
    no pass of XLA can fold it into a constant, whatever is fused with what. The division
    stays one eagerly, in ``jax.jit`` and under ``K.function``'s compiler options, also where
    it is left outside any fusion (after a reduction handed to YNNPACK, where XLA's simplifier
    runs again) and for average pooling's uneven counts of padded windows (which XLA folds
    into one constant array).

    The divisor depends on ``total``, so it is computed where ``total`` is: in a loop's body
    (``K.function``'s ``steps_per_call`` scan, ``K.rnn``) as at top level. An optimization
    barrier around the count alone (the first way, which this replaced) depended on nothing
    that changes in a loop: XLA's loop-invariant code motion hoisted it, and the derivative's
    ``1 / count``, out of the scan's body before removing the barrier; the body's fusions then
    read them as loop-carried values where a single step's fusions had them inline, and at
    ``K.function``'s LLVM level LLVM fused the other product of the softmax crossentropy
    gradient's ``r * e - t / n`` into a multiply-add, so that n steps in one call drifted from
    n calls in the last bit. Nor did the barrier hold where the division was left unfused.

    The derivative multiplies the tangent by the count's rounded reciprocal, what XLA makes of
    ``jnp.mean``'s derivative (a division by a constant): a constant, the same in a loop's body
    as at top level, eagerly as compiled. Dividing it too would add the divisor's comparison
    and choice to the gradient's fusions: a small MLP's train step's optimized HLO would exceed
    ``jnp.mean``'s by 10% instead of 4% (``tests/test_summation.py``,
    ``test_the_default_training_step_is_xlas_size``).

    The division costs a comparison and a choice per element of the quotient, fused with it
    (measured by hand: ``benchmarks/RESULTS.md``, "Design measurements (by hand)", "exact
    means"). No upstream issue found asking XLA to keep such divisions exact (checked
    2026-12-06; tensorflow/tensorflow#24061 asked for the reciprocal rewrite).

    Args:
        total: a float array or tracer.
        count: the number of summands: an int (a symbolic dimension in shape inference), or
            an array of counts that broadcasts to ``total`` (average pooling's windows).

    Returns:
        The quotient, of ``total``'s dtype and shape.
    """
    return _divided(total, jnp.broadcast_to(jnp.asarray(count, total.dtype), jnp.shape(total)))


def count_of(x: Any, axis: Any) -> Any:
    """The number of values of ``x`` that a reduction over ``axis`` combines into each result.

    Args:
        x: an array or tracer.
        axis: ``None`` (all axes), an int or a tuple of ints.

    Returns:
        The count: an int (or a symbolic dimension).
    """
    if axis is None:
        return x.size
    axes = {a % x.ndim for a in ((axis,) if type(axis) is int else axis)}
    return math.prod(x.shape[a] for a in axes)


def _widened(x: Any) -> tuple[Any, Any]:
    """``x`` in the type a mean is computed in (16-bit floats in float32, integers and booleans
    in the default float type, as ``jnp.mean`` computes them), and the type of the result."""
    x = jnp.asarray(x)
    dtype = jax.dtypes.canonicalize_dtype(jnp.float64) if x.dtype.kind in "biu" else x.dtype
    return x.astype(jnp.float32 if dtype in _HALF_DTYPES else dtype), dtype


def correctly_rounded_mean(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """``jnp.mean``, with XLA's sum divided by the count as TF and NumPy divide (see
    :func:`quotient`).

    Args:
        x: an array or tracer.
        axis: ``None``, an int or a tuple of axes.
        keepdims: keep the reduced axes with size 1.

    Returns:
        The mean, of ``x``'s float type.
    """
    wide, dtype = _widened(x)
    return quotient(jnp.sum(wide, axis, keepdims=keepdims), count_of(wide, axis)).astype(dtype)


def correctly_rounded_variance(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    """``jnp.var`` (the biased estimator), computed as TF computes it: the mean of the squared
    deviations from the mean, each mean divided as :func:`correctly_rounded_mean` divides.

    Args:
        x: an array or tracer.
        axis: ``None``, an int or a tuple of axes.
        keepdims: keep the reduced axes with size 1.

    Returns:
        The variance, of ``x``'s float type.
    """
    _, variance, dtype = _deviations(x, axis, keepdims, through_mean=True)
    return variance.astype(dtype)


def _deviations(x: Any, axis: Any, keepdims: bool, through_mean: bool) -> tuple:
    """The mean of ``x`` over ``axis`` (reduced axes kept), the mean of the squared deviations
    from it, both in the type a mean is computed in, and the result type; the deviations'
    derivative goes through the mean unless ``through_mean`` is ``False``."""
    wide, dtype = _widened(x)
    count = count_of(wide, axis)
    mean = quotient(jnp.sum(wide, axis, keepdims=True), count)
    centered = wide - (mean if through_mean else lax.stop_gradient(mean))
    squares = jnp.sum(centered * centered, axis, keepdims=keepdims)
    return mean, quotient(squares, count), dtype


def correctly_rounded_moments(x: Any, axis: Any = None, keepdims: bool = False) -> tuple:
    """:func:`correctly_rounded_mean` and :func:`correctly_rounded_variance` of ``x``, the mean
    computed once: a batch normalization's statistics, as ``tf.nn.moments`` computes them.

    As there, the variance's derivative does not go through the mean (the squared deviations
    are taken from the mean with its gradient stopped): that path's term, ``-2/n`` times the
    sum of the deviations, is zero, so the derivative is the same but for rounding, and the
    train step's derivative has one reduction and one division fewer per normalization to
    trace, lower and compile (XLA merges the two means of the forward pass either way).

    Args:
        x: an array or tracer.
        axis: ``None``, an int or a tuple of axes.
        keepdims: keep the reduced axes with size 1.

    Returns:
        ``(mean, variance)``, of ``x``'s float type.
    """
    mean, variance, dtype = _deviations(x, axis, keepdims, through_mean=False)
    if not keepdims:
        mean = jnp.squeeze(mean, axis)
    return mean.astype(dtype), variance.astype(dtype)


@jax.jit
def _compensated_mean(x: Any) -> Any:
    # Divided inside the compiled function (one dispatch, as jnp.mean's), by quotient: XLA
    # would multiply by the count's rounded reciprocal instead, 1 ulp off the correctly rounded
    # quotient for about half the inputs. The barrier stages the sum even where JAX evaluates
    # constants eagerly (compile-time eval).
    return quotient(lax.optimization_barrier(_compensated_sum(x)), x.size)


def _layout_free_total(x: Any, mean: bool) -> Any | None:
    """The cascaded sum or mean of ``x``, or ``None`` for a vector (it has one order)."""
    if sum(d > 1 for d in x.shape) < 2:
        return None
    total = _cascaded_sum(x)
    return quotient(total, x.size) if mean else total


def _exact_total(x: Any, mean: bool) -> Any:
    """The compensated sum or mean of ``x``."""
    return _compensated_mean(x) if mean else compensated_sum(x)


def _reduction(plain: Callable, mean: bool, total_of: Callable, summary: str) -> Callable:
    """``plain`` (``jnp.sum`` or :func:`correctly_rounded_mean`), with ``total_of(x, mean)``
    (``None``: plain's) for the full reductions :func:`applies` names."""

    def reduce(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
        total = total_of(x, mean) if applies(x, axis) else None
        if total is None:
            return plain(x, axis, keepdims=keepdims)
        return jnp.reshape(total, (1,) * x.ndim) if keepdims else total

    reduce.__name__ = "mean" if mean else "sum"
    reduce.__doc__ = f"""``{plain.__name__}``; for the full reductions :func:`applies` names,
    {summary}.

    Args:
        x: the value.
        axis: ``None``, an int or a tuple of axes.
        keepdims: keep the reduced axes with size 1.

    Returns:
        The {reduce.__name__}.
    """
    return reduce


_LAYOUT_FREE = (
    "summed with each addition's rounding error carried where ``x`` has two or more axes "
    "longer than 1 (the same for every layout of its values)"
)
_EXACT = "summed exactly (correctly rounded), whatever the order"
layout_free_sum = _reduction(jnp.sum, False, _layout_free_total, _LAYOUT_FREE)
layout_free_mean = _reduction(correctly_rounded_mean, True, _layout_free_total, _LAYOUT_FREE)
exact_sum = _reduction(jnp.sum, False, _exact_total, _EXACT)
exact_mean = _reduction(correctly_rounded_mean, True, _exact_total, _EXACT)
