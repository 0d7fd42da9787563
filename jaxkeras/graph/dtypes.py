"""Dtype names: every dtype jaxkeras reports or accepts goes through :func:`standardize_dtype`."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

ALIASES = {"float": "float32", "double": "float64", "half": "float16", "bool_": "bool"}
"""Dtype names Keras code uses that NumPy spells otherwise."""


def standardize_dtype(dtype: Any, arg: str = "dtype") -> str:
    """Returns the canonical name of a dtype, as JAX will store it.

    Args:
        dtype: a dtype name (``'float32'``), a NumPy dtype or type, or a JAX dtype.
        arg: the argument name to use in error messages.

    Returns:
        The dtype's name, e.g. ``'float32'``; 64-bit types become 32-bit unless x64 is enabled.

    Raises:
        TypeError: naming ``arg`` and the value when it is not a dtype.
    """
    if isinstance(dtype, str):
        dtype = ALIASES.get(dtype, dtype)
    try:
        np_dtype = jnp.dtype(dtype)
    except TypeError:
        raise TypeError(f"{arg}: unknown dtype {dtype!r}") from None
    return jax.dtypes.canonicalize_dtype(np_dtype).name


def dtype_of(x: Any) -> str:
    """Returns the dtype name of a symbolic value or array (Python scalars take JAX's default).

    Args:
        x: a symbolic value, an array or a Python scalar.

    Returns:
        The dtype's name.
    """
    dtype = getattr(x, "dtype", None)
    if isinstance(dtype, str):  # a symbolic value: already canonical
        return dtype
    if dtype is not None:
        return standardize_dtype(dtype)
    return jnp.asarray(x).dtype.name
