"""The learning phase: reading and setting it, and choosing values by it (``in_train_phase``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp

from jaxkeras._engine import graph
from jaxkeras._engine.graph import PHASE, PhaseSwitch, Symbolic


def learning_phase() -> Any:
    """Returns the learning phase: the value set by :func:`set_learning_phase`, else a tensor.

    The tensor is a placeholder (0 = test, 1 = train) that ``K.function`` may list among its
    inputs; when it is not fed, graphs run in the test phase (0).

    Returns:
        0 or 1, or the learning-phase tensor.
    """
    return PHASE.placeholder if PHASE.value is None else PHASE.value


def _check_phase(fn: str, value: Any) -> int:
    if isinstance(value, float) or value not in (0, 1):
        raise ValueError(f"{fn}: expected 0 or 1, got {value!r}")
    return int(value)


def set_learning_phase(value: int) -> None:
    """Fixes the learning phase for graphs built from now on.

    Args:
        value: 0 (test) or 1 (train).

    Raises:
        ValueError: for any other value.
    """
    PHASE.value = _check_phase("set_learning_phase", value)


@contextlib.contextmanager
def learning_phase_scope(value: int) -> Iterator[None]:
    """A context in which the learning phase is fixed to ``value``.

    Args:
        value: 0 or 1.
    """
    value = _check_phase("learning_phase_scope", value)
    previous = PHASE.value
    PHASE.value = value
    try:
        yield
    finally:
        PHASE.value = previous


_where = graph.op(lambda c, x, alt: jnp.where(c, x, alt), name="switch_phase")


def in_train_phase(x: Any, alt: Any, training: Any = None) -> Any:
    """Selects ``x`` in the training phase and ``alt`` otherwise.

    With the learning-phase tensor the choice is made when the graph is traced (each compiled
    function has one version per phase, and the branch not taken is not computed); the result
    then carries Keras's ``_uses_learning_phase``.

    Args:
        x: what to return in training (a value or a callable returning one).
        alt: what to return otherwise (likewise).
        training: 0/1/bool, a boolean tensor, or ``None`` for :func:`learning_phase`.

    Returns:
        ``x`` or ``alt``, or a tensor choosing between them.
    """
    if training is None:
        training = learning_phase()
    if isinstance(training, graph.LearningPhase):
        scope = graph.active_scope()
        if scope is not None:
            training = scope.learning_phase
        else:
            x = x() if callable(x) else x
            alt = alt() if callable(alt) else alt
            if x is alt:
                return x
            return PhaseSwitch(x, alt)
    if isinstance(training, (Symbolic, jax.core.Tracer)):
        x = x() if callable(x) else x
        alt = alt() if callable(alt) else alt
        return _where(training, x, alt)
    if bool(training):
        return x() if callable(x) else x
    return alt() if callable(alt) else alt


def in_test_phase(x: Any, alt: Any, training: Any = None) -> Any:
    """Selects ``x`` in the test phase and ``alt`` otherwise (see :func:`in_train_phase`).

    Args:
        x: what to return at test time (a value or a callable).
        alt: what to return in training (likewise).
        training: 0/1/bool, a boolean tensor, or ``None`` for :func:`learning_phase`.

    Returns:
        ``x`` or ``alt``, or a tensor choosing between them.
    """
    return in_train_phase(alt, x, training=training)
