"""Dtype names: every dtype jaxkeras reports or accepts goes through :func:`standardize_dtype`."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

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
    key = dtype if isinstance(dtype, (np.dtype, str)) else None
    if key is not None:
        name = _NAMES.get(key)
        if name is not None:
            return name
    if isinstance(dtype, str):
        dtype = ALIASES.get(dtype, dtype)
    if not isinstance(dtype, np.dtype):
        try:
            dtype = jnp.dtype(dtype)
        except TypeError:
            raise TypeError(f"{arg}: unknown dtype {dtype!r}") from None
    name = jax.dtypes.canonicalize_dtype(dtype).name
    if name not in _WIDE and dtype.name == name:  # the same with or without 64-bit mode
        _NAMES[dtype] = name
        if isinstance(key, str):
            _NAMES[key] = name
    return name


_WIDE = frozenset({"float64", "int64", "uint64", "complex128"})
_NAMES: dict = {}
"""Dtype or name given -> the dtype's name, for the dtypes 64-bit mode leaves alone: NumPy
computes ``name`` anew on each access (measured by hand: ``benchmarks/RESULTS.md``, "Design
measurements (by hand)", "dtype name cache"), and parsing a name and JAX's canonicalization
cost more."""


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
    if isinstance(dtype, np.dtype):
        name = _NAMES.get(dtype)  # standardize_dtype's cache, without its call
        if name is not None:
            return name
    if dtype is not None:
        return standardize_dtype(dtype)
    return jnp.asarray(x).dtype.name
