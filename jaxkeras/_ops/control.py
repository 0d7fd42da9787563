"""Selection and debugging: switch, identity, print_tensor; Python builtins kept for Keras code."""

from __future__ import annotations

import builtins
import functools
import sys
from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxkeras._engine.graph import op
from jaxkeras._ops.common import (
    TensorLike,
)
from jaxkeras.checks import (
    check_int,
)
from jaxkeras.tensors import int_shape, ndim

__all__ = ["identity", "print_tensor", "py_all", "py_sum", "switch"]

_PYTHON_SCALARS = (bool, int, float, np.bool_, np.integer, np.floating)


@op(name="switch", jit=())
def _switch(condition: Any, then_value: Any, else_value: Any) -> Any:
    condition = jnp.asarray(condition).astype(bool)
    rank = builtins.max(jnp.ndim(then_value), jnp.ndim(else_value))
    condition = jnp.reshape(condition, condition.shape + (1,) * (rank - condition.ndim))
    return jnp.where(condition, then_value, else_value)


def switch(condition: TensorLike, then_expression: Any, else_expression: Any) -> TensorLike:
    """Chooses, element-wise, between two values according to a condition.

    A Python bool (or number) condition picks one expression at once. A tensor condition may
    have a lower rank than the expressions: it applies to their leading axes (a condition of
    shape ``(batch,)`` selects whole samples).

    Args:
        condition: a bool or int tensor (non-zero is True), or a Python bool.
        then_expression: the value where the condition holds, or a callable returning it.
        else_expression: the value elsewhere, or a callable returning it.

    Returns:
        A tensor.

    Raises:
        ValueError: when the condition's rank exceeds the expressions'.
    """
    if isinstance(condition, _PYTHON_SCALARS):
        chosen = then_expression if condition else else_expression
        return chosen() if callable(chosen) else chosen
    then_value = then_expression() if callable(then_expression) else then_expression
    else_value = else_expression() if callable(else_expression) else else_expression
    rank = builtins.max(ndim(then_value), ndim(else_value))
    if ndim(condition) > rank:
        raise ValueError(
            f"switch: the condition's rank must not exceed the expressions' ({rank}), got a "
            f"condition of shape {int_shape(condition)}"
        )
    return _switch(condition, then_value, else_value)


@op
def identity(x: TensorLike, name: str | None = None) -> TensorLike:
    """Returns a tensor with the content of ``x`` (a new node; a variable gives a tensor).

    Args:
        x: a tensor or variable.
        name: ignored (kept for Keras code).

    Returns:
        A tensor.
    """
    return jnp.asarray(x)


def _emit(message: str, summarize: int, value: np.ndarray) -> None:
    threshold = sys.maxsize if summarize < 0 else 0
    text = np.array2string(np.asarray(value), threshold=threshold, edgeitems=summarize)
    print(f"{message} {text}" if message else text, flush=True)


@op(name="print_tensor")
def _print_tensor(x: Any, message: str, summarize: int) -> Any:
    jax.debug.callback(functools.partial(_emit, message, summarize), x)
    return x


def print_tensor(x: TensorLike, message: str = "", summarize: int | None = 3) -> TensorLike:
    """Prints ``message`` and the value of ``x`` each time it is computed, and returns ``x``.

    Inside ``K.function`` (and ``jax.jit``) it prints when the compiled function runs, not when
    it is traced. Use the returned tensor: the print happens only where it is used.

    Args:
        x: the tensor to print.
        message: printed before the value.
        summarize: the number of leading and trailing entries printed per axis (``None``: 3);
            -1 prints everything.

    Returns:
        ``x``, unchanged.
    """
    if not isinstance(message, str):
        raise ValueError(f"print_tensor: message must be a string, got {message!r}")
    if summarize is None:
        summarize = 3
    elif summarize != -1:
        summarize = check_int("print_tensor", "summarize", summarize)
    return _print_tensor(x, message, summarize)


def py_all(iterable: Iterable[Any]) -> bool:
    """Python's ``all`` (``K.all`` is the tensor reduction).

    Args:
        iterable: values to test.

    Returns:
        Whether every value is true.
    """
    return builtins.all(iterable)


def py_sum(iterable: Iterable[Any], start: Any = 0) -> Any:
    """Python's ``sum`` (``K.sum`` is the tensor reduction).

    Args:
        iterable: values to add.
        start: the initial value.

    Returns:
        The sum.
    """
    return builtins.sum(iterable, start)
