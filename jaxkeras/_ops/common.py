"""Types and helpers shared by the ops modules (argument checks live in :mod:`jaxkeras.checks`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import export

from jaxkeras._engine.graph import Node

TensorLike = Any
"""A symbolic tensor, a variable, a NumPy/JAX array or a Python scalar."""

Axes = int | Sequence[int] | None


def static_shape_of(shape: Any) -> tuple | None:
    """Returns the statically known entries of a checked shape argument (``None`` = unknown).

    Args:
        shape: a shape argument checked by :func:`jaxkeras.checks.check_shape_arg`.

    Returns:
        A tuple with ``None`` for symbolic entries, or ``None`` when the whole shape is a
        symbolic tensor.
    """
    if isinstance(shape, Node):
        return None
    return tuple(None if isinstance(d, Node) else d for d in shape)


def widened(x: Any) -> Any:
    """Inside an op body: a 16-bit float array (float16, bfloat16) as float32, else ``x``.

    For sums of squares, logarithms near 0 and epsilons such as ``1e-7``, which overflow,
    lose all precision or flush to zero in 16 bits; cast the result back to ``x.dtype``.
    """
    return x.astype(jnp.float32) if x.dtype in (jnp.float16, jnp.bfloat16) else x


def standard_result_type(*args: Any) -> np.dtype:
    """The dtype JAX's standard promotion gives ``args``, whatever the caller's promotion mode.

    Where jaxkeras combines a value with one of its own constants or accumulators of another
    dtype, it casts both to this type explicitly, so the result is the same under
    ``jax.numpy_dtype_promotion('strict')`` as under standard promotion.

    Args:
        *args: dtypes, arrays or Python scalars, as for ``jnp.result_type``.

    Returns:
        The promoted dtype.
    """
    with jax.numpy_dtype_promotion("standard"):
        return jnp.result_type(*args)


class TracedSizeError(ValueError):
    """A size (a shape argument's entry) computed from variables or inputs, which XLA's static
    shapes cannot take."""


def concrete_dims(shape: Any, what: str = "sizes") -> tuple[int, ...]:
    """Inside an op body: the shape argument as a tuple of Python ints.

    Symbolic entries arrive as numbers known at trace time (such as ``K.shape(x)[0]``), or, while
    shape inference tells unknown dimensions apart, as symbolic dimensions, kept as they are.

    Args:
        shape: a checked shape argument, with values in place of symbolic entries.
        what: the argument, for the error (``"tile: n"``).

    Returns:
        A tuple of ints (and symbolic dimensions).

    Raises:
        TracedSizeError: naming ``what`` when an entry is computed from variables or inputs.
    """
    try:
        if isinstance(shape, jax.Array):  # iterating it would stage ops out into the trace
            shape = np.asarray(shape)
        return tuple(d if export.is_symbolic_dim(d) else int(d) for d in shape)
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError) as err:
        raise TracedSizeError(
            f"{what} must be known when the graph is traced (ints, or scalars computed from "
            "static shapes such as K.shape(x)[0]); these are computed from variables or inputs, "
            "and an array's size cannot depend on such values under XLA: compute them in NumPy "
            "first, or use an op whose output shape does not depend on them"
        ) from err
